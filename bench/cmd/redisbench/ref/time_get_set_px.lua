-- Reference: the least a GCRA step runs, and nothing else: Redis TIME, a
-- GET of the key, and a SET of it with an expiry (PX), its value and TTL
-- passed as constant strings, so that no Lua arithmetic or number
-- formatting is counted.
local t = redis.call('TIME')
local v = redis.call('GET', KEYS[1])
redis.call('SET', KEYS[1], '1795452080344022', 'PX', '2000')
return 1
