-- queue_add.lua: admit an entry (queue_admit.lua, prepended).
-- KEYS[1] the stream, KEYS[2] the meta hash, KEYS[3] the dedup hash,
-- KEYS[4] the handled hash, KEYS[5] its zset (queue_admit.lua)
-- ARGV[1] dedup id ("" for none), ARGV[2] fields (JSON)
-- Reply: admit's {status, id, length, rate}.
return admit(ARGV[1], ARGV[2])
