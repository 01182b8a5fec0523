-- settle.lua: settles an estimate (store.Settler): if its ticket is there,
-- it deletes it (and its entry in its tag's tickets) and makes each change
-- (change.lua's change), and when units came back tells every store's
-- over-limit cache (forget.lua's message), all in one atomic call. The
-- store composes it after expire.lua, window_counter.lua and change.lua.
--
-- KEYS[1]  the ticket
-- KEYS[2]  its tag's tickets (issue.lua)
-- KEYS[3]  the generation counter of forgets (forget.lua)
-- KEYS[4..] the keys to change, one per change
-- ARGV[1]  now in µs since the epoch, or "" for Redis TIME
-- ARGV[2]  the forget channel, "" to send no message; ARGV[3] its keys,
--          as a JSON array of strings
-- ARGV[4..] per change: its op, the number of its arguments, then them
--          (change.lua)
-- Reply    1 when the ticket was there and the changes were made, else 0
redis.call('ZREM', KEYS[2], KEYS[1])
if redis.call('DEL', KEYS[1]) == 0 then return 0 end
local now = tonumber(ARGV[1])
if not now then
  local t = redis.call('TIME')
  now = t[1] * 1000000 + t[2]
end
local a = 4
for j = 4, #KEYS do
  change(KEYS[j], now, ARGV[a], a + 2)
  a = a + 2 + tonumber(ARGV[a + 1])
end
if ARGV[2] ~= '' then
  local gen = redis.call('INCR', KEYS[3])
  redis.call('PUBLISH', ARGV[2], gen .. ' ' .. ARGV[3])
end
return 1
