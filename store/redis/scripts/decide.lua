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
-- ARGV[2..] per level, in KEYS order: kind, flag, the number of the
--          level's own arguments, then those arguments, then for a block
--          its five (block.lua). The flag: "s" for shadow, "b" for a block,
--          "d" for a debt, "sb" or "sd" for both, else "-"; then "w<n>" or
--          "W<n>" for a level that watches the n after it, "o" for a debt
--          that stops, "p" for a debt's peek, "g" for a global limit's
--          share (fixed_window.lua), in that order
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
-- levels after it. block.lua's b_decide decides, for this driver and
-- coalesce.lua.
local now = tonumber(ARGV[1])
if not now then
  local t = redis.call('TIME')
  now = t[1] * 1000000 + t[2]
end
local reply = {}
b_decide(check, commit, build, reply, 0, now, 2, 1)
return reply
