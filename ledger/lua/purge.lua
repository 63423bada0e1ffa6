-- Delete settled payments (fulfilled, or never paid) older than the retention window, with
-- their index entry and their count. Only with PAYMENT_RETENTION_DAYS > 0, which settings
-- require to exceed EVENT_RETENTION_DAYS: Stripe cannot resend an event older than that, so
-- a purged payment cannot be paid again by a late delivery.
-- Returns the number purged.
local ARG = named(ARGV, 'cutoff_ms', 'limit')
whole_arg(ARG, 'cutoff_ms')
whole_arg(ARG, 'limit', 1)
local purged = 0
for _, state in ipairs({'fulfilled', 'pending'}) do
  local index = STATE_INDEX_PREFIX .. state
  local old = redis.call('ZRANGEBYSCORE', index, '-inf', ARG.cutoff_ms, 'LIMIT', 0, ARG.limit)
  for _, pk in ipairs(old) do
    redis.call('DEL', PAYMENT_PREFIX .. pk)
    redis.call('ZREM', index, pk)
    redis.call('HINCRBY', PAYMENT_STATES, state, -1)
    purged = purged + 1
  end
end
return purged
