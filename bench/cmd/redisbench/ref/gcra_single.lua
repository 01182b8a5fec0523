-- Reference: the single-purpose GCRA script of Sluice's first commit
-- (d2d6579 store/redis/scripts/tat.lua), before the scripts were composed
-- into one decide.lua; the same step with TIME, GET and SET PX.
-- tat.lua: one virtual-scheduling step, shared by GCRA and the token bucket.
--
-- KEYS[1]  the key; its value is the theoretical arrival time (TAT) in µs
--          since the epoch, expiring when the TAT passes
-- ARGV[1]  now in µs since the epoch, or "" to use Redis TIME
-- ARGV[2]  increment n*T in µs; 0 peeks and writes nothing
-- ARGV[3]  tolerance tau in µs
-- Reply    {allowed (1 or 0), now, tat}: tat is the new TAT when allowed,
--          else max(stored TAT, now)
local now = tonumber(ARGV[1])
if not now then
  local t = redis.call('TIME')
  now = t[1] * 1000000 + t[2]
end
local tat = tonumber(redis.call('GET', KEYS[1])) or now
if tat < now then tat = now end
local new = tat + ARGV[2]
if new - ARGV[3] > now then return {0, now, tat} end
if new > tat then
  redis.call('SET', KEYS[1], string.format('%d', new), 'PX', math.ceil((new - now) / 1000))
end
return {1, now, new}
