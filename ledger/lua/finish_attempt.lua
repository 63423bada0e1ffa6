-- Record how an attempt ended, only if its fencing token is still the payment's.
-- outcome: fulfilled|retry|failed|interrupted|not_called, or for a settlement (leg `settle`)
-- voided (fulfilled: it found the effect), or for a reversal held (not called: a person
-- takes it back, as `detail` says); detail: the receipt or the error. refused: 1 when the
-- call's answer refused it (outcome retry or failed: nothing applied), 0 when no answer came
-- or it may have applied.
-- verdict: the outcome recorded, 'stale', 'already' or 'missing'; state: the payment's.
local KEY = named(KEYS, 'payment')
local ARG = named(ARGV, 'token', 'outcome', 'detail', 'call_ms', 'max_attempts',
  'backoff_base_ms', 'backoff_cap_ms', 'reverse_on', 'refused')
local reply = replies('verdict', 'state')
local token, outcome, detail = ARG.token, choice_arg(ARG, 'outcome', FINISHED), ARG.detail
if choice_arg(ARG, 'refused', BIT) == '1' and outcome ~= 'retry' and outcome ~= 'failed' then
  refuse('refused is 1 only for the outcomes retry and failed, got ' .. shown(outcome))
end
local max_attempts, backoff = whole_arg(ARG, 'max_attempts', 1), backoff_args(ARG)
local reverse = reversal_arg(ARG)
if ARG.call_ms ~= '' and not tonumber(ARG.call_ms) then
  refuse('call_ms must be a number or empty, got ' .. shown(ARG.call_ms))
end
local pay, pk = KEY.payment, id_of(KEY.payment, PAYMENT_PREFIX)
local now = now_ms()
local held = redis.call('HMGET', pay, 'state', 'token', 'attempt:' .. token, 'leg', 'paid_at')
local state = held[1]
if not state then return reply{verdict = 'missing', state = ''} end
local current, record = held[2], held[3]
release_caller(pay, token, now, record)  -- its worker is back from the call (or never made it)
if record and FINISHED[cjson.decode(record)['outcome']] then
  redis.call('HSET', pay, 'attempt:' .. token, record)  -- written again for WAIT (prelude)
  return reply{verdict = 'already', state = state}  -- a client retry of this same call
end
-- A late receipt for the same token after its lease expired still proves the effect,
-- whatever happened to the payment since, as long as no newer attempt has started (the
-- token would have moved on): interrupted; re-queued (by a person or the sweeper), then
-- deferred by the gate (retrying), held for its purchase or failed by lost jobs.
-- A reversal's attempts are those after the token its reversal began at: an earlier token's
-- word (a fulfilment's late receipt) is no reversal's.
-- Likewise a fulfilment again after a dispute won (`refulfil_from`).
local leg = held[4]
local reversing, refulfilling, settling = leg == 'reverse', leg == 'refulfil', leg == 'settle'
local done = reversing and 'reversed' or 'fulfilled'
local leg_from = (reversing and redis.call('HGET', pay, 'reversal_from'))
  or (refulfilling and redis.call('HGET', pay, 'refulfil_from')) or '0'
local late = current == token and outcome == 'fulfilled'
  and state ~= 'in_progress' and state ~= done
  and not ((reversing or refulfilling) and tonumber(token) <= tonumber(leg_from))
-- Likewise the worker's word that it never called (it stalled past the call's window after
-- its fence): the interruption its own lease expiry caused is lifted, nothing was applied.
local idle = state == 'interrupted' and current == token and outcome == 'not_called'
if current ~= token or (state ~= 'in_progress' and not late and not idle) then
  redis.call('HINCRBY', pay, 'stale_finishes', 1)
  redis.call('HINCRBY', STATS, 'stale_finishes', 1)
  update_attempt(pay, token, {stale = true, stale_outcome = outcome, stale_at = now}, nil, record)
  return reply{verdict = 'stale', state = state}
end

if outcome == 'voided' and not settling then
  refuse('outcome voided is a settlement\'s, and ' .. pk .. ' is not being settled')
end
if outcome == 'held' and not reversing then
  refuse('outcome held is a reversal\'s, and ' .. pk .. ' is not being reversed')
end

-- Its request never left, or its answer refused it: it applied nothing on the downstreams
-- it added (never_reached; one an earlier call reached stays).
if outcome == 'not_called' or ARG.refused == '1' then
  never_reached(pay, token, record)
  record = redis.call('HGET', pay, 'attempt:' .. token)
end

