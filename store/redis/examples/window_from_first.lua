-- window_from_first.lua: a window limiter for Store.LoadScript (and the
-- httplimit middleware's NewScriptLimiter).
--
-- A window starts with its first request and lasts ARGV[2] seconds;
-- together its requests may take at most ARGV[1]. Unlike Sluice's own
-- fixed_window algorithm, whose windows are aligned to the epoch, each
-- key's window starts when that key is first seen.
--
-- KEYS[1]  the request's key (httplimit: prefix + the policy path)
-- ARGV[1]  limit: how much a window admits (an integer >= 1)
-- ARGV[2]  window, in whole seconds (>= 1)
-- ARGV[3]  optional cost of the request (>= 0, default 1); configure the
--          argument "$cost" to pass the request's cost
--
-- Reply: {"allow"|"deny", {limit, remaining, reset}}, to line up with the
-- header names X-RateLimit-Limit, X-RateLimit-Remaining, X-RateLimit-Reset
-- (reset: whole seconds until the window ends, rounded up), plus the pair
-- {"Retry-After", reset} when denied, unless the cost exceeds the limit and
-- can never be admitted.
local limit = tonumber(ARGV[1])
local window = tonumber(ARGV[2])
local cost = tonumber(ARGV[3] or "1")
if not limit or limit < 1 or not window or window < 1 or not cost or cost < 0 then
  return redis.error_reply("window_from_first.lua: want ARGV limit >= 1, window >= 1 (seconds) and an optional cost >= 0")
end

local count = tonumber(redis.call("GET", KEYS[1]) or "0")
local ttl = redis.call("PTTL", KEYS[1])
if ttl < 0 then
  -- -2: no window yet; -1: a key without expiry (repair it): a new window.
  count, ttl = 0, window * 1000
end
local reset = math.ceil(ttl / 1000)

if count + cost > limit then
  local items = {limit, limit - count, reset}
  if cost <= limit then
    items[#items + 1] = {"Retry-After", reset}
  end
  return {"deny", items}
end
if cost > 0 then
  if count == 0 then
    redis.call("SET", KEYS[1], cost, "PX", ttl)
  else
    redis.call("INCRBY", KEYS[1], cost)
  end
end
return {"allow", {limit, limit - count - cost, reset}}
