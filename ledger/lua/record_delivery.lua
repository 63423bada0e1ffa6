-- Record one accepted delivery, all or nothing, in one round trip.
-- Idempotent per request id: a retried call returns the first answer unchanged.
-- Source 'api' (deliveries.API_SOURCE) is no delivery: reconcile found the event through
-- Stripe's Events API. It creates the event and its payment as a delivery would, counts no
-- delivery (event n = 0, origin = api), and changes nothing but `confirmed` on a known event.
-- Payment, alias and fingerprint keys are derived here from the prefixes of ledger/keys.py:
-- the payment is known only once aliases are resolved. Payment records never expire here;
-- the sweeper purges settled ones after PAYMENT_RETENTION_DAYS (purge.lua), keeping every
-- index consistent. ARGV after the named ones: the captured RQ enqueue (run_commands).
local KEY = named(KEYS, 'event', 'request')
local ARG, ARGC = named(ARGV, 'type', 'created', 'livemode', 'api_version', 'payment_key',
  'role', 'paid', 'secret', 'source', 'sha', 'body', 'event_ttl', 'grace_ms', 'amount',
  'currency', 'job_id', 'linked', 'hold', 'account', 'fingerprint', 'thin', 'related_type',
  'related_id')
local cached = redis.call('GET', KEY.request)
if cached then
  redis.call('SET', KEY.request, cached, 'KEEPTTL')  -- written again for WAIT (prelude)
  return cjson.decode(cached)
end
local short = too_few('record_delivery', ARGC)
if short then return short end
local event_ttl, grace_ms = whole(ARG.event_ttl, 1, MAX_TTL_SECONDS),
  whole(ARG.grace_ms, 0, MAX_TTL_MS)

-- Checked before the first write.
if not (event_ttl and grace_ms) then
  return refuse('record_delivery', 'event ttl (s) and grace (ms): whole numbers up to MAX_TTL')
end
if ARG.paid ~= '0' and ARG.paid ~= '1' then
  return refuse('record_delivery', 'paid must be 0 or 1')
end
if ARG.thin ~= '0' and ARG.thin ~= '1' then
  return refuse('record_delivery', 'thin must be 0 or 1')
end
if ARG.paid == '1' and ARG.payment_key == '' then
  return refuse('record_delivery', 'a paid event needs a payment key')
end
-- A fingerprint's kind, mode, customer ('' for a guest), currency and amount.
local function fp_parts(fp)
  return string.match(fp, '^(%a+)|(%a+):([^:]*):(%a+):(%d+)$')
end
if ARG.fingerprint ~= '' and not fp_parts(ARG.fingerprint) then
  return refuse('record_delivery', 'fingerprint must be kind|mode:customer:currency:amount')
end
if not commands_ok(ARGC + 1) then
  return refuse('record_delivery', 'malformed enqueue commands')
end

-- Reads and decisions.
local ek, id = KEY.event, id_of(KEY.event, EVENT_PREFIX)
local now = now_ms()
local first = redis.call('HMGET', ek, 'n', 'sha', 'pk', 'role', 'paid', 'delivered_sha')
local known = first[1] and true or false
local from_api = ARG.source == 'api'
if from_api and known then
  redis.call('HSET', ek, 'confirmed', now)
  local answer = {tonumber(first[1]) or 0, 1, 0, 0, '', first[3] or ''}
  redis.call('SET', KEY.request, cjson.encode(answer), 'EX', REQUEST_TTL)
  return answer
end
-- n is 0 on an event found through the API: its first delivery is no duplicate, and its
-- stored body is the API's rendering, so copies are compared with the first delivered one.
local dup = (known and (tonumber(first[1]) or 1) > 0) and 1 or 0
local base_sha = first[6] or first[2]
local conflict = (dup == 1 and base_sha ~= ARG.sha) and 1 or 0
local pk, role, paid = ARG.payment_key, ARG.role, ARG.paid == '1'
local linked, fingerprint = ARG.linked, ARG.fingerprint
if known then
  -- The first record's classification stands: a copy, or another body under the same id,
  -- is counted but never moves a payment or creates one.
  pk, role, paid, linked, fingerprint = first[3] or '', first[4] or 'info', first[5] == '1', '', ''
end

-- The payment: an id Stripe ties to this one (alias or existing payment) wins, so one
-- purchase keeps one record whichever of its ids arrives first.
local function owner(some_id)
  local alias = redis.call('GET', ALIAS_PREFIX .. some_id)
  if alias then return alias end
  if redis.call('EXISTS', PAYMENT_PREFIX .. some_id) == 1 then return some_id end
  return nil
