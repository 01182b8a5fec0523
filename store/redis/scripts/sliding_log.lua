-- sliding_log.lua: a rolling log with several limits (algo.SlidingLog).
--
-- Key    exact log (B = 0): a sorted set with one member per recorded
--        action, scored by its time in µs. Members are a per-key sequence
--        number in fixed-width hex, string.format('%012x', seq): unique,
--        found again exactly (never tostring or '..' on a number, which
--        keep 14 significant digits), short (a 16-byte allocation), and
--        sorting as numbers; since the log's clock never goes back, the
--        newest member by score is the highest number, so the next one
--        needs no extra call. One set serves every limit: limit i counts
--        the members newer than now - W_i; members older than every window
--        are dropped once per 16 recorded actions.
--        sampled log (B > 0): a hash. 't' is the log's clock (µs, the time
--        of the newest recorded action), 'g' the time the minimum gap
--        counts from ('t' but for a refund) and 'p' the 'g' before the
--        last record (-1: none), for a refund. Limit i has B+1 bucket
--        counters in fields i*(B+1) + k mod (B+1) for its buckets k in
--        (a_i-B-1, a_i], a_i = floor(t/w_i), and their sum in field -(i+1).
--        Either form expires when every recorded action has left every
--        window.
-- Args   a+0: cost n (the store caps it at the largest limit + 1)
--        a+1: mode: 'b' binary, 'n' nary, 'u' uniform
--        a+2: minimum gap in µs (0: none)
--        a+3: buckets B (0: exact)
--        a+4: number of limits K
--        a+5+3i, a+6+3i, a+7+3i: limit i's limit, window and bucket width
--        (µs, ceil(W_i/B); 0 when exact), i = 0..K-1
-- Check  ok (the whole cost admitted), value, and 4+K extras: admitted,
--        wait, reset, denied by, then the K counts, describing the state
--        without this decision (a peek). For a level that was not ok, the
--        commit (which decide.lua calls for every such level) rewrites them
--        for the state after it: what a uniform or nary log recorded, and
--        the wait (see algo.SlidingLog). An ok level keeps them, and the
--        store derives its recorded state (counts + n, reset from the
--        clock): so a level that passed but was refunded in a Cluster
--        reports the state without it. value is the newest member's
--        sequence number (exact) or the clock (sampled, -1: none) after the
--        check, and the refund token after a commit that recorded: the
--        first member's sequence number or the record's time.
--
-- A log's clock never goes back: a decision earlier than the newest
-- recorded action is taken at that action's time e.

