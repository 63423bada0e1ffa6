-- Record one accepted delivery, all or nothing, in one round trip.
-- Idempotent per request id: a retried call returns the first answer unchanged.
-- KEYS: 1 event hash, 2 stats, 3 request answer, 4 event index, 5 payment states, 6 due set
-- Payment, alias, fingerprint and state-index keys are derived here from the prefixes that
-- webhook/keys.py prepends: the payment is known only once aliases are resolved.
-- Payment records never expire here; the sweeper purges settled ones after
-- PAYMENT_RETENTION_DAYS (workers/lua/purge.lua), keeping every index consistent.
local cached = redis.call('GET', KEYS[3])
if cached then
  return cjson.decode(cached)
end
local short = too_few('record_delivery', 24)
if short then return short end
local ek, stats, states, due = KEYS[1], KEYS[2], KEYS[5], KEYS[6]
local id, etype, created, livemode, api = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]
local pk, role, paid_arg, secret, src = ARGV[6], ARGV[7], ARGV[8], ARGV[9], ARGV[10]
local sha, body = ARGV[11], ARGV[12]
local event_ttl, request_ttl, grace = whole(ARGV[13], 1), whole(ARGV[14], 1), whole(ARGV[15], 0)
local amount, currency, job_id, series_prefix = ARGV[16], ARGV[17], ARGV[18], ARGV[19]
local linked, hold, account, fingerprint = ARGV[20], ARGV[21], ARGV[22], ARGV[23]
local window = whole(ARGV[24], 1)
local FIRST_COMMAND = 25

-- Checked before the first write.
if not (event_ttl and request_ttl and grace and window) then
  return refuse('record_delivery', 'event ttl, request ttl, grace and window: whole numbers')
end
if paid_arg ~= '0' and paid_arg ~= '1' then
  return refuse('record_delivery', 'paid must be 0 or 1')
end
if paid_arg == '1' and pk == '' then
  return refuse('record_delivery', 'a paid event needs a payment key')
end
if fingerprint ~= '' and not string.match(fingerprint, '^%a+|.+$') then
  return refuse('record_delivery', 'fingerprint must be kind|value')
end
if not commands_ok(FIRST_COMMAND) then
  return refuse('record_delivery', 'malformed enqueue commands')
end

-- Reads and decisions.
local now = now_ms()
local first = redis.call('HMGET', ek, 'n', 'sha', 'pk', 'role', 'paid')
local dup = first[1] and 1 or 0
local conflict = (dup == 1 and first[2] ~= sha) and 1 or 0
local paid = paid_arg == '1'
if dup == 1 then
  -- The first delivery's classification stands: a copy, or another body under the same id,
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
local pay = key ~= '' and (PAYMENT_PREFIX .. key) or nil
local state = pay and redis.call('HGET', pay, 'state') or nil
local held_for = ''
if pay and paid and state ~= nil and state ~= 'pending' then
  held_for = ''  -- already paid or held: nothing to decide
elseif pay and paid then
  local same = twin or redis.call('HGET', pay, 'same_purchase_as')
  if hold ~= '' then
    held_for = hold
  elseif same then
    held_for = 'same purchase as ' .. same .. ' (Stripe tied their ids after both were recorded)'
  elseif fingerprint ~= '' then
    local kind, rest = string.match(fingerprint, '^(%a+)|(.+)$')
    local other = redis.call('GET', FP_PREFIX .. (kind == 'pi' and 'invoice' or 'pi') .. ':' .. rest)
    if other and other ~= key and owner(other) ~= key then
      held_for = 'possible duplicate purchase of ' .. other .. ' (same customer, amount and ' ..
        'currency; no id from Stripe ties ' .. key .. ' to it)'
    end
  end
end

-- Writes.
local n = redis.call('HINCRBY', ek, 'n', 1)
if dup == 0 then
  redis.call('HSET', ek, 'type', etype, 'created', created, 'livemode', livemode,
    'api', api, 'pk', key, 'role', role, 'paid', paid_arg, 'sha', sha, 'body', body, 'first', now)
  if account ~= '' then redis.call('HSET', ek, 'account', account) end
  redis.call('EXPIRE', ek, event_ttl)
  redis.call('HINCRBY', stats, 'events', 1)
  redis.call('ZADD', KEYS[4], now, id)
  redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', now - event_ttl * 1000)
