-- queue_admit.lua: admit(dedup, fields), shared by queue_add.lua and
-- queue_requeue.lua (prepended to each, after queue_rate.lua): admits an
-- entry unless the queue holds its capacity (the meta hash's 'capacity',
-- the queue's definition). Never trims.
-- KEYS[1] the stream, KEYS[2] the meta hash, KEYS[3] the dedup hash
--         (dedup id -> entry id of entries still queued), KEYS[4] the
--         handled hash (dedup id -> "entry-id sha1-of-fields" of entries
--         handled), KEYS[5] the zset of when each handled id is forgotten
--         (ms); see queue_ack.lua
-- Returns {status, id, length, rate}: status 1 added, 2 duplicate (id is
-- the entry's, queued or handled within the dedup window), 3 the dedup id
-- is that of an entry with other fields (id is that entry's; nothing
-- added), 0 full (id ""), 4 the queue has no
-- capacity (it was never defined); rate is the drain rate in entries/s as
-- a string (0 unless full).
local function admit(dedup, fields)
  local len = redis.call('XLEN', KEYS[1])
  local cap = tonumber(redis.call('HGET', KEYS[2], 'capacity'))
  if not cap then return {4, '', len, '0'} end
  if dedup ~= '' then
    local id = redis.call('HGET', KEYS[3], dedup)
    if id then
      local e = redis.call('XRANGE', KEYS[1], id, id)
      if e[1] then
        local f = e[1][2]
        for i = 1, #f, 2 do
          if f[i] == 'f' and f[i + 1] ~= fields then return {3, id, len, '0'} end
        end
      end
      return {2, id, len, '0'}
    end
    local h = redis.call('HGET', KEYS[4], dedup)
    local until_ms = tonumber(redis.call('ZSCORE', KEYS[5], dedup))
    if h and until_ms and until_ms > now_us() / 1000 then
      local sp = string.find(h, ' ', 1, true)
      local hid = string.sub(h, 1, sp - 1)
      if string.sub(h, sp + 1) ~= redis.sha1hex(fields) then return {3, hid, len, '0'} end
      return {2, hid, len, '0'}
    end
  end
  if len >= cap then
    return {0, '', len, tostring(drain_rate(KEYS[2], now_us()))}
  end
  local id = redis.call('XADD', KEYS[1], '*', 'f', fields, 'd', dedup)
  if dedup ~= '' then redis.call('HSET', KEYS[3], dedup, id) end
  redis.call('HINCRBY', KEYS[2], 'admitted', 1)
  return {1, id, len + 1, '0'}
end
