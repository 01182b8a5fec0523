-- global_pool.lua: a region's share of a global limit's window, in the
-- regional Redis: the fixed window's hash that fixed_window.lua decides
-- from (flag 'g'), with e = the window's end (µs), n = units admitted,
-- s = units credited (charged at home first), d = units asked (admitted
-- or denied), c and ct = the store that refills it and until when (µs),
-- x = set once the window's allowance was credited, ne and ns = units
-- credited ahead for the next window (ending at ne), its s once it starts
-- (here or in fixed_window.lua, whichever sees it first). It reads the share,
-- claims its refilling (one store a region at a time), credits units
-- charged at home, takes back unused units to give home, and credits the
-- allowance of a region cut off from home once per window. The store
-- composes expire.lua before this file.
--
-- KEYS[1]  the share's hash (the fixed window's state key)
-- ARGV[1]  now in µs since the epoch, or "" for Redis TIME
-- ARGV[2]  the window in µs
-- ARGV[3]  the refilling store's id
-- ARGV[4]  how long a claim lasts (µs); 0 claims nothing
-- ARGV[5]  the window end that ARGV[6] and ARGV[7] are of (0: none); the
--          next window's takes a credit ahead (ne, ns); in another window
--          than these, nothing is credited (that window is over) or taken
--          back (units of another window)
-- ARGV[6]  units credited, charged at home for that window
-- ARGV[7]  units to take back, at most those held unused
-- ARGV[8]  the allowance: units credited uncharged, once per window (0: none)
-- Reply    {now, window end, n, s, d, units taken back, claimed (1 or 0),
--          units credited ahead for the next window}
local now = tonumber(ARGV[1])
if not now then
  local t = redis.call('TIME')
  now = t[1] * 1000000 + t[2]
end
local key, w = KEYS[1], tonumber(ARGV[2])
local e = now - now % w + w
local v = redis.call('HMGET', key, 'e', 'n', 's', 'd', 'c', 'ct', 'x', 'ne', 'ns')
local stored = tonumber(v[1])
if stored and stored > e then
  e = stored -- the clock stepped back: stay in the later window
end
local n, s, d, c, ct, x, ns = 0, 0, 0, false, 0, false, 0
if stored == e then
  n, s, d = tonumber(v[2]) or 0, tonumber(v[3]) or 0, tonumber(v[4]) or 0
  c, ct, x = v[5], tonumber(v[6]) or 0, v[7]
  if tonumber(v[8]) == e + w then ns = tonumber(v[9]) or 0 end
elseif stored then
  if tonumber(v[8]) == e then s = tonumber(v[9]) or 0 end -- credited ahead
  redis.call('DEL', key) -- another window's share: over
end
local claimed = 0
if tonumber(ARGV[4]) > 0 and (not c or c == ARGV[3] or ct <= now) then
  c, ct, claimed = ARGV[3], now + tonumber(ARGV[4]), 1
end
local taken = 0
if tonumber(ARGV[5]) == e then
  s = s + tonumber(ARGV[6])
  taken = math.max(math.min(tonumber(ARGV[7]), s - n), 0)
  s = s - taken
elseif tonumber(ARGV[5]) == e + w then
  ns = ns + tonumber(ARGV[6])
end
if tonumber(ARGV[8]) > 0 and not x then
  s, x = s + tonumber(ARGV[8]), 1
end
redis.call('HSET', key, 'e', e, 'n', n, 's', s, 'd', d)
if c then redis.call('HSET', key, 'c', c, 'ct', ct) end
if x then redis.call('HSET', key, 'x', 1) end
local last = e
if ns > 0 then
  redis.call('HSET', key, 'ne', e + w, 'ns', ns)
  last = e + w -- the hash lives until the window credited ahead ends
end
redis.call('PEXPIRE', key, ttl(last - now))
return {now, e, n, s, d, taken, claimed, ns}
