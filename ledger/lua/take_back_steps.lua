-- A payment taken back, its next step: its leg begun (a reversal, a settlement), never
-- fulfilled, or held for a person, after refunds.lua.

-- it is enqueued now (due again after the grace), else the sweeper enqueues one at once
-- (recover.lua: a queued payment without a job).
local function enqueue_leg(pay, pk, now, first, job_id, grace_ms)
  if first then
    redis.call('HSET', pay, 'job', job_id)
    run_commands(first)
    redis.call('ZADD', DUE, now + grace_ms, pk)
  else
    redis.call('HDEL', pay, 'job')
    redis.call('ZADD', DUE, now, pk)
  end
end

-- Another leg of the payment is due (`settle`, `refulfil`): queued under it with a fresh
-- attempt budget, its attempts those after the token it began at (`{leg}_from`), counted
-- (`stat`), its job the captured one from ARGV[first], else the sweeper's.
local function begin_leg(pay, leg, stat, now, first, job_id, grace_ms)
  local token = redis.call('HGET', pay, 'token') or 0
  redis.call('HSET', pay, 'leg', leg, leg .. '_from', token, 'budget_base', token)
  move(pay, 'queued', now)
  redis.call('HINCRBY', STATS, stat, 1)
  enqueue_leg(pay, id_of(pay, PAYMENT_PREFIX), now, first, job_id, grace_ms)
  return 'queued'
end

-- The fulfilled payment's reversal is due: the same machinery as fulfilment (`leg` =
-- reverse: queued, in_progress, retrying, failed and interrupted are the reversal's), with
-- a fresh attempt budget. `refund` names the refund it is for (nil: the whole payment, or
-- what remains of it) and `amount` what it takes back.
local function begin_reversal(pay, why, now, first, job_id, grace_ms, refund, amount)
  local pk = id_of(pay, PAYMENT_PREFIX)
  local token = redis.call('HGET', pay, 'token') or 0
  redis.call('HSET', pay, 'leg', 'reverse', 'reversal_why', why, 'reversal_due_at', now,
    'reversal_from', token, 'budget_base', token, 'reversal_amount', amount)
  if refund then
    redis.call('HSET', pay, 'reversal_refund', refund)
  else
    redis.call('HDEL', pay, 'reversal_refund')
  end
  move(pay, 'queued', now)
  redis.call('HINCRBY', STATS, 'reversals_due', 1)
  enqueue_leg(pay, pk, now, first, job_id, grace_ms)
end

local MAY_HAVE_APPLIED = ' after an attempt of a replay-safe action that may have applied it'

-- How a hold reason names a taking back after such an attempt, and a giving back.
local function taken_after_a_call(why)
  return (why == 'dispute' and 'dispute lost' or 'refunded in full') .. MAY_HAVE_APPLIED
end

local function given_back_words(why)
  return why == 'dispute' and 'its dispute was won' or 'a refund failed or was canceled'
end

-- Held so (hold_taken_back), then no longer taken back (a refund failed or was canceled,
-- its dispute won) before a person decided: the customer paid, so its reason no longer
-- offers to end it refunded_unfulfilled (a person's not_applied is refused now,
-- lua/operator.lua), only a retry (which runs) or resolving it as fulfilled. Said only once
-- the ledger itself no longer takes it back: a failure that a charge figure may still count
-- (given_back's lower bound) leaves it taken back, and its reason as it was. Taken back
-- again, hold_taken_back says so again. Returns 'held' or nil.
local function given_back_while_held(pay)
  local f = redis.call('HMGET', pay, 'by_hand', 'leg', 'hold_reason', 'taken_back')
  if f[1] or f[2] or not string.find(f[3] or '', MAY_HAVE_APPLIED, 1, true) then return nil end
  local why = f[4]
  if not why or taken_back(pay) then return nil end
  redis.call('HSET', pay, 'hold_reason', given_back_words(why) .. ' while it was held (' ..
    taken_after_a_call(why) .. '): the customer paid; retry it (the action is replay-safe: ' ..
    'one effect under its key), or resolve it as fulfilled if the downstream shows it applied')
  return 'held'
end

-- Taken back after an attempt of a replay-safe action that may have applied it, and not
-- settled by the action itself: held for a person, who checks the downstream and resolves
-- it as fulfilled (then reversed) or as not applied (lua/operator.lua: refunded_unfulfilled).
local function hold_taken_back(pay, why, now, because)
  return hold(pay, now, taken_after_a_call(why) .. (because or '') ..
    ': check the downstream (resolve as fulfilled if it applied: with REVERSAL_ACTION it is ' ..
    'then reversed; as not applied if it did not: it ends refunded_unfulfilled, never called)')
end

local GAVE_UP = ', and its action could not settle it (last_error)'

-- Its settlement voided the payment's key (`key_voided`: a settlement's call answered so), or
-- may have (one started and its answer never came), and the payment is no longer taken back
-- (its refund failed, its dispute was won): the customer paid. Voided: nothing can apply it
-- under that key, so only a person grants it (by_hand). May have: a retry is safe (the
-- fulfilment applies it, finds it applied, or fails on a voided key), or a person grants it.
local function hold_voided(pay, now)
  redis.call('HDEL', pay, 'leg', 'taken_back', 'lease_until', 'phase', 'job')
  local then_ = ', then it was no longer taken back (its refund failed or its dispute was won): '
  if redis.call('HEXISTS', pay, 'key_voided') == 1 then
    return hold_reinstated(pay, now, 'its settlement voided its key' .. then_ ..
      'the customer paid and nothing can apply it under that key; grant it by hand, then ' ..
      'resolve it as fulfilled (a retry runs nothing)', true)
  end
  return hold_reinstated(pay, now, 'its settlement may have voided its key (its answer ' ..
    'never came)' .. then_ .. 'the customer paid; retry it (the fulfilment applies it, finds ' ..
    'it applied, or fails on a voided key), or grant it by hand and resolve it as fulfilled')
