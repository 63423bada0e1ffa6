-- Take the payment for one attempt: a lease and a new fencing token, or a recorded skip.
-- KEYS: 1 payment, 2 states, 3 due, 4 stats
-- ARGV: 1 job id, 2 lease ms, 3 replay_safe (0/1), 4 payment key, 5 execution id (unique per run),
--       6 max attempts
-- Returns {'go', token, amount, currency, livemode, events} | {'skip', 0, reason}
--       | {'interrupted', 0} | {'missing', 0}
local pay, states, due, stats = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local short = too_few('start_attempt', 6)
if short then return short end
local job_id, lease_ms, replay_safe = ARGV[1], whole(ARGV[2], 1), ARGV[3]
local max_attempts = whole(ARGV[6], 1)
if not (lease_ms and max_attempts) or (replay_safe ~= '0' and replay_safe ~= '1') then
  return refuse('start_attempt', 'lease ms and max attempts must be numbers, replay_safe 0 or 1')
end
local now = now_ms()
local state = redis.call('HGET', pay, 'state')
local function go(token)
  local call = redis.call('HMGET', pay, 'amount', 'currency', 'livemode', 'events')
  return {'go', token, call[1] or '', call[2] or '', call[3] or '', call[4] or ''}
end
if not state then return {'missing', 0} end

local function skip(reason)
  redis.call('HINCRBY', pay, 'skipped:' .. reason, 1)
  redis.call('HSET', pay, 'last_skip', reason .. ' job ' .. ARGV[1] .. ' at ' .. now)
  redis.call('HINCRBY', stats, 'jobs_skipped:' .. reason, 1)
  return {'skip', 0, reason}
end

if state ~= 'queued' and state ~= 'retrying' and state ~= 'in_progress' then
  return skip(state)  -- settled, held for a person, or not paid
end
if state == 'in_progress' then
  if tonumber(redis.call('HGET', pay, 'lease_until') or '0') > now then
    if redis.call('HGET', pay, 'attempt_id') == ARGV[5] then
      return go(tonumber(redis.call('HGET', pay, 'token')))  -- a client retry of this call
    end
    return skip('leased')
  end
  local expired = expire_lease(pay, states, stats, now, max_attempts)
  if expired ~= 'again' then
    redis.call('ZREM', due, ARGV[4])
    return {expired == 'interrupted' and 'interrupted' or 'spent', 0}
  end
end
if state == 'retrying' and tonumber(redis.call('HGET', pay, 'next_at') or '0') > now then
  return skip('not_due')
end

local lease_until = now + lease_ms
local token = redis.call('HINCRBY', pay, 'token', 1)
move(pay, states, 'in_progress')
-- A replay-safe action needs no separate fence before its call: re-running it is harmless,
-- so the attempt is `calling` from the start (one round trip less per job).
local phase = ARGV[3] == '1' and 'calling' or 'leased'
redis.call('HSET', pay, 'lease_until', lease_until, 'phase', phase, 'replay_safe', ARGV[3],
  'job', ARGV[1], 'attempt_id', ARGV[5])
redis.call('HDEL', pay, 'next_at', 'sweep_seen')
redis.call('HINCRBY', stats, 'attempts_started', 1)
redis.call('ZADD', due, lease_until, ARGV[4])
redis.call('HSET', pay, 'attempt:' .. token, cjson.encode({started = now, outcome = 'started'}))
return go(token)
