-- Record how an attempt ended, only if its fencing token is still the payment's.
-- outcome: fulfilled|retry|failed|interrupted|not_called; detail: the receipt or the error.
-- Returns {verdict, state}: verdict is the outcome recorded, 'stale' or 'already'
local KEY = named(KEYS, 'payment')
local ARG, ARGC = named(ARGV, 'token', 'outcome', 'detail', 'call_ms', 'max_attempts',
  'backoff_base_ms', 'backoff_cap_ms')
local short = too_few('finish_attempt', ARGC)
if short then return short end
local token, outcome, detail = ARG.token, ARG.outcome, ARG.detail
local max_attempts = whole(ARG.max_attempts, 1)
local base_ms, cap_ms = whole(ARG.backoff_base_ms, 0, MAX_TTL_MS),
  whole(ARG.backoff_cap_ms, 0, MAX_TTL_MS)
if not (FINISHED[outcome] and max_attempts and base_ms and cap_ms) then
  return refuse('finish_attempt', 'outcome must be a finished one; budget and backoff numbers')
end
if ARG.call_ms ~= '' and not tonumber(ARG.call_ms) then
  return refuse('finish_attempt', 'call ms must be a number')
end
local pay, pk = KEY.payment, id_of(KEY.payment, PAYMENT_PREFIX)
local now = now_ms()
local state = redis.call('HGET', pay, 'state')
if not state then return {'missing', ''} end
local current = redis.call('HGET', pay, 'token')
local record = redis.call('HGET', pay, 'attempt:' .. token)
release_caller(pay, token, now)  -- its worker is back from the call (or never made it)
if record and FINISHED[cjson.decode(record)['outcome']] then
  redis.call('HSET', pay, 'attempt:' .. token, record)  -- written again for WAIT (prelude)
  return {'already', state}  -- a client retry of this same call: one worker per token
end
-- A late receipt for the same token after its lease expired still proves the effect (also
-- after a person re-queued it, as long as no newer attempt has started).
local late = (state == 'interrupted' or state == 'queued') and current == token
  and outcome == 'fulfilled'
-- Likewise the worker's word that it never called (it stalled past the call's window after
-- its fence): the interruption its own lease expiry caused is lifted, nothing was applied.
local idle = state == 'interrupted' and current == token and outcome == 'not_called'
if current ~= token or (state ~= 'in_progress' and not late and not idle) then
  redis.call('HINCRBY', pay, 'stale_finishes', 1)
  redis.call('HINCRBY', STATS, 'stale_finishes', 1)
  update_attempt(pay, token, {stale = true, stale_outcome = outcome, stale_at = now})
  return {'stale', state or ''}
end

redis.call('HINCRBY', STATS, 'attempts_finished', 1)
redis.call('HINCRBY', STATS, 'attempt_outcome:' .. outcome, 1)
-- A fulfilled attempt's end and detail are the payment's fulfilled_at and receipt: kept
-- once, there (ledger/queries.py joins them back).
local fulfilled = outcome == 'fulfilled'
update_attempt(pay, token, {outcome = outcome, ended = (not fulfilled) and now or nil,
  ms = tonumber(ARG.call_ms), detail = (not fulfilled) and detail or nil, late = late or nil})
redis.call('HDEL', pay, 'lease_until', 'phase')

if fulfilled then
  move(pay, 'fulfilled', now)
  local latency = now - tonumber(redis.call('HGET', pay, 'paid_at') or now)
  redis.call('HSET', pay, 'receipt', detail, 'fulfilled_at', now)
  -- What only a live attempt needs goes: a fulfilled payment is kept for ever.
  redis.call('HDEL', pay, 'last_error', 'job', 'attempt_id', 'replay_safe', 'sweep_seen')
  redis.call('HINCRBY', STATS, 'effects', 1)
  redis.call('LPUSH', LATENCIES, latency)
  redis.call('LTRIM', LATENCIES, 0, LATENCIES_CAP - 1)
  local bucket = 'le:inf'
  for _, bound in ipairs(LATENCY_BUCKETS_MS) do
    if latency <= bound then bucket = 'le:' .. bound break end
  end
  redis.call('HINCRBY', FULFIL_HISTOGRAM, bucket, 1)
  redis.call('HINCRBY', FULFIL_HISTOGRAM, 'sum_ms', latency)
  redis.call('ZREM', DUE, pk)
  return {'fulfilled', 'fulfilled'}
end

redis.call('HSET', pay, 'last_error', detail)
if outcome == 'interrupted' then
  -- The downstream may have applied it and may not dedupe: a person decides.
  move(pay, 'interrupted', now)
  redis.call('HINCRBY', STATS, 'interrupted', 1)
  redis.call('ZREM', DUE, pk)
  return {'interrupted', 'interrupted'}
end
local used = attempts_used(pay)
if (outcome == 'retry' or outcome == 'not_called') and used < max_attempts then
  local next_at = now + math.floor(math.min(base_ms * 2 ^ (used - 1), cap_ms))
  move(pay, 'retrying', now)
  redis.call('HSET', pay, 'next_at', next_at)
  redis.call('ZADD', DUE, next_at, pk)
  return {'retry', 'retrying'}
end
move(pay, 'failed', now)
redis.call('HINCRBY', STATS, 'dead_letters', 1)
redis.call('ZREM', DUE, pk)
return {outcome, 'failed'}
