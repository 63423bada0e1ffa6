-- The sweeper's look at one due payment: re-enqueue a lost job, a due retry or an attempt
-- whose lease expired (when that is safe), or mark it interrupted, or push it back.
-- KEYS: 1 payment, 2 states, 3 due, 4 stats, 5 RQ queue list
-- ARGV: 1 payment key, 2 grace ms, 3 RQ job key prefix, 4 new job id, 5.. enqueue commands
-- Returns {verdict}
local pay, states, due, stats = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local pk, grace = ARGV[1], tonumber(ARGV[2])
local now = now_ms()
local state = redis.call('HGET', pay, 'state')
if redis.call('HGET', pay, 'job') == ARGV[4] then
  return {'requeued'}  -- a client retry of this same call: its new job is already queued
end
local function again(at, verdict)
  redis.call('ZADD', due, at, pk)
  return {verdict}
end

if state == 'queued' then
  local job = redis.call('HGET', pay, 'job')
  local status = job and redis.call('HGET', ARGV[3] .. job, 'status')
  if status == 'queued' and redis.call('LPOS', KEYS[5], job) then
    return again(now + grace, 'waiting')
  end
  if status == 'started' and redis.call('HGET', pay, 'sweep_seen') ~= job then
    -- Picked up but no lease yet: give the worker one more grace period.
    redis.call('HSET', pay, 'sweep_seen', job)
    return again(now + grace, 'watching')
  end
  requeue(pay, states, due, stats, pk, ARGV[4], 5, grace, now, 'lost_job')
  return {'requeued'}
elseif state == 'in_progress' then
  local lease = tonumber(redis.call('HGET', pay, 'lease_until') or '0')
  if lease > now then return again(lease, 'leased') end
  if expire_lease(pay, states, stats, now) then
    redis.call('ZREM', due, pk)
    return {'interrupted'}
  end
  requeue(pay, states, due, stats, pk, ARGV[4], 5, grace, now, 'lease_expired')
  return {'requeued'}
elseif state == 'retrying' then
  local next_at = tonumber(redis.call('HGET', pay, 'next_at') or '0')
  if next_at > now then return again(next_at, 'not_due') end
  requeue(pay, states, due, stats, pk, ARGV[4], 5, grace, now, 'retry')
  return {'requeued'}
end
redis.call('ZREM', due, pk)
return {'settled'}
