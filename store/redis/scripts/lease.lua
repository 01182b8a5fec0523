-- lease.lua: takes a lease of units from a fixed window's counter (the
-- hash of fixed_window.lua: e = the end of the counted window in µs, n =
-- its count), gives back what the taker's last lease left unused, or both
-- at once. A lease's units count in the window at once, so the takers of
-- leases can never admit more than the limit together; they admit from
-- them until the window ends, and no longer.
--
-- Every taker of a lease in a window is registered in the hash
-- (field h:<taker>; h counts them). A lease is granted only while what
-- the window has left is large next to it: at most half of what is left
-- divided among the registered takers, this one included, so that each
-- could take as much again. It is the k units asked for, or fewer near the
-- limit, down to ARGV[8]; below that none are, and the caller decides
-- exactly. The store composes expire.lua before this file.
--
-- KEYS[1]  the fixed window's hash
-- ARGV[1]  now in µs since the epoch, or "" for Redis TIME
-- ARGV[2]  the window in µs
-- ARGV[3]  the limit
-- ARGV[4]  k, the units wanted (0: only give back, and leave)
-- ARGV[5]  the taker's id
-- ARGV[6]  units given back, left of the taker's last lease
-- ARGV[7]  the window end of that lease (µs); units of another window are
--          not given back: that window is over
-- ARGV[8]  the fewest units worth a lease
-- Reply    {now, granted, window end, the window's count after}
local now = tonumber(ARGV[1])
if not now then
  local t = redis.call('TIME')
  now = t[1] * 1000000 + t[2]
end
local key, w, limit, k = KEYS[1], tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local e = now - now % w + w
local v = redis.call('HMGET', key, 'e', 'n', 'h')
if tonumber(v[1]) and tonumber(v[1]) > e then
  e = tonumber(v[1]) -- the clock stepped back: stay in the later window
end
local n, h = 0, 0
if tonumber(v[1]) == e then
  n, h = tonumber(v[2]) or 0, tonumber(v[3]) or 0
elseif v[1] then
  redis.call('DEL', key) -- another window's count and takers
end
local back = tonumber(ARGV[6])
if back > 0 and tonumber(ARGV[7]) == e then
  n = math.max(n - back, 0)
end
local field = 'h:' .. ARGV[5]
local registered = h > 0 and redis.call('HEXISTS', key, field) == 1
local granted = 0
if k > 0 then
  local takers = h
  if not registered then takers = h + 1 end
  granted = math.min(k, math.floor((limit - n) / (2 * takers)))
  if granted < tonumber(ARGV[8]) then
    granted = 0
  else
    n = n + granted
    if not registered then
      h = h + 1
      redis.call('HSET', key, field, 1)
    end
  end
elseif registered then
  h = h - 1
  redis.call('HDEL', key, field)
end
redis.call('HSET', key, 'e', e, 'n', n, 'h', h)
redis.call('PEXPIRE', key, ttl(e - now))
return {now, granted, e, n}
