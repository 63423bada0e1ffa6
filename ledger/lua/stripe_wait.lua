-- A payment whose purchase waits for Stripe, without a call and without spending an attempt,
-- as gate.lua's deferral does: `retrying` with next_at and `waiting` = reason, due for the
-- sweeper then. Reasons: STRIPE_WAIT, its line items could not be read (Stripe's API
-- answered 429, 5xx or nothing); CHECKOUT_WAIT, its Checkout Session's event has not come
-- yet (CHECKOUT_WAIT_SECONDS). The wait doubles from base_ms with each time this payment
-- waited for that reason (`{reason}_waits`) up to cap_ms, or is retry_after_ms (Stripe's
-- Retry-After) when longer. Only a payment that waits for a call (queued, or retrying and
-- due) waits so; answers when it is due again (ms), or 0 (it was in another state: nothing
-- written).
local KEY = named(KEYS, 'payment')
local ARG = named(ARGV, 'reason', 'base_ms', 'cap_ms', 'retry_after_ms', 'detail')
choice_arg(ARG, 'reason', {[STRIPE_WAIT] = true, [CHECKOUT_WAIT] = true})
local base_ms, cap_ms = whole_arg(ARG, 'base_ms', 1), whole_arg(ARG, 'cap_ms', 1, MAX_TTL_MS)
local retry_after_ms = whole_arg(ARG, 'retry_after_ms', 0, MAX_TTL_MS)
local pay, pk = KEY.payment, id_of(KEY.payment, PAYMENT_PREFIX)
local now = now_ms()
local state = redis.call('HGET', pay, 'state')
local due = state == 'retrying'
  and tonumber(redis.call('HGET', pay, 'next_at') or '0') <= now
if state ~= 'queued' and not due then return 0 end
local waits = redis.call('HINCRBY', pay, ARG.reason .. '_waits', 1)
local at = now + math.max(math.min(base_ms * 2 ^ (waits - 1), cap_ms), retry_after_ms)
move(pay, 'retrying', now)
-- Back from the gate's deferral (queued, `waiting` still naming it): that set no longer holds it.
local was = redis.call('HGET', pay, 'waiting')
if was and was ~= ARG.reason then redis.call('ZREM', WAITING_PREFIX .. was, pk) end
redis.call('HSET', pay, 'next_at', at, 'waiting', ARG.reason, 'last_skip',
  ARG.reason .. ': ' .. string.sub(ARG.detail, 1, 200) .. ' at ' .. now)
redis.call('ZADD', DUE, at, pk)
redis.call('HINCRBY', STATS, 'deferred:' .. ARG.reason, 1)
return at
