-- Whether a worker may call the downstream for this payment now: fulfilment not paused,
-- the circuit breaker of the downstream this call goes to (KEYS breaker: ledger/keys.py
-- BREAKERS) closed (or this call is the cool-down's one probe), a free slot under
-- FULFILMENT_MAX_RATE. A refused payment waits without spending an attempt: it becomes
-- `retrying` with next_at and `waiting` = reason (the sweeper re-enqueues it when due, and
-- releases it at once on resume or when its breaker closes; breaker_wait names the reason of
-- this breaker's wait, so each breaker releases only its own). rate_park 0: a rate refusal
-- only answers how long to wait (the worker waits in its job and asks again). `dirty`: the
-- breaker counts failures or is open, so the job must report even a success (it resets them).
-- out_of_time 1: the job's RQ timeout no longer leaves its attempt's time (workers/gating.py):
-- a payment that would be admitted is due again at once instead, for a fresh job.
-- verdict: go (probe, dirty) | pass (reason; no call can follow: recorded as start_attempt
-- records a skip) | wait (reason, until_ms: deferred in the ledger) | rate (wait_ms)
local KEY = named(KEYS, 'payment', 'breaker')
local ARG = named(ARGV, 'job_id', 'cooldown_ms', 'probe_ms', 'max_rate', 'park_ms',
  'rate_park', 'out_of_time', 'breaker_wait')
local reply = replies('verdict', 'probe', 'dirty', 'reason', 'wait_ms', 'until_ms')
local cooldown_ms, probe_ms = whole_arg(ARG, 'cooldown_ms', 1), whole_arg(ARG, 'probe_ms', 1)
local max_rate, park_ms = whole_arg(ARG, 'max_rate', 0), whole_arg(ARG, 'park_ms', 1)
choice_arg(ARG, 'rate_park', BIT)
choice_arg(ARG, 'out_of_time', BIT)
choice_arg(ARG, 'breaker_wait', {breaker = true, reversal_breaker = true})
local BREAKER = KEY.breaker
local pay, pk = KEY.payment, id_of(KEY.payment, PAYMENT_PREFIX)
local now = now_ms()
local held = redis.call('HMGET', pay, 'state', 'lease_until', 'next_at', 'waiting', 'token')
local state, waiting, token = held[1], held[4], held[5] or '0'
local leased = state == 'in_progress' and tonumber(held[2] or '0') > now
local early = state == 'retrying' and tonumber(held[3] or '0') > now
if not state then return reply{verdict = 'pass', reason = 'missing'} end
if (state ~= 'queued' and state ~= 'retrying' and state ~= 'in_progress') or leased or early then
  local reason = leased and 'leased' or early and 'not_due' or state
  redis.call('HINCRBY', pay, 'skipped:' .. reason, 1)
  redis.call('HSET', pay, 'last_skip', reason .. ' job ' .. ARG.job_id .. ' at ' .. now)
  redis.call('HINCRBY', STATS, 'jobs_skipped:' .. reason, 1)
  return reply{verdict = 'pass', reason = reason}
end

local function wait(reason, at)
  redis.call('HINCRBY', STATS, 'deferred:' .. reason, 1)
  if state == 'in_progress' then  -- an expired lease: the sweeper's recover handles it
    return reply{verdict = 'wait', reason = reason, until_ms = at}
  end
  move(pay, 'retrying', now, state)
  redis.call('HSET', pay, 'next_at', at, 'waiting', reason)
  redis.call('ZADD', DUE, at, pk)
  -- A payment is in the set its `waiting` names, and in no other.
  if waiting and waiting ~= reason then redis.call('ZREM', WAITING_PREFIX .. waiting, pk) end
  redis.call('ZADD', WAITING_PREFIX .. reason, 'NX', now, pk)
  return reply{verdict = 'wait', reason = reason, until_ms = at}
end

-- Out of the set its `waiting` names, and without one.
local function no_longer_waiting()
  if waiting then
    redis.call('ZREM', WAITING_PREFIX .. waiting, pk)
    redis.call('HDEL', pay, 'waiting')
  end
end

-- Out of time for its attempt: due again now, for the sweeper to re-enqueue with a fresh job.
-- No `waiting` reason: nothing is to end first.
local function due_now()
  redis.call('HINCRBY', STATS, 'deferred:job_timeout', 1)
  if state ~= 'in_progress' then
    move(pay, 'retrying', now, state)
    redis.call('HSET', pay, 'next_at', now, 'last_skip', 'job_timeout job ' .. ARG.job_id ..
      ' at ' .. now)
    redis.call('ZADD', DUE, now, pk)
    no_longer_waiting()
  end
  return reply{verdict = 'wait', reason = 'job_timeout', until_ms = now}
end

local function admitted(probe, dirty)
  no_longer_waiting()
  return reply{verdict = 'go', probe = probe, dirty = dirty}
end

if redis.call('EXISTS', PAUSE) == 1 then return wait('paused', now + park_ms) end
local b = redis.call('HMGET', BREAKER, 'state', 'open_until', 'probe_until', 'failures',
  'probe_payment', 'probe_token', 'probe_failed_by')
local probe = false
if b[1] == 'open' then
  local open_until, probe_until = tonumber(b[2] or '0'), tonumber(b[3] or '0')
  if now < open_until then return wait(ARG.breaker_wait, open_until) end
  -- This payment's own probe, granted before its next attempt: an admission sent again
  -- (its reply lost: ledger/connection.py retries a command) answers as the first did.
  local own = b[5] == pk and b[6] == token
  if probe_until > now and own and ARG.out_of_time == '0' then return admitted(true, true) end
  if probe_until > now then return wait(ARG.breaker_wait, probe_until + cooldown_ms) end
  -- The last probe failed on a payment of this payment's customer: another customer's
  -- payment probes first if one comes within a cool-down. The same customer's next failed
  -- probe says nothing new (a quota), and breaker.lua closes on it: in an outage of every
  -- customer that would release them all into it (their attempts spent), whereas another
  -- customer's refusal keeps it open (breaker.lua corroborated).
  if (b[7] or '') ~= '' and now < open_until + cooldown_ms then
    local customer = redis.call('HGET', pay, 'p_customer')
    local party = (customer and customer ~= '') and ('cus:' .. customer) or pk
    if party == b[7] then return wait(ARG.breaker_wait, open_until + cooldown_ms) end
  end
  probe = true
end
if ARG.out_of_time == '1' then return due_now() end
-- Every admitted call is logged for a second (the call rate shown); max_rate 0: no limit.
redis.call('ZREMRANGEBYSCORE', CALL_LOG, '-inf', now - 1000)
if max_rate > 0 and redis.call('ZCARD', CALL_LOG) >= max_rate then
  local free_at = tonumber(redis.call('ZRANGE', CALL_LOG, 0, 0, 'WITHSCORES')[2]) + 1000
  if ARG.rate_park == '1' then return wait('rate', free_at) end
  return reply{verdict = 'rate', reason = 'rate', wait_ms = free_at - now}
end
redis.call('ZADD', CALL_LOG, now, now .. ':' .. redis.call('INCR', CALL_SEQ))
redis.call('PEXPIRE', CALL_LOG, 2000)
if probe then
  redis.call('HSET', BREAKER, 'probe_until', now + probe_ms, 'probe_payment', pk,
    'probe_token', token)
  redis.call('HINCRBY', BREAKER, 'probes', 1)
end
return admitted(probe, b[1] == 'open' or tonumber(b[4] or '0') > 0)
