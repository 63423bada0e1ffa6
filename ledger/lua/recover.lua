-- The sweeper's look at one due payment: re-enqueue a lost job, a due retry or an attempt
-- whose lease expired (when that is safe), or mark it interrupted, or push it back.
-- trusted_until_ms: the latest time of Redis's clock the sweeper vouches for (ledger/clock.py
-- StepWatch); a lease is ended only while now is at most that.
-- ARGV after the named ones: the captured RQ enqueue of job_id (run only to re-enqueue).
-- Returns what it did:
-- requeued|waiting|watching|spent|leased|clock|interrupted|backoff|not_due|settled
local KEY = named(KEYS, 'payment', 'queue')
local ARG, ARGC = named(ARGV, 'job_id', 'grace_ms', 'max_attempts', 'backoff_base_ms',
  'backoff_cap_ms', 'trusted_until_ms')
local grace_ms, max_attempts = whole_arg(ARG, 'grace_ms', 0, MAX_TTL_MS),
  whole_arg(ARG, 'max_attempts', 1)
local trusted_until = whole_arg(ARG, 'trusted_until_ms', 0)
local backoff = backoff_args(ARG)
check_commands(ARGC + 1)
local pay, pk = KEY.payment, id_of(KEY.payment, PAYMENT_PREFIX)
local now = now_ms()
local state = redis.call('HGET', pay, 'state')
if redis.call('HGET', pay, 'job') == ARG.job_id then
  return 'requeued'  -- a client retry of this same call: its new job is already queued
end
local function again(at, verdict)
  redis.call('ZADD', DUE, at, pk)
  return verdict
end

-- The payment's RQ job, and what RQ's hash of it says (nil: none, or gone).
local function job_of()
  local job = redis.call('HGET', pay, 'job')
  return job, job and redis.call('HGET', RQ_JOB_PREFIX .. job, 'status')
end

-- A job no worker will finish (taken off the queue by one that died, which left it
-- `queued`: the shipped worker marks no job started) keeps its hash for ever (RQ gives a
-- queued job no expiry): deleted. A worker still about to read it finds it gone and skips.
local function forget_job(job, status)
  if job and status == 'queued' then redis.call('DEL', RQ_JOB_PREFIX .. job) end
end

-- When RQ says a job was enqueued (its enqueued_at, 2026-12-06T21:40:24.123456Z), as a
-- number that orders like the time (seconds; a month counted as 31 days), or nil.
local function enqueued_s(job)
  local at = job and redis.call('HGET', RQ_JOB_PREFIX .. job, 'enqueued_at')
  local y, mo, d, h, mi, sec = string.match(at or '', '^(%d+)-(%d+)-(%d+)T(%d+):(%d+):(%d+)')
  if not y then return nil end
  return ((((tonumber(y) * 12 + tonumber(mo)) * 31 + tonumber(d)) * 24 + tonumber(h)) * 60
    + tonumber(mi)) * 60 + tonumber(sec)
end

-- Whether a job RQ says is queued is still in the queue. LPOS scans it, one job at a time,
-- so past QUEUE_SCAN_CAP jobs (a backlog being worked) the queue's order answers: it is
-- first in, first out, so a job enqueued well before the one at its head (by more than the
-- grace; every job's enqueued_at is Redis's clock: run_commands) was taken already.
-- Otherwise, or unknown, it is taken to be there: found lost once the queue has moved on.
local function in_queue(job)
  if redis.call('LLEN', KEY.queue) <= QUEUE_SCAN_CAP then
    return redis.call('LPOS', KEY.queue, job) ~= false
  end
  local first, mine = enqueued_s(redis.call('LINDEX', KEY.queue, 0)), enqueued_s(job)
  return not (first and mine and first - mine > grace_ms / 1000)
end

if state == 'queued' then
  local job, status = job_of()
  if status == 'queued' and in_queue(job) then
    return again(now + grace_ms, 'waiting')
  end
  if status == 'started' and redis.call('HGET', pay, 'sweep_seen') ~= job then
    -- Picked up but no lease yet: give the worker one more grace period.
    redis.call('HSET', pay, 'sweep_seen', job)
    return again(now + grace_ms, 'watching')
  end
  if status == 'failed' then
    -- The job crashed before it could take a lease (e.g. an action that cannot be loaded).
    local failures = redis.call('HINCRBY', pay, 'job_failures', 1)
    if failures >= max_attempts and redis.call('HGET', pay, 'leg') == 'settle' then
      redis.call('HSET', pay, 'last_error', 'settlement: the job failed ' .. failures ..
        ' times before it could start an attempt; see the worker log and RQ failed jobs')
      settle_given_up(pay, now)
      redis.call('ZREM', DUE, pk)
      return 'spent'
    elseif failures >= max_attempts then
      move(pay, 'failed', now)
      redis.call('HSET', pay, 'last_error', 'the fulfilment job failed ' .. failures ..
        ' times before it could start an attempt; see the worker log and RQ failed jobs')
      redis.call('HINCRBY', STATS, 'dead_letters', 1)
      redis.call('ZREM', DUE, pk)
      return 'spent'
    end
  end
  forget_job(job, status)
  requeue(pay, ARG.job_id, ARGC + 1, grace_ms, now, 'lost_job')
  return 'requeued'
elseif state == 'in_progress' then
  local lease = tonumber(redis.call('HGET', pay, 'lease_until') or '0')
  if lease > now then return again(lease, 'leased') end
  -- The lease ended by Redis's clock, its call ends by its worker's: after a forward step
  -- of Redis's clock the call may still run, so the lease waits for the sweeper to vouch.
  if now > trusted_until then return again(now, 'clock') end
  local fulfilling = not redis.call('HGET', pay, 'leg')
  forget_job(job_of())  -- its worker is gone, or will find its job's end already written
  local expired = expire_lease(pay, now, max_attempts)
  if expired == 'interrupted' then
    redis.call('ZREM', DUE, pk)
    return 'interrupted'
  elseif expired == 'spent' then
    redis.call('ZREM', DUE, pk)
  else  -- back off like a failed attempt: a job that kills its worker must not spin
    retry_later(pay, attempts_used(pay), backoff, now)
    redis.call('HINCRBY', STATS, 'requeued:lease_expired', 1)
  end
  -- The attempt is over: a refund in full (or a dispute lost) recorded while it ran does
  -- now what it does to a waiting payment, as when its worker answers (finish_attempt.lua):
  -- settled (its job enqueued), held, or never fulfilled; not a dead letter for a person.
  local moved = fulfilling and take_back(pay, now, false, ARGC + 1, ARG.job_id, grace_ms)
  if moved == 'queued' then return 'requeued' end
  return expired == 'spent' and 'spent' or 'backoff'
elseif state == 'retrying' then
  local next_at = tonumber(redis.call('HGET', pay, 'next_at') or '0')
  if next_at > now then return again(next_at, 'not_due') end
  requeue(pay, ARG.job_id, ARGC + 1, grace_ms, now, 'retry')
  return 'requeued'
end
redis.call('ZREM', DUE, pk)
return 'settled'
