-- What a refund in full, a lost dispute or a refund given back does to a payment, by its
-- state, after take_back_steps.lua: take_back, reinstate and a failed reversal's hold.

-- What a refund in full or a lost dispute does to the payment now, by its state (its
-- fulfilment leg only: a reversal under way or done, or a fulfilment again after a dispute
-- won, is not begun again). Not fulfilled and waiting (queued, retrying, held, failed) with
-- no effect possible: `refunded_unfulfilled`, never called; one that may have an effect (a
-- replay-safe attempt ran): settled by its action, else held for a person. Fulfilled: its
-- reversal is due when `reverse` (reversal_arg: REVERSAL_ACTION set); with `reverse.each` each refund's own reversal is due
-- as soon as it is recorded (next_reversal), a partial one too. In progress, pending,
-- interrupted: nothing yet (the attempt's finish, the paid event or a person decides;
-- `taken_back` tells them). Returns the new state or nil.
local function take_back(pay, now, reverse, first, job_id, grace_ms, starting)
  local why, was, ever = taken_back(pay)
  if not why and ever and not was and waits_unfulfilled(pay) then
    -- refunded in full and failed since, told in another order (the failure first: the
    -- Events API's newest-first reconcile): never fulfilled on its own, as if told in order
    redis.call('HSET', pay, 'taken_back', 'refund')
    return never_fulfilled(pay, now)
  end
  -- given back before this fulfilment's attempt, or before it was fulfilled (a person's
  -- retry or resolve of an interrupted one, then its dispute won): no longer said taken back
  if not why and was and (starting or redis.call('HGET', pay, 'state') == 'fulfilled') then
    redis.call('HDEL', pay, 'taken_back')
  end
  if not why and not (reverse and reverse.each) then return nil end
  local g = redis.call('HMGET', pay, 'leg', 'state', 'retake', 'reinstated_at', 'reversed_at',
    'effect_of')
  local leg, state, reinstated_at, reversed_at = g[1], g[2], g[4], g[5]
  -- (a fulfilment again that is done goes on below: granted again, then taken back again)
  if leg == 'reverse' or leg == 'settle' or (leg == 'refulfil' and state ~= 'fulfilled') then
    return nil
  end
  if why then redis.call('HSET', pay, 'taken_back', why) end
  if g[3] then return nil end  -- held for a person to take it back by hand (hold_retake)
  local again = why and taken_back_again(pay, now)
  if again == 'fulfilled' then
    return take_back(pay, now, reverse, first, job_id, grace_ms) or again
  elseif again then
    return again
  end
  -- reversed once, then granted again (by a person, or fulfilled again after a dispute won):
  -- never reversed twice; taken back in full again, a person's (a partial refund with
  -- REVERSAL_PER_REFUND is only recorded)
  if state == 'fulfilled' and reinstated_at and reversed_at then
    return why and reverse and hold_retake(pay, why, now) or nil
  end
  -- closed as the same purchase as another record: its effect is that one's, never
  -- reversed under this key; taken back in full, a person's (a partial refund with
  -- REVERSAL_PER_REFUND is only recorded)
  if state == 'fulfilled' and g[6] then
    return why and reverse and hold_effect_elsewhere(pay, why, g[6], now) or nil
  end
  if state == 'fulfilled' and reverse and reverse.each then
    local next_why, refund, amount = next_reversal(pay)
    if next_why then
      begin_reversal(pay, next_why, now, first, job_id, grace_ms, refund, amount)
      return 'queued'
    end
    -- Taken back with nothing left to reverse: its refunds were all reversed while the
    -- amount paid was not known (a thin event paid it), and the amount that came since
    -- shows they carried all of it. No call told the action so (none carried the amount
    -- paid): one more reverses what remains (nothing), refund id nil, so it hears. Its key
    -- is unspent: a reversal of what remains leaves the payment reversed, and only a grant
    -- (reinstated_at, above) fulfils it again.
    if why and reversed_at then
      begin_reversal(pay, why, now, first, job_id, grace_ms, nil, math.max(0, remaining(pay)))
      return 'queued'
    end
    return nil
  end
  if not why then return nil end
  if state == 'queued' or state == 'retrying' or state == 'held' or state == 'failed' then
    if may_have_applied(pay) then
      return settle_or_hold(pay, why, now, first, job_id, grace_ms)
    end
    return never_fulfilled(pay, now)
  end
  if state == 'fulfilled' and reverse then
    begin_reversal(pay, why, now, first, job_id, grace_ms, nil, remaining(pay))
    return 'queued'
  end
  return nil
end

