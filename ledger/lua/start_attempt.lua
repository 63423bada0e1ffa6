-- Take the payment for one attempt: a lease and a new fencing token, or a recorded skip.
-- `execution` is unique per run of a job: a client retry of this very call is answered
-- `go` again, a second run of the same RQ job is skipped.
-- verdict: go (with the token and what the call needs: amount, currency, livemode, events)
-- | skip (with its reason) | missing
local KEY = named(KEYS, 'payment')
local ARG = named(ARGV, 'job_id', 'execution', 'lease_ms', 'replay_safe', 'settles', 'caller',
  'leg', 'downstream')
local reply = replies('verdict', 'token', 'reason', 'amount', 'currency', 'livemode', 'events')
local lease_ms = whole_arg(ARG, 'lease_ms', 1, MAX_TTL_MS)
choice_arg(ARG, 'replay_safe', BIT)
choice_arg(ARG, 'settles', BIT)
choice_arg(ARG, 'leg', {fulfil = true, reverse = true, refulfil = true, settle = true})
local pay = KEY.payment
local now = now_ms()
local state = redis.call('HGET', pay, 'state')
local function go(token)
  local call = redis.call('HMGET', pay, 'amount', 'currency', 'livemode', 'events')
  return reply{verdict = 'go', token = token, amount = call[1], currency = call[2],
    livemode = call[3], events = call[4]}
end
if not state then return reply{verdict = 'missing'} end

local function skip(reason)
  redis.call('HINCRBY', pay, 'skipped:' .. reason, 1)
  redis.call('HSET', pay, 'last_skip', reason .. ' job ' .. ARG.job_id .. ' at ' .. now)
  redis.call('HINCRBY', STATS, 'jobs_skipped:' .. reason, 1)
  return reply{verdict = 'skip', reason = reason}
end

if state ~= 'queued' and state ~= 'retrying' and state ~= 'in_progress' then
  return skip(state)  -- settled, held for a person, or not paid
end
if state == 'in_progress' then
  if tonumber(redis.call('HGET', pay, 'lease_until') or '0') > now then
    if redis.call('HGET', pay, 'attempt_id') == ARG.execution then
      redis.call('HSET', pay, 'attempt_id', ARG.execution)  -- written again for WAIT (prelude)
      return go(tonumber(redis.call('HGET', pay, 'token')))  -- a client retry of this call
    end
    return skip('leased')
  end
  -- An expired lease is ended by the sweeper alone, once it has checked Redis's clock
  -- against its own (recover.lua, ledger/clock.py StepWatch): after a forward step of
  -- Redis's clock a lease only looks over here while its call may still run.
  return skip('lease_expired')
end
if state == 'retrying' and tonumber(redis.call('HGET', pay, 'next_at') or '0') > now then
  return skip('not_due')
end
-- The job read which leg is due (fulfilment, or its reversal) before it chose its action.
local leg = redis.call('HGET', pay, 'leg') or 'fulfil'
if leg ~= ARG.leg then return skip('leg') end
-- Refunded in full (or a dispute lost) while it waited: never fulfilled (or held).
if leg == 'fulfil' and take_back(pay, now, false, nil, nil, 0, true) then
  return skip('taken_back')
end
-- Its refund failed since (or its dispute was won): no longer taken back, fulfilled after all,
-- unless an attempt of its settlement started (it may have voided the key: a person).
if leg == 'settle' and not taken_back(pay) then
  local from = tonumber(redis.call('HGET', pay, 'settle_from') or '0')
  if tonumber(redis.call('HGET', pay, 'token') or '0') > from then
    hold_voided(pay, now)
    return skip('not_taken_back')
  end
  redis.call('HDEL', pay, 'leg', 'job', 'taken_back')
  redis.call('ZADD', DUE, now, id_of(pay, PAYMENT_PREFIX))  -- the sweeper's job
  return skip('not_taken_back')
end
if leg == 'refulfil' and taken_back(pay) then  -- refunded in full since its dispute was won
  refulfil_withdrawn(pay, now, tonumber(redis.call('HGET', pay, 'token') or '0') + 1)
  return skip('taken_back')
end
-- One purchase, one effect: the other record of this purchase may have had (or is having)
-- its effect, so this one waits for a person instead (checked here, at the last moment
-- before a call, whatever the intake saw).
local twin = leg == 'fulfil' and engaged_twin(pay)
if twin then
  hold_for_twin(pay, twin, now, 'held when an attempt would have started')
  return skip('same_purchase')
