-- gate.lua: at most one action per interval.
--
-- KEYS[1]  the key; its value is when the gate opens again (µs since the
--          epoch), expiring then
-- ARGV[1]  now in µs since the epoch, or "" to use Redis TIME
-- ARGV[2]  interval in µs
-- ARGV[3]  cost; "0" peeks, "1" passes an open gate, more never passes
-- Reply    {allowed (1 or 0), now, when the gate opens after the decision}
local now = tonumber(ARGV[1])
if not now then
  local t = redis.call('TIME')
  now = t[1] * 1000000 + t[2]
end
local at = tonumber(redis.call('GET', KEYS[1])) or 0
if ARGV[3] ~= '1' or at > now then
  if ARGV[3] == '0' then return {1, now, at} end
  return {0, now, at}
end
at = now + ARGV[2]
redis.call('SET', KEYS[1], string.format('%d', at), 'PX', math.ceil(ARGV[2] / 1000))
return {1, now, at}
