-- queue_claim.lua: take over entries idle too long (XAUTOCLAIM), one page.
-- KEYS[1] the stream, KEYS[2] the meta hash
-- ARGV[1] group, ARGV[2] consumer, ARGV[3] min idle (ms), ARGV[4] cursor,
-- ARGV[5] count
-- Reply: {next cursor, {id, fields..., deliveries}...} where fields are
-- the entry's field/value pairs; entries deleted meanwhile are skipped.
local r = redis.call('XAUTOCLAIM', KEYS[1], ARGV[1], ARGV[2], ARGV[3], ARGV[4], 'COUNT', ARGV[5])
local out = {r[1]}
for _, e in ipairs(r[2]) do
  if e and e[2] then
    local p = redis.call('XPENDING', KEYS[1], ARGV[1], e[1], e[1], 1)
    if p[1] then
      out[#out + 1] = {e[1], e[2], p[1][4]}
    end
  end
end
if #out > 1 then redis.call('HINCRBY', KEYS[2], 'delivered', #out - 1) end
return out
