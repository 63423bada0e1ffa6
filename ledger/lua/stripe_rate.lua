-- A slot for one request to Stripe's API (a purchase's line items) under STRIPE_API_MAX_RATE
-- requests per second across every worker on every host: a log of the last second's
-- requests, as gate.lua keeps the downstream's. Answers 0 (the request may go, logged) or
-- the milliseconds until a slot frees.
local ARG = named(ARGV, 'max_rate')
local max_rate = whole_arg(ARG, 'max_rate', 1)
local now = now_ms()
redis.call('ZREMRANGEBYSCORE', STRIPE_API_CALLS, '-inf', now - 1000)
if redis.call('ZCARD', STRIPE_API_CALLS) >= max_rate then
  local oldest = tonumber(redis.call('ZRANGE', STRIPE_API_CALLS, 0, 0, 'WITHSCORES')[2])
  return math.max(oldest + 1000 - now, 1)
end
redis.call('ZADD', STRIPE_API_CALLS, now, now .. ':' .. redis.call('INCR', STRIPE_API_SEQ))
redis.call('PEXPIRE', STRIPE_API_CALLS, 2000)
return 0
