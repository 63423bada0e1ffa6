-- A payment whose purchase waits for Stripe's API (its line items could not be read: 429,
-- 5xx, no answer) waits without a call and without spending an attempt, as gate.lua's
-- deferral does: `retrying` with next_at and `waiting` = STRIPE_WAIT, due for the sweeper
-- then. The wait doubles from base_ms with each time this payment waited so (`stripe_waits`)
-- up to cap_ms, or is Stripe's Retry-After when longer. Only a payment that waits for a call
-- (queued, or retrying and due) waits so; answers when it is due again (ms), or 0 (it was in
-- another state: nothing written).
local KEY = named(KEYS, 'payment')
local ARG = named(ARGV, 'base_ms', 'cap_ms', 'retry_after_ms', 'detail')
local base_ms, cap_ms = whole_arg(ARG, 'base_ms', 1), whole_arg(ARG, 'cap_ms', 1, MAX_TTL_MS)
local retry_after_ms = whole_arg(ARG, 'retry_after_ms', 0, MAX_TTL_MS)
local pay, pk = KEY.payment, id_of(KEY.payment, PAYMENT_PREFIX)
local now = now_ms()
local state = redis.call('HGET', pay, 'state')
local due = state == 'retrying'
  and tonumber(redis.call('HGET', pay, 'next_at') or '0') <= now
if state ~= 'queued' and not due then return 0 end
local waits = redis.call('HINCRBY', pay, 'stripe_waits', 1)
local at = now + math.max(math.min(base_ms * 2 ^ (waits - 1), cap_ms), retry_after_ms)
move(pay, 'retrying', now)
redis.call('HSET', pay, 'next_at', at, 'waiting', STRIPE_WAIT, 'last_skip',
  STRIPE_WAIT .. ': ' .. string.sub(ARG.detail, 1, 200) .. ' at ' .. now)
redis.call('ZADD', DUE, at, pk)
redis.call('HINCRBY', STATS, 'deferred:' .. STRIPE_WAIT, 1)
return at
