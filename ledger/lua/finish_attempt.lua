-- Record how an attempt ended, only if its fencing token is still the payment's.
-- KEYS: 1 payment, 2 states, 3 due, 4 stats, 5 latencies, 6 latency histogram
-- ARGV: 1 token, 2 outcome (fulfilled|retry|failed|interrupted), 3 receipt or error, 4 call ms,
--       5 max attempts, 6 backoff base ms, 7 backoff cap ms, 8 payment key, 9 latency cap,
--       10 histogram bucket bounds in ms (space-separated, ascending)
-- Returns {verdict, state}: verdict is the outcome recorded, or 'stale'
local pay, states, due, stats = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local short = too_few('finish_attempt', 10)
if short then return short end
local token, outcome, detail = ARGV[1], ARGV[2], ARGV[3]
local max_attempts, base_ms, cap_ms = whole(ARGV[5], 1), whole(ARGV[6], 0), whole(ARGV[7], 0)
local latency_cap = whole(ARGV[9], 1)
if not (FINISHED[outcome] and max_attempts and base_ms and cap_ms and latency_cap) then
  return refuse('finish_attempt', 'outcome must be a finished one; budget, backoff and cap numbers')
end
if not string.match(ARGV[10] or '', '^[%d ]*$') or (ARGV[4] ~= '' and not tonumber(ARGV[4])) then
  return refuse('finish_attempt', 'bucket bounds must be whole numbers, call ms a number')
end
local now = now_ms()
local state = redis.call('HGET', pay, 'state')
if not state then return {'missing', ''} end
local current = redis.call('HGET', pay, 'token')
local record = redis.call('HGET', pay, 'attempt:' .. token)
if record and FINISHED[cjson.decode(record)['outcome']] then
  return {'already', state}  -- a client retry of this same call: one worker per token
end
-- A late receipt for the same token after its lease expired still proves the effect (also
-- after a person re-queued it, as long as no newer attempt has started).
local late = (state == 'interrupted' or state == 'queued') and current == token
  and outcome == 'fulfilled'
if current ~= token or (state ~= 'in_progress' and not late) then
  redis.call('HINCRBY', pay, 'stale_finishes', 1)
  redis.call('HINCRBY', stats, 'stale_finishes', 1)
  update_attempt(pay, token, {stale = true, stale_outcome = outcome, stale_at = now})
  return {'stale', state or ''}
end

redis.call('HINCRBY', stats, 'attempts_finished', 1)
redis.call('HINCRBY', stats, 'attempt_outcome:' .. outcome, 1)
-- A fulfilled attempt's end and detail are the payment's fulfilled_at and receipt: kept
-- once, there (webhook/readout.py joins them back).
local fulfilled = outcome == 'fulfilled'
update_attempt(pay, token, {outcome = outcome, ended = (not fulfilled) and now or nil,
  ms = tonumber(ARGV[4]), detail = (not fulfilled) and detail or nil, late = late or nil})
redis.call('HDEL', pay, 'lease_until', 'phase')

if outcome == 'fulfilled' then
  move(pay, states, 'fulfilled')
  local paid_at = tonumber(redis.call('HGET', pay, 'paid_at') or now)
  redis.call('HSET', pay, 'receipt', detail, 'fulfilled_at', now)
  -- What only a live attempt needs goes: a fulfilled payment is kept for ever.
  redis.call('HDEL', pay, 'last_error', 'job', 'attempt_id', 'replay_safe', 'sweep_seen')
  redis.call('HINCRBY', stats, 'effects', 1)
  redis.call('LPUSH', KEYS[5], now - paid_at)
  redis.call('LTRIM', KEYS[5], 0, tonumber(ARGV[9]) - 1)
  local bucket = 'le:inf'
  for bound in string.gmatch(ARGV[10], '%d+') do
    if now - paid_at <= tonumber(bound) then bucket = 'le:' .. bound break end
  end
  redis.call('HINCRBY', KEYS[6], bucket, 1)
  redis.call('HINCRBY', KEYS[6], 'sum_ms', now - paid_at)
  redis.call('ZREM', due, ARGV[8])
  return {'fulfilled', 'fulfilled'}
end

redis.call('HSET', pay, 'last_error', detail)
if outcome == 'interrupted' then
  -- The downstream may have applied it and may not dedupe: a person decides.
  move(pay, states, 'interrupted')
  redis.call('HINCRBY', stats, 'interrupted', 1)
  redis.call('ZREM', due, ARGV[8])
  return {'interrupted', 'interrupted'}
end
local used = tonumber(current)
  - tonumber(redis.call('HGET', pay, 'budget_base') or '0')
if outcome == 'retry' and used < tonumber(ARGV[5]) then
  local delay = math.min(tonumber(ARGV[6]) * 2 ^ (used - 1), tonumber(ARGV[7]))
  move(pay, states, 'retrying')
  redis.call('HSET', pay, 'next_at', now + math.floor(delay))
  redis.call('ZADD', due, now + math.floor(delay), ARGV[8])
  return {'retry', 'retrying'}
end
move(pay, states, 'failed')
redis.call('HINCRBY', stats, 'dead_letters', 1)
redis.call('ZREM', due, ARGV[8])
return {outcome, 'failed'}
