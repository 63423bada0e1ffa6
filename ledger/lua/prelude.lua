-- Shared by every ledger script: prepended when the script is loaded (scripts cannot call
-- each other), after the key names, TTLs and caps of ledger/keys.py and the script's name
-- (SCRIPT). Every script checks its arguments before its first write: Redis does not roll
-- back a script that fails half-way, so a runtime error after a write would leave the
-- ledger partial.
-- A replayed answer (a client retry of a call whose reply was lost) is "written again for
-- WAIT": the same value once more, because WAIT (LEDGER_MIN_REPLICAS, ledger/replication.py)
-- is documented to wait for the writes of its own connection, and a retry runs on a new one.

-- Refuse the call: an error reply naming the script (SCRIPT, ledger/scripts.py) that
-- writes nothing as long as it comes before the first write. It ends the script.
local function refuse(what)
  error(redis.error_reply('ERR ' .. SCRIPT .. ': ' .. what))
end

-- A value as an error message shows it: quoted, cut to 40 characters, unprintable ones '?'.
local function shown(value)
  if value == nil then return 'nothing' end
  local text = string.gsub(string.sub(value, 1, 40), '[^%w%p ]', '?')
  return "'" .. text .. "'" .. (#value > 40 and '...' or '')
end

-- A script's KEYS or ARGV by name: named(ARGV, 'a', 'b') -> {a = ARGV[1], b = ARGV[2]}, 2;
-- refused if one is missing (it would fail later, half-way). ledger/scripts.py reads the
-- same names and passes each call's values in this order.
local function named(values, ...)
  local names = {...}
  local by_name = {}
  for i, name in ipairs(names) do
    if values[i] == nil then
      refuse((values == KEYS and 'key ' or 'argument ') .. name .. ' (' .. i .. ' of ' ..
        #names .. ') is missing: ' .. #values .. ' given')
    end
    by_name[name] = values[i]
  end
  return by_name, #names
end

-- A script's reply by name: `local reply = replies('verdict', 'state')` at its top, then
-- `return reply{verdict = 'stale', state = state}` answers {'stale', state}; a field not
-- given is false (nil to the client). ledger/replies.py reads the same names.
local function replies(...)
  local names = {...}
  return function(fields)
    local answer = {}
    for i, name in ipairs(names) do
      local value = fields[name]
      if value == nil then value = false end
      answer[i] = value
    end
    return answer
  end
end

local function now_ms()
  if CLOCK_KEY ~= '' then  -- only in protocol tests (keys.lua_constants)
    local fake = tonumber(redis.call('GET', CLOCK_KEY))
    if fake then return fake end
  end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- Argument `name` of `args` as a whole number from `least` to `most` (either optional),
-- else refused (so are nan, inf, '1.5', ''). A TTL or a duration added to now has `most`
-- MAX_TTL_SECONDS or MAX_TTL_MS (ledger/keys.py): Redis would refuse a longer EXPIRE after
-- earlier writes.
local function whole_arg(args, name, least, most)
  local n = tonumber(args[name])
  if n and n == n and n ~= math.huge and n ~= -math.huge and n == math.floor(n)
    and not (least and n < least) and not (most and n > most) then
    return n
  end
  local range = (least and (' from ' .. least) or '') .. (most and (' to ' .. most) or '')
  refuse(name .. ' must be a whole number' .. range .. ', got ' .. shown(args[name]))
end

-- Argument `name` of `args` if it is one of `allowed` ({['0'] = true, ...}), else refused.
local function choice_arg(args, name, allowed)
  local value = args[name]
  if allowed[value] then return value end
  local choices = {}
  for choice in pairs(allowed) do choices[#choices + 1] = choice end
  table.sort(choices)
  refuse(name .. ' must be ' .. table.concat(choices, '|') .. ', got ' .. shown(value))
end

local BIT = {['0'] = true, ['1'] = true}

-- The commands an RQ enqueue is captured as, with the argument counts each may have
-- (name included): anything else could fail half-way through a script, so it is refused.
local CAPTURABLE = {
  SADD = function(n) return n >= 3 end,
  RPUSH = function(n) return n >= 3 end,
  LPUSH = function(n) return n >= 3 end,
  HSET = function(n) return n >= 4 and n % 2 == 0 end,
}

-- Refused unless ARGV[first..] is a well-formed list of captured commands:
-- (count, arg1..argcount)*.
local function check_commands(first)
  local i = first
  while i <= #ARGV do
    local count = tonumber(ARGV[i])
    if not count or count < 1 or count ~= math.floor(count) or i + count > #ARGV then
      refuse('captured enqueue: argument ' .. i .. ' must count the words of a command ' ..
        'that follows, got ' .. shown(ARGV[i]))
    end
    local arity = CAPTURABLE[string.upper(ARGV[i + 1])]
    if not arity or not arity(count) then
      refuse('captured enqueue: argument ' .. (i + 1) .. ' must start an RQ command ' ..
        '(SADD, RPUSH, LPUSH, HSET with its arguments), got ' .. shown(ARGV[i + 1]) ..
        ' with ' .. (count - 1) .. ' arguments')
    end
    i = i + count + 1
  end
end

-- A time of Redis's clock (ms) as RQ writes one: 2026-12-06T21:40:24.123000Z (the civil
-- date of a day count: Howard Hinnant's days_from_civil, inverted).
local function rq_time(ms)
  local s = math.floor(ms / 1000)
  local z = math.floor(s / 86400) + 719468
  local era = math.floor(z / 146097)
  local doe = z - era * 146097
  local yoe = math.floor((doe - math.floor(doe / 1460) + math.floor(doe / 36524)
    - math.floor(doe / 146096)) / 365)
  local doy = doe - (365 * yoe + math.floor(yoe / 4) - math.floor(yoe / 100))
  local mp = math.floor((5 * doy + 2) / 153)
  local month = mp < 10 and mp + 3 or mp - 9
  local year = yoe + era * 400 + (month <= 2 and 1 or 0)
  local day, rest = doy - math.floor((153 * mp + 2) / 5) + 1, s % 86400
  return string.format('%04d-%02d-%02dT%02d:%02d:%02d.%06dZ', year, month, day,
    math.floor(rest / 3600), math.floor(rest % 3600 / 60), rest % 60, ms % 1000 * 1000)
end

-- Run the captured commands (an RQ enqueue) from ARGV[first..], checked by check_commands.
-- The job's enqueued_at is Redis's clock, not the process's that captured it: the sweeper
-- orders a long queue by it (recover.lua), and processes on other machines' clocks would
-- make healthy jobs look lost.
local function run_commands(first)
  local i = first
  while i <= #ARGV do
    local count = tonumber(ARGV[i])
    local job = string.upper(ARGV[i + 1]) == 'HSET'
      and string.sub(ARGV[i + 2], 1, #RQ_JOB_PREFIX) == RQ_JOB_PREFIX
    if job then
      local command = {unpack(ARGV, i + 1, i + count)}
      for f = 3, count - 1, 2 do
        if command[f] == 'enqueued_at' then command[f + 1] = rq_time(now_ms()) end
      end
      redis.call(unpack(command))
    else
      redis.call(unpack(ARGV, i + 1, i + count))
    end
    i = i + count + 1
  end
end

-- The id a key was built from: id_of('wl:pay:pi_1', PAYMENT_PREFIX) -> 'pi_1'.
local function id_of(key, prefix)
  return string.sub(key, #prefix + 1)
end

-- Change a payment's state (or give a new one its first): the hash, the count per state
-- and the per-state index, scored by when it entered the state; for `retrying`, when it
-- first did since it last left the retry loop (queued, in_progress, retrying), kept as
-- `retrying_since`: each retry passes through queued and in_progress, and the age of the
-- oldest retrying payment (an alert's) must grow for as long as it is not done. A payment
-- that waited at the gate (gate.lua) and now leaves the way back to it (retrying, then
-- queued) by any other path (held, failed, a person's decision) leaves its waiting set
-- too, so no set keeps a payment that no longer waits.
-- `from`: the state the caller has just read (it is read here when not given).
local function move(pay, to, now, from)
  if from == nil then from = redis.call('HGET', pay, 'state') end
  if from == to then return end
  local pk = id_of(pay, PAYMENT_PREFIX)
  redis.call('HSET', pay, 'state', to)
  local left = to ~= 'queued' and to ~= 'in_progress' and to ~= 'retrying'  -- the retry loop
  local had = {false, false}  -- waiting, retrying_since
  if left then
    had = redis.call('HMGET', pay, 'waiting', 'retrying_since')
  elseif to == 'in_progress' then
    had[1] = redis.call('HGET', pay, 'waiting')
  end
  if had[1] then
    redis.call('ZREM', WAITING_PREFIX .. had[1], pk)
    redis.call('HDEL', pay, 'waiting')
  end
  if from then
    redis.call('HINCRBY', PAYMENT_STATES, from, -1)
    redis.call('ZREM', STATE_INDEX_PREFIX .. from, pk)
  end
  local since = now
  if to == 'retrying' then
    since = tonumber(redis.call('HGET', pay, 'retrying_since')) or now
    redis.call('HSET', pay, 'retrying_since', since)
  elseif left and had[2] then
    redis.call('HDEL', pay, 'retrying_since')
  end
  redis.call('HINCRBY', PAYMENT_STATES, to, 1)
  redis.call('ZADD', STATE_INDEX_PREFIX .. to, since, pk)
end

-- Count one delivery ('d') or rejection ('r') in this minute, for the dashboard's chart:
-- one hash per hour.
-- The series hash of the hour ``now`` (ms) falls in (keep_rejections.lua writes it too).
local function series_hour(now)
  return math.floor(math.floor(now / 60000) / 60)
end

local function bump_series(kind, now)
  local minute = math.floor(now / 60000)
  local series = SERIES_PREFIX .. series_hour(now)
  if redis.call('HINCRBY', series, kind .. ':' .. minute, 1) == 1 then
    redis.call('EXPIRE', series, SERIES_TTL)
  end
end

-- Attempts: outcomes written by the attempt's own worker (finish_attempt.lua). A payment
-- hash keeps state, token (fencing counter = attempts started), lease_until, phase
-- (leased|calling), replay_safe, job, next_at, last_error, receipt, fulfilled_at, and one
-- `attempt:{token}` JSON record per attempt (in the hash: a key each would cost more).
-- not_called: the worker stalled after its fence past the call's window and did not call.
-- voided: a settlement (leg `settle`) found no effect under the payment's key and voided it.
-- held: a reversal's worker did not call (its effect is on another downstream): a person's.
local FINISHED = {fulfilled = true, retry = true, failed = true, interrupted = true,
  not_called = true, voided = true, held = true}

-- Purchases Stripe tied late: two payment records of one purchase point at each other
-- (`same_purchase_as`). Only one of them may ever call the downstream. A record is engaged
-- when it may have had, or may yet have, an effect: an attempt live or past (fulfilled,
-- interrupted), or any attempt started before (its token) that left it queued, retrying or
-- failed (a replay-safe retry or a budget spent after ambiguous calls may have applied).
local function engaged(pay)
  local state = redis.call('HGET', pay, 'state')
  if state == 'in_progress' or state == 'fulfilled' or state == 'interrupted' then
    return true
  end
  local started = tonumber(redis.call('HGET', pay, 'token') or '0') > 0
  return started and (state == 'queued' or state == 'retrying' or state == 'failed')
end

-- A payment the ledger took back that Stripe no longer does: counted, and marked so a
-- person's retry runs nothing of the ledger's (lua/operator.lua), only their resolve.
local function reinstated(pay, now)
  redis.call('HINCRBY', STATS, 'reinstated', 1)
  redis.call('HSET', pay, 'reinstated_at', now)
end

-- Hold a waiting payment for a person, saying why: out of the retry loop and the sweeper's
-- due set. `by_hand`: only a person can grant it (reinstated): a retry runs nothing
-- (lua/operator.lua). Returns 'held'.
local function hold(pay, now, reason, by_hand)
  move(pay, 'held', now)
  redis.call('HSET', pay, 'hold_reason', reason)
  if by_hand then redis.call('HSET', pay, 'by_hand', 1) else redis.call('HDEL', pay, 'by_hand') end
  redis.call('HDEL', pay, 'next_at', 'sweep_seen')
  redis.call('ZREM', DUE, id_of(pay, PAYMENT_PREFIX))
  return 'held'
end

-- Stripe gave back what the ledger took back, and a person decides: counted `reinstated`
-- (its time kept unless `undated`: see hold_failed_reversal) and `held`, then held.
local function hold_reinstated(pay, now, reason, by_hand, undated)
  if undated then redis.call('HINCRBY', STATS, 'reinstated', 1) else reinstated(pay, now) end
  redis.call('HINCRBY', STATS, 'held', 1)
  return hold(pay, now, reason, by_hand)
end

-- Hold a payment for a person because its twin (same purchase) is engaged.
local function hold_for_twin(pay, twin, now, when)
  hold(pay, now, 'same purchase as ' .. twin ..
    ' (Stripe tied their ids after both were recorded; ' .. when .. ')')
  redis.call('HINCRBY', STATS, 'held', 1)
  redis.call('HINCRBY', STATS, 'held_for_twin', 1)
end

-- Refunds and disputes (docs/LEDGER.md, "What a refund takes back"). A payment keeps what
-- Stripe took back: `rf` (JSON: refund id -> amount counted; -1 for a refund that failed or
-- was canceled, which stays so whatever order its events come in), `rf_failed` (JSON: a
-- failed refund's id -> [amount, made at, when it failed: the earliest `refund.failed` or
-- status change that said so, 0 while no event dated it]), `rf_charge` and `rf_charge_at`
-- (the `amount_refunded` of the latest charge event, by its `created`, and that time),
-- `rf_charge_max` (the largest one ever) and `dispute` (`{id} {status}` of a closed one). A
-- copy or an older event of the same refund counts once: per id, the largest amount.
local function keep_taken(pay, taken)
  if taken.refunds then
    local rf = cjson.decode(redis.call('HGET', pay, 'rf') or '{}')
    for id, amount in pairs(taken.refunds) do
      local had = rf[id]
      if had == -1 or amount == -1 then rf[id] = -1
      elseif not had or amount > had then rf[id] = amount end
    end
    redis.call('HSET', pay, 'rf', cjson.encode(rf))
  end
  if taken.failed then
    local failed = cjson.decode(redis.call('HGET', pay, 'rf_failed') or '{}')
    for id, f in pairs(taken.failed) do
      local had = failed[id]
      if not had or (f[3] > 0 and (had[3] == 0 or f[3] < had[3])) then failed[id] = f end
    end
    redis.call('HSET', pay, 'rf_failed', cjson.encode(failed))
  end
  local charged = tonumber(taken.charge_refunded)
  if charged then
    local at = tonumber(taken.charge_at) or 0
    local had = redis.call('HMGET', pay, 'rf_charge', 'rf_charge_at', 'rf_charge_max')
    local had_at = tonumber(had[2] or '0')
    if not had[1] or at > had_at or (at == had_at and charged > tonumber(had[1])) then
      redis.call('HSET', pay, 'rf_charge', charged, 'rf_charge_at', at)
    end
    if charged > (tonumber(had[3] or had[1] or '0') or 0) then
      redis.call('HSET', pay, 'rf_charge_max', charged)
    end
  end
  if taken.dispute then
    redis.call('HSET', pay, 'dispute', taken.dispute .. ' ' .. taken.dispute_status)
  end
end

-- The refunds counted by id (`rf` as the hash holds it): a failed one (-1) counts nothing.
local function counted_refunds(rf)
  local total = 0
  for _, amount in pairs(cjson.decode(rf or '{}')) do
    if amount > 0 then total = total + amount end
  end
  return total
end

-- The refunded amount: the refunds counted by id, or the latest charge event's
-- `amount_refunded` if larger, less the refunds it counted that failed since. What every
-- automatic decision believes (`lower` false): a failed refund comes off only when known made
-- by then and failed after it (a charge event after the failure is believed as it is). What
-- Stripe may have refunded at the least (`lower`: whether a person must look): it comes off
-- unless known to have failed before the charge event (failed the same second, not dated,
-- or a figure from before `rf_charge_at` was kept). The fields as the hash holds them.
local function refund_total(rf, rf_charge, rf_charge_at, rf_failed, lower)
  local total = counted_refunds(rf)
  local charged, at = tonumber(rf_charge or '0'), tonumber(rf_charge_at or '0')
  for _, f in pairs(cjson.decode(rf_failed or '{}')) do
    local made, said = f[2], f[3]
    local off
    if lower then
      off = (at == 0 or made <= at) and not (said > 0 and said < at)
    else
      off = at > 0 and made <= at and said > at
    end
    if off then charged = charged - f[1] end
  end
  return math.max(total, charged)
end

-- Refunded in full at some time, whatever happened since: the refunds by id (failed ones
-- too) or the largest charge figure ever reach the amount paid. `f`: taken_back's fields.
local function ever_refunded(paid, f)
  local total = counted_refunds(f[2])
  for _, failed in pairs(cjson.decode(f[5] or '{}')) do total = total + failed[1] end
  return math.max(total, tonumber(f[8] or f[3] or '0') or 0) >= paid
end

-- Why the payment's effect must be taken back: 'refund' (refunded in full: the refunded
-- amount reaches the amount paid), 'dispute' (a dispute closed as lost), else nil; the
-- `taken_back` it keeps from when it was; and whether it was ever refunded in full. Read in
-- one command: every attempt's start, fence and finish asks. `lower`: refund_total's.
local function taken_back(pay, lower)
  local f = redis.call('HMGET', pay, 'amount', 'rf', 'rf_charge', 'rf_charge_at', 'rf_failed',
    'dispute', 'taken_back', 'rf_charge_max')
  local paid = tonumber(f[1] or '')
  local ever = paid and paid > 0 and ever_refunded(paid, f)
  if ever and refund_total(f[2], f[3], f[4], f[5], lower) >= paid then
    return 'refund', f[7], ever
  end
  if f[6] and string.match(f[6], ' lost$') then return 'dispute', f[7], ever end
  return nil, f[7], ever
end

-- Why a payment the ledger took back (`taken_back` kept, or its reversal's why) may no
-- longer be, now that Stripe gave it back (a refund failed or was canceled, a dispute won):
-- 'refund' or 'dispute', else nil. Asked at refund_total's lower bound: a failure that may
-- have come after the charge figure that counted it goes to a person, never unseen.
local function given_back(pay)
  local f = redis.call('HMGET', pay, 'taken_back', 'reversal_why')
  local why = f[1] or f[2]
  if not why or taken_back(pay, true) then return nil end
  return why
end

-- Whether an attempt that did not end in an effect may still have applied one: a call of a
-- replay-safe action whose answer did not refuse it (one that is not replay-safe goes
-- `interrupted` instead, and its refusals applied nothing). `called_on` names the
-- downstreams such calls may have reached: each is taken off again when the attempt that
-- added it never sent its request or was refused (lua/attempts.lua never_reached), never
-- while an earlier call there may have applied. `called_unnamed`: a replay-safe call whose
-- action named no downstream, kept for good. Any of them counts, not only the last
-- attempt's: a later attempt of an action that is not replay-safe (FULFILMENT_ACTION
-- changed) does not undo it.
local function may_have_applied(pay)
  local f = redis.call('HMGET', pay, 'token', 'called_on', 'called_unnamed')
  return tonumber(f[1] or '0') > 0 and ((f[2] or '') ~= '' or f[3] == '1')
end

-- What a script's `reverse_on` argument says (Settings.reversal_mode): '0' (no reversal) or
-- '1' followed by the words `each` (REVERSAL_PER_REFUND: each refund its own reversal) and
-- `refulfil` (REVERSAL_DISPUTE_WON=fulfil). Returns {each, refulfil} or false; refused if
-- malformed.
local function reversal_arg(args)
  local value = args.reverse_on or ''
  if value == '0' then return false end
  local mode = {each = false, refulfil = false}
  local on, words = string.match(value, '^(%S+)(.*)$')
  local ok = on == '1'
  for word in string.gmatch(words or '', '%S+') do
    if mode[word] == nil then ok = false else mode[word] = true end
  end
  if not ok then
    refuse('reverse_on must be 0, or 1 followed by each and/or refulfil, got ' .. shown(value))
  end
  return mode
end

-- What remains of a payment to take back: the amount paid less what its reversals carried,
-- or '' when the amount paid is not known (a payment only a thin event paid: it carries none;
-- a reversal of "what remains" then says so rather than 0).
local function remaining(pay)
  local paid = tonumber(redis.call('HGET', pay, 'amount') or '')
  if not paid then return '' end
  return paid - tonumber(redis.call('HGET', pay, 'reversed_amount') or '0')
end

-- The next reversal of a payment whose refunds are reversed one by one (REVERSAL_PER_REFUND):
-- why, the refund id (nil: what remains of the payment) and the amount, or nil. A dispute
-- lost takes what remains in one reversal; else each refund counted (amount > 0) and not yet
-- reversed, by id (its amount, never more than what remains); else, refunded in full by an
-- amount no known refund accounts for (a `charge.refunded` without its refunds listed), what
-- remains. With the amount paid not known (remaining: ''), a dispute lost still takes back
-- what remains and each refund its own amount.
local function next_reversal(pay)
  local rest = remaining(pay)
  local known = rest ~= ''
  local dispute = redis.call('HGET', pay, 'dispute')
  if dispute and string.match(dispute, ' lost$') then
    if not known or rest > 0 then return 'dispute', nil, rest end
    return nil
  end
  if known and rest <= 0 then return nil end
  local done = cjson.decode(redis.call('HGET', pay, 'rv') or '{}')
  local refunds = cjson.decode(redis.call('HGET', pay, 'rf') or '{}')
  local ids = {}
  for id, amount in pairs(refunds) do
    if amount > 0 and not done[id] then ids[#ids + 1] = id end
  end
  if #ids > 0 then
    table.sort(ids)
    local amount = refunds[ids[1]]
    return 'refund', ids[1], known and math.min(amount, rest) or amount
  end
  if known and taken_back(pay) == 'refund' then return 'refund', nil, rest end
  return nil
end

-- A payment queued for its next leg gets its job: with captured RQ commands from ARGV[first]
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

-- Taken back after an attempt of a replay-safe action that may have applied it, and not
-- settled by the action itself: held for a person, who checks the downstream and resolves
-- it as fulfilled (then reversed) or as not applied (lua/operator.lua: refunded_unfulfilled).
local function hold_taken_back(pay, why, now, because)
  return hold(pay, now, (why == 'dispute' and 'dispute lost' or 'refunded in full') ..
    ' after an attempt of a replay-safe action that may have applied it' .. (because or '') ..
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
  return hold_reinstated(pay, now, (why == 'dispute' and 'its dispute was won' or
    'a refund failed or was canceled') .. ' after it was taken back before any effect: the ' ..
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
  return hold(pay, now, (why == 'dispute' and 'a dispute lost' or 'refunded in full') ..
    ' after a person closed it without a call as the same purchase as ' .. other ..
    ': it has no effect under its own key, so the ledger does not reverse it; its ' ..
    "purchase's effect is " .. other .. "'s (fulfil:" .. other .. '): take that back by ' ..
    'hand if this is its purchase, then resolve this payment as fulfilled (it is then ' ..
    'reversed; a retry runs nothing)', true)
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
