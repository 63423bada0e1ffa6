-- Shared helpers, prepended to every fulfilment script (scripts cannot call each other).
-- Payment hash fields: state, token (fencing counter = attempts started), lease_until,
-- phase (leased|calling), replay_safe, job, next_at, last_error, receipt, fulfilled_at,
-- and one `attempt:{token}` JSON record per attempt (in the hash: a key each would cost more).
-- Attempt outcomes written by the attempt's own worker (finish_attempt.lua).
local FINISHED = {fulfilled = true, retry = true, failed = true, interrupted = true}

-- Merge fields into the JSON record of attempt `token`.
local function update_attempt(pay, token, fields)
  local raw = redis.call('HGET', pay, 'attempt:' .. token)
  if not raw then return end
  local record = cjson.decode(raw)
  for k, v in pairs(fields) do record[k] = v end
  redis.call('HSET', pay, 'attempt:' .. token, cjson.encode(record))
end

-- Attempts used since the last person's retry (the fencing token counts every start).
local function attempts_used(pay)
  return tonumber(redis.call('HGET', pay, 'token') or '0')
    - tonumber(redis.call('HGET', pay, 'budget_base') or '0')
end

-- The lease of the current attempt has expired: its worker died or stalled. Returns
-- 'interrupted' (the call may have happened and the action is not replay-safe), 'spent'
-- (that was the last attempt of the budget: the payment now waits for a person, so a job
-- that kills its worker cannot loop for ever) or 'again'.
local function expire_lease(pay, states, stats, now, max_attempts)
  local phase = redis.call('HGET', pay, 'phase')
  local token = redis.call('HGET', pay, 'token')
  local replay_safe = redis.call('HGET', pay, 'replay_safe') == '1'
  update_attempt(pay, token, {outcome = 'lease_expired', ended = now, phase = phase})
  redis.call('HINCRBY', stats, 'leases_expired', 1)
  redis.call('HDEL', pay, 'lease_until', 'phase')
  local deaths = redis.call('HINCRBY', pay, 'leases_expired', 1)
  if phase == 'calling' and not replay_safe then
    move(pay, states, 'interrupted')
    redis.call('HSET', pay, 'last_error', 'attempt ' .. token ..
      ' was interrupted during the downstream call; the action is not replay-safe')
    redis.call('HINCRBY', stats, 'interrupted', 1)
    return 'interrupted'
  end
  if attempts_used(pay) >= max_attempts then
    local to = replay_safe and 'failed' or 'interrupted'
    move(pay, states, to)
    redis.call('HSET', pay, 'last_error', 'worker died (or stalled past its lease) ' .. deaths ..
      ' times during this payment; attempt budget of ' .. max_attempts .. ' spent')
    redis.call('HINCRBY', stats, to == 'failed' and 'dead_letters' or 'interrupted', 1)
    return 'spent'
  end
  return 'again'
end

-- Put the payment back in the queue with a new RQ job whose commands start at ARGV[first].
local function requeue(pay, states, due, stats, pk, job_id, first, grace, now, why)
  move(pay, states, 'queued')
  redis.call('HSET', pay, 'job', job_id)
  redis.call('HDEL', pay, 'sweep_seen', 'next_at')
  run_commands(first)
  redis.call('ZADD', due, now + grace, pk)
  redis.call('HINCRBY', stats, 'requeued:' .. why, 1)
end
