-- queue_ack.lua: an entry leaves the queue: XACK, XDEL, its dedup id and last
-- error are forgotten, the drain rate counts it.
-- KEYS[1] the stream, KEYS[2] the meta hash, KEYS[3] the dedup hash,
-- KEYS[4] the errors hash (entry id -> last error)
-- ARGV[1] group, ARGV[2] entry id, ARGV[3] counter ('acked' or 'dead')
-- Reply: 1, or 0 when the entry had been acked already (no change).
local e = redis.call('XRANGE', KEYS[1], ARGV[2], ARGV[2])
if redis.call('XACK', KEYS[1], ARGV[1], ARGV[2]) == 0 then return 0 end
redis.call('XDEL', KEYS[1], ARGV[2])
redis.call('HDEL', KEYS[4], ARGV[2])
if e[1] then
  local f = e[1][2]
  for i = 1, #f, 2 do
    if f[i] == 'd' and f[i + 1] ~= '' and redis.call('HGET', KEYS[3], f[i + 1]) == ARGV[2] then
      redis.call('HDEL', KEYS[3], f[i + 1])
    end
  end
end
redis.call('HINCRBY', KEYS[2], ARGV[3], 1)
drained(KEYS[2], now_us())
return 1
