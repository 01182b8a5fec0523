-- queue_ack.lua: an entry leaves the queue: XACK, XDEL, its last error is
-- forgotten, the drain rate counts it. Its dedup id leaves the dedup hash:
-- a handled entry's id is remembered in the handled hash for the dedup
-- window (ARGV[4]), so that a retry of its Add answers the entry; a dead
-- one's is forgotten, so that its dead letter can be requeued. Up to 10
-- handled ids past their window are forgotten on each call.
-- KEYS[1] the stream, KEYS[2] the meta hash, KEYS[3] the dedup hash,
-- KEYS[4] the errors hash (entry id -> last error), KEYS[5] the handled
-- hash, KEYS[6] its zset (queue_admit.lua)
-- ARGV[1] group, ARGV[2] entry id, ARGV[3] counter ('acked' or 'dead'),
-- ARGV[4] the dedup window, ms
-- Reply: 1, or 0 when the entry had been acked already (no change).
local e = redis.call('XRANGE', KEYS[1], ARGV[2], ARGV[2])
if redis.call('XACK', KEYS[1], ARGV[1], ARGV[2]) == 0 then return 0 end
redis.call('XDEL', KEYS[1], ARGV[2])
redis.call('HDEL', KEYS[4], ARGV[2])
local now = now_us()
local now_ms = math.floor(now / 1000)
for _, d in ipairs(redis.call('ZRANGEBYSCORE', KEYS[6], '-inf', now_ms, 'LIMIT', 0, 10)) do
  redis.call('HDEL', KEYS[5], d)
  redis.call('ZREM', KEYS[6], d)
end
if e[1] then
  local f = e[1][2]
  local dedup, fields = '', ''
  for i = 1, #f, 2 do
    if f[i] == 'd' then dedup = f[i + 1] elseif f[i] == 'f' then fields = f[i + 1] end
  end
  if dedup ~= '' and redis.call('HGET', KEYS[3], dedup) == ARGV[2] then
    redis.call('HDEL', KEYS[3], dedup)
    if ARGV[3] == 'acked' then
      redis.call('HSET', KEYS[5], dedup, ARGV[2] .. ' ' .. redis.sha1hex(fields))
      redis.call('ZADD', KEYS[6], now_ms + tonumber(ARGV[4]), dedup)
    end
  end
end
redis.call('HINCRBY', KEYS[2], ARGV[3], 1)
drained(KEYS[2], now)
return 1
