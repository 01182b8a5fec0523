-- expire.lua: how long a key lives in Redis, in ms. Every state carries its
-- own times and every script judges them against now, so a key's expiry
-- only frees memory. With Redis TIME (ARGV[1] is "") a key lives until its
-- state expires, rounded up to the ms. With a caller's explicit time, whose
-- clock need not run with Redis's (a replayed trace, a test, a simulator),
-- it lives a minute longer, so that state still live at the caller's time
-- is not dropped on Redis's; a caller whose clock runs more than a minute
-- behind Redis's between two decisions may find state gone early. ARGV[1]
-- is the call's time but in coalesce.lua, which sets grace for each decision.
local grace = ARGV[1] == '' and 0 or 60000
-- The bounds of a debt (algo.Debt): a TAT at most horizon µs ahead of now
-- (algo.MaxHorizon), a count at most maxcount (algo.MaxCount), an exact
-- log's window at most maxexact entries (algo.MaxExactLimit).
local horizon, maxcount, maxexact = 3153600000000000, 9007199254740991, 1000000

-- window_end returns the end of the window that holds now: of w µs
-- aligned to the epoch, or for w = 0 a calendar's window (Redis has no
-- time zone data: the store gives the windows around its own time), the
-- first of the ends ARGV[b+2 .. b+ARGV[b]] after now, ARGV[b+1] being the
-- earliest start. A now outside them (clocks a window apart) is an error.
local function window_end(now, w, b)
  if w > 0 then return now - now % w + w end
  if now >= tonumber(ARGV[b + 1]) then
    for i = b + 2, b + tonumber(ARGV[b]) do
      local e = tonumber(ARGV[i])
      if e > now then return e end
    end
  end
  error('a calendar window: the time ' .. now .. ' is outside the windows given around the caller\'s (clocks a window apart)')
end
local function ttl(us)
  return math.ceil(us / 1000) + grace
end
