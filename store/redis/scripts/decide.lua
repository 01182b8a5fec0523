-- decide.lua: one atomic decision over one or more keys (the levels of a
-- hierarchical limit), all or nothing. The store composes each script it
-- runs from expire.lua, block.lua, the files of the algorithms the call
-- uses (no others: a script builds every function it defines on every
-- call, so a GCRA decision must not pay for the sliding log's) and this
-- driver. Each algorithm file defines <kind>_check(key, now, a, reply, p)
-- -> ok, value[, extra] and <kind>_commit(key, now, a, go, value, reply,
-- p), where a is the index in ARGV of the level's first argument, or
-- <kind>_kind(), which builds and returns {check, commit, undo} (a kind
-- with many functions). Before this driver the store declares the
-- dispatch tables for the kinds included: local check, commit = {<kind> =
-- <kind>_check, ...}, {...} and local build = {<kind> = <kind>_kind, ...}.
-- A kind that reports more than ok and value (sliding_log.lua,
-- window_counter.lua) writes its extra values at reply[p+2 ...] and
-- returns their count; the commit may rewrite them (and the value,
-- reply[p+1]) to describe the state after it. The functions are plain
-- locals, not tables of closures: every table a script builds is garbage
-- Redis must collect, and the decision path stays as lean as a
-- single-purpose script.
--
-- KEYS     per level, in order: its key, then its block key for a level
--          with a block
-- ARGV[1]  now in µs since the epoch, or "" to use Redis TIME
-- ARGV[2..] per level, in KEYS order: kind, flag ("s" for shadow, "b" for
--          a block, "d" for a debt, "sb" or "sd" for both, "dp" or "sdp"
--          for a debt's peek, else "-"), the number of the level's
--          own arguments, then those arguments, then for a block its five
--          (block.lua)
-- Reply    {now, pass (1 or 0, plus 2 when a level was not ok), then per
--          level: code, value, extras...}
--          where code = ok (1 or 0) + 2 * the number of extras: for the
--          kinds without extras it is just ok. A level with a block has
--          one extra more, last: when its block ends (0 for none), for a
--          block it was under or the one its denial started.
--
-- Every level is checked first; a level under a block is not ok, its kind
-- checked but never committed. pass is 1 when every level that is not
-- shadow is ok; then each level is committed, with go = ok, so ok levels
-- record their cost. When pass is 0, only the levels whose own check
-- failed are committed (with go = false), so that an algorithm may record
-- a denied attempt (a uniform sliding log), and each starts its block. A
-- level with a debt (flag 'd') is committed either way, with go = 'owe'
-- when its own check failed: it records the cost in full (algo.Debt). A
-- debt's peek (flag 'p') comes with the arguments of a cost of 1, so that
-- it is not ok once nothing remains; it records nothing: committed only
-- when not ok, with go = false, as a denial that records no attempt.
-- A debt is committed with its check, in KEYS order, so that a key twice
-- in the call is checked the second time after the first's cost; a debt
-- that stops ('o', store.Request.Stop) is committed after every check,
-- checked again first, when every level was ok (shadow ones too) or when
-- it was not ok itself, and then lowers pass if it is not ok. pass is
-- then 1 or 0, plus 2 when some level was not ok (the levels that stop
-- recorded nothing unless they were not ok).
-- A level that watches others (its flag holds 'w<n>' or 'W<n>', a node's
-- escalate) is checked as a peek and not committed with them: after them,
-- block.lua's b_escalate decides it for the blocks (or denials) of the n
-- levels after it.
local now = tonumber(ARGV[1])
if not now then
  local t = redis.call('TIME')
  now = t[1] * 1000000 + t[2]
end
local reply = {now, 1}
local blocked = {}
local done, all = {}, true -- the debts committed with their check; every level ok
local i, p, j = 2, 3, 1
while j <= #KEYS do
  reply[p], reply[p + 1] = 0, 0
  local kind = ARGV[i]
  if not check[kind] then
    local built = build[kind]()
    check[kind], commit[kind] = built.check, built.commit
  end
  local span, keys, b = b_level(i)
  local ok, val, extra = check[kind](KEYS[j], now, i + 3, reply, p)
  extra = extra or 0
  if b then ok, extra = b_check(KEYS[j + 1], now, ok, extra, reply, p, blocked) end
  if b_debt(i) and not b_stop(i) and not b_peek(i) then
    commit[kind](KEYS[j], now, i + 3, ok or 'owe', val, reply, p)
    done[p] = true
  end
  if not ok then
    all = false
    if b_enforced(i) then reply[2] = 0 end
  end
  reply[p] = (ok and 1 or 0) + 2 * extra
  reply[p + 1] = val
  i, p, j = i + span, p + 2 + extra, j + keys
end
i, p, j = 2, 3, 1
local ws, ev, idx = nil, {}, 0 -- the levels that watch others (block.lua), what each level did
local again = true -- no level that stops, checked again, was not ok
while j <= #KEYS do
  local code = reply[p]
  local ok = code % 2 == 1
  local span, keys, b = b_level(i)
  local last = p + 1 + (code - code % 2) / 2
  local debt, peek = b_debt(i), b_peek(i)
  local n, denials = b_watch(i)
  local started = false
  idx = idx + 1
  if n > 0 then
    ws = ws or {}
    ws[#ws + 1] = {i, p, j, n, denials, idx, last, b}
  elseif done[p] then
    -- committed with its check
  elseif b_stop(i) and not peek then
    ok = b_recheck(check, commit, KEYS[j], now, i, code, ok, all, reply, p)
    if not ok and b_enforced(i) then again = false end
  elseif not blocked[p] and (reply[2] == 1 or not ok or debt) and not (ok and peek) then
    local go = ok
    if debt and not ok and not peek then go = 'owe' end
    commit[ARGV[i]](KEYS[j], now, i + 3, go, reply[p + 1], reply, p)
    if b and not ok then
      reply[last] = b_start(KEYS[j + 1], now, b)
      started = reply[last] > 0
    end
  end
  ev[idx] = b_event(i, ok, started)
  i, p, j = i + span, last + 1, j + keys
end
if ws then b_escalate(ws, ev, now, reply, blocked, check, commit) end
if not again then reply[2] = 0 end
if not all then reply[2] = reply[2] + 2 end
return reply
