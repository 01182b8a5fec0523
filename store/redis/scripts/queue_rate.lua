-- queue_rate.lua: shared by queue_add.lua and queue_ack.lua (prepended to each), no KEYS.
-- The drain rate counts entries leaving the queue in windows of W µs held
-- in the meta hash: w0 (start of the current window), n0 (entries left in
-- it) and r (entries/s of the window before). drain_rate(meta, now)
-- returns entries/s over the last W to 2W; an idle queue decays to 0.
local W = 10000000

local function now_us()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

local function drain_rate(meta, now)
  local v = redis.call('HMGET', meta, 'w0', 'n0', 'r')
  local w0, n0, r = tonumber(v[1]), tonumber(v[2]) or 0, tonumber(v[3])
  if not w0 then return 0 end
  local el = now - w0
  if el >= W or not r then
    if el <= 0 then return 0 end
    return n0 * 1000000 / el
  end
  return (n0 + r * W / 1000000) * 1000000 / (el + W)
end

local function drained(meta, now)
  local v = redis.call('HMGET', meta, 'w0', 'n0')
  local w0, n0 = tonumber(v[1]), tonumber(v[2]) or 0
  if not w0 then
    redis.call('HSET', meta, 'w0', now, 'n0', 1)
    return
  end
  local el = now - w0
  if el >= W then
    redis.call('HSET', meta, 'r', tostring(n0 * 1000000 / el), 'w0', now, 'n0', 1)
  else
    redis.call('HINCRBY', meta, 'n0', 1)
  end
end
