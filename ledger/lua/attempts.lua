-- The helpers of a payment's attempts, after the prelude, for the scripts that take, fence,
-- finish, recover or decide attempts (ledger/scripts.py ATTEMPT_SCRIPTS); the others skip
-- them, since every call builds each helper of its text anew.

-- Merge fields into the JSON record of attempt `token` (`raw`: that record as the caller has
-- just read it, false if absent; read here when not given).
local function update_attempt(pay, token, fields, dropped, raw)
  if raw == nil then raw = redis.call('HGET', pay, 'attempt:' .. token) end
  if not raw then return end
  local record = cjson.decode(raw)
  for k, v in pairs(fields) do record[k] = v end
  for _, k in ipairs(dropped or {}) do record[k] = nil end
  redis.call('HSET', pay, 'attempt:' .. token, cjson.encode(record))
end

-- Whether the space-separated list `words` holds `word`.
local function has_word(words, word)
  return string.find(' ' .. words .. ' ', ' ' .. word .. ' ', 1, true) ~= nil
end

-- The list of downstreams a leg's replay-safe calls may have reached (start_attempt.lua),
-- where a call on another one could be a second effect: a fulfilment again after a dispute
-- won has a key of its own, so a list of its own too.
local REACHED = {fulfil = 'called_on', refulfil = 'refulfil_on'}

