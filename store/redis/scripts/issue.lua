-- issue.lua: issues the ticket of an estimate (store.Settler), unless its
-- tag already holds the most open tickets one tag may: the tag's tickets
-- are a sorted set of the ticket keys scored by when each expires, whose
-- expired ones are dropped first; with a queue (store.TicketQueue), it
-- queues an entry with the ticket, scored by when both expire.
--
-- KEYS[1]  the ticket: a string that expires with it
-- KEYS[2]  its tag's tickets
-- KEYS[3]  the queue (a sorted set of entries), or none
-- ARGV[1]  now in µs since the epoch, or "" for Redis TIME
-- ARGV[2]  the ticket's life in µs
-- ARGV[3]  the most open tickets of a tag (store.MaxOpenTickets)
-- ARGV[4]  the entry to queue, with KEYS[3]
-- Reply    1 when issued, 0 when the tag holds the most already
local now = tonumber(ARGV[1])
if not now then
  local t = redis.call('TIME')
  now = t[1] * 1000000 + t[2]
end
local life = tonumber(ARGV[2])
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
if not redis.call('ZSCORE', KEYS[2], KEYS[1]) and redis.call('ZCARD', KEYS[2]) >= tonumber(ARGV[3]) then
  return 0
end
redis.call('ZADD', KEYS[2], now + life, KEYS[1])
redis.call('SET', KEYS[1], '1', 'PX', math.max(math.floor(life / 1000), 1))
local last = redis.call('ZRANGE', KEYS[2], -1, -1, 'WITHSCORES')
redis.call('PEXPIRE', KEYS[2], math.max(math.ceil((tonumber(last[2]) - now) / 1000), 1))
if KEYS[3] then
  redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now)
  redis.call('ZADD', KEYS[3], now + life, ARGV[4])
  last = redis.call('ZRANGE', KEYS[3], -1, -1, 'WITHSCORES')
  redis.call('PEXPIRE', KEYS[3], math.max(math.ceil((tonumber(last[2]) - now) / 1000), 1))
end
return 1
