-- refund.lua: gives back what decide.lua committed in one Redis Cluster
-- hash slot when another hash slot of the same request denied. The store composes it
-- like decide.lua, from the files of the algorithms the call uses; each
-- defines <kind>_undo(key, now, a, value), or <kind>_kind() returning
-- {check, commit, undo}, and the store declares local undo = {<kind> =
-- <kind>_undo, ...} and local build = {<kind> = <kind>_kind, ...} first.
--
-- KEYS     the levels of one hash slot, as decide.lua got them
-- ARGV     decide.lua's ARGV for those levels, with ARGV[1] set to the now
--          decide.lua replied (or "" for Redis TIME: a limiter handle's
--          Cancel); then one value per key: the value decide.lua replied
--          for the level, or "" for a level that committed nothing and
--          for a block key (a refund leaves blocks as they are: only a
--          denied level starts one, and a denied level is not refunded)
-- Reply    the number of levels refunded
local now = tonumber(ARGV[1])
if not now then
  local t = redis.call('TIME')
  now = t[1] * 1000000 + t[2]
end
local i, v, j = 2, #ARGV - #KEYS, 1
local n = 0
while j <= #KEYS do
  local val = tonumber(ARGV[v + j])
  if val then
    local kind = ARGV[i]
    if not undo[kind] then undo[kind] = build[kind]().undo end
    undo[kind](KEYS[j], now, i + 3, val)
    n = n + 1
  end
  local span, keys = b_level(i)
  i, j = i + span, j + keys
end
return n
