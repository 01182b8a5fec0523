-- window_counter.lua: per-slice counters checked over several windows
-- (algo.WindowCounter).
--
-- Key    one hash per caller, one field per slice: 'a' is the latest slice
--        with a count (slice number floor(t/S)); the counts of the M
--        latest slices (a-M, a] sit in fields k mod M, M the longest
--        window in slices; field -(i+1) holds window i's sum over its m_i
--        slices (a-m_i, a]. The hash expires when slice a leaves the
--        longest window. (The store cannot name per-slice keys: under
--        Redis TIME the client does not know the slice, and a script may
--        only touch keys it is given; one hash is one key, so one hash slot.)
-- Args   a+0: cost n (the store caps it at the largest limit + 1)
--        a+1: slice S in µs
--        a+2: number of windows K
--        a+3+2i, a+4+2i: window i's limit and length in slices m_i
-- Check  ok, value, and 4+K extras like sliding_log.lua's: admitted, wait,
--        reset, denied by, then the K counts, of the state without this
--        decision (the store derives the state after an ok level's commit:
--        counts + n, reset from the slice). value is 'a' before the
--        decision (-1: none), then the slice the commit counted in (the
--        refund token).

-- The kind's functions are built by w_kind() on the first use in a call
-- (see sliding_log.lua): w_kind() returns {check, commit, undo}.
local w_fns
local function w_kind()
  if w_fns then return w_fns end
  -- w_args parses a level's arguments once per call: n, S, K, M (the
  -- longest window in slices), then limit and slices of each window at
  -- 5+2i and 6+2i.
  local parsed = {}
  local function w_args(a)
    local v = parsed[a]
    if v then return v end
    local k = tonumber(ARGV[a + 2])
    v = {tonumber(ARGV[a]), tonumber(ARGV[a + 1]), k, 0}
    for i = 0, k - 1 do
      local lim, mi = tonumber(ARGV[a + 3 + 2 * i]), tonumber(ARGV[a + 4 + 2 * i])
      v[5 + 2 * i], v[6 + 2 * i] = lim, mi
      if mi > v[4] then v[4] = mi end
    end
    parsed[a] = v
    return v
  end
  -- held[p] is the check's HMGET reply for the level at reply index p:
  -- 'a', the K sums, and the counter of now's slice, which the commit
  -- updates in the one HSET when the decision stays in the latest slice.
  local held = {}

  local function w_check(key, now, a, reply, p)
    local v = w_args(a)
    local n, s, k, m = v[1], v[2], v[3], v[4]
    local cur = math.floor(now / s)
    local f = {'a'}
    for i = 1, k do f[i + 1] = -i end
    f[k + 2] = cur % m
    local h = redis.call('HMGET', key, unpack(f))
    held[p] = h
    local la = tonumber(h[1])
    if la and la > cur then cur = la end
    reply[p + 2], reply[p + 3], reply[p + 4], reply[p + 5] = 0, 0, 0, 0
    local need, owner
    for i = 0, k - 1 do
      local c, mi = 0, v[6 + 2 * i]
      if la and cur - la < mi then
        c = tonumber(h[2 + i]) or 0
        -- the slices (la-m_i, cur-m_i] leave window i
        for kk = la - mi + 1, cur - mi do
          need, owner = need or {}, owner or {}
          need[#need + 1], owner[#owner + 1] = kk % m, p + 6 + i
        end
      end
      reply[p + 6 + i] = c
    end
    if need then
      for from = 1, #need, 1000 do
        local to = math.min(from + 999, #need)
        local v = redis.call('HMGET', key, unpack(need, from, to))
        for x = from, to do reply[owner[x]] = reply[owner[x]] - (tonumber(v[x - from + 1]) or 0) end
      end
    end
    local fits = true
    for i = 0, k - 1 do
      if reply[p + 6 + i] + n > v[5 + 2 * i] then fits = false end
    end
    if la then reply[p + 4] = (la + m) * s end
    if fits then
      reply[p + 2] = n
      return true, la or -1, 4 + k
    end
    -- Denied: wait for the latest of the windows that do not fit, walking
    -- each back from the newest slice to the one holding its
    -- (L_i-n+1)-th newest action.
    local wait, by = 0, 0
    for i = 0, k - 1 do
      local lim, mi = v[5 + 2 * i], v[6 + 2 * i]
      if n > lim then
        wait, by = -1, i + 1
        break
      end
      if reply[p + 6 + i] + n > lim then
        local acc, kk, bottom, t, chunk = 0, la, cur - mi + 1, nil, 8
        while not t and kk >= bottom do
          local lo = math.max(bottom, kk - chunk + 1)
          if chunk < 256 then chunk = chunk * 2 end
          local fs = {}
          for x = kk, lo, -1 do fs[#fs + 1] = x % m end
          local v = redis.call('HMGET', key, unpack(fs))
          for x = 1, #fs do
            acc = acc + (tonumber(v[x]) or 0)
            if acc > lim - n then
              t = (kk - x + 1 + mi) * s
              break
            end
          end
          kk = lo - 1
        end
        if t and t > wait then wait, by = t, i + 1 end
      end
    end
    reply[p + 3], reply[p + 5] = wait, by
    return false, la or -1, 4 + k
  end

  local function w_commit(key, now, a, go, la, reply, p)
    local v = w_args(a)
    local n, s, k, m = v[1], v[2], v[3], v[4]
    if not go or n == 0 then return end
    if go == 'owe' then
      -- a debt: the cost in full, but no window's count above maxcount
      for i = 0, k - 1 do n = math.min(n, maxcount - reply[p + 6 + i]) end
      if n <= 0 then return end
    end
    local now_slice = math.floor(now / s)
    local cur = now_slice
    if la < 0 then
      la = nil
    elseif la > cur then
      cur = la
    end
    if la and cur - la >= m then
      redis.call('DEL', key)
      la = nil
    end
    local set = {}
    for i = 0, k - 1 do
      set[2 * i + 1], set[2 * i + 2] = -(i + 1), reply[p + 6 + i] + n
    end
    local x = 2 * k
    if la == cur then
      -- The latest slice again: its expiry stands. The counter read by
      -- the check is the current one unless the clock was ahead of now.
      if cur == now_slice then
        set[x + 1], set[x + 2] = cur % m, (tonumber(held[p][k + 2]) or 0) + n
        redis.call('HSET', key, unpack(set))
      else
        redis.call('HSET', key, unpack(set))
        redis.call('HINCRBY', key, cur % m, n)
      end
    else
      set[x + 1], set[x + 2], set[x + 3], set[x + 4] = cur % m, n, 'a', cur
      if la and cur - la > 1 then
        local del = {}
        for kk = la + 1, cur - 1 do del[#del + 1] = kk % m end
        for from = 1, #del, 1000 do
          redis.call('HDEL', key, unpack(del, from, math.min(from + 999, #del)))
        end
      end
      redis.call('HSET', key, unpack(set))
      redis.call('PEXPIRE', key, ttl((cur + m) * s - now))
    end
    reply[p + 1] = cur
  end

  -- Undo gives back a committed cost (a refund across Cluster hash slots) from
  -- the slice it was counted in, while that slice is still kept.
  local function w_undo(key, now, a, slice)
    local v = w_args(a)
    local n, k, m = v[1], v[3], v[4]
    if n == 0 then return end
    local la = tonumber(redis.call('HGET', key, 'a'))
    if not la then return end
    if la - slice >= m then return end
    redis.call('HINCRBY', key, slice % m, -n)
    for i = 0, k - 1 do
      if la - slice < v[6 + 2 * i] then redis.call('HINCRBY', key, -(i + 1), -n) end
    end
  end
  w_fns = {check = w_check, commit = w_commit, undo = w_undo}
  return w_fns
end