-- The kind's functions are built by s_kind() on the first use in a call,
-- so that a call without a sliding log does not pay for their closures:
-- s_kind() returns {check, commit, undo}.
local s_fns
local function s_kind()
  if s_fns then return s_fns end
  local function s_member(seq)
    return string.format('%012x', seq)
  end

  -- s_record returns how many actions the commit records: binary what the
  -- batch passed (go), nary what it admitted, uniform every attempt, at most
  -- the largest limit; a debt (go = 'owe') the whole cost.
  local function s_record(a, go, adm, n, mode, k)
    if go == 'owe' then return n end -- a debt (binary logs only)
    if mode == 'n' then return adm end
    if mode ~= 'u' then return go and adm or 0 end
    local lmax = 0
    for i = 0, k - 1 do
      local lim = tonumber(ARGV[a + 5 + 3 * i])
      if lim > lmax then lmax = lim end
    end
    return math.min(n, lmax)
  end

  -- s_admit applies the decision rule to the counts in the reply.
  local function s_admit(a, reply, p, n, mode, k, gapok)
    if n == 0 then return 0 end
    local fits, room = true, n
    for i = 0, k - 1 do
      local lim, c = tonumber(ARGV[a + 5 + 3 * i]), reply[p + 6 + i]
      if c + n > lim then fits = false end
      if lim - c < room then room = lim - c end
    end
    if mode == 'n' then
      if not gapok or room < 0 then return 0 end
      return room
    end
    if fits and gapok then return n end
    return 0
  end

  -- s_wait sets wait and denied by in the reply for a decision that did not
  -- admit the whole cost; leave(i, j) is when limit i's j-th newest action
  -- leaves its window (called with the extra arguments), gapat when the gap
  -- is kept again (0: no matter).
  local function s_wait(a, reply, p, n, k, gapat, leave, key, ...)
    local wait, by = 0, 0
    for i = 0, k - 1 do
      if n > tonumber(ARGV[a + 5 + 3 * i]) then
        reply[p + 3], reply[p + 5] = -1, i + 1
        return
      end
    end
    for i = 0, k - 1 do
      local lim = tonumber(ARGV[a + 5 + 3 * i])
      if reply[p + 6 + i] + n > lim then
        local t = leave(key, a, i, lim - n + 1, ...)
        if t > wait then wait, by = t, i + 1 end
      end
    end
    if gapat > wait then wait, by = gapat, -1 end
    reply[p + 3], reply[p + 5] = wait, by
  end

  -- s_over reports whether a count in the reply is above its limit (a
  -- debt, a uniform log's attempts): then a peek is denied, and waits.
  local function s_over(a, reply, p, k)
    for i = 0, k - 1 do
      if reply[p + 6 + i] > tonumber(ARGV[a + 5 + 3 * i]) then return true end
    end
    return false
  end

  -- s_owe caps a debt of n so that no window counts more than most, given
  -- the counts before it in the reply.
  local function s_owe(reply, p, n, k, most)
    for i = 0, k - 1 do n = math.min(n, most - reply[p + 6 + i]) end
    return math.max(n, 0)
  end

  local function s_window_max(a, k)
    local wmax = 0
    for i = 0, k - 1 do
      local win = tonumber(ARGV[a + 6 + 3 * i])
      if win > wmax then wmax = win end
    end
    return wmax
  end

  -- Exact log -----------------------------------------------------------------

  local function se_leave(key, a, i, j)
    local e = redis.call('ZRANGE', key, -j, -j, 'WITHSCORES')
    return tonumber(e[2]) + tonumber(ARGV[a + 6 + 3 * i])
  end

  local function se_check(key, now, a, reply, p, n, mode, gap, k)
    local top = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
    local last = tonumber(top[2])
    local e = now
    if last and last > now then e = last end
    for i = 0, k - 1 do
      local c = 0
      if last then c = redis.call('ZCOUNT', key, e - ARGV[a + 6 + 3 * i] + 1, '+inf') end
      reply[p + 6 + i] = c
    end
    local adm = s_admit(a, reply, p, n, mode, k, not last or gap == 0 or e - last >= gap)
    reply[p + 2] = adm
    if last then
      reply[p + 4] = last + s_window_max(a, k)
      return adm == n and not s_over(a, reply, p, k), tonumber(top[1], 16)
    end
    return adm == n, 0
  end

  local function se_commit(key, now, a, go, seq, reply, p, n, mode, gap, k)
    local adm = reply[p + 2]
    local rec = s_record(a, go, adm, n, mode, k)
    local wmax = s_window_max(a, k)
    local last
    if reply[p + 4] > 0 then last = reply[p + 4] - wmax end
    -- A debt is answered as the denial it was checked to be (its wait, on
    -- the log before it), and then recorded.
    local owe = go == 'owe'
    if owe then
      local gapat = 0
      if gap > 0 and last and n > 0 then gapat = last + gap end
      s_wait(a, reply, p, n, k, gapat, se_leave, key)
      rec = s_owe(reply, p, rec, k, maxexact)
    end
    if rec > 0 then
      local e = now
      if last and last > now then e = last end
      seq = seq + 1
      -- Drop the entries older than every window once per 16 actions: the
      -- counts and waits only ever look inside the windows.
      if math.floor((seq + rec - 1) / 16) ~= math.floor((seq - 1) / 16) then
        redis.call('ZREMRANGEBYSCORE', key, '-inf', e - wmax)
      end
      if rec == 1 then
        redis.call('ZADD', key, e, s_member(seq))
      else
        local args, m = {}, 0
        for j = seq, seq + rec - 1 do
          args[m + 1] = e
          args[m + 2] = s_member(j)
          m = m + 2
          if m == 1000 then
            redis.call('ZADD', key, unpack(args, 1, m))
            m = 0
          end
        end
        if m > 0 then redis.call('ZADD', key, unpack(args, 1, m)) end
      end
      last = e
      redis.call('PEXPIRE', key, ttl(last + wmax - now))
      reply[p + 1] = seq
      if adm ~= n and not owe then
        reply[p + 4] = last + wmax
        for i = 0, k - 1 do reply[p + 6 + i] = reply[p + 6 + i] + rec end
      end
    end
    if (adm ~= n or s_over(a, reply, p, k)) and not owe then
      local gapat = 0
      if gap > 0 and last and n > 0 then gapat = last + gap end
      s_wait(a, reply, p, n, k, gapat, se_leave, key)
    end
  end

  local function se_undo(key, now, a, seq, n)
    local args, m = {}, 0
    for j = seq, seq + n - 1 do
      m = m + 1
      args[m] = s_member(j)
      if m == 1000 then
        redis.call('ZREM', key, unpack(args, 1, m))
        m = 0
      end
    end
    if m > 0 then redis.call('ZREM', key, unpack(args, 1, m)) end
  end

  -- Sampled log ---------------------------------------------------------------

  -- ss_hmget reads fields in chunks (Lua's unpack has a stack limit) and
  -- calls f(x, value) for the x-th field.
  local function ss_hmget(key, fields, f)
    for from = 1, #fields, 1000 do
      local to = math.min(from + 999, #fields)
      local v = redis.call('HMGET', key, unpack(fields, from, to))
      for x = from, to do f(x, tonumber(v[x - from + 1]) or 0) end
    end
  end

  local function ss_hdel(key, fields)
    for from = 1, #fields, 1000 do
      redis.call('HDEL', key, unpack(fields, from, math.min(from + 999, #fields)))
    end
  end

  -- ss_leave walks limit i's buckets down from the clock's (the newest after
  -- the decision) to the oldest counted at time e, in chunks, to the bucket
  -- of the j-th newest action, and returns when that bucket leaves the
  -- window.
  local function ss_leave(key, a, i, j, r, e, clock)
    local w = tonumber(ARGV[a + 7 + 3 * i])
    local bottom = math.floor(e / w) - r + 1
    local acc, kb, chunk = 0, math.floor(clock / w), 8
    while kb >= bottom do
      local lo = math.max(bottom, kb - chunk + 1)
      if chunk < 256 then chunk = chunk * 2 end
      local f = {}
      for x = kb, lo, -1 do f[#f + 1] = i * r + x % r end
      local v = redis.call('HMGET', key, unpack(f))
      for x = 1, #f do
        acc = acc + (tonumber(v[x]) or 0)
        if acc >= j then return (kb - x + 1 + r) * w end
      end
      kb = lo - 1
    end
    return 0
  end

  -- held[p] is the sampled check's HMGET reply for the level at reply
  -- index p: 't', 'g', the K sums, then the counter of now's bucket of
  -- each limit, which the commit updates in its one HSET when no bucket
  -- moves on (the common case, when several decisions share a bucket).
  local held = {}

  local function ss_check(key, now, a, reply, p, n, mode, gap, b, k)
    local r = b + 1
    local f = {'t', 'g'}
    for i = 1, k do
      f[2 + i] = -i
      local w = tonumber(ARGV[a + 7 + 3 * (i - 1)])
      f[2 + k + i] = (i - 1) * r + math.floor(now / w) % r
    end
    local h = redis.call('HMGET', key, unpack(f))
    held[p] = h
    local t, g = tonumber(h[1]), tonumber(h[2])
    local e = now
    if t and t > now then e = t end
    local need, reset = nil, 0
    for i = 0, k - 1 do
      local c = 0
      if t then
        local w = tonumber(ARGV[a + 7 + 3 * i])
        local cur, ai = math.floor(e / w), math.floor(t / w)
        if (ai + r) * w > reset then reset = (ai + r) * w end
        if cur - ai < r then
          c = tonumber(h[3 + i]) or 0
          -- the buckets that leave the ring from ai to cur sit in the
          -- fields of (ai, cur]
          for kb = ai + 1, cur do
            need = need or {}
            need[#need + 1] = i * r + kb % r
          end
        end
      end
      reply[p + 6 + i] = c
    end
    if need then
      ss_hmget(key, need, function(x, v)
        local i = p + 6 + math.floor(need[x] / r)
        reply[i] = reply[i] - v
      end)
    end
    local adm = s_admit(a, reply, p, n, mode, k, not g or gap == 0 or e - g >= gap)
    reply[p + 2], reply[p + 4] = adm, reset
    return adm == n and not s_over(a, reply, p, k), t or -1
  end

  local function ss_commit(key, now, a, go, t, reply, p, n, mode, gap, b, k)
    local r = b + 1
    local adm = reply[p + 2]
    local rec = s_record(a, go, adm, n, mode, k)
    local h = held[p]
    local g = tonumber(h[2])
    if t < 0 then t = nil end
    local e = now
    if t and t > now then e = t end
    -- A debt is answered as the denial it was checked to be, and then
    -- recorded (see se_commit).
    local owe = go == 'owe'
    if owe then
      local gapat = 0
      if gap > 0 and g and n > 0 then gapat = g + gap end
      s_wait(a, reply, p, n, k, gapat, ss_leave, key, r, e, t or e)
      rec = s_owe(reply, p, rec, k, maxcount)
    end
    if rec > 0 then
      local set, del, reset, moved = {'t', e, 'g', e, 'p', g or -1}, nil, 0, not t
      for i = 0, k - 1 do
        local w = tonumber(ARGV[a + 7 + 3 * i])
        local cur = math.floor(e / w)
        local c = reply[p + 6 + i] + rec
        if adm ~= n and not owe then reply[p + 6 + i] = c end
        local x = #set
        set[x + 1], set[x + 2] = -(i + 1), c
        if (cur + r) * w > reset then reset = (cur + r) * w end
        local field = i * r + cur % r
        local ai = t and math.floor(t / w)
        if ai == cur and e == now then
          -- the check read this bucket's counter
          set[x + 3], set[x + 4] = field, (tonumber(h[3 + k + i]) or 0) + rec
        elseif ai == cur then
          redis.call('HINCRBY', key, field, rec)
        else
          moved = true
          set[x + 3], set[x + 4] = field, rec
          if ai then
            for kb = math.max(ai + 1, cur - r + 1), cur - 1 do
              del = del or {}
              del[#del + 1] = i * r + kb % r
            end
          end
        end
      end
      if del then ss_hdel(key, del) end
      redis.call('HSET', key, unpack(set))
      -- The expiry moves only when a bucket does.
      if moved then redis.call('PEXPIRE', key, ttl(reset - now)) end
      reply[p + 1] = e
      if adm ~= n and not owe then reply[p + 4] = reset end
      t, g = e, e
    end
    if (adm ~= n or s_over(a, reply, p, k)) and not owe then
      local gapat = 0
      if gap > 0 and g and n > 0 then gapat = g + gap end
      s_wait(a, reply, p, n, k, gapat, ss_leave, key, r, e, t or e)
    end
  end

  local function ss_undo(key, now, a, e, n, b, k)
    local r = b + 1
    local h = redis.call('HMGET', key, 't', 'g', 'p')
    local t = tonumber(h[1])
    if not t then return end
    for i = 0, k - 1 do
      local w = tonumber(ARGV[a + 7 + 3 * i])
      local kb = math.floor(e / w)
      if math.floor(t / w) - kb < r then
        redis.call('HINCRBY', key, i * r + kb % r, -n)
        redis.call('HINCRBY', key, -(i + 1), -n)
      end
    end
    if tonumber(h[2]) == e then
      local prev = tonumber(h[3])
      if prev and prev >= 0 then
        redis.call('HSET', key, 'g', prev)
      else
        redis.call('HDEL', key, 'g')
      end
    end
  end

  -- The kind's functions for decide.lua and refund.lua ------------------------

  local function s_check(key, now, a, reply, p)
    local n, mode, gap, b, k = tonumber(ARGV[a]), ARGV[a + 1], tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3]), tonumber(ARGV[a + 4])
    reply[p + 2], reply[p + 3], reply[p + 4], reply[p + 5] = 0, 0, 0, 0
    local ok, val
    if b > 0 then
      ok, val = ss_check(key, now, a, reply, p, n, mode, gap, b, k)
    else
      ok, val = se_check(key, now, a, reply, p, n, mode, gap, k)
    end
    return ok, val, 4 + k
  end

  local function s_commit(key, now, a, go, val, reply, p)
    local n, mode, gap, b, k = tonumber(ARGV[a]), ARGV[a + 1], tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3]), tonumber(ARGV[a + 4])
    if b > 0 then
      ss_commit(key, now, a, go, val, reply, p, n, mode, gap, b, k)
    else
      se_commit(key, now, a, go, val, reply, p, n, mode, gap, k)
    end
  end

  -- Undo gives back a committed batch (a refund across Cluster hash slots): an ok
  -- level recorded the whole cost at the check's time.
  local function s_undo(key, now, a, val)
    local n, b, k = tonumber(ARGV[a]), tonumber(ARGV[a + 3]), tonumber(ARGV[a + 4])
    if n == 0 then return end
    if b > 0 then
      ss_undo(key, now, a, val, n, b, k)
    else
      se_undo(key, now, a, val, n)
    end
  end
  s_fns = {check = s_check, commit = s_commit, undo = s_undo}
  return s_fns
end
