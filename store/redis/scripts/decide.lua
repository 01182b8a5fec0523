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
-- KEYS     one key per level
-- ARGV[1]  now in µs since the epoch, or "" to use Redis TIME
-- ARGV[2..] per level, in KEYS order: kind, flag ("s" for shadow, else "-"),
--          the number of the level's own arguments, then those arguments
-- Reply    {now, pass (1 or 0), then per level: code, value, extras...}
--          where code = ok (1 or 0) + 2 * the number of extras: for the
--          kinds without extras it is just ok.
--
-- Every level is checked first. pass is 1 when every level that is not
-- shadow is ok; then each level is committed, with go = ok, so ok levels
-- record their cost. When pass is 0, only the levels whose own check failed
-- are committed (with go = false), so that an algorithm may record a denied
-- attempt (a uniform sliding log); the others write nothing.
local now = tonumber(ARGV[1])
if not now then
  local t = redis.call('TIME')
  now = t[1] * 1000000 + t[2]
end
local reply = {now, 1}
local i, p = 2, 3
for j = 1, #KEYS do
  reply[p], reply[p + 1] = 0, 0
  local kind = ARGV[i]
  if not check[kind] then
    local built = build[kind]()
    check[kind], commit[kind] = built.check, built.commit
  end
  local ok, val, extra = check[kind](KEYS[j], now, i + 3, reply, p)
  if not ok and ARGV[i + 1] ~= 's' then reply[2] = 0 end
  extra = extra or 0
  reply[p] = (ok and 1 or 0) + 2 * extra
  reply[p + 1] = val
  i, p = i + 3 + ARGV[i + 2], p + 2 + extra
end
i, p = 2, 3
for j = 1, #KEYS do
  local code = reply[p]
  local ok = code % 2 == 1
  if reply[2] == 1 or not ok then commit[ARGV[i]](KEYS[j], now, i + 3, ok, reply[p + 1], reply, p) end
  i, p = i + 3 + ARGV[i + 2], p + 2 + (code - code % 2) / 2
end
return reply