-- With refunds reversed on their own (REVERSAL_PER_REFUND, `rv`), a reversed payment given
-- back is not given back whole: the refunds that stand keep what their reversals took. What
-- a person grants back, for the hold's reason: a dispute won, what its reversal took and
-- the reversals of refunds failed since; a refund failed, its own reversal's, else what the
-- rest's took. nil (the whole purchase: the reason says so) when no refund reversed on its
-- own stands or failed, or the amount paid is not known (reversals carried no amounts).
local function what_stands(pay, why)
  local f = redis.call('HMGET', pay, 'rv', 'rv_failed', 'rf', 'reversed_amount', 'amount')
  if not tonumber(f[5] or '') then return nil end
  local failed, refunds = cjson.decode(f[2] or '{}'), cjson.decode(f[3] or '{}')
  local standing, gone, named = 0, 0, {}
  for id, amount in pairs(cjson.decode(f[1] or '{}')) do
    if refunds[id] == -1 and not failed[id] then
      gone = gone + amount
      named[#named + 1] = id .. ' (' .. amount .. ')'
    elseif not failed[id] then
      standing = standing + amount
    end
  end
  if standing == 0 and gone == 0 then return nil end
  table.sort(named)
  local rest = math.max(0, (tonumber(f[4] or '0') or 0) - standing - gone)
  local grants = {}
  if why == 'dispute' then grants[1] = "what the dispute's reversal took (" .. rest .. ')' end
  if #named > 0 then grants[#grants + 1] = 'what the reversal of ' .. table.concat(named, ', ') ..
    ' took' end
  if #grants == 0 and rest > 0 then grants[1] = "what the rest's reversal took (" .. rest .. ')' end
  if #grants == 0 then return nil end
  return ' less the refunds that stand (' .. standing .. '): grant back by hand ' ..
    table.concat(grants, ' and ')
end

-- A payment settled as taken back that Stripe no longer takes back (given_back) is never
-- left so silently (and one held so, taken back again: taken_back_again). Refunded before any effect (`refunded_unfulfilled`): held
-- (hold_given_back). Reversed: the customer keeps the money's worth, so by default a person
-- decides (held: grant it again by hand, then resolve it as fulfilled); with
-- `reverse.refulfil` (REVERSAL_DISPUTE_WON=fulfil) a dispute won is fulfilled again, once, by
-- the fulfilment action under its own idempotency key (`leg` = refulfil, a fresh budget; the
-- captured job from ARGV[first], else the sweeper's). A refund that failed after its
-- reversal is always a person's: the reversal may have carried less than the whole payment.
-- Returns 'held', 'queued' or nil.
local function reinstate(pay, now, reverse, first, job_id, grace_ms)
  local again = taken_back_again(pay, now)
  if again == 'fulfilled' then  -- its effect stands: taken back as any (take_back)
    return take_back(pay, now, reverse, first, job_id, grace_ms) or again
  end
  if again then return again end
  local f = redis.call('HMGET', pay, 'state', 'retake')
  local state = f[1]
  if state == 'held' and f[2] and not taken_back(pay) then
    -- held to be taken back by hand (hold_retake), and given back before it was resolved:
    -- the person may have taken it back already, so still theirs, now to grant
    redis.call('HDEL', pay, 'retake', 'taken_back')
    reinstated(pay, now)
    return hold(pay, now, 'Stripe gave it back (a refund failed or was canceled, a dispute ' ..
      'won) while it was held to be taken back by hand: the customer paid; make sure the ' ..
      'purchase is granted (grant it again if you took it back), then resolve it as ' ..
      'fulfilled (a retry runs nothing)', true)
  end
  if state == 'held' then return given_back_while_held(pay) end
  if state ~= 'reversed' and state ~= 'refunded_unfulfilled' then return nil end
  local why = given_back(pay)
  if not why then return nil end
  if state == 'refunded_unfulfilled' then return hold_given_back(pay, now, why) end
  if why == 'dispute' and reverse and reverse.refulfil then
    reinstated(pay, now)
    return begin_leg(pay, 'refulfil', 'refulfils_due', now, first, job_id, grace_ms)
  end
  return hold_reinstated(pay, now, (why == 'dispute' and 'dispute won' or
    'a refund failed or was canceled') .. ' after its reversal: the customer keeps the ' ..
    'purchase' .. (what_stands(pay, why) or '; grant it again by hand') ..
    ', then resolve it as fulfilled (a retry runs nothing)', true)
end

-- REVERSAL_PER_REFUND: a refund reversed on its own (`rv`) that then failed or was canceled
-- (`rf` says -1), while the payment is fulfilled again (a partial refund): the customer paid
-- in full and part of the effect was taken back. Held for a person, who grants back what its
-- reversal took (by_hand: a retry runs nothing). Each such refund holds it once (`rv_failed`:
-- refund id -> the amount its reversal took), however many events tell of its failure and
-- after a person resolved it. What their reversals took is `rv_regrant` until a person says
-- they granted it back (then it no longer counts as reversed: lua/operator.lua) or the
-- payment is taken back again (taken_back_again). No `reinstated_at`: never reversed in
-- full, a later refund is reversed as any (take_back); one that has it was reversed in full
-- and given back, its failed refunds a person's already (reinstate). In the middle of
-- another reversal: when that ends (reversal_done). Returns 'held' or nil.
local function hold_failed_reversal(pay, now)
  local f = redis.call('HMGET', pay, 'state', 'leg', 'rv', 'rf', 'rv_failed', 'reinstated_at')
  if f[1] ~= 'fulfilled' or f[2] or not f[3] or f[6] then return nil end
  local refunds, held = cjson.decode(f[4] or '{}'), cjson.decode(f[5] or '{}')
  local ids = {}
  for id, amount in pairs(cjson.decode(f[3])) do
    if refunds[id] == -1 and not held[id] then
      ids[#ids + 1] = id
      held[id] = amount
    end
  end
  if #ids == 0 then return nil end
  table.sort(ids)
  local named, took = {}, 0
  for i, id in ipairs(ids) do
    named[i] = id .. ' (' .. held[id] .. ')'
    took = took + held[id]
  end
  redis.call('HSET', pay, 'rv_failed', cjson.encode(held))
  redis.call('HINCRBY', pay, 'rv_regrant', took)
  local one = #ids == 1
  return hold_reinstated(pay, now, (one and 'a refund ' or 'refunds ') ..
    table.concat(named, ', ') ..
    (one and ' failed after its reversal: grant back by hand what its reversal took' or
    ' failed after their reversals: grant back by hand what their reversals took') ..
    ', then resolve it as fulfilled (a retry runs nothing)', true, true)
end
