-- adjust.lua: one change to a key outside a request (store.Adjuster):
-- change.lua's change, on KEYS[1].
--
-- KEYS[1]  the key (change.lua)
-- ARGV[1]  now in µs since the epoch, or "" for Redis TIME
-- ARGV[2]  the change (change.lua's op)
-- ARGV[3..] its arguments (change.lua)
-- Reply    1
local now = tonumber(ARGV[1])
if not now then
  local t = redis.call('TIME')
  now = t[1] * 1000000 + t[2]
end
change(KEYS[1], now, ARGV[2], 3)
return 1
