-- gate.lua: at most one action per interval.
--
-- Key    its value is when the gate opens again (µs since the epoch),
--        expiring then
-- Args   a+0: interval in µs
--        a+1: cost: "0" peeks, "1" passes an open gate, more never passes
-- Check  ok, value: when the gate opens after the decision
local function g_check(key, now, a)
  local at = tonumber(redis.call('GET', key)) or 0
  local cost = ARGV[a + 1]
  if cost == '0' then return true, at end
  if cost ~= '1' or at > now then return false, at end
  return true, now + ARGV[a]
end

local function g_commit(key, now, a, go, at)
  if go and ARGV[a + 1] == '1' then
    redis.call('SET', key, at, 'PX', ttl(ARGV[a]))
  end
end

-- Undo reopens the gate (a refund across Cluster hash slots) if it is still
-- closed by the committed action.
local function g_undo(key, now, a, at)
  if tonumber(redis.call('GET', key)) == at then redis.call('DEL', key) end
end
