-- change.lua: a change to a key outside a request: a penalty or a reward
-- (algo.Plan.Adjust), a block or an unblock (algo.Plan.BlockFor,
-- Unblock), by the rules algo states. It defines change(key, now, op, a)
-- for the drivers adjust.lua (one change) and settle.lua (an estimate's
-- changes); the store composes it after expire.lua, window_counter.lua and
-- sliding_log.lua (a penalty on either is the debt of a decision: its
-- check, then its commit with go = 'owe').
--
-- key      the key's state (tat.lua's, fixed_window.lua's or
--          window_counter.lua's layout) for a penalty or a reward, its
--          block key (block.lua's) for a block or an unblock
-- op       "tp" / "tr" a penalty / reward on a TAT, "fp" / "fr" on a fixed
--          window, "wp" / "wr" on a window counter, "sp" / "sr" on a
--          sliding log, "b" a block, "u" an unblock; "tg", "fg", "wg",
--          "sg" a give-back of what an estimate took (algo.Plan.GiveBack):
--          only what still counts, in the window it was counted in
-- ARGV[a..] TAT: n, T in µs, the horizon in µs; window: n, the window in
--          µs (0: a calendar's), the largest count, then a calendar's
--          windows (window_end); window counter, sliding log: n, then
--          what window_counter.lua or sliding_log.lua takes after its
--          cost; block: its length in µs, forget_after in µs; a
--          give-back: since (when the estimate was counted, µs; for a
--          fixed window the end of its window instead), then the reward's
--          arguments of its kind (a fixed window: n alone)
local function change(key, now, op, a)
  if op == 'tp' or op == 'tr' then
    local n, step = tonumber(ARGV[a]), tonumber(ARGV[a + 1])
    local tat = tonumber(redis.call('GET', key)) or now
    if tat < now then tat = now end
    if op == 'tp' then
      n = math.min(n, math.floor((now + tonumber(ARGV[a + 2]) - tat) / step))
      tat = tat + n * step
    elseif n > math.floor((tat - now) / step) then
      tat = now
    else
      tat = tat - n * step
    end
    if tat <= now then
      redis.call('DEL', key)
    else
      redis.call('SET', key, tat, 'PX', ttl(tat - now))
    end
  elseif op == 'fp' or op == 'fr' then
    local n, w = tonumber(ARGV[a]), tonumber(ARGV[a + 1])
    local v = redis.call('HMGET', key, 'e', 'n')
    local e, count = window_end(now, w, a + 3), 0
    local stored = tonumber(v[1])
    if stored and stored >= e then
      e, count = stored, tonumber(v[2]) or 0
    elseif stored and redis.call('HLEN', key) > 2 then
      redis.call('DEL', key) -- another window's count and leases
    end
    if op == 'fp' then
      count = math.min(count + n, tonumber(ARGV[a + 2]))
    else
      count = math.max(count - n, 0)
    end
    redis.call('HSET', key, 'e', e, 'n', count)
    redis.call('PEXPIRE', key, ttl(e - now))
  elseif op == 'wp' then
    local w, reply = w_kind(), {}
    local _, la = w.check(key, now, a, reply, 1)
    w.commit(key, now, a, 'owe', la, reply, 1)
  elseif op == 'wr' then
    -- The newest slices first, none below 0; each window's sum loses what
    -- its slices lose.
    local n, k = tonumber(ARGV[a]), tonumber(ARGV[a + 2])
    local la = tonumber(redis.call('HGET', key, 'a'))
    if la then
      local m = 0
      for i = 0, k - 1 do m = math.max(m, tonumber(ARGV[a + 4 + 2 * i])) end
      local left = 0
      for s = la, la - m + 1, -1 do
        local c = tonumber(redis.call('HGET', key, s % m)) or 0
        local take = math.min(c, n)
        if take > 0 then
          redis.call('HINCRBY', key, s % m, -take)
          for i = 0, k - 1 do
            if la - s < tonumber(ARGV[a + 4 + 2 * i]) then redis.call('HINCRBY', key, -(i + 1), -take) end
          end
          n = n - take
        end
        left = left + c - take
      end
      if left == 0 then redis.call('DEL', key) end
    end
  elseif op == 'sp' then
    local sl, reply = s_kind(), {}
    local _, v = sl.check(key, now, a, reply, 1)
    sl.commit(key, now, a, 'owe', v, reply, 1)
  elseif op == 'sr' then
    -- The newest actions first, none below an empty log: entries of an
    -- exact log; each limit's buckets, newest first, in a sampled one.
    local n, b, k = tonumber(ARGV[a]), tonumber(ARGV[a + 3]), tonumber(ARGV[a + 4])
    if b == 0 then
      local z = redis.call('ZCARD', key)
      if z > 0 then redis.call('ZREMRANGEBYRANK', key, -math.min(n, z), -1) end
    else
      local t = tonumber(redis.call('HGET', key, 't'))
      local r = b + 1
      for i = 0, k - 1 do
        if not t then break end
        local ai, left = math.floor(t / tonumber(ARGV[a + 7 + 3 * i])), n
        for kb = ai, ai - b, -1 do
          if left <= 0 then break end
          local f = i * r + kb % r
          local take = math.min(tonumber(redis.call('HGET', key, f)) or 0, left)
          if take > 0 then
            redis.call('HINCRBY', key, f, -take)
            redis.call('HINCRBY', key, -(i + 1), -take)
            left = left - take
          end
        end
      end
    end
  elseif op == 'tg' then
    -- The part of the n·T scheduled from since that lies after now.
    local since, n, step = tonumber(ARGV[a]), tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2])
    local tat = tonumber(redis.call('GET', key))
    if tat and tat > now and since < tat then
      n = math.min(n, math.floor((tat - now) / step) + 1)
      local back = math.min(n * step, since + n * step - now)
      if back > 0 then
        tat = tat - back
        if tat <= now then
          redis.call('DEL', key)
        else
          redis.call('SET', key, tat, 'PX', ttl(tat - now))
        end
      end
    end
  elseif op == 'fg' then
    -- Only to the window the estimate was counted in, while it lasts.
    local e, n = tonumber(ARGV[a]), tonumber(ARGV[a + 1])
    local v = redis.call('HMGET', key, 'e', 'n')
    if tonumber(v[1]) == e and e > now then
      redis.call('HSET', key, 'n', math.max((tonumber(v[2]) or 0) - n, 0))
    end
  elseif op == 'wg' then
    -- From since's slice alone, while it is in the longest window.
    local since, n, sl, k = tonumber(ARGV[a]), tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3])
    local la = tonumber(redis.call('HGET', key, 'a'))
    if la then
      local m, big = 0, 0
      for i = 0, k - 1 do
        local mi = tonumber(ARGV[a + 5 + 2 * i])
        if mi > m then m, big = mi, i end
      end
      local s = math.floor(since / sl)
      if s <= la and s > math.max(la, math.floor(now / sl)) - m then
        local take = math.min(tonumber(redis.call('HGET', key, s % m)) or 0, n)
        if take > 0 then
          redis.call('HINCRBY', key, s % m, -take)
          for i = 0, k - 1 do
            if la - s < tonumber(ARGV[a + 5 + 2 * i]) then redis.call('HINCRBY', key, -(i + 1), -take) end
          end
          if tonumber(redis.call('HGET', key, -(big + 1))) == 0 then redis.call('DEL', key) end
        end
      end
    end
  elseif op == 'sg' then
    -- An exact log's entries at since; a sampled one's buckets of since.
    local since, n, b, k = tonumber(ARGV[a]), tonumber(ARGV[a + 1]), tonumber(ARGV[a + 4]), tonumber(ARGV[a + 5])
    if b == 0 then
      local mw = 0
      for i = 0, k - 1 do mw = math.max(mw, tonumber(ARGV[a + 7 + 3 * i])) end
      if since > now - mw then
        while n > 0 do
          local ms = redis.call('ZRANGEBYSCORE', key, since, since, 'LIMIT', 0, math.min(n, 1000))
          if #ms == 0 then break end
          redis.call('ZREM', key, unpack(ms))
          n = n - #ms
        end
      end
    else
      local t = tonumber(redis.call('HGET', key, 't'))
      if t then
        local r = b + 1
        for i = 0, k - 1 do
          local w = tonumber(ARGV[a + 8 + 3 * i])
          local ai, kb = math.floor(t / w), math.floor(since / w)
          if kb <= ai and kb > ai - r and (kb + r) * w > now then
            local f = i * r + kb % r
            local take = math.min(tonumber(redis.call('HGET', key, f)) or 0, n)
            if take > 0 then
              redis.call('HINCRBY', key, f, -take)
              redis.call('HINCRBY', key, -(i + 1), -take)
            end
          end
        end
      end
    end
  elseif op == 'b' then
    local v = redis.call('GET', key)
    local count = 1
    if v then
      local _, c = string.match(v, '^(%d+) (%d+)$')
      if tonumber(c) > 1 then count = tonumber(c) end
    end
    local u = now + tonumber(ARGV[a])
    redis.call('SET', key, string.format('%d %d', u, count), 'PX', ttl(u + tonumber(ARGV[a + 1]) - now))
  elseif op == 'u' then
    redis.call('DEL', key)
  end
end
