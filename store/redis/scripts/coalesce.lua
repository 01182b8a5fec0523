-- coalesce.lua: several decisions in one call, each what decide.lua does on
-- its own, all or nothing, in one atomic call (the store coalesces concurrent
-- decisions into one). The store composes it as it composes
-- decide.lua (expire.lua, the algorithm files, the dispatch tables, then
-- this driver); a decision alone goes to decide.lua, which this file
-- follows level for level, so that a call of one pays for no loop.
--
-- The decisions on Redis's clock share one TIME. A decision
-- that fails (a command of its own errs, such as a key of another type)
-- fails alone: its part of the reply is {now, -1, the error}, and the
-- others go on.
--
-- KEYS     every decision's levels, decision by decision, as decide.lua
--          takes them (a level's key, then its block key if it has one)
-- ARGV[1]  the number of decisions
-- ARGV[2..] per decision: now in µs since the epoch or "" to use Redis TIME,
--          its number of levels, then per level what decide.lua takes
-- Reply    per decision: what decide.lua replies.
--
-- Each decision is decided as decide.lua decides (its description holds
-- here, blocks included).
local clock
local reply = {}

-- decide runs the decision whose arguments start at ARGV[i], whose keys
-- follow KEYS[k], writing its reply after reply[base]; it returns the
-- reply's new length, the index of the next decision's arguments and the
-- keys up to its last.
local function decide(i, k, base, levels)
  local now = tonumber(ARGV[i])
  grace = 60000 -- expire.lua: a caller's time
  if not now then
    if not clock then
      local t = redis.call('TIME')
      clock = t[1] * 1000000 + t[2]
    end
    now, grace = clock, 0
  end
  reply[base + 1], reply[base + 2] = now, 1
  local blocked = {}
  local done, all = {}, true -- as decide.lua's
  local a, p, j = i + 2, base + 3, k + 1
  for _ = 1, levels do
    reply[p], reply[p + 1] = 0, 0
    local kind = ARGV[a]
    if not check[kind] then
      local built = build[kind]()
      check[kind], commit[kind] = built.check, built.commit
    end
    local span, keys, b = b_level(a)
    local ok, val, extra = check[kind](KEYS[j], now, a + 3, reply, p)
    extra = extra or 0
    if b then ok, extra = b_check(KEYS[j + 1], now, ok, extra, reply, p, blocked) end
    if b_debt(a) and not b_stop(a) and not b_peek(a) then
      commit[kind](KEYS[j], now, a + 3, ok or 'owe', val, reply, p)
      done[p] = true
    end
    if not ok then
      all = false
      if b_enforced(a) then reply[base + 2] = 0 end
    end
    reply[p] = (ok and 1 or 0) + 2 * extra
    reply[p + 1] = val
    a, p, j = a + span, p + 2 + extra, j + keys
  end
  local next, last = a, p - 1
  local pass = reply[base + 2] == 1
  a, p, j = i + 2, base + 3, k + 1
  local ws, ev, again = nil, {}, true
  for idx = 1, levels do
    local code = reply[p]
    local ok = code % 2 == 1
    local span, keys, b = b_level(a)
    local final = p + 1 + (code - code % 2) / 2
    local debt, peek = b_debt(a), b_peek(a)
    local n, denials = b_watch(a)
    local started = false
    if n > 0 then
      ws = ws or {}
      ws[#ws + 1] = {a, p, j, n, denials, idx, final, b}
    elseif done[p] then
      -- committed with its check
    elseif b_stop(a) and not peek then
      ok = b_recheck(check, commit, KEYS[j], now, a, code, ok, all, reply, p)
      if not ok and b_enforced(a) then again = false end
    elseif not blocked[p] and (pass or not ok or debt) and not (ok and peek) then
      local go = ok
      if debt and not ok and not peek then go = 'owe' end
      commit[ARGV[a]](KEYS[j], now, a + 3, go, reply[p + 1], reply, p)
      if b and not ok then
        reply[final] = b_start(KEYS[j + 1], now, b)
        started = reply[final] > 0
      end
    end
    ev[idx] = b_event(a, ok, started)
    a, p, j = a + span, final + 1, j + keys
  end
  if ws then b_escalate(ws, ev, now, reply, blocked, check, commit) end
  if not again then reply[base + 2] = 0 end
  if not all then reply[base + 2] = reply[base + 2] + 2 end
  return last, next, j - 1
end

local n, i, k = 0, 2, 0 -- the reply's length; the decision's first argument; the keys before it
for _ = 1, tonumber(ARGV[1]) do
  local levels = tonumber(ARGV[i + 1])
  local ok, last, next, keys = pcall(decide, i, k, n, levels)
  if ok then
    n, i, k = last, next, keys
  else
    local err = last
    for q = #reply, n + 1, -1 do reply[q] = nil end
    if type(err) == 'table' then err = err.err end
    reply[n + 1], reply[n + 2], reply[n + 3] = 0, -1, tostring(err)
    n, i = n + 3, i + 2
    for _ = 1, levels do
      local span, nkeys = b_level(i)
      i, k = i + span, k + nkeys
    end
  end
end
return reply
