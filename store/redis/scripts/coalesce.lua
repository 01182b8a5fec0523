-- coalesce.lua: several decisions in one call, each what decide.lua does on
-- its own, all or nothing, in one atomic call (the store coalesces concurrent
-- decisions into one). The store composes it as it composes
-- decide.lua (expire.lua, block.lua, the algorithm files, the dispatch
-- tables, then this driver); a decision alone goes to decide.lua, so that
-- a call of one pays for no loop over decisions.
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
-- here, blocks included), by the same function: block.lua's b_decide.
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
  return b_decide(check, commit, build, reply, base, now, i + 2, k + 1, levels)
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
