-- queue_drain_rate.lua: a queue's drain rate (queue_rate.lua, prepended),
-- changing nothing.
-- KEYS[1] the meta hash
-- Reply: entries/s, as a string
return tostring(drain_rate(KEYS[1], now_us()))