end
local key, ties, twin = pk, {}, nil
if pk ~= '' then
  local ids = {pk}
  for other in string.gmatch(linked, '%S+') do ids[#ids + 1] = other end
  local found = nil
  for _, some_id in ipairs(ids) do
    local o = owner(some_id)
    if o and not found then found = o elseif o and o ~= found then twin = o end
  end
  key = found or pk
  for _, some_id in ipairs(ids) do
    if some_id ~= key and not owner(some_id) then ties[#ties + 1] = some_id end
  end
end
-- Payments no id ties to the rest of their purchase yet, by kind, mode, who (any|guest),
-- currency and amount (keys.UNTIED_PREFIX).
local function untied_key(kind, mode, who, currency, amount)
  return UNTIED_PREFIX .. kind .. ':' .. mode .. ':' .. who .. ':' .. currency .. ':' .. amount
end
local function untied_other(zkey)
  redis.call('ZREMRANGEBYSCORE', zkey, '-inf', now - FP_TTL * 1000)
  for _, other in ipairs(redis.call('ZREVRANGE', zkey, 0, 9)) do
    local o = owner(other)
    if o and other ~= key and o ~= key then return other end
  end
  return nil
end
-- Another paid payment this one may duplicate (no id from Stripe ties them): of the same
-- customer by its fingerprint, or an untied one a guest's payment cannot be told from (not
-- looked for when this event names the rest of its purchase: that half is known).
local function possible_duplicate(fp)
  local kind, mode, who, currency, amount = fp_parts(fp)
  local kin = kind == 'pi' and 'invoice' or 'pi'
  local other = who ~= '' and redis.call('GET', FP_PREFIX .. kin .. ':' .. mode .. ':' ..
    who .. ':' .. currency .. ':' .. amount)
  if other and other ~= key and owner(other) ~= key then return other end
  if linked ~= '' then return nil end
  return untied_other(untied_key(kin, mode, who == '' and 'any' or 'guest', currency, amount))
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

local pay = key ~= '' and (PAYMENT_PREFIX .. key) or nil
local state = pay and redis.call('HGET', pay, 'state') or nil
local held_for = ''
if pay and paid and state ~= nil and state ~= 'pending' then
  held_for = ''  -- already paid or held: nothing to decide
elseif pay and paid then
  local same = twin or redis.call('HGET', pay, 'same_purchase_as')
  if ARG.hold ~= '' then
    held_for = ARG.hold
  elseif same then
    held_for = 'same purchase as ' .. same .. ' (Stripe tied their ids after both were recorded)'
  elseif fingerprint ~= '' then
    local other = possible_duplicate(fingerprint)
    local who = select(3, fp_parts(fingerprint)) == '' and 'a guest\'s payment of the same '
      or 'same customer, '
    if other then
      held_for = 'possible duplicate purchase of ' .. other .. ' (' .. who .. 'amount and ' ..
        'currency; no id from Stripe ties ' .. key .. ' to it)'
    end
  end
end

-- Writes.
local n = redis.call('HINCRBY', ek, 'n', from_api and 0 or 1)
if not known then
  redis.call('HSET', ek, 'type', ARG.type, 'created', ARG.created, 'livemode', ARG.livemode,
    'api', ARG.api_version, 'pk', key, 'role', role, 'paid', ARG.paid, 'sha', ARG.sha,
    'body', ARG.body, 'first', now)
  if ARG.account ~= '' then redis.call('HSET', ek, 'account', ARG.account) end
  -- A thin event: a reference to an object instead of the object itself.
  if ARG.thin == '1' then redis.call('HSET', ek, 'thin', 1) end
  if ARG.related_type ~= '' then
    redis.call('HSET', ek, 'rel_type', ARG.related_type, 'rel_id', ARG.related_id)
  end
  redis.call('EXPIRE', ek, event_ttl)
  redis.call('HINCRBY', STATS, 'events', 1)
  redis.call('ZADD', EVENT_INDEX, now, id)
  redis.call('ZREMRANGEBYSCORE', EVENT_INDEX, '-inf', now - event_ttl * 1000)
elseif dup == 1 then
  redis.call('HINCRBY', STATS, 'duplicates', 1)
  if conflict == 1 then
    redis.call('HINCRBY', ek, 'conflicts', 1)
    redis.call('HSET', ek, 'conflict_sha', ARG.sha)
    redis.call('HINCRBY', STATS, 'conflicts', 1)
  end
else
  redis.call('HSET', ek, 'delivered_sha', ARG.sha)
end
if from_api then
  redis.call('HSET', ek, 'origin', 'api')
  redis.call('HINCRBY', STATS, 'reconciled', 1)
else
  redis.call('HSET', ek, 'last', now, 'secret', ARG.secret)
  redis.call('HINCRBY', ek, 'src:' .. ARG.source, 1)
  redis.call('HINCRBY', STATS, 'deliveries', 1)
  redis.call('HINCRBY', STATS, 'source:' .. ARG.source, 1)
  redis.call('HINCRBY', STATS, 'secret:' .. ARG.secret, 1)
  redis.call('HSET', SECRETS_LAST_SEEN, ARG.secret, now)
  redis.call('HINCRBY', STATS, 'type:' .. ARG.type, 1)
end

local enqueued = 0
if pay then
  for _, some_id in ipairs(ties) do redis.call('SET', ALIAS_PREFIX .. some_id, key) end
  if linked ~= '' then untie(pay) end  -- Stripe named the rest of its purchase
  if twin then
    -- Two records of one purchase, tied only now: one of them waits for a person. The one
    -- that may have had an effect (engaged) goes on; else the one that has not started.
    local twin_pay = PAYMENT_PREFIX .. twin
    untie(twin_pay)
    redis.call('HSET', pay, 'same_purchase_as', twin)
    redis.call('HSET', twin_pay, 'same_purchase_as', key)
    redis.call('HINCRBY', STATS, 'purchases_tied_late', 1)
    local twin_state = redis.call('HGET', twin_pay, 'state')
    local going = {queued = true, in_progress = true, retrying = true, fulfilled = true}
    local waiting = {queued = true, retrying = true}
    if waiting[state] and engaged(twin_pay) and not engaged(pay) then
      hold_for_twin(pay, twin, now, 'held when the tie arrived')
      state = 'held'
    elseif waiting[twin_state] and going[state] then
      hold_for_twin(twin_pay, key, now, 'held when the tie arrived')
    elseif state == 'held' and going[twin_state] then
      redis.call('HSET', pay, 'hold_reason', 'same purchase as ' .. twin ..
        ' (Stripe tied their ids after both were recorded)')
    end
  end
  if not state then
    state = 'pending'
    move(pay, state, now)
    redis.call('HSET', pay, 'token', 0)
  end
  local events = redis.call('HGET', pay, 'events') or ''
  if not string.find(' ' .. events .. ' ', ' ' .. id .. ' ', 1, true) then
    redis.call('HSET', pay, 'events', events == '' and id or (events .. ' ' .. id))
  end
  if ARG.account ~= '' then redis.call('HSET', pay, 'account', ARG.account) end
  redis.call('HINCRBY', pay, 'deliveries', from_api and 0 or 1)
  if role == 'failed' or role == 'refund' then
    redis.call('HSET', pay, 'last_' .. role, ARG.type)
  end
  if paid then
    if redis.call('HSETNX', pay, 'paid_at', now) == 1 then
      redis.call('HSET', pay, 'paid_by', id, 'amount', ARG.amount, 'currency', ARG.currency,
        'livemode', ARG.livemode)
      if fingerprint ~= '' then
        local kind, mode, who, currency, amount = fp_parts(fingerprint)
        if who ~= '' then
          redis.call('SET', FP_PREFIX .. kind .. ':' .. mode .. ':' .. who .. ':' .. currency ..
            ':' .. amount, key, 'EX', FP_TTL)
        end
        if linked == '' and key == pk then  -- nothing ties it to the rest of its purchase yet
          for _, set in ipairs(who == '' and {'any', 'guest'} or {'any'}) do
            local zkey = untied_key(kind, mode, set, currency, amount)
            redis.call('ZADD', zkey, now, key)
            redis.call('EXPIRE', zkey, FP_TTL)
          end
          redis.call('HSET', pay, 'untied', fingerprint)
        end
      end
    end
    if state == 'pending' and held_for ~= '' then
      state = 'held'
      move(pay, state, now)
      redis.call('HSET', pay, 'hold_reason', held_for)
      redis.call('HINCRBY', STATS, 'held', 1)
    elseif state == 'pending' then
      state = 'queued'
      move(pay, state, now)
      if key == pk and ARG.job_id ~= '' then
        redis.call('HSET', pay, 'job', ARG.job_id)
        redis.call('ZADD', DUE, now + grace_ms, key)
        run_commands(ARGC + 1)
        enqueued = 1
      else
        -- The job was captured for another id: the sweeper enqueues one for this payment now.
        redis.call('ZADD', DUE, now, key)
      end
    end
  end
end

if not from_api then bump_series('d', now) end
local answer = {n, dup, conflict, enqueued, state or '', key}
redis.call('SET', KEY.request, cjson.encode(answer), 'EX', REQUEST_TTL)
return answer
