-- fixed_window.lua: a counter per window aligned to the epoch, or per
-- window of the calendar (algo.Calendar).
--
-- Key    a hash: e = the end of the counted window (µs), n = its count,
--        and the window's lease holders (lease.lua); it expires when the
--        window ends
-- Args   a+0: window in µs, or 0 for a calendar's windows
--        a+1: limit
--        a+2: cost (0 peeks and writes nothing)
--        a+3..: a calendar's windows around the caller's time (window_end):
--        their count, the earliest start, then the ends
-- Check  ok, value: the window's count after the decision (before it when
--        not ok), and one extra value: the end of the window counted, which
--        is the stored window's when that one is later than now's (the clock
--        stepped back: a key never returns to a window it has left)

-- f_end returns the end of the window a decision at now counts in, given
-- the stored window's end e (nil for none).
local function f_end(now, a, e)
  local mine = window_end(now, tonumber(ARGV[a]), a + 3)
  if e and e > mine then return e end
  return mine
end

local function f_check(key, now, a, reply, p)
  local v = redis.call('HMGET', key, 'e', 'n')
  local stored = tonumber(v[1])
  local e = f_end(now, a, stored)
  local n = 0
  if stored == e then n = tonumber(v[2]) end
  reply[p + 2] = e
  local after = n + ARGV[a + 2]
  if after > tonumber(ARGV[a + 1]) then return false, n, 1 end
  return true, after, 1
end

local function f_commit(key, now, a, go, after)
  if not go or ARGV[a + 2] == '0' then return end
  if go == 'owe' then
    -- a debt: after is the count before, which grows by the cost, to at
    -- most maxcount
    after = math.min(after + ARGV[a + 2], maxcount)
    local stored = tonumber(redis.call('HGET', key, 'e'))
    local e = f_end(now, a, stored)
    if stored ~= e and redis.call('HLEN', key) > 2 then
      redis.call('DEL', key) -- another window's lease holders (lease.lua)
    end
    redis.call('HSET', key, 'e', e, 'n', after)
    redis.call('PEXPIRE', key, ttl(e - now))
    return
  end
  if after == tonumber(ARGV[a + 2]) then
    -- a window's first cost (or the first after its count was given back)
    local stored = tonumber(redis.call('HGET', key, 'e'))
    local e = f_end(now, a, stored)
    if stored ~= e and redis.call('HLEN', key) > 2 then
      redis.call('DEL', key) -- another window's lease holders (lease.lua)
    end
    redis.call('HSET', key, 'e', e, 'n', ARGV[a + 2])
    redis.call('PEXPIRE', key, ttl(e - now))
  else
    redis.call('HINCRBY', key, 'n', ARGV[a + 2])
  end
end

-- Undo gives back a committed cost (a refund across Cluster hash slots) while
-- its window is still the counted one.
local function f_undo(key, now, a, after)
  local stored = tonumber(redis.call('HGET', key, 'e'))
  if stored and stored == f_end(now, a, stored) then
    redis.call('HINCRBY', key, 'n', -ARGV[a + 2])
  end
end