-- An attempt whose request never left (refused before sending: breaker.lua; its worker
-- never called: finish_attempt.lua), or whose answer refused it (finish_attempt.lua's
-- `refused`: nothing applied), had no effect on the downstreams it added to those lists (its
-- record's `reached`): each is taken off again, so a move is not held for it, nor a
-- settlement sent there, nor a refund in full held (refunds.lua may_have_applied). A
-- downstream an earlier call had reached is in no later attempt's `reached`: it stays, as
-- a later refusal does not undo what that call may have applied. `raw`: its record, as just
-- read.
local function never_reached(pay, token, raw)
  local record = raw and cjson.decode(raw) or {}
  if type(record.reached) ~= 'table' then return end
  for field, downstream in pairs(record.reached) do
    local kept = {}
    for name in string.gmatch(redis.call('HGET', pay, field) or '', '%S+') do
      if name ~= downstream then kept[#kept + 1] = name end
    end
    if #kept == 0 then redis.call('HDEL', pay, field)
    else redis.call('HSET', pay, field, table.concat(kept, ' ')) end
  end
  update_attempt(pay, token, {}, {'reached'}, raw)
end

-- Attempts used since the last person's retry (the fencing token counts every start).
local function attempts_used(pay)
  return tonumber(redis.call('HGET', pay, 'token') or '0')
    - tonumber(redis.call('HGET', pay, 'budget_base') or '0')
end

-- The backoff between attempts a script was given (ARGV backoff_base_ms, backoff_cap_ms).
local function backoff_args(args)
  return {base_ms = whole_arg(args, 'backoff_base_ms', 0, MAX_TTL_MS),
    cap_ms = whole_arg(args, 'backoff_cap_ms', 0, MAX_TTL_MS)}
end

-- Retry the payment after its backoff: base_ms, doubled for each attempt used after the
-- first, at most cap_ms; not before the current attempt's retry_at (a Retry-After, or a
-- failed probe's turn: breaker.lua). Returns when (ms).
local function retry_later(pay, used, backoff, now)
  local next_at = now + math.floor(math.min(backoff.base_ms * 2 ^ (used - 1), backoff.cap_ms))
  local raw = redis.call('HGET', pay, 'attempt:' .. (redis.call('HGET', pay, 'token') or '0'))
  local asked = raw and tonumber(cjson.decode(raw)['retry_at'])
  if asked and asked > next_at then next_at = asked end
  move(pay, 'retrying', now)
  redis.call('HSET', pay, 'next_at', next_at)
  redis.call('ZADD', DUE, next_at, id_of(pay, PAYMENT_PREFIX))
  return next_at
end

-- 'reversal: ' while the payment's reversal is due (docs/REVERSAL.md), so a person reading
-- its error knows which action it was; else ''.
local function leg_word(pay)
  return redis.call('HGET', pay, 'leg') == 'reverse' and 'reversal: ' or ''
end

-- A settlement (leg `settle`) given up: an attempt failed for good or the budget is spent.
-- Held for a person as if its action could not settle (`settle_gave_up`: not settled again
-- until a person's retry, operator.lua); no longer taken back, as hold_given_back says.
local function settle_given_up(pay, now)
  local back = given_back(pay)
  if back then return hold_given_back(pay, now, back) end
  redis.call('HDEL', pay, 'leg', 'lease_until', 'phase')
  redis.call('HSET', pay, 'settle_gave_up', '1')
  return hold_taken_back(pay, taken_back(pay), now, GAVE_UP)
end

-- The lease of the current attempt has expired: its worker died or stalled. Returns
-- 'interrupted' (the call may have happened and the action is not replay-safe), 'spent'
-- (that was the last attempt of the budget: the payment now waits for a person, so a job
-- that kills its worker cannot loop for ever) or 'again'.
local function expire_lease(pay, now, max_attempts)
  local phase = redis.call('HGET', pay, 'phase')
  local token = redis.call('HGET', pay, 'token')
  local replay_safe = redis.call('HGET', pay, 'replay_safe') == '1'
  update_attempt(pay, token, {outcome = 'lease_expired', ended = now, phase = phase})
  redis.call('HINCRBY', STATS, 'leases_expired', 1)
  redis.call('HDEL', pay, 'lease_until', 'phase')
  local deaths = redis.call('HINCRBY', pay, 'leases_expired', 1)
  if phase == 'calling' and not replay_safe then
    move(pay, 'interrupted', now)
    redis.call('HSET', pay, 'last_error', leg_word(pay) .. 'attempt ' .. token ..
      ' was interrupted during the downstream call; the action is not replay-safe')
    redis.call('HINCRBY', STATS, 'interrupted', 1)
    return 'interrupted'
  end
  if attempts_used(pay) >= max_attempts then
    if redis.call('HGET', pay, 'leg') == 'settle' then
      redis.call('HSET', pay, 'last_error', 'settlement: worker died (or stalled past its ' ..
        'lease) ' .. deaths .. ' times; attempt budget of ' .. max_attempts .. ' spent')
      settle_given_up(pay, now)
      return 'spent'
    end
    local to = replay_safe and 'failed' or 'interrupted'
    move(pay, to, now)
    redis.call('HSET', pay, 'last_error', leg_word(pay) ..
      'worker died (or stalled past its lease) ' .. deaths ..
      ' times during this payment; attempt budget of ' .. max_attempts .. ' spent')
    redis.call('HINCRBY', STATS, to == 'failed' and 'dead_letters' or 'interrupted', 1)
    return 'spent'
  end
  return 'again'
end

-- Put the payment back in the queue with a new RQ job whose commands start at ARGV[first].
local function requeue(pay, job_id, first, grace_ms, now, why)
  move(pay, 'queued', now)
  redis.call('HSET', pay, 'job', job_id)
  redis.call('HDEL', pay, 'sweep_seen', 'next_at')
  run_commands(first)
  redis.call('ZADD', DUE, now + grace_ms, id_of(pay, PAYMENT_PREFIX))
  redis.call('HINCRBY', STATS, 'requeued:' .. why, 1)
end

-- The twin of a payment if that twin is engaged, else nil: checked again when an attempt
-- starts and before its call (start_attempt, mark_calling), not only when the tie arrives.
local function engaged_twin(pay)
  local twin = redis.call('HGET', pay, 'same_purchase_as')
  if twin and engaged(PAYMENT_PREFIX .. twin) then return twin end
  return nil
end

-- The other record of this held payment's purchase whose effect a person's resolve as
-- fulfilled vouches for (`same_purchase_as`, a tie Stripe sent late, else `dup_of`, the
-- payment it was held as a possible duplicate of), when none of its own attempts may have
-- applied it; else nil. Each followed to the record whose key has the effect
-- (effect_holder); a twin itself held or failed with no call that may have applied has no
-- effect to vouch for: then `dup_of`'s (both held, then tied, and closed one after the other,
-- each named the other, neither with an effect). When each leads back to this payment, the
-- twin still (its hold when taken back says no record is known to have the effect). Kept as
-- `effect_of`: its reversal is never run under its own key (take_back.lua take_back,
-- hold_effect_elsewhere).
local function effect_elsewhere(pay)
  local f = redis.call('HMGET', pay, 'state', 'same_purchase_as', 'dup_of')
  if f[1] ~= 'held' or may_have_applied(pay) then return nil end
  local twin, dup = effect_holder(pay, f[2]), effect_holder(pay, f[3])
  if twin and dup and twin == f[2] then
    local twin_pay = PAYMENT_PREFIX .. twin
    local state = redis.call('HGET', twin_pay, 'state')
    if (state == 'held' or state == 'failed') and not may_have_applied(twin_pay) then
      return dup
    end
  end
  return twin or dup or f[2] or f[3]
end

-- The worker process `caller` is about to call the downstream for attempt `token`: the
-- attempt names it and its liveness key (keys.CALLER_PREFIX) names the call until the lease
-- ends (its watchdog ends the process before then if the call will not stop). The script
-- writes `caller` into the attempt with the attempt's other fields; this sets the key.
local function hold_caller(pay, token, caller, now, lease_ms)
  if caller == '' then return end
  local held = id_of(pay, PAYMENT_PREFIX) .. ' ' .. token .. ' ' .. (now + lease_ms)
  if CLOCK_KEY ~= '' then  -- protocol tests: the until in it decides on their clock, so a
    redis.call('SET', CALLER_PREFIX .. caller, held)  -- slow machine changes no program
  else
    redis.call('SET', CALLER_PREFIX .. caller, held, 'PX', lease_ms)
  end
end

-- The caller of attempt `token` if its process may still be in that call: {caller, until}.
-- `raw`: as update_attempt's.
local function caller_in_call(pay, token, now, raw)
  if raw == nil then raw = redis.call('HGET', pay, 'attempt:' .. token) end
  local caller = raw and cjson.decode(raw)['caller']
  if not caller then return nil end
  local value = redis.call('GET', CALLER_PREFIX .. caller)
  if not value then return nil end
  local pk, t, until_ms = string.match(value, '^(%S+) (%S+) (%d+)$')
  if pk ~= id_of(pay, PAYMENT_PREFIX) or t ~= tostring(token) or tonumber(until_ms) <= now then
    return nil
  end
  return {caller, until_ms}
end

-- The attempt is over (its worker returned from the call, or never made it): its process
-- is no longer in it.
local function release_caller(pay, token, now, raw)
  local in_call = caller_in_call(pay, token, now, raw)
  if in_call then redis.call('DEL', CALLER_PREFIX .. in_call[1]) end
end

-- A reversal's call applied (its success, a late receipt, or a person's word: `receipt`).
-- A reversal for one refund records it (`rv`) and the next one is due (next_reversal), or,
-- with none left, the payment is `reversed` when taken back (refunded in full and every
-- refund reversed, or a dispute lost) and `fulfilled` again otherwise (a partial refund: the
-- effect stays for what was not refunded; held if a refund it reversed failed since:
-- hold_failed_reversal). A whole-payment (or remaining) reversal makes it
-- `reversed`, settled for good; a dispute won meanwhile is reinstated (above). Each is
-- counted (`rest_reversed`): one whose amount was not known, or of nothing left, carries
-- none, so `reversed_amount` alone cannot tell it happened. Returns the new state.
local function reversal_done(pay, now, receipt, reverse)
  local pk = id_of(pay, PAYMENT_PREFIX)
  local f = redis.call('HMGET', pay, 'reversal_refund', 'reversal_amount', 'reversal_paid_unknown')
  local refund, paid_unknown = f[1], f[3]
  local amount = tonumber(f[2] or '0') or 0
  redis.call('HINCRBY', pay, 'reversed_amount', amount)
  if not refund then redis.call('HINCRBY', pay, 'rest_reversed', 1) end
  redis.call('HSET', pay, 'reversal_receipt', receipt, 'reversed_at', now)
  local waiting = redis.call('HGET', pay, 'waiting')  -- a late receipt, deferred by the gate
  if waiting then redis.call('ZREM', WAITING_PREFIX .. waiting, pk) end
  redis.call('HDEL', pay, 'last_error', 'job', 'attempt_id', 'replay_safe', 'sweep_seen',
    'next_at', 'waiting', 'reversal_refund', 'reversal_amount', 'reversal_paid_unknown')
  redis.call('HINCRBY', STATS, 'reversals', 1)
  redis.call('ZREM', DUE, pk)
  if refund then
    local done = cjson.decode(redis.call('HGET', pay, 'rv') or '{}')
    done[refund] = amount
    redis.call('HSET', pay, 'rv', cjson.encode(done))
    redis.call('HINCRBY', STATS, 'refund_reversals', 1)
    local why, next_refund, next_amount = next_reversal(pay)
    if why then
      begin_reversal(pay, why, now, nil, nil, 0, next_refund, next_amount)
      return 'queued'
    end
    local why_back = taken_back(pay)
    if not why_back then
      redis.call('HDEL', pay, 'leg', 'taken_back')  -- (a dispute lost meanwhile, then won)
      move(pay, 'fulfilled', now)
      return hold_failed_reversal(pay, now) or 'fulfilled'
    end
    -- Taken back in full, and a call of this reversal carried no amount paid (it came
    -- meanwhile), so none said so: what remains is reversed once more, as take_back does
    -- when the amount comes after.
    if paid_unknown then
      begin_reversal(pay, why_back, now, nil, nil, 0, nil, math.max(0, remaining(pay)))
      return 'queued'
    end
  end
  move(pay, 'reversed', now)
  return reinstate(pay, now, reverse, nil, nil, 0) or 'reversed'
end

-- Attempts that say they never called the downstream.
local NEVER_CALLED = {not_called = true, taken_back = true, stale_before_call = true,
  same_purchase = true}

-- Whether an earlier attempt of the fulfilment again (tokens after `refulfil_from`) may have
-- applied it: one whose record does not say it never called (a retry's refusal too: a person
-- looks rather than the ledger guess).
local function refulfil_may_have_applied(pay, before)
  local from = tonumber(redis.call('HGET', pay, 'refulfil_from') or '0')
  for t = from + 1, before - 1 do
    local raw = redis.call('HGET', pay, 'attempt:' .. t)
    if raw and not NEVER_CALLED[cjson.decode(raw)['outcome']] then return true end
  end
  return false
end

-- A fulfilment again after a dispute won (`leg` = refulfil) that finds the payment refunded
-- in full (or a dispute lost) before its call: not called; the payment stays reversed,
-- unless an earlier attempt of it may have applied it (held to take it back by hand).
-- `before`: the first token not to look at (the attempt withdrawn, or the next one).
local function refulfil_withdrawn(pay, now, before)
  redis.call('HDEL', pay, 'next_at', 'sweep_seen', 'job', 'lease_until', 'phase')
  redis.call('ZREM', DUE, id_of(pay, PAYMENT_PREFIX))
  if refulfil_may_have_applied(pay, before) then
    return hold_retake(pay, taken_back(pay) or 'refund', now, true)
  end
  redis.call('HSET', pay, 'leg', 'reverse')
  move(pay, 'reversed', now)
  return 'reversed'
end
