-- block.lua: a level's block (algo.Block, which states the rules: a
-- denial starts a block, the block denies without deciding and is never
-- extended, and a block within forget_after of the last one's end is
-- growth times longer, up to max). The drivers include it before
-- themselves. It also holds the levels' loop that decide.lua and
-- coalesce.lua share (b_decide).
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

-- b_enforced reports whether the level whose arguments start at ARGV[a]
-- is enforced (its flag is not shadow's).
local function b_enforced(a)
  return string.sub(ARGV[a + 1], 1, 1) ~= 's'
end

-- b_event returns what an enforced level did, for a level that watches
-- it: nil (allowed, or shadow), 1 (denied), 2 (denied, and its denial
-- started a block: started).
local function b_event(a, ok, started)
  if ok or not b_enforced(a) then return nil end
  if started then return 2 end
  return 1
end

-- b_escalate decides the levels that watch others, ws (each {a, p, j, n,
-- denials, idx, last, b}: its arguments, reply, key, watched count, mode,
-- index among the levels, block value and block arguments), the deepest
-- first: for each event of the n levels after it (ev, by index), it is
-- decided again at cost 1 (a fixed window with a block: ARGV a+5 and b+4
-- are the costs, set from the peek's 0), until its window denies, which
-- starts its block. A watcher under a block counts nothing. check and
-- commit are the driver's dispatch tables.
local function b_escalate(ws, ev, now, reply, blocked, check, commit)
  for w = #ws, 1, -1 do
    local a, p, j, n, denials, idx, last, b = unpack(ws[w])
    local count = 0
    for x = idx + 1, idx + n do
      if ev[x] == 2 or (denials and ev[x]) then count = count + 1 end
    end
    local started = false
    if count > 0 and not blocked[p] then
      ARGV[a + 5], ARGV[b + 4] = '1', '1'
      local kind = ARGV[a]
      for _ = 1, count do
        local ok, val = check[kind](KEYS[j], now, a + 3, reply, p)
        commit[kind](KEYS[j], now, a + 3, ok, val, reply, p)
        reply[p], reply[p + 1] = (ok and 1 or 0) + 4, val
        if not ok then
          reply[last], started = b_start(KEYS[j + 1], now, b), true
          break
        end
      end
    end
    ev[idx] = b_event(a, reply[p] % 2 == 1, started)
  end
end

-- b_decide decides one decision, as decide.lua describes, for decide.lua
-- and coalesce.lua: its levels' arguments start at ARGV[a], their keys at
-- KEYS[j]; levels is their number, or nil for as many as KEYS holds from j
-- (decide.lua). It writes {now, pass, then per level code, value,
-- extras...} after reply[base] and returns the reply's new length, the
-- index of the argument after the decision's and of its last key. check,
-- commit and build are the driver's dispatch tables.
-- A level's flag (ARGV[a+1]) may hold 'd', a debt (algo.Debt): committed
-- whatever the other levels decide, with go = 'owe' when not ok, which
-- records the cost in full; 'o', a debt that stops (store.Request.Stop),
-- which records an admitted cost only when every level is ok, shadow ones
-- too; 'p', a debt's peek, whose arguments are a cost of 1's and which
-- records nothing; 'w<n>' or 'W<n>', a level that watches the n after it
-- (b_escalate). A debt without 'o' is committed with its check, in its
-- order, so that a key twice in one call is checked the second time after
-- the first's cost. The flags are read here, not by functions of their
-- own: a script builds every function it defines on every call.
local function b_decide(check, commit, build, reply, base, now, a, j, levels)
  reply[base + 1], reply[base + 2] = now, 1
  local blocked = {}
  local done, all = {}, true -- the debts committed with their check; every level ok
  local first, key, count = a, j, 0 -- where the levels start; how many
  local p = base + 3
  while count ~= levels and (levels or j <= #KEYS) do
    count = count + 1
    reply[p], reply[p + 1] = 0, 0
    local kind, flag = ARGV[a], ARGV[a + 1]
    if not check[kind] then
      local built = build[kind]()
      check[kind], commit[kind] = built.check, built.commit
    end
    local span, keys, b = b_level(a)
    local ok, val, extra = check[kind](KEYS[j], now, a + 3, reply, p)
    extra = extra or 0
    if b then ok, extra = b_check(KEYS[j + 1], now, ok, extra, reply, p, blocked) end
    if string.find(flag, 'd', 1, true) and not string.find(flag, 'o', 1, true)
        and not string.find(flag, 'p', 1, true) then
      commit[kind](KEYS[j], now, a + 3, ok or 'owe', val, reply, p)
      done[p] = true
    end
    if not ok then
      all = false
      if b_enforced(a) then reply[base + 2] = 0 end
    end
    reply[p] = (ok and 1 or 0) + 2 * extra
    reply[p + 1] = val
    a, p, j = a + span, p + 2 + extra, j + keys
  end
  local next, last = a, p - 1
  local pass = reply[base + 2] == 1
  a, p, j = first, base + 3, key
  local ws, ev = nil, {} -- the levels that watch others, what each level did
  local again = true -- no level that stops, checked again, was not ok
  for idx = 1, count do
    local code = reply[p]
    local ok = code % 2 == 1
    local kind, flag = ARGV[a], ARGV[a + 1]
    local span, keys, b = b_level(a)
    local final = p + 1 + (code - code % 2) / 2
    local debt, peek = string.find(flag, 'd', 1, true), string.find(flag, 'p', 1, true)
    local w, n = string.match(flag, '([wW])(%d+)')
    n = tonumber(n) or 0
    local started = false
    if n > 0 then
      ws = ws or {}
      ws[#ws + 1] = {a, p, j, n, w == 'W', idx, final, b}
    elseif done[p] then
      -- committed with its check
    elseif string.find(flag, 'o', 1, true) and not peek then
      -- A debt that stops, after every check: checked again, after the
      -- levels before it (its key twice in the call), and committed (with
      -- go = 'owe' when not ok) when every level was ok (all) or it was
      -- not ok itself; else only checked again, for what it reports.
      local now_ok, val = check[kind](KEYS[j], now, a + 3, reply, p)
      if all or not ok then
        commit[kind](KEYS[j], now, a + 3, now_ok or 'owe', val, reply, p)
      end
      reply[p], reply[p + 1] = (now_ok and 1 or 0) + code - code % 2, val
      ok = now_ok
      if not ok and b_enforced(a) then again = false end
    elseif not blocked[p] and (pass or not ok or debt) and not (ok and peek) then
      local go = ok
      if debt and not ok and not peek then go = 'owe' end
      commit[kind](KEYS[j], now, a + 3, go, reply[p + 1], reply, p)
      if b and not ok then
        reply[final] = b_start(KEYS[j + 1], now, b)
        started = reply[final] > 0
      end
    end
    ev[idx] = b_event(a, ok, started)
    a, p, j = a + span, final + 1, j + keys
  end
  if ws then b_escalate(ws, ev, now, reply, blocked, check, commit) end
  if not again then reply[base + 2] = 0 end
  if not all then reply[base + 2] = reply[base + 2] + 2 end
  return last, next, j - 1
end
