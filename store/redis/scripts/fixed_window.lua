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
--
-- A global limit's share (the level's flag holds 'g'; global_pool.lua): the
-- hash also holds s, the units of the window this region was credited
-- (charged at home first), d, the units asked (admitted or denied): the
-- demand that sizes the share, and ne, ns: units credited ahead for the
-- window that ends at ne, which become its s when it starts. A decision
-- admits only within s: its value is the count plus the limit's units not
-- held, so that the limit less the value is what the share has left. A
-- window credited nothing holds nothing.

-- f_end returns the end of the window a decision at now counts in, given
-- the stored window's end e (nil for none).
local function f_end(now, a, e)
  local mine = window_end(now, tonumber(ARGV[a]), a + 3)
  if e and e > mine then return e end
  return mine
end

-- f_current[a] is set when level a, a global limit's share, holds the
-- window its check counted in (f_check), so that its commit need not read
-- the hash again; nil until a script checks a share.
local f_current

-- f_global reports whether level a is a global limit's share.
local function f_global(a)
  return string.find(ARGV[a - 2], 'g', 1, true) ~= nil
end

local function f_check(key, now, a, reply, p)
  local v = redis.call('HMGET', key, 'e', 'n', 's', 'ne', 'ns')
  local stored = tonumber(v[1])
  local e = f_end(now, a, stored)
  local n, limit = 0, tonumber(ARGV[a + 1])
  if stored == e then n = tonumber(v[2]) or 0 end
  reply[p + 2] = e
  if f_global(a) then
    local s = 0
    if stored == e then
      s = tonumber(v[3]) or 0
    elseif tonumber(v[4]) == e then
      s = tonumber(v[5]) or 0 -- credited ahead for this window
    end
    n = n + limit - math.min(s, limit) -- the units not held count as spent
    f_current = f_current or {}
    f_current[a] = stored == e
  end
  local after = n + ARGV[a + 2]
  if after > limit then return false, n, 1 end
  return true, after, 1
end

-- f_share records a global limit's decision in its share: the demand
-- always, the count when admitted (f_check admitted only within s, in the
-- hash's window).
local function f_share(key, now, a, go)
  local cost = tonumber(ARGV[a + 2])
  if not (f_current and f_current[a]) then
    local v = redis.call('HMGET', key, 'e', 'ne', 'ns')
    local stored = tonumber(v[1])
    local e = f_end(now, a, stored)
    if stored ~= e then
      local s = 0
      if tonumber(v[2]) == e then s = tonumber(v[3]) or 0 end -- credited ahead
      redis.call('DEL', key) -- another window's share: over
      redis.call('HSET', key, 'e', e, 'n', 0, 's', s, 'd', 0)
      redis.call('PEXPIRE', key, ttl(e - now))
    end
  end
  redis.call('HINCRBY', key, 'd', cost)
  if go then redis.call('HINCRBY', key, 'n', cost) end
end

local function f_commit(key, now, a, go, after)
  if ARGV[a + 2] == '0' then return end
  if f_global(a) then return f_share(key, now, a, go) end
  if not go then return end
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
