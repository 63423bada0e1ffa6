-- Shared helpers, prepended to every fulfilment script (scripts cannot call each other).
-- Payment hash fields: state, token (fencing counter = attempts started), lease_until,
-- phase (leased|calling), replay_safe, job, next_at, last_error, receipt, fulfilled_at,
-- and one `attempt:{token}` JSON record per attempt (in the hash: a key each would cost more).
-- Attempt outcomes written by the attempt's own worker (finish_attempt.lua).
local FINISHED = {fulfilled = true, retry = true, failed = true, interrupted = true}

local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- Change a payment's state: the hash, the count per state and the per-state index.
local function move(pay, states, to)
  local from = redis.call('HGET', pay, 'state')
  if from == to then return end
  local pk = string.sub(pay, #PAYMENT_PREFIX + 1)
  local t = redis.call('TIME')
  redis.call('HSET', pay, 'state', to)
  if from then
    redis.call('HINCRBY', states, from, -1)
    redis.call('ZREM', STATE_INDEX_PREFIX .. from, pk)
  end
  redis.call('HINCRBY', states, to, 1)
  redis.call('ZADD', STATE_INDEX_PREFIX .. to, tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000), pk)
end

-- Merge fields into the JSON record of attempt `token`.
local function update_attempt(pay, token, fields)
  local raw = redis.call('HGET', pay, 'attempt:' .. token)
  if not raw then return end
  local record = cjson.decode(raw)
  for k, v in pairs(fields) do record[k] = v end
  redis.call('HSET', pay, 'attempt:' .. token, cjson.encode(record))
end

-- The lease of the current attempt has expired. Returns true if the payment is now
-- `interrupted`: the downstream call may have happened and the action is not replay-safe.
local function expire_lease(pay, states, stats, now)
  local phase = redis.call('HGET', pay, 'phase')
  local token = redis.call('HGET', pay, 'token')
  update_attempt(pay, token, {outcome = 'lease_expired', ended = now, phase = phase})
  redis.call('HINCRBY', stats, 'leases_expired', 1)
  redis.call('HDEL', pay, 'lease_until', 'phase')
  if phase == 'calling' and redis.call('HGET', pay, 'replay_safe') ~= '1' then
    move(pay, states, 'interrupted')
    redis.call('HSET', pay, 'last_error', 'attempt ' .. token ..
      ' was interrupted during the downstream call; the action is not replay-safe')
    redis.call('HINCRBY', stats, 'interrupted', 1)
    return true
  end
  return false
end

-- Put the payment back in the queue with a new RQ job whose commands start at ARGV[first].
local function requeue(pay, states, due, stats, pk, job_id, first, grace, now, why)
  move(pay, states, 'queued')
  redis.call('HSET', pay, 'job', job_id)
  redis.call('HDEL', pay, 'sweep_seen', 'next_at')
  local i = first
  while i <= #ARGV do
    local count = tonumber(ARGV[i])
    redis.call(unpack(ARGV, i + 1, i + count))
    i = i + count + 1
  end
  redis.call('ZADD', due, now + grace, pk)
  redis.call('HINCRBY', stats, 'requeued:' .. why, 1)
end
