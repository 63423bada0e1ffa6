-- A person's decision on one payment: retry a failed one, or resolve an interrupted one.
-- KEYS: 1 payment, 2 states, 3 due, 4 stats
-- ARGV: 1 payment key, 2 decision (retry|fulfilled), 3 allowed states (space-separated),
--       4 note, 5 grace ms, 6 new job id (also this decision's id), 7 ms an interrupted
--       attempt may still be running after its call started, 8.. enqueue commands
-- Returns {'ok', new state} or {'refused', current state}
local pay, states, due, stats = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local short = too_few('operator', 7)
if short then return short end
if not (whole(ARGV[5], 0) and whole(ARGV[7], 0)) or not commands_ok(8) then
  return refuse('operator', 'grace and in-flight ms must be numbers; commands well-formed')
end
if ARGV[2] ~= 'retry' and ARGV[2] ~= 'fulfilled' then
  return refuse('operator', 'decision must be retry or fulfilled')
end
local now = now_ms()
local state = redis.call('HGET', pay, 'state')
if redis.call('HGET', pay, 'decision_id') == ARGV[6] then
  return {'ok', state}  -- a client retry of this same decision
end
if not state or not string.find(' ' .. ARGV[3] .. ' ', ' ' .. state .. ' ', 1, true) then
  return {'refused', state or ''}
end
if ARGV[2] == 'retry' and state == 'interrupted' then
  -- Its call may still be in flight (a stalled worker keeps its fenced call): wait it out.
  local raw = redis.call('HGET', pay, 'attempt:' .. (redis.call('HGET', pay, 'token') or '1'))
  local started = raw and cjson.decode(raw)['calling']
  if started and now < tonumber(started) + tonumber(ARGV[7]) then
    return {'wait', tostring(tonumber(started) + tonumber(ARGV[7]))}
  end
end
redis.call('HSET', pay, 'decision_id', ARGV[6])
redis.call('HSET', pay, 'resolved_by', ARGV[4] .. ' at ' .. now .. ' (' .. ARGV[2] .. ' from '
  .. state .. ')')
if ARGV[2] == 'fulfilled' then
  move(pay, states, 'fulfilled')
  redis.call('HSET', pay, 'receipt', cjson.encode({resolved = ARGV[4]}), 'fulfilled_at', now)
  redis.call('HINCRBY', stats, 'resolved_fulfilled', 1)
  redis.call('ZREM', due, ARGV[1])
  return {'ok', 'fulfilled'}
end
-- A fresh attempt budget for the retry.
redis.call('HSET', pay, 'budget_base', redis.call('HGET', pay, 'token') or 0)
requeue(pay, states, due, stats, ARGV[1], ARGV[6], 8, tonumber(ARGV[5]), now, 'operator')
return {'ok', 'queued'}
