-- Reference: the leanest GCRA step I could write, for the floor of the
-- script target: one level, Redis TIME only, no functions or tables
-- built, arithmetic without math.*, and its answer as one string ("ok
-- now tat") rather than a table, which Redis converts at a higher cost.
-- It takes the arguments of a decide.lua call of one GCRA level: ARGV[5]
-- is the increment n*T and ARGV[6] the tolerance tau, in µs.
local t = redis.call('TIME')
local now = t[1] * 1000000 + t[2]
local tat = tonumber(redis.call('GET', KEYS[1])) or now
if tat < now then tat = now end
local new = tat + ARGV[5]
if new - ARGV[6] > now then return string.format('0 %d %d', now, tat) end
local us = new - now
redis.call('SET', KEYS[1], string.format('%d', new), 'PX', string.format('%d', (us - us % 1000) / 1000 + 1))
return string.format('1 %d %d', now, new)
