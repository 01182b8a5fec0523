-- Reference: time_get_set_px.lua with KEEPTTL in place of PX: the write
-- keeps the key's expiry (none, for a key it creates).
local t = redis.call('TIME')
local v = redis.call('GET', KEYS[1])
redis.call('SET', KEYS[1], '1795452080344022', 'KEEPTTL')
return 1
