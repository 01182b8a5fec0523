-- queue_requeue.lua: moves a dead letter back into its queue as a new
-- entry, with its fields and dedup id (queue_admit.lua, prepended); the
-- dead letter is removed only if the entry was added.
-- KEYS[1] the stream, KEYS[2] the meta hash, KEYS[3] the dedup hash,
-- KEYS[4] the handled hash, KEYS[5] its zset (queue_admit.lua),
-- KEYS[6] the dead-letter stream
-- ARGV[1] the dead letter's id in the dead-letter stream
-- Reply: admit's {status, id, length, rate}, or status 5 when there is no
-- such dead letter.
local e = redis.call('XRANGE', KEYS[6], ARGV[1], ARGV[1])[1]
if not e then return {5, '', 0, '0'} end
local fields, dedup = '', ''
for i = 1, #e[2], 2 do
  if e[2][i] == 'f' then fields = e[2][i + 1] elseif e[2][i] == 'd' then dedup = e[2][i + 1] end
end
local r = admit(dedup, fields)
if r[1] == 1 then redis.call('XDEL', KEYS[6], ARGV[1]) end
return r
