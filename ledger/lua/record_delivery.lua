-- Record one accepted delivery, all or nothing, in one round trip.
-- Idempotent per request id: a retried call returns the first answer unchanged.
-- Source 'api' (deliveries.API_SOURCE) is no delivery: reconcile found the event through
-- Stripe's Events API. It creates the event and its payment as a delivery would, counts no
-- delivery (event n = 0, origin = api), and changes nothing but `confirmed` on a known event.
-- Payment, alias and fingerprint keys are derived here from the prefixes of ledger/keys.py:
-- the payment is known only once aliases are resolved. Payment records never expire here;
-- the sweeper purges settled ones after PAYMENT_RETENTION_DAYS (purge.lua), keeping every
-- index consistent. ARGV after the named ones: the captured RQ enqueue (run_commands).
-- deliveries: the event's count; payment_state and payment_key: the payment it joined.
local KEY = named(KEYS, 'event', 'request')
local ARG, ARGC = named(ARGV, 'type', 'created', 'livemode', 'api_version', 'payment_key',
  'role', 'paid', 'secret', 'source', 'sha', 'body', 'event_ttl', 'grace_ms', 'amount',
  'currency', 'job_id', 'linked', 'hold', 'account', 'fingerprint', 'thin', 'related_type',
  'related_id', 'purchase', 'taken', 'reverse_on')
local reply = replies('deliveries', 'duplicate', 'conflict', 'enqueued', 'payment_state',
  'payment_key')

-- A fingerprint's kind, mode, customer ('' for a guest), currency and amount.
local function fp_parts(fp)
  return string.match(fp, '^(%a+)|(%a+):([^:]*):(%a+):(%d+)$')
end

-- The arguments checked before the first write; returns the event's TTL (s), the new job's
-- grace (ms), the purchase's fields and what was taken back.
local function checked()
  local event_ttl = whole_arg(ARG, 'event_ttl', 1, MAX_TTL_SECONDS)
  local grace_ms = whole_arg(ARG, 'grace_ms', 0, MAX_TTL_MS)
  choice_arg(ARG, 'paid', BIT)
  choice_arg(ARG, 'thin', BIT)
  reversal_arg(ARG)
  if ARG.paid == '1' and ARG.payment_key == '' then
    refuse('payment_key must name the payment when paid is 1, got ' .. shown(ARG.payment_key))
  end
  if ARG.fingerprint ~= '' and not fp_parts(ARG.fingerprint) then
    refuse('fingerprint must be kind|mode:customer:currency:amount, got ' ..
      shown(ARG.fingerprint))
  end
  check_commands(ARGC + 1)
  return event_ttl, grace_ms, purchase_arg(ARG.purchase), taken_arg(ARG.taken)
end

-- The first answer to this request if this call is a client retry of it (written again
-- for WAIT: prelude), else nil.
local function replayed()
  local cached = redis.call('GET', KEY.request)
  if not cached then return nil end
  redis.call('SET', KEY.request, cached, 'KEEPTTL')
  return cjson.decode(cached)
end

-- The answer, kept for a client retry of this request.
local function answer(fields)
  local kept = reply(fields)
  redis.call('SET', KEY.request, cjson.encode(kept), 'EX', REQUEST_TTL)
  return kept
end

-- What this delivery is, given the event's stored record (`first`: n, sha, pk, role, paid,
-- delivered_sha; all nil for a new event).
local function classified(first, now)
  -- One constructor with every field (false: none yet), so the table is sized once.
  local d = {now = now, ek = KEY.event, id = id_of(KEY.event, EVENT_PREFIX),
    known = first[1] and true or false, from_api = ARG.source == 'api', dup = 0,
    conflict = 0, pk = ARG.payment_key, role = ARG.role, paid = ARG.paid == '1',
    linked = ARG.linked, fingerprint = ARG.fingerprint, key = '', ties = false,
    twin = false, pay = false, dup_of = false}
  if not d.known then return d end
  -- n is 0 on an event found through the API: its first delivery is no duplicate, and its
  -- stored body is the API's rendering, so copies are compared with the first delivered one.
  d.dup = (tonumber(first[1]) or 1) > 0 and 1 or 0
  d.conflict = (d.dup == 1 and (first[6] or first[2]) ~= ARG.sha) and 1 or 0
  -- The first record's classification stands: a copy, or another body under the same id,
  -- is counted but never moves a payment or creates one.
  d.pk, d.role, d.paid = first[3] or '', first[4] or 'info', first[5] == '1'
  d.linked, d.fingerprint = '', ''
  return d
