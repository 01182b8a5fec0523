-- adjust.lua: a change to a key outside a request (store.Adjuster): a
-- penalty or a reward (algo.Plan.Adjust), a block or an unblock
-- (algo.Plan.BlockFor, Unblock), by the rules algo states.
--
-- KEYS[1]  the key's state (tat.lua's or fixed_window.lua's layout) for a
--          penalty or a reward, its block key (block.lua's) for a block or
--          an unblock
-- ARGV[1]  now in µs since the epoch, or "" for Redis TIME
-- ARGV[2]  the change: "tp" / "tr" a penalty / reward on a TAT, "fp" /
--          "fr" on a fixed window, "wp" / "wr" on a window counter, "b" a
--          block, "u" an unblock
-- ARGV[3..] TAT: n, T in µs, the horizon in µs; window: n, the window in
--          µs, the largest count; window counter: n, then what
--          window_counter.lua takes after its cost; block: its length in
--          µs, forget_after in µs
-- Reply    1
--
-- The store composes it after expire.lua and window_counter.lua: a
-- penalty on a window counter is the debt of a decision (its check, then
-- its commit with go = 'owe').
local now = tonumber(ARGV[1])
if not now then
  local t = redis.call('TIME')
  now = t[1] * 1000000 + t[2]
end
local op = ARGV[2]
if op == 'tp' or op == 'tr' then
  local n, step = tonumber(ARGV[3]), tonumber(ARGV[4])
  local tat = tonumber(redis.call('GET', KEYS[1])) or now
  if tat < now then tat = now end
  if op == 'tp' then
    n = math.min(n, math.floor((now + tonumber(ARGV[5]) - tat) / step))
    tat = tat + n * step
  elseif n > math.floor((tat - now) / step) then
    tat = now
  else
    tat = tat - n * step
  end
  if tat <= now then
    redis.call('DEL', KEYS[1])
  else
    redis.call('SET', KEYS[1], tat, 'PX', ttl(tat - now))
  end
elseif op == 'fp' or op == 'fr' then
  local n, w = tonumber(ARGV[3]), tonumber(ARGV[4])
  local v = redis.call('HMGET', KEYS[1], 'e', 'n')
  local e, count = now - now % w + w, 0
  local stored = tonumber(v[1])
  if stored and stored >= e then
    e, count = stored, tonumber(v[2]) or 0
  elseif stored and redis.call('HLEN', KEYS[1]) > 2 then
    redis.call('DEL', KEYS[1]) -- another window's count and leases
  end
  if op == 'fp' then
    count = math.min(count + n, tonumber(ARGV[5]))
  else
    count = math.max(count - n, 0)
  end
  redis.call('HSET', KEYS[1], 'e', e, 'n', count)
  redis.call('PEXPIRE', KEYS[1], ttl(e - now))
elseif op == 'wp' then
  local w, reply = w_kind(), {}
  local _, la = w.check(KEYS[1], now, 3, reply, 1)
  w.commit(KEYS[1], now, 3, 'owe', la, reply, 1)
elseif op == 'wr' then
  -- The newest slices first, none below 0; each window's sum loses what
  -- its slices lose.
  local n, k = tonumber(ARGV[3]), tonumber(ARGV[5])
  local la = tonumber(redis.call('HGET', KEYS[1], 'a'))
  if la then
    local m = 0
    for i = 0, k - 1 do m = math.max(m, tonumber(ARGV[7 + 2 * i])) end
    local left = 0
    for s = la, la - m + 1, -1 do
      local c = tonumber(redis.call('HGET', KEYS[1], s % m)) or 0
      local take = math.min(c, n)
      if take > 0 then
        redis.call('HINCRBY', KEYS[1], s % m, -take)
        for i = 0, k - 1 do
          if la - s < tonumber(ARGV[7 + 2 * i]) then redis.call('HINCRBY', KEYS[1], -(i + 1), -take) end
        end
        n = n - take
      end
      left = left + c - take
    end
    if left == 0 then redis.call('DEL', KEYS[1]) end
  end
elseif op == 'b' then
  local v = redis.call('GET', KEYS[1])
  local count = 1
  if v then
    local _, c = string.match(v, '^(%d+) (%d+)$')
    if tonumber(c) > 1 then count = tonumber(c) end
  end
  local u = now + tonumber(ARGV[3])
  redis.call('SET', KEYS[1], string.format('%d %d', u, count), 'PX', ttl(u + tonumber(ARGV[4]) - now))
elseif op == 'u' then
  redis.call('DEL', KEYS[1])
end
return 1
