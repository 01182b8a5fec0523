-- queue_add.lua: admit an entry unless the queue is full. Never trims.
-- KEYS[1] the stream, KEYS[2] the meta hash, KEYS[3] the dedup hash
--         (dedup id -> entry id of entries still queued)
-- ARGV[1] capacity, ARGV[2] dedup id ("" for none), ARGV[3] fields (JSON)
-- The meta hash keeps the capacity of the last admission, for Stats.
-- Reply: {status, id, length, rate}: status 1 added, 2 duplicate (id is
-- the queued entry's), 3 the dedup id is queued with other fields (id is
-- that entry's; nothing added), 0 full (id ""); rate is the drain rate in
-- entries/s as a string (0 unless full).
local len = redis.call('XLEN', KEYS[1])
if ARGV[2] ~= '' then
  local id = redis.call('HGET', KEYS[3], ARGV[2])
  if id then
    local e = redis.call('XRANGE', KEYS[1], id, id)
    if e[1] then
      local f = e[1][2]
      for i = 1, #f, 2 do
        if f[i] == 'f' and f[i + 1] ~= ARGV[3] then return {3, id, len, '0'} end
      end
    end
    return {2, id, len, '0'}
  end
end
if len >= tonumber(ARGV[1]) then
  return {0, '', len, tostring(drain_rate(KEYS[2], now_us()))}
end
local id = redis.call('XADD', KEYS[1], '*', 'f', ARGV[3], 'd', ARGV[2])
if ARGV[2] ~= '' then redis.call('HSET', KEYS[3], ARGV[2], id) end
redis.call('HINCRBY', KEYS[2], 'admitted', 1)
redis.call('HSET', KEYS[2], 'capacity', ARGV[1])
return {1, id, len + 1, '0'}
