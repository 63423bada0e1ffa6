-- A person's decision on one payment: retry a failed one, or resolve an interrupted one.
-- decision: retry|fulfilled|not_applied; allowed: the states it is allowed from
-- (space-separated); job_id is also this decision's id. ARGV after the named ones: the
-- captured RQ enqueue.
-- verdict: ok (state: the new one) | refused (state: the current one) | by_hand (a retry of
-- a payment only a person grants, refused) | not_taken_back (not_applied of a payment not
-- held after it was taken back, refused) | wait (until_ms, caller: the process of the last
-- call may still be in it)
local KEY = named(KEYS, 'payment')
local ARG, ARGC = named(ARGV, 'decision', 'allowed', 'note', 'job_id', 'grace_ms',
  'reverse_on')
local reply = replies('verdict', 'state', 'until_ms', 'caller')
local grace_ms = whole_arg(ARG, 'grace_ms', 0, MAX_TTL_MS)
check_commands(ARGC + 1)
choice_arg(ARG, 'decision', {retry = true, fulfilled = true, not_applied = true})
local reverse = reversal_arg(ARG)
local pay = KEY.payment
local now = now_ms()
local state = redis.call('HGET', pay, 'state')
if redis.call('HGET', pay, 'decision_id') == ARG.job_id then
  redis.call('HSET', pay, 'decision_id', ARG.job_id)  -- written again for WAIT (prelude)
  return reply{verdict = 'ok', state = state}  -- a client retry of this same decision
end
if not state or not string.find(' ' .. ARG.allowed .. ' ', ' ' .. state .. ' ', 1, true) then
  return reply{verdict = 'refused', state = state or ''}
end
local leg = redis.call('HGET', pay, 'leg')
-- Held for a person to grant by hand: taken back (reversed, refunded before any effect, its
-- key voided by a settlement), then no longer (a dispute won, a refund failed).
local by_hand = state == 'held' and redis.call('HGET', pay, 'by_hand')
if by_hand and ARG.decision == 'retry' then
  return reply{verdict = 'by_hand', state = state}  -- nothing of the ledger's may run again
end
-- Not applied: only for a payment held after it was taken back (refunded in full, a dispute
-- lost) while a call of its fulfilment may have applied (take_back_steps.lua
-- hold_taken_back), not one held for a person to act by hand, nor one with a leg due.
if ARG.decision == 'not_applied' and (state ~= 'held' or by_hand or leg or not taken_back(pay)) then
  return reply{verdict = 'not_taken_back', state = state}
end
if ARG.decision ~= 'fulfilled' then
  -- Refused while the worker process that made the last call may still be in it (a retry
  -- could call again; not applied would be said before that call's end): its liveness key
  -- lasts until that process has returned from the call or been ended by its watchdog
  -- (keys.CALLER_PREFIX).
  local in_call = caller_in_call(pay, redis.call('HGET', pay, 'token') or '0', now)
  if in_call then return reply{verdict = 'wait', until_ms = in_call[2], caller = in_call[1]} end
end
redis.call('HSET', pay, 'decision_id', ARG.job_id)
-- what the decision does, kept for people (the fields it rests on go with it)
local retake = by_hand and redis.call('HEXISTS', pay, 'retake') == 1
local as = 'retry'
if ARG.decision == 'not_applied' then
  as = 'not_applied'
elseif ARG.decision == 'fulfilled' and by_hand then
  as = retake and 'taken_back_by_hand' or 'granted_by_hand'
elseif ARG.decision == 'fulfilled' then
  as = ({reverse = 'reversed', refulfil = 'fulfilled_again'})[leg or ''] or 'fulfilled'
end
redis.call('HSET', pay, 'resolved_by', ARG.note, 'resolved_at', now,
  'resolved_decision', ARG.decision, 'resolved_from', state, 'resolved_as', as)
if ARG.decision == 'not_applied' then
  -- a person looked where its calls went and found no effect: taken back before any, as if
  -- no call had reached there (take_back_steps.lua never_fulfilled: refunded_unfulfilled,
  -- no reversal)
  redis.call('HDEL', pay, 'hold_reason', 'settle_gave_up')
  redis.call('HINCRBY', STATS, 'resolved_not_applied', 1)
  return reply{verdict = 'ok', state = never_fulfilled(pay, now)}
end
if ARG.decision == 'fulfilled' and retake then
  -- granted again, taken back again, and a person took it back by hand (take_back_steps.lua
  -- hold_retake): reversed, as a reversal's leg resolved would leave it
  move(pay, 'reversed', now)
  -- reversal_from: no attempt before this decision is a reversal's (a late receipt is stale)
  redis.call('HSET', pay, 'leg', 'reverse', 'retaken_at', now,
    'reversal_from', redis.call('HGET', pay, 'token') or 0)
  redis.call('HDEL', pay, 'by_hand', 'hold_reason', 'retake')
  redis.call('HINCRBY', STATS, 'resolved_reversed', 1)
  return reply{verdict = 'ok', state = 'reversed'}
end
if ARG.decision == 'fulfilled' and by_hand then
  -- a person granted it by hand; a first receipt (a reversed payment's) stays, and a refund
  -- in full after it is reversed, or if it was reversed before, held (take_back.lua take_back)
  move(pay, 'fulfilled', now)
  redis.call('HSET', pay, 'fulfilled_at', now, 'fulfilled_by_hand', 1)
  redis.call('HSETNX', pay, 'receipt', cjson.encode({resolved = ARG.note}))
  redis.call('HDEL', pay, 'by_hand', 'hold_reason', 'leg')
  redis.call('HINCRBY', STATS, 'resolved_fulfilled', 1)
  -- what failed refunds' reversals took, granted back: no longer reversed (a later refund in
  -- full reverses it again); another reversed refund that failed meanwhile holds it again
  local regrant = tonumber(redis.call('HGET', pay, 'rv_regrant') or '0')
  if regrant > 0 then redis.call('HINCRBY', pay, 'reversed_amount', -regrant) end
  redis.call('HDEL', pay, 'rv_regrant')
  -- a refund recorded while it was held is reversed now (REVERSAL_PER_REFUND)
  local moved = hold_failed_reversal(pay, now) or (reverse and reverse.each and
    take_back(pay, now, reverse, ARGC + 1, ARG.job_id, grace_ms))
  return reply{verdict = 'ok', state = moved or 'fulfilled'}
end
if ARG.decision == 'fulfilled' and leg == 'reverse' then
  -- A reversal's call a person found applied: that reversal is done (the payment reversed,
  -- or for one refund of several, the next one due or fulfilled again).
  redis.call('HINCRBY', STATS, 'resolved_reversed', 1)
  local moved = reversal_done(pay, now, cjson.encode({resolved = ARG.note}), reverse)
  return reply{verdict = 'ok', state = moved}
