-- How a downstream call went, for the circuit breaker every worker shares.
-- kind: up (it answered: success or this payment's own refusal) | down (refused or reset
-- before sending, DNS, connect timeout, 502/503/504, 429) | none (no call after all).
-- A down failure opens the breaker once BREAKER_THRESHOLD follow each other (threshold 0:
-- never), a failed probe re-opens it for a cool-down, a Retry-After opens it until then;
-- any answer closes it. The attempt is refunded (budget_base + 1: it does not count against
-- MAX_ATTEMPTS) when the request was never sent or the breaker is open: the downstream's
-- outage, not this payment's failure.
-- Returns the breaker's state after it.
local KEY = named(KEYS, 'payment')
local ARG = named(ARGV, 'token', 'kind', 'sent', 'threshold', 'cooldown_ms',
  'retry_after_ms', 'detail')
local threshold, cooldown_ms = whole_arg(ARG, 'threshold', 0), whole_arg(ARG, 'cooldown_ms', 1)
local retry_after_ms = whole_arg(ARG, 'retry_after_ms', 0)
choice_arg(ARG, 'kind', {up = true, down = true, none = true})
choice_arg(ARG, 'sent', BIT)
local pay, pk = KEY.payment, id_of(KEY.payment, PAYMENT_PREFIX)
local now = now_ms()
if redis.call('HGET', BREAKER, 'probe_payment') == pk then
  redis.call('HSET', BREAKER, 'probe_until', 0, 'probe_payment', '')
end
local state = redis.call('HGET', BREAKER, 'state') or 'closed'
if ARG.kind == 'none' then return state end
if ARG.kind == 'up' then
  redis.call('HSET', BREAKER, 'failures', 0)
  if state == 'open' then
    redis.call('HSET', BREAKER, 'state', 'closed', 'closed_at', now)
    redis.call('HINCRBY', BREAKER, 'closes', 1)
  end
  return 'closed'
end

local failures = redis.call('HINCRBY', BREAKER, 'failures', 1)
local open_until = tonumber(redis.call('HGET', BREAKER, 'open_until') or '0')
redis.call('HSET', BREAKER, 'last_error', ARG.detail, 'last_failure_at', now)
local function open(until_ms)
  if state ~= 'open' then
    redis.call('HSET', BREAKER, 'state', 'open', 'opened_at', now)
    redis.call('HINCRBY', BREAKER, 'opens', 1)
    state = 'open'
  end
  open_until = math.max(open_until, until_ms)
  redis.call('HSET', BREAKER, 'open_until', open_until)
end
if threshold > 0 then
  if state == 'open' or failures >= threshold then open(now + cooldown_ms) end
  if retry_after_ms > 0 then open(now + retry_after_ms) end
end
local used = attempts_used(pay)
if (state == 'open' or ARG.sent == '0') and used >= 1
  and redis.call('HGET', pay, 'token') == ARG.token
  and redis.call('HGET', pay, 'state') == 'in_progress' then
  redis.call('HINCRBY', pay, 'budget_base', 1)
  update_attempt(pay, ARG.token, {refunded = state == 'open' and 'breaker' or 'not_sent'})
  redis.call('HINCRBY', STATS, 'attempts_refunded', 1)
end
return state