end

-- The payment an id belongs to: the one an alias names, or its own if it exists, else nil.
local function owner(some_id)
  local alias = redis.call('GET', ALIAS_PREFIX .. some_id)
  if alias then return alias end
  if redis.call('EXISTS', PAYMENT_PREFIX .. some_id) == 1 then return some_id end
  return nil
end

-- The payment this delivery joins: an id Stripe ties to this one (alias or existing payment)
-- wins, so one purchase keeps one record whichever of its ids arrives first. Sets d.key, the
-- ids to tie to it (d.ties) and a second existing record of the same purchase (d.twin).
local function find_payment(d)
  d.key, d.ties = d.pk, {}
  if d.pk == '' then return end
  local ids = {d.pk}
  for other in string.gmatch(d.linked, '%S+') do ids[#ids + 1] = other end
  local found = nil
  for _, some_id in ipairs(ids) do
    local o = owner(some_id)
    if o and not found then found = o elseif o and o ~= found then d.twin = o end
  end
  d.key = found or d.pk
  for _, some_id in ipairs(ids) do
    if some_id ~= d.key and not owner(some_id) then d.ties[#d.ties + 1] = some_id end
  end
  d.pay = PAYMENT_PREFIX .. d.key
end

-- Payments no id ties to the rest of their purchase yet, by kind, mode, who (any|guest),
-- currency and amount (keys.UNTIED_PREFIX).
local function untied_key(kind, mode, who, currency, amount)
  return UNTIED_PREFIX .. kind .. ':' .. mode .. ':' .. who .. ':' .. currency .. ':' .. amount
end

local function untied_other(d, zkey)
  redis.call('ZREMRANGEBYSCORE', zkey, '-inf', d.now - FP_TTL * 1000)
  for _, other in ipairs(redis.call('ZREVRANGE', zkey, 0, 9)) do
    local o = owner(other)
    if o and other ~= d.key and o ~= d.key then return other end
  end
  return nil
end

-- Another paid payment this one may duplicate (no id from Stripe ties them): of the same
-- customer by its fingerprint, or an untied one a guest's payment cannot be told from (not
-- looked for when this event names the rest of its purchase: that half is known).
local function possible_duplicate(d)
  local kind, mode, who, currency, amount = fp_parts(d.fingerprint)
  local kin = kind == 'pi' and 'invoice' or 'pi'
  local other = who ~= '' and redis.call('GET', FP_PREFIX .. kin .. ':' .. mode .. ':' ..
    who .. ':' .. currency .. ':' .. amount)
  if other and other ~= d.key and owner(other) ~= d.key then return other end
  if d.linked ~= '' then return nil end
  return untied_other(d, untied_key(kin, mode, who == '' and 'any' or 'guest', currency, amount))
end

local function untie(some_pay)
  local fp = redis.call('HGET', some_pay, 'untied')
  if not fp then return end
  local kind, mode, _, currency, amount = fp_parts(fp)
  local some_id = id_of(some_pay, PAYMENT_PREFIX)
  redis.call('ZREM', untied_key(kind, mode, 'any', currency, amount), some_id)
  redis.call('ZREM', untied_key(kind, mode, 'guest', currency, amount), some_id)
  redis.call('HDEL', some_pay, 'untied')
end

-- Why the first paid event of a payment in `state` must wait for a person, or ''; the
-- payment it may duplicate goes in d.dup_of.
local function hold_reason(d, state)
  if state ~= nil and state ~= 'pending' then return '' end  -- already paid or held
  if ARG.hold ~= '' then return ARG.hold end
  local same = d.twin or redis.call('HGET', d.pay, 'same_purchase_as')
  if same then
    return 'same purchase as ' .. same .. ' (Stripe tied their ids after both were recorded)'
  end
  if d.fingerprint == '' then return '' end
  local other = possible_duplicate(d)
  if not other then return '' end
  d.dup_of = other
  local who = select(3, fp_parts(d.fingerprint)) == '' and 'a guest\'s payment of the same '
    or 'same customer, '
  return 'possible duplicate purchase of ' .. other .. ' (' .. who .. 'amount and ' ..
    'currency; no id from Stripe ties ' .. d.key .. ' to it)'
end

-- The event's record and the global counts; returns the event's delivery count.
local function write_event(d, event_ttl)
  local n = redis.call('HINCRBY', d.ek, 'n', d.from_api and 0 or 1)
  if not d.known then
    redis.call('HSET', d.ek, 'type', ARG.type, 'created', ARG.created, 'livemode',
      ARG.livemode, 'api', ARG.api_version, 'pk', d.key, 'role', d.role, 'paid', ARG.paid,
      'sha', ARG.sha, 'body', ARG.body, 'first', d.now)
    if ARG.account ~= '' then redis.call('HSET', d.ek, 'account', ARG.account) end
    -- A thin event: a reference to an object instead of the object itself.
    if ARG.thin == '1' then redis.call('HSET', d.ek, 'thin', 1) end
    if ARG.related_type ~= '' then
      redis.call('HSET', d.ek, 'rel_type', ARG.related_type, 'rel_id', ARG.related_id)
    end
    redis.call('EXPIRE', d.ek, event_ttl)
    redis.call('HINCRBY', STATS, 'events', 1)
    redis.call('ZADD', EVENT_INDEX, d.now, d.id)
    redis.call('ZREMRANGEBYSCORE', EVENT_INDEX, '-inf', d.now - event_ttl * 1000)
  elseif d.dup == 1 then
    redis.call('HINCRBY', STATS, 'duplicates', 1)
    if d.conflict == 1 then
      redis.call('HINCRBY', d.ek, 'conflicts', 1)
      redis.call('HSET', d.ek, 'conflict_sha', ARG.sha)
      redis.call('HINCRBY', STATS, 'conflicts', 1)
    end
  else
    redis.call('HSET', d.ek, 'delivered_sha', ARG.sha)
  end
  if d.from_api then
    redis.call('HSET', d.ek, 'origin', 'api')
    redis.call('HINCRBY', STATS, 'reconciled', 1)
  else
    redis.call('HSET', d.ek, 'last', d.now, 'secret', ARG.secret)
    redis.call('HINCRBY', d.ek, 'src:' .. ARG.source, 1)
    redis.call('HINCRBY', STATS, 'deliveries', 1)
    redis.call('HINCRBY', STATS, 'source:' .. ARG.source, 1)
    redis.call('HINCRBY', STATS, 'secret:' .. ARG.secret, 1)
    redis.call('HSET', SECRETS_LAST_SEEN, ARG.secret, d.now)
    redis.call('HINCRBY', STATS, 'type:' .. ARG.type, 1)
  end
  return n
end

-- A held record's reason gains that Stripe tied it to `twin` (said once).
local function tell_tie(pay, twin)
  local why = redis.call('HGET', pay, 'hold_reason') or ''
  local tie = 'same purchase as ' .. twin .. ' (Stripe tied their ids after both were recorded)'
  if not string.find(why, 'same purchase as ' .. twin, 1, true) then
    redis.call('HSET', pay, 'hold_reason', why == '' and tie or (why .. '; also the ' .. tie))
  end
end

-- Two records of one purchase, tied only now: one of them waits for a person. The one that
-- may have had an effect (engaged) goes on; else the one that has not started. Returns the
-- payment's state after it.
local function tie_twin(d, state)
  local twin, twin_pay = d.twin, PAYMENT_PREFIX .. d.twin
  untie(twin_pay)
  redis.call('HSET', d.pay, 'same_purchase_as', twin)
  redis.call('HSET', twin_pay, 'same_purchase_as', d.key)
  redis.call('HINCRBY', STATS, 'purchases_tied_late', 1)
  local twin_state = redis.call('HGET', twin_pay, 'state')
  local going = {queued = true, in_progress = true, retrying = true, fulfilled = true}
  local waiting = {queued = true, retrying = true}
  if waiting[state] and engaged(twin_pay) and not engaged(d.pay) then
    hold_for_twin(d.pay, twin, d.now, 'held when the tie arrived')
    return 'held'
  elseif waiting[twin_state] and going[state] then
    hold_for_twin(twin_pay, d.key, d.now, 'held when the tie arrived')
  else
    -- added to why a record is held, not put in its place: what a person must do stays (a
    -- grant or a taking back by hand, a possible duplicate) and now also knows of the twin,
    -- whatever it is doing (interrupted: it may have the effect); both held (each a possible
    -- duplicate of another payment), each knows of the other
    if state == 'held' then tell_tie(d.pay, twin) end
    if twin_state == 'held' then tell_tie(twin_pay, d.key) end
  end
  return state
end

-- The payment's paid fields, once, and its fingerprint: found by a payment of the other
-- kind (FP_PREFIX) and, while nothing ties it to the rest of its purchase, listed untied.
-- A thin paid event carries no amount: the first new paid event that does gives it then.
-- Returns true when this event gave an amount to a payment paid before.
local function mark_paid(d)
  if redis.call('HSETNX', d.pay, 'paid_at', d.now) == 0 then
    if d.known or ARG.amount == '' or redis.call('HGET', d.pay, 'amount') ~= '' then
      return false
    end
    redis.call('HSET', d.pay, 'amount', ARG.amount, 'currency', ARG.currency)
    return true
  end
  redis.call('HSET', d.pay, 'paid_by', d.id, 'paid_type', ARG.type, 'amount', ARG.amount,
    'currency', ARG.currency, 'livemode', ARG.livemode)
  if d.fingerprint == '' then return false end
  local kind, mode, who, currency, amount = fp_parts(d.fingerprint)
  if who ~= '' then
    redis.call('SET', FP_PREFIX .. kind .. ':' .. mode .. ':' .. who .. ':' .. currency ..
      ':' .. amount, d.key, 'EX', FP_TTL)
  end
  if d.linked == '' and d.key == d.pk then
    for _, set in ipairs(who == '' and {'any', 'guest'} or {'any'}) do
      local zkey = untied_key(kind, mode, set, currency, amount)
      redis.call('ZADD', zkey, d.now, d.key)
      redis.call('ZREMRANGEBYSCORE', zkey, '-inf', d.now - FP_TTL * 1000)
      redis.call('EXPIRE', zkey, FP_TTL)
    end
    redis.call('HSET', d.pay, 'untied', d.fingerprint)
  end
  return false
end

-- A pending payment's first paid event: it waits for a person (`held_for`), or is queued
-- with the captured job (or, when that job was captured for another id, made due for the
-- sweeper to enqueue one). Returns the new state and whether the job was enqueued.
local function queue_or_hold(d, held_for, grace_ms)
  -- refunded (or lost, even if won since) before it was ever paid here: never called
  local why, was, ever = taken_back(d.pay)
  if why or was or ever then return never_fulfilled(d.pay, d.now), 0 end
  if held_for ~= '' then
    move(d.pay, 'held', d.now)
    redis.call('HSET', d.pay, 'hold_reason', held_for)
    -- the record whose effect may be this purchase's (operator.lua, effect_elsewhere)
    if d.dup_of then redis.call('HSET', d.pay, 'dup_of', d.dup_of) end
    redis.call('HINCRBY', STATS, 'held', 1)
    return 'held', 0
  end
  move(d.pay, 'queued', d.now)
  if d.key == d.pk and ARG.job_id ~= '' then
    redis.call('HSET', d.pay, 'job', ARG.job_id)
    redis.call('ZADD', DUE, d.now + grace_ms, d.key)
    run_commands(ARGC + 1)
    return 'queued', 1
  end
  redis.call('ZADD', DUE, d.now, d.key)
  return 'queued', 0
end

-- A new event's purchase fields: a paying event's replace what is stored, any other
-- event's only fill fields still missing (a late unpaid copy of a session must not undo it).
local function keep_purchase(d, purchase)
  if d.known or not purchase then return end
  if not d.paid then
    for field, value in pairs(purchase) do redis.call('HSETNX', d.pay, field, value) end
    return
  end
  local pairs_ = {}
  for field, value in pairs(purchase) do
    pairs_[#pairs_ + 1] = field
    pairs_[#pairs_ + 1] = value
  end
  if #pairs_ > 0 then redis.call('HSET', d.pay, unpack(pairs_)) end
end

-- Two records of one purchase, tied late: each fills the purchase fields it lacks from the
-- other's (HSETNX: what a record's own events said stays), so whichever of them calls gives
-- the whole purchase (a basil invoice's subscription and lines to its PaymentIntent's).
local function share_purchase(one, other)
  for _, pair in ipairs({{one, other}, {other, one}}) do
    local from = redis.call('HGETALL', pair[2])
    for i = 1, #from, 2 do
      if string.sub(from[i], 1, 2) == 'p_' then
        redis.call('HSETNX', pair[1], from[i], from[i + 1])
      end
    end
  end
end

-- The payment's side: ties, its events and counts, and for a paid event its paid fields and
-- its move out of pending. Returns its state and whether a job was enqueued.
local function join_payment(d, state, held_for, grace_ms, purchase, taken)
  for _, some_id in ipairs(d.ties) do redis.call('SET', ALIAS_PREFIX .. some_id, d.key) end
  if #d.ties > 0 then  -- kept on the payment, so purge.lua deletes its aliases with it
    local aliases = redis.call('HGET', d.pay, 'aliases')
    redis.call('HSET', d.pay, 'aliases', (aliases and (aliases .. ' ') or '') ..
      table.concat(d.ties, ' '))
  end
  if d.linked ~= '' then untie(d.pay) end  -- Stripe named the rest of its purchase
  if d.twin then state = tie_twin(d, state) end
  if not state then
    state = 'pending'
    move(d.pay, state, d.now)
    redis.call('HSET', d.pay, 'token', 0)
  end
  local events = redis.call('HGET', d.pay, 'events') or ''
  if not string.find(' ' .. events .. ' ', ' ' .. d.id .. ' ', 1, true) then
    redis.call('HSET', d.pay, 'events', events == '' and d.id or (events .. ' ' .. d.id))
  end
  if ARG.account ~= '' then redis.call('HSET', d.pay, 'account', ARG.account) end
  keep_purchase(d, purchase)
  if d.twin then share_purchase(d.pay, PAYMENT_PREFIX .. d.twin) end
  redis.call('HINCRBY', d.pay, 'deliveries', d.from_api and 0 or 1)
  if d.role == 'failed' or d.role == 'refund' then
    redis.call('HSET', d.pay, 'last_' .. d.role, ARG.type)
  end
  if taken and not d.known then
    keep_taken(d.pay, taken)
    if taken.dispute_open then return state, 0 end  -- a dispute opened takes nothing back
    local own_job = d.key == d.pk and ARG.job_id ~= ''
    local reverse, first = reversal_arg(ARG), own_job and (ARGC + 1) or nil
    local moved = take_back(d.pay, d.now, reverse, first, ARG.job_id, grace_ms)
      or reinstate(d.pay, d.now, reverse, first, ARG.job_id, grace_ms)
      or hold_failed_reversal(d.pay, d.now)
    return moved or state, (moved == 'queued' and own_job) and 1 or 0
  end
  if not d.paid then return state, 0 end
  local amount_given = mark_paid(d)
  if state == 'pending' then return queue_or_hold(d, held_for, grace_ms) end
  if not amount_given then return state, 0 end
  -- Refunds recorded while the amount was unknown may take it back now.
  local own_job = d.key == d.pk and ARG.job_id ~= ''
  local moved = take_back(d.pay, d.now, reversal_arg(ARG), own_job and (ARGC + 1) or nil,
    ARG.job_id, grace_ms)
  return moved or state, (moved == 'queued' and own_job) and 1 or 0
end

local replay = replayed()
if replay then return replay end
local event_ttl, grace_ms, purchase, taken = checked()
local now = now_ms()
local first = redis.call('HMGET', KEY.event, 'n', 'sha', 'pk', 'role', 'paid', 'delivered_sha')
if ARG.source == 'api' and first[1] then  -- found by reconcile, already recorded
  redis.call('HSET', KEY.event, 'confirmed', now)
  return answer{deliveries = tonumber(first[1]) or 0, duplicate = 1, conflict = 0,
    enqueued = 0, payment_state = '', payment_key = first[3] or ''}
end
local d = classified(first, now)
find_payment(d)
local state = d.pay and redis.call('HGET', d.pay, 'state') or nil
local held_for = (d.pay and d.paid) and hold_reason(d, state) or ''
local n = write_event(d, event_ttl)
local enqueued = 0
if d.pay then state, enqueued = join_payment(d, state, held_for, grace_ms, purchase, taken) end
if not d.from_api then bump_series('d', now) end
return answer{deliveries = n, duplicate = d.dup, conflict = d.conflict, enqueued = enqueued,
  payment_state = state or '', payment_key = d.key}
