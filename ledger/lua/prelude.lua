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
