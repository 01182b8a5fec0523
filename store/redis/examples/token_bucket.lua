-- token_bucket.lua: a token-bucket limiter for Store.LoadScript (and the
-- httplimit middleware's NewScriptLimiter).
--
-- The bucket holds up to ARGV[1] tokens and gains ARGV[2] tokens every
-- ARGV[3] seconds; a request takes its cost in tokens or is denied. A key
-- never seen has a full bucket. Time is Redis's (TIME), in microseconds.
--
-- KEYS[1]  the request's key (httplimit: prefix + the policy path), a hash
--          of the tokens left and the time they were counted
-- ARGV[1]  burst: the bucket's size (an integer >= 1)
-- ARGV[2]  rate: tokens gained per period (>= 1)
-- ARGV[3]  per: the period, in whole seconds (>= 1)
-- ARGV[4]  optional cost of the request (>= 0, default 1); configure the
--          argument "$cost" to pass the request's cost
--
-- Reply: {"allow"|"deny", {burst, remaining, reset}}, to line up with the
-- header names X-RateLimit-Limit, X-RateLimit-Remaining, X-RateLimit-Reset
-- (remaining: whole tokens left; reset: whole seconds until the bucket is
-- full, rounded up), plus the pair {"Retry-After", seconds until the cost
-- fits, rounded up} when denied, unless the cost exceeds the bucket.
local burst = tonumber(ARGV[1])
local rate = tonumber(ARGV[2])
local per = tonumber(ARGV[3])
local cost = tonumber(ARGV[4] or "1")
if not burst or burst < 1 or not rate or rate < 1 or not per or per < 1 or not cost or cost < 0 then
  return redis.error_reply("token_bucket.lua: want ARGV burst >= 1, rate >= 1, per >= 1 (seconds) and an optional cost >= 0")
end

local t = redis.call("TIME")
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local fill = rate / (per * 1000000) -- tokens per microsecond

local state = redis.call("HMGET", KEYS[1], "tokens", "at")
local tokens = tonumber(state[1]) or burst
local at = tonumber(state[2]) or now
tokens = math.min(burst, tokens + math.max(now - at, 0) * fill)

local allowed = tokens >= cost
if allowed and cost > 0 then
  tokens = tokens - cost
  local full_us = (burst - tokens) / fill
  -- numbers, not tostring (%.14g): Redis converts them exactly
  redis.call("HSET", KEYS[1], "tokens", tokens, "at", now)
  redis.call("PEXPIRE", KEYS[1], math.ceil(full_us / 1000) + 1)
end

local items = {burst, math.floor(tokens), math.ceil((burst - tokens) / fill / 1000000)}
if not allowed then
  if cost <= burst then
    items[#items + 1] = {"Retry-After", math.ceil((cost - tokens) / fill / 1000000)}
  end
  return {"deny", items}
end
return {"allow", items}
