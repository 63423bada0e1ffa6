-- Resume fulfilment for every worker (the sweeper's release.lua then re-queues the paused
-- payments), in one step, and record it as the last resume.
-- request: this call's id; a client retry of it (its reply lost) answers as the first run.
-- Returns 1 (resumed now) or 0 (it was not paused).
local ARG = named(ARGV, 'by', 'request')
if redis.call('HGET', RESUMED, 'request') == ARG.request then
  redis.call('HSET', RESUMED, 'request', ARG.request)  -- written again for WAIT (prelude)
  return tonumber(redis.call('HGET', RESUMED, 'ended') or '0')
end
local ended = redis.call('DEL', PAUSE)
redis.call('HSET', RESUMED, 'at', now_ms(), 'by', ARG.by, 'request', ARG.request, 'ended', ended)
return ended
