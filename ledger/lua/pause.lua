-- Pause fulfilment for every worker (gate.lua defers each payment while PAUSE exists), in one
-- step: a resume never meets half a pause. The first pause's time, author and reason stay.
-- request: this call's id; a client retry of it (its reply lost) answers as the first run.
-- Returns 1 (paused now) or 0 (it already was).
local ARG = named(ARGV, 'by', 'reason', 'request')
local since = redis.call('HGET', PAUSE, 'since')
if since then
  redis.call('HSET', PAUSE, 'since', since)  -- written again for WAIT (prelude)
  return redis.call('HGET', PAUSE, 'request') == ARG.request and 1 or 0
end
redis.call('HSET', PAUSE, 'since', now_ms(), 'by', ARG.by, 'reason', ARG.reason,
  'request', ARG.request)
return 1
