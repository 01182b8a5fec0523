-- global_home.lua: the count of a global limit's window at its home: the
-- units charged to the regions' shares, never more than the limit. A
-- region's store charges units here before its region spends them, and
-- gives back units its region took back unspent. Each window has a key of
-- its own, named by the window's end on the regions' clocks, so that
-- regions whose clocks differ never count one window in another; it lives
-- a window past that end on home's clock. The store composes expire.lua
-- before this file.
--
-- KEYS[1]  the window's count
-- ARGV[1]  the limit
-- ARGV[2]  units wanted
-- ARGV[3]  units given back (charged here before for this window)
-- ARGV[4]  the window's end (µs)
-- ARGV[5]  the window (µs)
-- Reply    {units granted, the count after}
local t = redis.call('TIME')
local now = t[1] * 1000000 + t[2]
local key, limit = KEYS[1], tonumber(ARGV[1])
local n = tonumber(redis.call('GET', key)) or 0
n = math.max(n - tonumber(ARGV[3]), 0)
local granted = math.max(math.min(tonumber(ARGV[2]), limit - n), 0)
n = n + granted
redis.call('SET', key, n, 'PX', ttl(math.max(tonumber(ARGV[4]), now) + tonumber(ARGV[5]) - now))
return {granted, n}
