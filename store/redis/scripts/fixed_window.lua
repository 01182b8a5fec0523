-- fixed_window.lua: a counter per window aligned to the epoch.
--
-- KEYS[1]  a hash: e = the end of the counted window (µs), n = its count;
--          it expires when the window ends
-- ARGV[1]  now in µs since the epoch, or "" to use Redis TIME
-- ARGV[2]  window in µs
-- ARGV[3]  limit
-- ARGV[4]  cost; 0 peeks and writes nothing
-- Reply    {allowed (1 or 0), now, count of the window after the decision}
local now = tonumber(ARGV[1])
if not now then
  local t = redis.call('TIME')
  now = t[1] * 1000000 + t[2]
end
local e = now - now % ARGV[2] + ARGV[2]
local v = redis.call('HMGET', KEYS[1], 'e', 'n')
local n = 0
if tonumber(v[1]) == e then n = tonumber(v[2]) end
local cost = tonumber(ARGV[4])
if n + cost > tonumber(ARGV[3]) then return {0, now, n} end
if cost > 0 then
  if n == 0 then
    redis.call('HSET', KEYS[1], 'e', string.format('%d', e), 'n', ARGV[4])
    redis.call('PEXPIRE', KEYS[1], math.ceil((e - now) / 1000))
  else
    redis.call('HINCRBY', KEYS[1], 'n', ARGV[4])
  end
end
return {1, now, n + cost}
