-- forget.lua: tells every store on this Redis (and prefix) that keys were
-- reset or refunded, so that their over-limit caches drop the denials
-- they hold for them (store/redis/forget.go).
--
-- KEYS[1]  the generation counter of forgets
-- ARGV[1]  the channel
-- ARGV[2]  the keys, as a JSON array of strings
-- Reply    the new generation; the message published is
--          "<generation> <keys>": a store that sees a generation more
--          than one past the last it saw has missed a message, and drops
--          every cached denial.
local gen = redis.call('INCR', KEYS[1])
redis.call('PUBLISH', ARGV[1], gen .. ' ' .. ARGV[2])
return gen
