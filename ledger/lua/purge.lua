-- Delete settled payments (fulfilled, reversed, refunded before fulfilment, or never paid) older than the retention window, with
-- their index entry and their count, and every other key or entry that names them: the
-- aliases Stripe's other ids got (the payment's `aliases`), its untied records (`untied`:
-- the fingerprint of record_delivery.lua's fp_parts), a waiting set or the sweeper's due
-- set. Its events need nothing: they expire EVENT_RETENTION_DAYS after their first delivery.
-- Only with PAYMENT_RETENTION_DAYS > 0, which settings require to exceed
-- EVENT_RETENTION_DAYS: Stripe cannot resend an event older than that, so a purged payment
-- cannot be paid again by a late delivery.
-- Returns the number purged.
local ARG = named(ARGV, 'cutoff_ms', 'limit')
whole_arg(ARG, 'cutoff_ms')
whole_arg(ARG, 'limit', 1)

local function forget(pk)
  local pay = PAYMENT_PREFIX .. pk
  local found = redis.call('HMGET', pay, 'aliases', 'untied')
  for some_id in string.gmatch(found[1] or '', '%S+') do
    if redis.call('GET', ALIAS_PREFIX .. some_id) == pk then
      redis.call('DEL', ALIAS_PREFIX .. some_id)
    end
  end
  local kind, mode, currency, amount = string.match(found[2] or '',
    '^(%a+)|(%a+):[^:]*:(%a+):(%d+)$')
  if kind then
    for _, who in ipairs({'any', 'guest'}) do
      redis.call('ZREM', UNTIED_PREFIX .. kind .. ':' .. mode .. ':' .. who .. ':' .. currency ..
        ':' .. amount, pk)
    end
  end
  for _, reason in ipairs({'paused', 'breaker', 'reversal_breaker', 'rate'}) do
    redis.call('ZREM', WAITING_PREFIX .. reason, pk)
  end
  redis.call('ZREM', DUE, pk)
  redis.call('DEL', pay)
end

local purged = 0
for _, state in ipairs({'fulfilled', 'pending', 'reversed', 'refunded_unfulfilled'}) do
  local index = STATE_INDEX_PREFIX .. state
  local old = redis.call('ZRANGEBYSCORE', index, '-inf', ARG.cutoff_ms, 'LIMIT', 0, ARG.limit)
  for _, pk in ipairs(old) do
    forget(pk)
    redis.call('ZREM', index, pk)
    redis.call('HINCRBY', PAYMENT_STATES, state, -1)
    purged = purged + 1
  end
end
return purged
