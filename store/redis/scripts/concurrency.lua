-- concurrency.lua: slots held for a while (a hold), for a permit (algo.Concurrency,
-- which states the rules and the bookkeeping this file repeats).
--
-- Key    one hash per key. 'A': the units its holders hold; 'B': a time no
--        holder's hold ends before; 'E': one none ends after; 'S': the
--        last number given to a holder without a permit id. One field per
--        holder, its permit id or 'a' and its number, valued '<hold's end>
--        <units>' (µs, units). The hash lives until E; it is deleted when
--        its last holder leaves.
-- Args   a+0: limit; a+1: hold_for in µs; a+2: cost; a+3: permit id ("0":
--        none); a+4: op: "0" acquire, "1" renew, "2" release
-- Check  ok, value, and 4 extras: the units held, E, when the cost would
--        fit (a denial; -1: never) and the units admitted (acquire) or
--        freed (release). The check reports the state before the decision;
--        the commit rewrites the held units and E to the state after it.
--        value is the refund token: after the commit, the permit id of a
--        holder it added, or minus the number of one without an id; 0 when
--        it added none.

-- c_all returns every holder in the hash, its hold ended or not:
-- {field, end, units, number} each, number being 0 for a permit id.
local function c_all(key)
  local h = redis.call('HGETALL', key)
  local out = {}
  for i = 1, #h, 2 do
    local f = h[i]
    if #f > 1 or (f ~= 'A' and f ~= 'B' and f ~= 'E' and f ~= 'S') then
      local e, n = string.match(h[i + 1], '^(%d+) (%d+)$')
      local seq = 0
      if string.sub(f, 1, 1) == 'a' then seq = tonumber(string.sub(f, 2)) end
      out[#out + 1] = {f, tonumber(e), tonumber(n), seq}
    end
  end
  return out
end

-- c_holders returns the live holders at now, in the order
-- algo.Concurrency keeps them for a release without an id (earliest
-- hold first, then first taken).
local function c_holders(key, now)
  local out = {}
  for _, hd in ipairs(c_all(key)) do
    if hd[2] > now then out[#out + 1] = hd end
  end
  table.sort(out, function(x, y)
    if x[2] ~= y[2] then return x[2] < y[2] end
    return x[4] < y[4]
  end)
  return out
end

local function c_val(e, n) return string.format('%d %d', e, n) end

-- c_state reads A, B, E and the permit's holder; held is the units held at
-- now (A unless a hold may have ended).
local c_read = {}
local function c_state(key, now, a)
  local id = ARGV[a + 3]
  local v = redis.call('HMGET', key, 'A', 'B', 'E', id)
  local s = {tonumber(v[1]) or 0, tonumber(v[2]) or 0, tonumber(v[3]) or 0}
  s.held = s[1]
  if s[2] ~= 0 and s[2] <= now then
    s.held = 0
    for _, hd in ipairs(c_holders(key, now)) do s.held = s.held + hd[3] end
  end
  if id ~= '0' and v[4] then
    local e, n = string.match(v[4], '^(%d+) (%d+)$')
    if tonumber(e) > now then s.mine = tonumber(n) end
  end
  return s
end

local function c_check(key, now, a, reply, p)
  local s = c_state(key, now, a)
  c_read[p] = s
  local cost, op, limit = tonumber(ARGV[a + 2]), ARGV[a + 4], tonumber(ARGV[a])
  reply[p + 2], reply[p + 3], reply[p + 4], reply[p + 5] = s.held, s[3], 0, 0
  if op == '2' then
    local freed = s.mine or 0
    if ARGV[a + 3] == '0' then
      for _, hd in ipairs(c_holders(key, now)) do
        if hd[4] > 0 then freed = freed + math.min(hd[3], cost - freed) end
      end
    end
    reply[p + 5] = freed
    return true, 0, 4
  end
  if op == '1' or (s.mine and cost > 0) then
    if not s.mine then
      reply[p + 4] = -1
      return false, 0, 4
    end
    if op == '0' then reply[p + 5] = cost end
    return true, 0, 4
  end
  if cost == 0 then return true, 0, 4 end
  if cost > limit then
    reply[p + 4] = -1
    return false, 0, 4
  end
  if s.held + cost > limit then
    local need, freed = s.held + cost - limit, 0
    for _, hd in ipairs(c_holders(key, now)) do
      freed = freed + hd[3]
      if freed >= need then
        reply[p + 4] = hd[2]
        break
      end
    end
    return false, 0, 4
  end
  reply[p + 5] = cost
  return true, 0, 4
end

-- c_sweep drops the holders whose hold has ended, if B says one may
-- have, and sets A, B and E from those left (s is c_state's table).
local function c_sweep(key, now, s)
  if s[2] == 0 or s[2] > now then return end
  local a, b, e = 0, 0, 0
  for _, hd in ipairs(c_all(key)) do
    if hd[2] > now then
      a = a + hd[3]
      if b == 0 or hd[2] < b then b = hd[2] end
      if hd[2] > e then e = hd[2] end
    else
      redis.call('HDEL', key, hd[1])
    end
  end
  s[1], s[2], s[3] = a, b, e
  if a == 0 then
    redis.call('DEL', key)
  else
    redis.call('HSET', key, 'A', a, 'B', b, 'E', e)
  end
end

-- c_drop takes n units off A after a release; a hash left without
-- holders is deleted.
local function c_drop(key, s, n)
  s[1] = s[1] - n
  if s[1] <= 0 then
    redis.call('DEL', key)
    s[1], s[2], s[3] = 0, 0, 0
    return
  end
  redis.call('HSET', key, 'A', s[1])
end

local function c_commit(key, now, a, go, _, reply, p)
  if not go then return end
  local s = c_read[p]
  local id, cost, op = ARGV[a + 3], tonumber(ARGV[a + 2]), ARGV[a + 4]
  local hold = tonumber(ARGV[a + 1])
  if op == '2' then
    local freed = reply[p + 5]
    if freed == 0 then return end
    c_sweep(key, now, s)
    if id ~= '0' then
      redis.call('HDEL', key, id)
    else
      local left = freed
      for _, hd in ipairs(c_holders(key, now)) do
        if left == 0 then break end
        if hd[4] > 0 then
          local take = math.min(hd[3], left)
          left = left - take
          if take == hd[3] then
            redis.call('HDEL', key, hd[1])
          else
            redis.call('HSET', key, hd[1], c_val(hd[2], hd[3] - take))
          end
        end
      end
    end
    c_drop(key, s, freed)
    reply[p + 2], reply[p + 3] = reply[p + 2] - freed, s[3]
    return
  end
  local cost_taken = reply[p + 5]
  local renew = op == '1' or (s.mine ~= nil and cost > 0)
  if not renew and cost_taken == 0 then return end -- a peek
  c_sweep(key, now, s)
  local e = now + hold
  if renew then
    redis.call('HSET', key, id, c_val(e, s.mine))
    if e < s[2] then s[2] = e end -- the clock stepped back
  else
    local f = id
    if id == '0' then
      local seq = redis.call('HINCRBY', key, 'S', 1)
      f = 'a' .. seq
      reply[p + 1] = -seq
    else
      reply[p + 1] = tonumber(id)
    end
    redis.call('HSET', key, f, c_val(e, cost))
    s[1] = s[1] + cost
    if s[2] == 0 or e < s[2] then s[2] = e end
    reply[p + 2] = reply[p + 2] + cost
  end
  if e > s[3] then s[3] = e end
  redis.call('HSET', key, 'A', s[1], 'B', s[2], 'E', s[3])
  redis.call('PEXPIRE', key, ttl(s[3] - now))
  reply[p + 3] = s[3]
end

-- Undo removes the holder a commit added (a refund across Cluster hash slots):
-- value is the commit's token.
local function c_undo(key, now, a, token)
  if token == 0 then return end
  local f = token > 0 and string.format('%d', token) or 'a' .. string.format('%d', -token)
  local v = redis.call('HGET', key, f)
  if not v then return end
  local _, n = string.match(v, '^(%d+) (%d+)$')
  redis.call('HDEL', key, f)
  local left = (tonumber(redis.call('HGET', key, 'A')) or 0) - tonumber(n)
  if left <= 0 then
    redis.call('DEL', key)
  else
    redis.call('HSET', key, 'A', left)
  end
end