end
if ARG.decision == 'fulfilled' and leg == 'refulfil' then
  -- A fulfilment again after a dispute won, found applied: the first one's receipt stays.
  move(pay, 'fulfilled', now)
  redis.call('HSET', pay, 'refulfil_receipt', cjson.encode({resolved = ARG.note}),
    'refulfilled_at', now)
  redis.call('HINCRBY', STATS, 'resolved_fulfilled', 1)
  redis.call('ZREM', DUE, id_of(pay, PAYMENT_PREFIX))
  -- refunded in full (or a dispute lost) meanwhile: a person takes it back (hold_retake)
  local moved = take_back(pay, now, reverse, ARGC + 1, ARG.job_id, grace_ms)
  return reply{verdict = 'ok', state = moved or 'fulfilled'}
end
if ARG.decision == 'fulfilled' then
  -- closed as the same purchase as another record: the effect a person vouches for is that
  -- record's, under its key (attempts.lua effect_elsewhere)
  local other = effect_elsewhere(pay)
  if other then redis.call('HSET', pay, 'effect_of', other) end
  move(pay, 'fulfilled', now)
  redis.call('HSET', pay, 'receipt', cjson.encode({resolved = ARG.note}), 'fulfilled_at', now,
    'fulfilled_by_hand', 1)
  redis.call('HINCRBY', STATS, 'resolved_fulfilled', 1)
  redis.call('ZREM', DUE, id_of(pay, PAYMENT_PREFIX))
  -- Refunded in full (or a dispute lost) meanwhile: the effect a person found is reversed.
  local moved = take_back(pay, now, reverse, ARGC + 1, ARG.job_id, grace_ms)
  return reply{verdict = 'ok', state = moved or 'fulfilled'}
end
-- A fresh attempt budget for the retry; a settlement that gave up may run again (its cause
-- fixed: the attempt's start settles a payment taken back, lua/take_back.lua take_back).
redis.call('HSET', pay, 'budget_base', redis.call('HGET', pay, 'token') or 0)
redis.call('HDEL', pay, 'settle_gave_up')
-- Held after FULFILMENT_ACTION moved (start_attempt.lua), and a person found nothing where
-- its calls went: the calls from now on are the new downstream's alone.
if redis.call('HEXISTS', pay, 'moved_from') == 1 then
  redis.call('HDEL', pay, 'called_on', 'refulfil_on', 'moved_from')
end
requeue(pay, ARG.job_id, ARGC + 1, grace_ms, now, 'operator')
return reply{verdict = 'ok', state = 'queued'}