else
  redis.call('HINCRBY', stats, 'duplicates', 1)
  if conflict == 1 then
    redis.call('HINCRBY', ek, 'conflicts', 1)
    redis.call('HSET', ek, 'conflict_sha', sha)
    redis.call('HINCRBY', stats, 'conflicts', 1)
  end
end
redis.call('HSET', ek, 'last', now, 'secret', secret)
redis.call('HINCRBY', ek, 'src:' .. src, 1)
redis.call('HINCRBY', stats, 'deliveries', 1)
redis.call('HINCRBY', stats, 'source:' .. src, 1)
redis.call('HINCRBY', stats, 'secret:' .. secret, 1)
redis.call('HSET', SECRETS_LAST_SEEN, secret, now)
redis.call('HINCRBY', stats, 'type:' .. etype, 1)

local enqueued = 0
if pay then
  for _, some_id in ipairs(ties) do redis.call('SET', ALIAS_PREFIX .. some_id, key) end
  if twin then
    -- Two records of one purchase, tied only now: the one that has not started waits.
    local twin_pay = PAYMENT_PREFIX .. twin
    redis.call('HSET', pay, 'same_purchase_as', twin)
    redis.call('HSET', twin_pay, 'same_purchase_as', key)
    redis.call('HINCRBY', stats, 'purchases_tied_late', 1)
    local twin_state = redis.call('HGET', twin_pay, 'state')
    local going = {queued = true, in_progress = true, retrying = true, fulfilled = true}
    local tied = ' (Stripe tied their ids after both were recorded)'
    if (twin_state == 'queued' or twin_state == 'retrying') and going[state] then
      move(twin_pay, states, 'held')
      redis.call('HSET', twin_pay, 'hold_reason', 'same purchase as ' .. key .. tied)
      redis.call('ZREM', due, twin)
    elseif state == 'held' and going[twin_state] then
      redis.call('HSET', pay, 'hold_reason', 'same purchase as ' .. twin .. tied)
    end
  end
  if not state then
    state = 'pending'
    redis.call('HSET', pay, 'state', state, 'token', 0)
    redis.call('ZADD', STATE_INDEX_PREFIX .. state, now, key)
    redis.call('HINCRBY', states, state, 1)
  end
  local events = redis.call('HGET', pay, 'events') or ''
  local position = 0
  local seen = 0
  for some_id in string.gmatch(events, '%S+') do
    seen = seen + 1
    if some_id == id then position = seen end
  end
  if position == 0 then
    redis.call('HSET', pay, 'events', events == '' and id or (events .. ' ' .. id))
    position = seen + 1
  end
  if account ~= '' then redis.call('HSET', pay, 'account', account) end
  redis.call('HINCRBY', pay, 'deliveries', 1)
  if role == 'failed' or role == 'refund' then
    redis.call('HSET', pay, 'last_' .. role, etype)
  end
  if paid then
    if redis.call('HSETNX', pay, 'paid_at', now) == 1 then
      -- The paying event is named by its position in `events`, not by its id again (memory).
      redis.call('HSET', pay, 'paid_by_n', position, 'amount', amount,
        'currency', currency, 'livemode', livemode)
      if fingerprint ~= '' then
        local kind, rest = string.match(fingerprint, '^(%a+)|(.+)$')
        redis.call('SET', FP_PREFIX .. kind .. ':' .. rest, key, 'EX', window)
      end
    end
    if state == 'pending' and held_for ~= '' then
      state = 'held'
      move(pay, states, state)
      redis.call('HSET', pay, 'hold_reason', held_for)
      redis.call('HINCRBY', stats, 'held', 1)
    elseif state == 'pending' then
      state = 'queued'
      move(pay, states, state)
      if key == pk and job_id ~= '' then
        redis.call('HSET', pay, 'job', job_id)
        redis.call('ZADD', due, now + grace, key)
        run_commands(FIRST_COMMAND)
        enqueued = 1
      else
        -- The job was captured for another id: the sweeper enqueues one for this payment now.
        redis.call('ZADD', due, now, key)
      end
    end
  end
end

-- Per-minute delivery counts for the dashboard's chart: one hash per hour, kept 48 hours.
local minute = math.floor(now / 60000)
local series = series_prefix .. math.floor(minute / 60)
if redis.call('HINCRBY', series, 'd:' .. minute, 1) == 1 then
  redis.call('EXPIRE', series, 172800)
end

local answer = {n, dup, conflict, enqueued, state or '', key}
redis.call('SET', KEYS[3], cjson.encode(answer), 'EX', request_ttl)
return answer
