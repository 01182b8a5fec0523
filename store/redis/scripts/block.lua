-- block.lua: a level's block (algo.Block, which states the rules: a
-- denial starts a block, the block denies without deciding and is never
-- extended, and a block within forget_after of the last one's end is
-- growth times longer, up to max). The drivers include it before
-- themselves.
--
-- Key    the level's block key (the state key + "%:block"): "<until>
--        <count>", until in µs since the epoch, count the blocks in a row;
--        it expires forget_after after until
-- Args   b+0: for in µs; b+1: growth; b+2: max in µs; b+3: forget_after
--        in µs (defaults applied by the store); b+4: the decision's cost
--        ("0": a peek, which starts no block)
-- b_until(key) returns until and count (0, 0 for none); b_start(key, now,
-- b) starts a block and returns its until.
local function b_until(key)
  local v = redis.call('GET', key)
  if not v then return 0, 0 end
  local u, n = string.match(v, '^(%d+) (%d+)$')
  return tonumber(u), tonumber(n)
end

local function b_start(key, now, b)
  local u, n = b_until(key)
  if ARGV[b + 4] == '0' then return 0 end
  local forget = tonumber(ARGV[b + 3])
  if u ~= 0 and now - u <= forget then
    n = math.min(n + 1, 1000) -- algo.MaxBlockCount
  else
    n = 1
  end
  -- The n-th block in a row: for · growth^(n-1), one factor at a time,
  -- up to max (algo.Block.Length).
  local d, most, g = tonumber(ARGV[b]), tonumber(ARGV[b + 2]), tonumber(ARGV[b + 1])
  local i = 1
  while i < n and d < most and g > 1 do
    d, i = d * g, i + 1
  end
  if d > most then d = most end
  u = now + math.floor(d)
  redis.call('SET', key, string.format('%d %d', u, n), 'PX', ttl(u + forget - now))
  return u
end

-- b_level returns, for the level whose arguments start at ARGV[a], how
-- many arguments and keys it spans, and where its block's arguments start
-- (nil for a level without a block: its flag has no 'b').
local function b_level(a)
  local n = 3 + ARGV[a + 2]
  if string.find(ARGV[a + 1], 'b', 1, true) then
    return n + 5, 2, a + n
  end
  return n, 1, nil
end

-- b_check applies a level's block after its kind's check, whose outcome
-- is ok with extra values at reply[p+2 ...]: it writes the block's end
-- after them (0 for none) and marks blocked[p] when the key is under a
-- block, which makes the level not ok. It returns ok and the extras'
-- count.
local function b_check(key, now, ok, extra, reply, p, blocked)
  local u = b_until(key)
  reply[p + 2 + extra] = 0
  if now < u then
    ok, blocked[p], reply[p + 2 + extra] = false, true, u
  end
  return ok, extra + 1
end

-- b_debt reports whether the level whose arguments start at ARGV[a] has a
-- debt (its flag holds 'd', algo.Debt): it is committed whatever the
-- other levels decide, and when not ok with go = 'owe', which records
-- the cost in full.
local function b_debt(a)
  return string.find(ARGV[a + 1], 'd', 1, true) ~= nil
end

-- b_peek reports whether the level whose arguments start at ARGV[a] is a
-- debt's peek (its flag holds 'p'): its arguments are a cost of 1's, and
-- it records nothing (algo.Debt).
local function b_peek(a)
  return string.find(ARGV[a + 1], 'p', 1, true) ~= nil
end

-- b_enforced reports whether the level whose arguments start at ARGV[a]
-- is enforced (its flag is not shadow's).
local function b_enforced(a)
  return string.sub(ARGV[a + 1], 1, 1) ~= 's'
end
