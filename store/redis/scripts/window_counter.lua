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
--        only touch keys it is given; one hash is one key, so one slot.)
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
  local function w_check(key, now, a, reply, p)
    local n, s, k = tonumber(ARGV[a]), tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2])
    local f = {'a'}
    for i = 1, k do f[i + 1] = -i end
    local h = redis.call('HMGET', key, unpack(f))
    local la = tonumber(h[1])
    local cur = math.floor(now / s)
    if la and la > cur then cur = la end
    local m = 0
    for i = 0, k - 1 do
      local mi = tonumber(ARGV[a + 4 + 2 * i])
      if mi > m then m = mi end
    end
    reply[p + 2], reply[p + 3], reply[p + 4], reply[p + 5] = 0, 0, 0, 0
    local need, owner
    for i = 0, k - 1 do
      local c, mi = 0, tonumber(ARGV[a + 4 + 2 * i])
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
      if n > 0 and reply[p + 6 + i] + n > tonumber(ARGV[a + 3 + 2 * i]) then fits = false end
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
      local lim, mi = tonumber(ARGV[a + 3 + 2 * i]), tonumber(ARGV[a + 4 + 2 * i])
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
    local n = tonumber(ARGV[a])
    if not go or n == 0 then return end
    local s, k = tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2])
    local m = 0
    for i = 0, k - 1 do
      local mi = tonumber(ARGV[a + 4 + 2 * i])
      if mi > m then m = mi end
    end
    local cur = math.floor(now / s)
    if la < 0 then
      la = nil
    elseif la > cur then
      cur = la
    end
    if la and cur - la >= m then
      redis.call('DEL', key)
      la = nil
    end
    local set = {'a', cur}
    for i = 0, k - 1 do
      set[#set + 1] = -(i + 1)
      set[#set + 1] = reply[p + 6 + i] + n
    end
    if la == cur then
      redis.call('HINCRBY', key, cur % m, n)
    else
      set[#set + 1] = cur % m
      set[#set + 1] = n
      if la and cur - la > 1 then
        local del = {}
        for kk = la + 1, cur - 1 do del[#del + 1] = kk % m end
        for from = 1, #del, 1000 do
          redis.call('HDEL', key, unpack(del, from, math.min(from + 999, #del)))
        end
      end
    end
    redis.call('HSET', key, unpack(set))
    redis.call('PEXPIRE', key, math.ceil(((cur + m) * s - now) / 1000))
    reply[p + 1] = cur
  end

  -- Undo gives back a committed cost (a refund across Cluster slots) from
  -- the slice it was counted in, while that slice is still kept.
  local function w_undo(key, now, a, slice)
    local n, k = tonumber(ARGV[a]), tonumber(ARGV[a + 2])
    if n == 0 then return end
    local la = tonumber(redis.call('HGET', key, 'a'))
    if not la then return end
    local m = 0
    for i = 0, k - 1 do
      local mi = tonumber(ARGV[a + 4 + 2 * i])
      if mi > m then m = mi end
    end
    if la - slice >= m then return end
    redis.call('HINCRBY', key, slice % m, -n)
    for i = 0, k - 1 do
      if la - slice < tonumber(ARGV[a + 4 + 2 * i]) then redis.call('HINCRBY', key, -(i + 1), -n) end
    end
  end
  w_fns = {check = w_check, commit = w_commit, undo = w_undo}
  return w_fns
end
