-- dequeue.lua: takes the oldest entry of a ticket queue whose life has
-- not ended (store.TicketQueue), once: the entries are a sorted set
-- scored by when each expires (issue.lua), whose expired ones are
-- dropped first.
--
-- KEYS[1]  the queue
-- ARGV[1]  now in µs since the epoch, or "" for Redis TIME
-- Reply    the entry, or "" when there is none
local now = tonumber(ARGV[1])
if not now then
  local t = redis.call('TIME')
  now = t[1] * 1000000 + t[2]
end
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local first = redis.call('ZRANGE', KEYS[1], 0, 0)
if #first == 0 then return '' end
redis.call('ZREM', KEYS[1], first[1])
return first[1]
