-- decide.lua: one atomic decision over one or more keys (the levels of a
-- hierarchical limit), all or nothing. The store composes each script it
-- runs from expire.lua, the files of the algorithms the call uses (no
-- others: a script builds every function it defines on every call, so a
-- GCRA decision must not pay for the sliding log's) and this driver. Each
-- algorithm file defines <kind>_check(key, now, a, reply, p) -> ok, value[,
-- extra] and <kind>_commit(key, now, a, go, value, reply, p), where a is
-- the index in ARGV of the level's first argument, or <kind>_kind(), which
-- builds and returns {check, commit, undo} (a kind with many functions).
-- Before this driver the store declares the dispatch tables for the kinds
-- included: local check, commit = {<kind> = <kind>_check, ...}, {...} and
-- local build = {<kind> = <kind>_kind, ...}. A kind that reports more than
-- ok and value (sliding_log.lua, window_counter.lua) writes its extra values
-- at reply[p+2 ...] and returns their count; the commit may rewrite them
-- (and the value, reply[p+1]) to describe the state after it. The functions
-- are plain locals, not tables of closures: every table a script builds is
-- garbage Redis must collect, and the decision path stays as lean as a
-- single-purpose script.
--
-- The call holds one or more decisions (the store gathers concurrent ones
-- into one call: a batch), each all or nothing on its own; the whole call
-- is atomic, and its decisions on Redis's clock share one TIME. A decision
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
