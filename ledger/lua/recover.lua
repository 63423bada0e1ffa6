-- The sweeper's look at one due payment: re-enqueue a lost job, a due retry or an attempt
-- whose lease expired (when that is safe), or mark it interrupted, or push it back.
-- KEYS: 1 payment, 2 states, 3 due, 4 stats, 5 RQ queue list
-- ARGV: 1 payment key, 2 grace ms, 3 RQ job key prefix, 4 new job id, 5 max attempts,
--       6 backoff base ms, 7 backoff cap ms, 8.. enqueue commands
-- Returns {verdict}
local pay, states, due, stats = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local short = too_few('recover', 7)
if short then return short end
local pk, grace, job_prefix, job_id = ARGV[1], whole(ARGV[2], 0), ARGV[3], ARGV[4]
local max_attempts, base_ms, cap_ms = whole(ARGV[5], 1), whole(ARGV[6], 0), whole(ARGV[7], 0)
local FIRST_COMMAND = 8
if not (grace and max_attempts and base_ms and cap_ms) or not commands_ok(FIRST_COMMAND) then
  return refuse('recover', 'grace, max attempts and backoff must be numbers; commands well-formed')
end
local now = now_ms()
local state = redis.call('HGET', pay, 'state')
if redis.call('HGET', pay, 'job') == job_id then
  return {'requeued'}  -- a client retry of this same call: its new job is already queued
end
local function again(at, verdict)
  redis.call('ZADD', due, at, pk)
  return {verdict}
end

if state == 'queued' then
  local job = redis.call('HGET', pay, 'job')
  local status = job and redis.call('HGET', job_prefix .. job, 'status')
  if status == 'queued' and redis.call('LPOS', KEYS[5], job) then
    return again(now + grace, 'waiting')
  end
  if status == 'started' and redis.call('HGET', pay, 'sweep_seen') ~= job then
    -- Picked up but no lease yet: give the worker one more grace period.
    redis.call('HSET', pay, 'sweep_seen', job)
    return again(now + grace, 'watching')
  end
  if status == 'failed' then
    -- The job crashed before it could take a lease (e.g. an action that cannot be loaded).
    local failures = redis.call('HINCRBY', pay, 'job_failures', 1)
    if failures >= max_attempts then
      move(pay, states, 'failed')
      redis.call('HSET', pay, 'last_error', 'the fulfilment job failed ' .. failures ..
        ' times before it could start an attempt; see the worker log and RQ failed jobs')
      redis.call('HINCRBY', stats, 'dead_letters', 1)
      redis.call('ZREM', due, pk)
      return {'spent'}
    end
  end
  requeue(pay, states, due, stats, pk, job_id, FIRST_COMMAND, grace, now, 'lost_job')
  return {'requeued'}
elseif state == 'in_progress' then
  local lease = tonumber(redis.call('HGET', pay, 'lease_until') or '0')
  if lease > now then return again(lease, 'leased') end
  local expired = expire_lease(pay, states, stats, now, max_attempts)
  if expired ~= 'again' then
    redis.call('ZREM', due, pk)
    return {expired == 'interrupted' and 'interrupted' or 'spent'}
  end
  -- Back off like a failed attempt: a job that kills its worker must not spin.
  local next_at = now + math.floor(math.min(base_ms * 2 ^ (attempts_used(pay) - 1), cap_ms))
  move(pay, states, 'retrying')
  redis.call('HSET', pay, 'next_at', next_at)
  redis.call('HINCRBY', stats, 'requeued:lease_expired', 1)
  return again(next_at, 'backoff')
elseif state == 'retrying' then
  local next_at = tonumber(redis.call('HGET', pay, 'next_at') or '0')
  if next_at > now then return again(next_at, 'not_due') end
  requeue(pay, states, due, stats, pk, job_id, FIRST_COMMAND, grace, now, 'retry')
  return {'requeued'}
end
redis.call('ZREM', due, pk)
return {'settled'}