local function record_outcome()
  redis.call('HINCRBY', STATS, 'attempts_finished', 1)
  redis.call('HINCRBY', STATS, 'attempt_outcome:' .. outcome, 1)
  -- A fulfilled attempt's end and detail are the payment's fulfilled_at and receipt: kept
  -- once, there (the read model joins them back). Its caller only mattered while the call
  -- might still be running (a person's retry waits for it), and a fulfilled payment is kept;
  -- `reached` only until its request was known sent or not (never_reached).
  local fulfilled = outcome == 'fulfilled'
  update_attempt(pay, token, {outcome = outcome, ended = (not fulfilled) and now or nil,
    ms = tonumber(ARG.call_ms), detail = (not fulfilled) and detail or nil, late = late or nil},
    fulfilled and {'caller', 'reached'} or {'reached'}, record)
  local plain = fulfilled and not reversing and not refulfilling  -- its one HDEL below has them
  if not plain then redis.call('HDEL', pay, 'lease_until', 'phase') end

  if fulfilled and reversing then
    return reply{verdict = 'reversed', state = reversal_done(pay, now, detail, reverse)}
  end
  if fulfilled and refulfilling then  -- fulfilled again after a dispute won: its own receipt
    move(pay, 'fulfilled', now, state)
    redis.call('HSET', pay, 'refulfil_receipt', detail, 'refulfilled_at', now)
    redis.call('HDEL', pay, 'last_error', 'job', 'attempt_id', 'replay_safe', 'sweep_seen',
      'next_at', 'waiting')
    redis.call('HINCRBY', STATS, 'refulfilled', 1)
    redis.call('ZREM', DUE, pk)
    return reply{verdict = 'fulfilled', state = 'fulfilled'}
  end
  if outcome == 'voided' then  -- settled: no effect under its key, and none can come now
    redis.call('HDEL', pay, 'leg', 'last_error', 'attempt_id', 'replay_safe', 'waiting')
    redis.call('HSET', pay, 'key_voided', 1)
    redis.call('HINCRBY', STATS, 'settled_voided', 1)
    -- no longer taken back (its refund failed, its dispute won): held (hold_voided)
    return reply{verdict = 'voided', state = never_fulfilled(pay, now)}
  end
  if fulfilled and settling then  -- settled: the effect was there, a fulfilment after all
    redis.call('HDEL', pay, 'leg')
    -- (a late receipt of an attempt before the settlement proves it too, but is none)
    if tonumber(token) > tonumber(redis.call('HGET', pay, 'settle_from') or '0') then
      redis.call('HINCRBY', STATS, 'settled_applied', 1)
    end
  end
  if fulfilled then
    -- A late receipt deferred by the gate leaves its waiting set here (move).
    move(pay, 'fulfilled', now, state)
    local latency = now - tonumber(held[5] or now)
    redis.call('HSET', pay, 'receipt', detail, 'fulfilled_at', now)
    -- What only a live attempt needs goes: a fulfilled payment is kept for ever.
    redis.call('HDEL', pay, 'lease_until', 'phase', 'last_error', 'job', 'attempt_id',
      'replay_safe', 'called_unnamed', 'sweep_seen', 'next_at', 'waiting', 'fulfilled_by_hand')
    redis.call('HINCRBY', STATS, 'effects', 1)
    local bucket = 'le:inf'
    for _, bound in ipairs(LATENCY_BUCKETS_MS) do
      if latency <= bound then bucket = 'le:' .. bound break end
    end
    redis.call('HINCRBY', FULFIL_HISTOGRAM, bucket, 1)
    redis.call('HINCRBY', FULFIL_HISTOGRAM, 'sum_ms', latency)
    redis.call('ZREM', DUE, pk)
    return reply{verdict = 'fulfilled', state = 'fulfilled'}
  end

  redis.call('HSET', pay, 'last_error', detail)
  if outcome == 'held' then
    -- Not failed: a failed payment is only retried, which refuses again while the action
    -- names the same downstream; a held one a person also resolves, once they took it back.
    redis.call('HINCRBY', STATS, 'held', 1)
    return reply{verdict = 'held', state = hold(pay, now, detail)}
  end
  if outcome == 'interrupted' then
    -- The downstream may have applied it and may not dedupe: a person decides.
    move(pay, 'interrupted', now)
    redis.call('HINCRBY', STATS, 'interrupted', 1)
    redis.call('ZREM', DUE, pk)
    return reply{verdict = 'interrupted', state = 'interrupted'}
  end
  local used = attempts_used(pay)
  if (outcome == 'retry' or outcome == 'not_called') and used < max_attempts then
    retry_later(pay, used, backoff, now)
    return reply{verdict = 'retry', state = 'retrying'}
  end
  if settling then return reply{verdict = outcome, state = settle_given_up(pay, now)} end
  move(pay, 'failed', now)
  redis.call('HINCRBY', STATS, 'dead_letters', 1)
  redis.call('ZREM', DUE, pk)
  return reply{verdict = outcome, state = 'failed'}
end

-- A refund in full (or a lost dispute, or with REVERSAL_PER_REFUND any refund) recorded while
-- the call ran: an effect is reversed (REVERSAL_ACTION), a payment left waiting without one is
-- never fulfilled.
local answer = record_outcome()
if not reversing and not (settling and outcome ~= 'fulfilled') then
  local moved = take_back(pay, now, reverse)
  if moved then answer[2] = moved end
end
return answer
