-- Fence before the downstream call: only the holder of the current token and a live lease
-- may call. Marks the phase `calling` (what recovery needs to know) and renews the lease.
-- Returns 1 (go ahead) or 0 (stale, or its purchase's other record is engaged: do not call)
local KEY = named(KEYS, 'payment')
local ARG = named(ARGV, 'token', 'lease_ms', 'caller')
local lease_ms = whole_arg(ARG, 'lease_ms', 1, MAX_TTL_MS)
local pay = KEY.payment
local now = now_ms()
local held = redis.call('HMGET', pay, 'state', 'token', 'lease_until', 'leg')
if held[1] ~= 'in_progress' or held[2] ~= ARG.token or tonumber(held[3] or '0') <= now then
  update_attempt(pay, ARG.token, {outcome = 'stale_before_call', ended = now})
  return 0
end
-- Refunded in full (or a dispute lost) since the lease was taken: this fulfilment is not
-- called (an action that is not replay-safe is fenced here, so nothing was applied); so too
-- if given back since (its dispute won): held for a person, as a waiting one would be.
local leg = held[4]
local why, was = taken_back(pay)
if (leg == 'refulfil' and why) or ((leg or 'fulfil') == 'fulfil' and (why or was)) then
  update_attempt(pay, ARG.token, {outcome = 'taken_back', ended = now})
  if leg == 'refulfil' then
    refulfil_withdrawn(pay, now, tonumber(ARG.token))
  else
    never_fulfilled(pay, now)
  end
  return 0
end
-- Both records of a purchase may hold leases taken before Stripe tied them: the first
-- to reach its fence calls, the other waits for a person.
local twin = engaged_twin(pay)
if twin then
  update_attempt(pay, ARG.token, {outcome = 'same_purchase', ended = now})
  redis.call('HDEL', pay, 'lease_until', 'phase')
  hold_for_twin(pay, twin, now, 'held at the fence before the call')
  return 0
end
redis.call('HSET', pay, 'phase', 'calling', 'lease_until', now + lease_ms)
update_attempt(pay, ARG.token, {calling = now, caller = ARG.caller ~= '' and ARG.caller or nil})
hold_caller(pay, ARG.token, ARG.caller, now, lease_ms)
return 1