end

-- Taken back before any effect, then no longer (given_back: its refund failed or was
-- canceled, its dispute was won): the customer paid and has nothing, so a person decides
-- (fulfil it by hand, or refund it again): an effect days after a refund may be one the
-- merchant cancelled. After a settlement's attempt started, its key may be voided
-- (hold_voided). Of one purchase's two records, the other may have the effect: said.
local function hold_given_back(pay, now, why)
  local f = redis.call('HMGET', pay, 'token', 'settle_from', 'same_purchase_as')
  if f[2] and tonumber(f[1] or '0') > tonumber(f[2]) then return hold_voided(pay, now) end
  local has = f[3] and ('has no effect under this record (same purchase as ' .. f[3] ..
    ', which may have had it: check it first)') or 'has nothing'
  return hold_reinstated(pay, now, given_back_words(why) ..
    ' after it was taken back before any effect: the ' ..
    'customer paid and ' .. has .. '; fulfil it by hand and resolve it as fulfilled, or ' ..
    'refund it again (a retry runs nothing)', true)
end

-- Held for a person because Stripe gave it back (by_hand), then taken back again (refunded
-- in full again, a dispute lost): back where the first taking left it, `reversed` (its
-- reversal done), `fulfilled` (held with no leg after a refund's own reversal: a refund that
-- failed after it, hold_failed_reversal; or held in its fulfilment again's leg, whose effect
-- may stand: taken back after it was granted again, then given back, reinstate; its taking
-- goes on from there) or `refunded_unfulfilled`. Returns the new state, or nil.
local function taken_back_again(pay, now)
  local f = redis.call('HMGET', pay, 'state', 'by_hand', 'leg', 'reversed_at', 'retake')
  if f[1] ~= 'held' or not f[2] or f[5] or not taken_back(pay) then return nil end
  redis.call('HDEL', pay, 'by_hand', 'hold_reason', 'rv_regrant')
  if f[3] == 'reverse' and f[4] then
    move(pay, 'reversed', now)
    return 'reversed'
  end
  if f[4] and (not f[3] or f[3] == 'refulfil') then
    move(pay, 'fulfilled', now)
    return 'fulfilled'
  end
  move(pay, 'refunded_unfulfilled', now)
  redis.call('HINCRBY', STATS, 'refunded_unfulfilled', 1)
  return 'refunded_unfulfilled'
end

-- Reversed once, granted again (by a person, or fulfilled again after a dispute won), then
-- taken back again (refunded in full again, a dispute lost): the ledger does not reverse a
-- payment twice (its key reverse:{payment_key} was spent), so a person takes it back by hand
-- and resolves it (`retake`: then reversed, lua/operator.lua; given back before that: held
-- to grant, reinstate). `maybe`: a fulfilment again whose attempt may have applied it, taken
-- back before it was done (lua/attempts.lua refulfil_withdrawn). Returns 'held'.
local function hold_retake(pay, why, now, maybe)
  redis.call('HSET', pay, 'retake', why)
  redis.call('HINCRBY', STATS, 'held', 1)
  local what = why == 'dispute' and 'a dispute lost' or 'refunded in full'
  if maybe then
    local pk = id_of(pay, PAYMENT_PREFIX)
    return hold(pay, now, what .. ' while its fulfilment again may have applied (an attempt ' ..
      'of it called without a clear answer): look for refulfil:' .. pk .. ' in the ' ..
      'downstream and take it back by hand if it applied, then resolve it as fulfilled (it ' ..
      'is then reversed; a retry runs nothing)', true)
  end
  return hold(pay, now, what .. ' after it was granted again: the ledger does not reverse it ' ..
    'a second time; take it back by hand, then resolve it as fulfilled (it is then reversed; ' ..
    'a retry runs nothing)', true)
