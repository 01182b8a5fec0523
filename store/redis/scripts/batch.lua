-- batch.lua: several decisions in one call, each what decide.lua does on
-- its own, all or nothing, in one atomic call (the store gathers concurrent
-- decisions into one: a batch). The store composes it as it composes
-- decide.lua (expire.lua, the algorithm files, the dispatch tables, then
-- this driver); a decision alone goes to decide.lua, which this file
-- follows level for level, so that a call of one pays for no loop.
--
-- The decisions on Redis's clock share one TIME. A decision
-- that fails (a command of its own errs, such as a key of another type)
-- fails alone: its part of the reply is {now, -1, the error}, and the
-- others go on.
--
-- KEYS     every decision's levels, one key per level, decision by decision
-- ARGV[1]  the number of decisions
-- ARGV[2..] per decision: now in µs since the epoch or "" to use Redis TIME,
--          its number of levels, then per level, in KEYS order: kind, flag
--          ("s" for shadow, else "-"), the number of the level's own
--          arguments, then those arguments
-- Reply    per decision: now, pass (1 or 0), then per level: code, value,
--          extras... where code = ok (1 or 0) + 2 * the number of extras:
--          for the kinds without extras it is just ok.
--
-- Every level of a decision is checked first. pass is 1 when every level
-- that is not shadow is ok; then each level is committed, with go = ok, so
-- ok levels record their cost. When pass is 0, only the levels whose own
-- check failed are committed (with go = false), so that an algorithm may
-- record a denied attempt (a uniform sliding log); the others write
-- nothing.
local clock
local reply = {}

-- decide runs the decision whose arguments start at ARGV[i], whose keys
-- follow KEYS[k], writing its reply after reply[base]; it returns the
-- reply's new length and the index of the next decision's arguments.
local function decide(i, k, base, levels)
  local now = tonumber(ARGV[i])
  grace = 60000 -- expire.lua: a caller's time
  if not now then
    if not clock then
      local t = redis.call('TIME')
      clock = t[1] * 1000000 + t[2]
    end
    now, grace = clock, 0
  end
  reply[base + 1], reply[base + 2] = now, 1
  local a, p = i + 2, base + 3
  for j = k + 1, k + levels do
    reply[p], reply[p + 1] = 0, 0
    local kind = ARGV[a]
    if not check[kind] then
      local built = build[kind]()
      check[kind], commit[kind] = built.check, built.commit
    end
    local ok, val, extra = check[kind](KEYS[j], now, a + 3, reply, p)
    if not ok and ARGV[a + 1] ~= 's' then reply[base + 2] = 0 end
    extra = extra or 0
    reply[p] = (ok and 1 or 0) + 2 * extra
    reply[p + 1] = val
    a, p = a + 3 + ARGV[a + 2], p + 2 + extra
  end
  local next, last = a, p - 1
  local pass = reply[base + 2] == 1
  a, p = i + 2, base + 3
  for j = k + 1, k + levels do
    local code = reply[p]
    local ok = code % 2 == 1
    if pass or not ok then commit[ARGV[a]](KEYS[j], now, a + 3, ok, reply[p + 1], reply, p) end
    a, p = a + 3 + ARGV[a + 2], p + 2 + (code - code % 2) / 2
  end
  return last, next
end

local n, i, k = 0, 2, 0 -- the reply's length; the decision's first argument; the keys before it
for _ = 1, tonumber(ARGV[1]) do
  local levels = tonumber(ARGV[i + 1])
  local ok, last, next = pcall(decide, i, k, n, levels)
  if ok then
    n, i = last, next
  else
    local err = last
    for q = #reply, n + 1, -1 do reply[q] = nil end
    if type(err) == 'table' then err = err.err end
    reply[n + 1], reply[n + 2], reply[n + 3] = 0, -1, tostring(err)
    n, i = n + 3, i + 2
    for _ = 1, levels do i = i + 3 + ARGV[i + 2] end
  end
  k = k + levels
end
return reply
