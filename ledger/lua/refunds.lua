-- What a payment's refunds and disputes say, for the scripts that take a payment back
-- (ledger/scripts.py TAKING_BACK), after the prelude: what Stripe took back, whether it
-- still does, what remains and the next reversal due.

-- A dispute's close, kept per dispute id in `disputes` (JSON: id -> [status, created], the
-- latest close of each by its event's `created`, a tie to the one recorded last). `dispute`
-- is the close that decides: a lost one (the money went with it, whatever another dispute of
-- the charge said: an inquiry closed before its chargeback, told late), else the latest.
-- Only a close of the lost dispute's own id (won) gives it back. A `dispute` kept before
-- `disputes` was counts as the oldest close of its id.
local function keep_dispute_close(pay, taken)
  local had = redis.call('HMGET', pay, 'disputes', 'dispute')
  local closes = cjson.decode(had[1] or '{}')
  local old_id, old_status = string.match(had[2] or '', '^(%S+) (%S+)$')
  if old_id and not closes[old_id] then closes[old_id] = {old_status, -1} end
  local at = tonumber(taken.dispute_at) or 0
  local kept = closes[taken.dispute]
  if not kept or at >= kept[2] then closes[taken.dispute] = {taken.dispute_status, at} end
  local pick, pick_at, pick_lost
  for id, c in pairs(closes) do
    local lost = c[1] == 'lost'
    if not pick or (lost and not pick_lost) or (lost == pick_lost
      and (c[2] > pick_at or (c[2] == pick_at and id > pick))) then
      pick, pick_at, pick_lost = id, c[2], lost
    end
  end
  redis.call('HSET', pay, 'disputes', cjson.encode(closes), 'dispute',
    pick .. ' ' .. closes[pick][1])
end

-- Refunds and disputes (docs/LEDGER.md, "What a refund takes back"). A payment keeps what
-- Stripe took back: `rf` (JSON: refund id -> amount counted; -1 for a refund that failed or
-- was canceled, which stays so whatever order its events come in), `rf_failed` (JSON: a
-- failed refund's id -> [amount, made at, when it failed: the earliest `refund.failed` or
-- status change that said so, 0 while no event dated it]), `rf_charge` and `rf_charge_at`
-- (the `amount_refunded` of the latest charge event, by its `created`, and that time),
-- `rf_charge_max` (the largest one ever), `dispute` and `disputes` (the closes:
-- keep_dispute_close),
-- `dispute_open` (`{id} {event type}` of the latest other dispute event, by its `created`,
-- and that time, `dispute_open_at`: open while no closed one has its id) and `notes`. A copy
-- or an older event of the same refund counts once: per id, the largest amount.
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
  if taken.notes then
    -- each refund's and dispute's reason and metadata (ledger/refund_notes.py), per id the
    -- latest event's by its `created`, then an update's (a tie: the one recorded last); at
    -- most NOTES_KEPT ids
    local notes = cjson.decode(redis.call('HGET', pay, 'notes') or '{}')
    local count = 0
    for _ in pairs(notes) do count = count + 1 end
    for id, note in pairs(taken.notes) do
      local had = notes[id]
      if had then
        local newer = note[1] > had[1] or (note[1] == had[1] and (note[4] or 0) >= (had[4] or 0))
        if newer then notes[id] = note end
      elseif count < NOTES_KEPT then
        notes[id], count = note, count + 1
      end
    end
    redis.call('HSET', pay, 'notes', cjson.encode(notes))
  end
  if taken.dispute then keep_dispute_close(pay, taken) end
  if taken.dispute_open then
    local at = tonumber(redis.call('HGET', pay, 'dispute_open_at') or '-1')
    if taken.dispute_at >= at then
      redis.call('HSET', pay, 'dispute_open', taken.dispute_open .. ' ' .. taken.dispute_event,
        'dispute_open_at', taken.dispute_at)
    end
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

