-- The sweeper's release of waiting payments once their reason is gone: after a resume (no
-- pause) and once the breaker that holds them is closed, each breaker its own (KEYS: `breaker`
-- FULFILMENT_ACTION's downstream's, `reversal_breaker` REVERSAL_ACTION's when apart). Each
-- released payment is due now; the sweeper's recover re-enqueues it. Payments no longer
-- retrying are just dropped from the set.
-- Returns the number released
local KEY = named(KEYS, 'breaker', 'reversal_breaker')
local ARG = named(ARGV, 'limit')
local limit = whole_arg(ARG, 'limit', 1)
local now = now_ms()
local free = {
  paused = redis.call('EXISTS', PAUSE) == 0,
  breaker = redis.call('HGET', KEY.breaker, 'state') ~= 'open',
  reversal_breaker = redis.call('HGET', KEY.reversal_breaker, 'state') ~= 'open',
}
local released = 0
for _, reason in ipairs({'paused', 'breaker', 'reversal_breaker'}) do
  if free[reason] then
    local set = WAITING_PREFIX .. reason
    for _, pk in ipairs(redis.call('ZRANGE', set, 0, limit - 1)) do
      local pay = PAYMENT_PREFIX .. pk
      if redis.call('HGET', pay, 'waiting') == reason then
        if redis.call('HGET', pay, 'state') == 'retrying' then
          redis.call('HSET', pay, 'next_at', now)
          redis.call('ZADD', DUE, now, pk)
          released = released + 1
        end
        redis.call('HDEL', pay, 'waiting')
      end
      redis.call('ZREM', set, pk)
    end
  end
end
return released
