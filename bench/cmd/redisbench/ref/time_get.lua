-- Reference: the script call plus Redis TIME and a GET of the key.
local t = redis.call('TIME')
local v = redis.call('GET', KEYS[1])
return 1
