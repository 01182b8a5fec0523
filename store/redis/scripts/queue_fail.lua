-- queue_fail.lua: records a delivery's error for whoever handles the entry next,
-- while the entry is still in the stream: a handler that fails after
-- another worker acked the entry leaves nothing behind.
-- KEYS[1] the stream, KEYS[2] the errors hash (entry id -> last error)
-- ARGV[1] entry id, ARGV[2] the error
-- Reply: 1 recorded, 0 the entry is gone.
if not redis.call('XRANGE', KEYS[1], ARGV[1], ARGV[1])[1] then return 0 end
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
return 1