end

-- The record whose own key carries the effect `other` stands for: `other`, or the record
-- its `effect_of` names (a person closed it too, without a call), never `pay` itself: nil
-- when the names lead back to it (or on past a few records).
local function effect_holder(pay, other)
  for _ = 1, 4 do
    if not other or PAYMENT_PREFIX .. other == pay then return nil end
    local next_one = redis.call('HGET', PAYMENT_PREFIX .. other, 'effect_of')
    if not next_one then return other end
    other = next_one
  end
  return nil
end

-- Closed by a person as fulfilled without a call while it was held as the same purchase as
-- another record (`effect_of`: a possible duplicate of it, or a tie Stripe sent late;
-- lua/attempts.lua effect_elsewhere), then taken back (refunded in full, a dispute lost): the
-- purchase's effect, if any, is the other record's, under that record's key, so a reversal
-- under this payment's would take back nothing. Held for a person instead, who takes that
-- effect back by hand if this purchase had it and resolves it (then reversed, as hold_retake;
-- a retry runs nothing). Returns 'held'.
local function hold_effect_elsewhere(pay, why, other, now)
  redis.call('HSET', pay, 'retake', why)
  redis.call('HINCRBY', STATS, 'held', 1)
  local holder = effect_holder(pay, other)
  local where = holder and ("its purchase's effect is " .. holder .. "'s (fulfil:" .. holder ..
    '): take that back by hand if this is its purchase') or ('no record of its purchase is ' ..
    'known to have the effect under its key (' .. other .. ' too was closed by a person ' ..
    'without a call): take back by hand what was granted for it')
  return hold(pay, now, (why == 'dispute' and 'a dispute lost' or 'refunded in full') ..
    ' after a person closed it without a call as the same purchase as ' .. other ..
    ': it has no effect under its own key, so the ledger does not reverse it; ' .. where ..
    ', then resolve this payment as fulfilled (it is then reversed; a retry runs nothing)', true)
end

-- Taken back before any effect: the payment is never called (`refunded_unfulfilled`), or
-- held if Stripe no longer takes it back. Returns the new state.
local function never_fulfilled(pay, now)
  local why, was = taken_back(pay)
  redis.call('HSET', pay, 'taken_back', why or was or 'refund')
  redis.call('HDEL', pay, 'next_at', 'sweep_seen', 'job', 'lease_until', 'phase')
  redis.call('ZREM', DUE, id_of(pay, PAYMENT_PREFIX))
  local given = given_back(pay)  -- why Stripe no longer takes it back, if it does not
  if given then return hold_given_back(pay, now, given) end
  move(pay, 'refunded_unfulfilled', now)
  redis.call('HINCRBY', STATS, 'refunded_unfulfilled', 1)
  return 'refunded_unfulfilled'
end

-- The same, by an action that settles it (`settles`, from its attempts' start: the built-in
-- SQLite and PostgreSQL actions): `leg` = settle, one call that finds the payment's key
-- (the effect applied: fulfilled, then taken back as any fulfilled payment) or voids it in
-- the same transaction (no attempt can apply it after: `refunded_unfulfilled`), with a fresh
-- attempt budget; given up, held as above. Returns the new state.
local function settle_or_hold(pay, why, now, first, job_id, grace_ms)
  local can = redis.call('HMGET', pay, 'settles', 'settle_gave_up')
  if can[2] then return hold_taken_back(pay, why, now, GAVE_UP) end
  if can[1] ~= '1' then return hold_taken_back(pay, why, now) end
  if string.find(redis.call('HGET', pay, 'called_on') or '', ' ', 1, true) then
    return hold_taken_back(pay, why, now, ' on one of several downstreams (called_on)')
  end
  return begin_leg(pay, 'settle', 'settles_due', now, first, job_id, grace_ms)
end

-- Waiting for its fulfilment (queued, retrying, held, failed), none of whose attempts may
-- have applied it.
local function waits_unfulfilled(pay)
  local f = redis.call('HMGET', pay, 'state', 'leg')
  local waiting = {queued = true, retrying = true, held = true, failed = true}
  return waiting[f[1]] and not f[2] and not may_have_applied(pay)
end
