-- consumers.lua: puts an entry at the head of a key's consumers list,
-- keeps the newest entries and sets the list's expiry.
--
-- KEYS[1]  the list, named after the level's state key so that it lives
--          in the same Cluster hash slot
-- ARGV[1]  the entry (JSON)
-- ARGV[2]  how many entries to keep
-- ARGV[3]  the list's time to live in ms
-- Reply    1
redis.call('LPUSH', KEYS[1], ARGV[1])
redis.call('LTRIM', KEYS[1], 0, tonumber(ARGV[2]) - 1)
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return 1
