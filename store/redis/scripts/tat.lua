-- tat.lua: the virtual-scheduling step, shared by GCRA and the token bucket.
--
-- Key    its value is the theoretical arrival time (TAT) in µs since the
--        epoch, expiring when the TAT passes
-- Args   a+0: increment n*T in µs (0 peeks and writes nothing)
--        a+1: tolerance tau in µs
-- Check  ok, value: value is the new TAT when ok, else max(stored TAT, now)
local function t_check(key, now, a)
  local tat = tonumber(redis.call('GET', key)) or now
  if tat < now then tat = now end
  local new = tat + ARGV[a]
  if new - ARGV[a + 1] > now then return false, tat end
  return true, new
end

local function t_commit(key, now, a, go, new)
  if go == 'owe' then
    -- a debt: new is max(stored TAT, now), which moves on by n*T, to at
    -- most the horizon ahead
    new = math.min(new + ARGV[a], now + horizon)
  end
  if go and ARGV[a] ~= '0' then
    redis.call('SET', key, new, 'PX', ttl(new - now))
  end
end

-- Undo gives back a committed increment (a refund across Cluster hash slots):
-- the TAT moves back by n*T, and a TAT no later than now is no state.
local function t_undo(key, now, a, new)
  local cur = tonumber(redis.call('GET', key))
  if not cur then return end
  local back = cur - ARGV[a]
  if back <= now then
    redis.call('DEL', key)
  else
    redis.call('SET', key, back, 'PX', ttl(back - now))
  end
end
