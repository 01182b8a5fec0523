-- fixed_window.lua: a counter per window aligned to the epoch.
--
-- Key    a hash: e = the end of the counted window (µs), n = its count,
--        and the window's lease holders (lease.lua); it expires when the
--        window ends
-- Args   a+0: window in µs
--        a+1: limit
--        a+2: cost (0 peeks and writes nothing)
-- Check  ok, value: the window's count after the decision (before it when
--        not ok)
local function f_check(key, now, a)
  local e = now - now % ARGV[a] + ARGV[a]
  local v = redis.call('HMGET', key, 'e', 'n')
  local n = 0
  if tonumber(v[1]) == e then n = tonumber(v[2]) end
  local after = n + ARGV[a + 2]
  if after > tonumber(ARGV[a + 1]) then return false, n end
  return true, after
end

local function f_commit(key, now, a, go, after)
  if not go or ARGV[a + 2] == '0' then return end
  if after == tonumber(ARGV[a + 2]) then
    local e = now - now % ARGV[a] + ARGV[a]
    if redis.call('HLEN', key) > 2 and tonumber(redis.call('HGET', key, 'e')) ~= e then
      redis.call('DEL', key) -- another window's lease holders (lease.lua)
    end
    redis.call('HSET', key, 'e', e, 'n', ARGV[a + 2])
    redis.call('PEXPIRE', key, ttl(e - now))
  else
    redis.call('HINCRBY', key, 'n', ARGV[a + 2])
  end
end

-- Undo gives back a committed cost (a refund across Cluster slots) while
-- its window is still the counted one.
local function f_undo(key, now, a, after)
  local e = now - now % ARGV[a] + ARGV[a]
  if tonumber(redis.call('HGET', key, 'e')) == e then
    redis.call('HINCRBY', key, 'n', -ARGV[a + 2])
  end
end
