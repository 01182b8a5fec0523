-- board.lua: the store's Board (store.Board): a hash of entries and its
-- generation.
--
-- KEYS[1]  the hash of entries
-- KEYS[2]  the generation counter
-- ARGV[1]  "post": ARGV[2] the name, ARGV[3] its value ("" with ARGV[4]
--          "del": remove it), ARGV[5] the most entries; "read": ARGV[2]
--          "all" for every entry
-- Reply    post: the new generation, or an error when the board is full;
--          read: {generation, Redis TIME's seconds, its µs, then name,
--          value, ... when all}
if ARGV[1] == 'post' then
  if ARGV[4] == 'del' then
    redis.call('HDEL', KEYS[1], ARGV[2])
  else
    if redis.call('HEXISTS', KEYS[1], ARGV[2]) == 0 and redis.call('HLEN', KEYS[1]) >= tonumber(ARGV[5]) then
      return redis.error_reply('the board holds ' .. ARGV[5] .. ' entries, the most it keeps')
    end
    redis.call('HSET', KEYS[1], ARGV[2], ARGV[3])
  end
  return redis.call('INCR', KEYS[2])
end
local t = redis.call('TIME')
local reply = {tonumber(redis.call('GET', KEYS[2])) or 0, tonumber(t[1]), tonumber(t[2])}
if ARGV[2] == 'all' then
  local all = redis.call('HGETALL', KEYS[1])
  for i = 1, #all do reply[3 + i] = all[i] end
end
return reply
