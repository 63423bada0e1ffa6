-- Delete settled payments (fulfilled, or never paid) older than the retention window, with
-- their index entry and their count. Only with PAYMENT_RETENTION_DAYS > 0,
-- which settings require to exceed EVENT_RETENTION_DAYS: Stripe cannot resend an event
-- older than that, so a purged payment cannot be paid again by a late delivery.
-- KEYS: 1 payment states   ARGV: 1 cutoff (ms), 2 most payments per call
-- Returns the number purged.
local short = too_few('purge', 2)
if short then return short end
if not (whole(ARGV[1]) and whole(ARGV[2], 1)) then
  return refuse('purge', 'cutoff and limit must be numbers')
end
local purged = 0
for _, state in ipairs({'fulfilled', 'pending'}) do
  local index = STATE_INDEX_PREFIX .. state
  local old = redis.call('ZRANGEBYSCORE', index, '-inf', ARGV[1], 'LIMIT', 0, tonumber(ARGV[2]))
  for _, pk in ipairs(old) do
    redis.call('DEL', PAYMENT_PREFIX .. pk)
    redis.call('ZREM', index, pk)
    redis.call('HINCRBY', KEYS[1], state, -1)
    purged = purged + 1
  end
end
return purged