end
-- FULFILMENT_ACTION moved (docs/ACTIONS.md) after a replay-safe call that may have applied
-- on the payment's earlier downstream: its key dedupes there, not on this one, so a call
-- here (replay-safe or not) could be a second effect. A person checks there: resolve as
-- fulfilled if it applied (`moved_from` says where, for its reversal), retry if not
-- (operator.lua). A fulfilment again after a dispute won has its own key, so only its own
-- calls count (`refulfil_on`). An attempt that names no downstream has none to be held for
-- (start_without_call names no caller either: its worker could not load its action, and
-- makes no call).
local reached = REACHED[leg]
if reached and ARG.downstream ~= '' then
  local on = redis.call('HGET', pay, reached) or ''
  if on ~= '' and not has_word(on, ARG.downstream) then
    hold(pay, now, 'FULFILMENT_ACTION moved: a call to ' .. on .. ' may have applied there;' ..
      ' resolve it as fulfilled if it did, retry it (here) if not')
    redis.call('HSET', pay, 'moved_from', on)
    redis.call('HINCRBY', STATS, 'held', 1)
    return skip('moved')
  end
end

local lease_until = now + lease_ms
local token = redis.call('HINCRBY', pay, 'token', 1)
move(pay, 'in_progress', now, state)
-- A replay-safe action needs no separate fence before its call: re-running it is harmless,
-- so the attempt is `calling` from the start (one round trip less per job).
local phase = ARG.replay_safe == '1' and 'calling' or 'leased'
-- A replay-safe call whose action names no downstream: no list can take it off again
-- (refunds.lua may_have_applied: `called_unnamed`, written with the rest); an attempt with no
-- caller makes no call (start_without_call).
local unnamed = phase == 'calling' and ARG.downstream == '' and ARG.caller ~= ''
  and leg ~= 'reverse'
redis.call('HSET', pay, 'lease_until', lease_until, 'phase', phase,
  'replay_safe', ARG.replay_safe, 'settles', ARG.settles, 'job', ARG.job_id,
  'attempt_id', ARG.execution, unpack(unnamed and {'called_unnamed', 1} or {}))
redis.call('HDEL', pay, 'next_at', 'sweep_seen')
-- Every downstream a replay-safe attempt of its fulfilment may call (its action's name for
-- it), so a settlement settles only on the one its calls went to (docs/REVERSAL.md), and a
-- move holds (above). The attempt keeps the lists it added its downstream to (`reached`):
-- should its request never leave, it is taken off them again (never_reached).
local sole = false  -- this attempt's downstream is the payment's only one there
local added = nil  -- list -> this downstream, for each list this attempt added it to
if phase == 'calling' and ARG.downstream ~= '' and leg ~= 'reverse' then
  local on = redis.call('HGET', pay, 'called_on') or ''
  for _, field in ipairs(leg == 'refulfil' and {'called_on', 'refulfil_on'} or {'called_on'}) do
    local names = field == 'called_on' and on or (redis.call('HGET', pay, field) or '')
    if not has_word(names, ARG.downstream) then
      local grown = names == '' and ARG.downstream or (names .. ' ' .. ARG.downstream)
      redis.call('HSET', pay, field, grown)
      added = added or {}
      added[field] = ARG.downstream
    end
  end
  sole = on == '' or on == ARG.downstream
end
-- A reversal's call carries the amount paid as this start reads it (jobs.py): none for a
-- payment only a thin event paid. Should it come before the reversal is done, the call that
-- took the payment back in full could not say so (reversal_done).
if leg == 'reverse' and (redis.call('HGET', pay, 'amount') or '') == '' then
  redis.call('HSET', pay, 'reversal_paid_unknown', 1)
end
redis.call('HINCRBY', STATS, 'attempts_started', 1)
redis.call('ZADD', DUE, lease_until, id_of(pay, PAYMENT_PREFIX))
-- The leg is kept on the attempt: the token alone cannot tell one per-refund reversal's
-- attempts from the ones before it (the read model, ledger/read/timeline.py).
local caller = phase == 'calling' and ARG.caller ~= '' and ARG.caller or nil  -- named at once
-- So is the downstream of an attempt that may apply the effect (`on`): a reversal is called
-- only where the effect went (workers/reversal_target.py). Left out when `called_on` names it
-- alone, which a fulfilled payment keeps anyway: no byte more on its hash.
local went = leg ~= 'reverse' and not sole and ARG.downstream ~= '' and ARG.downstream or nil
redis.call('HSET', pay, 'attempt:' .. token, cjson.encode({started = now, outcome = 'started',
  leg = leg, caller = caller, on = went, reached = added}))
if caller then hold_caller(pay, token, caller, now, lease_ms) end
return go(token)
