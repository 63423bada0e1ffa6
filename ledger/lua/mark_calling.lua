-- Fence before the downstream call: only the holder of the current token and a live lease
-- may call. Marks the phase `calling` (what recovery needs to know) and renews the lease.
-- KEYS: 1 payment   ARGV: 1 token, 2 lease ms
-- Returns 1 (go ahead) or 0 (stale: do not call)
local pay = KEYS[1]
local short = too_few('mark_calling', 2)
if short then return short end
if not whole(ARGV[2], 1) then return refuse('mark_calling', 'lease ms must be a number') end
local now = now_ms()
if redis.call('HGET', pay, 'state') ~= 'in_progress'
  or redis.call('HGET', pay, 'token') ~= ARGV[1]
  or tonumber(redis.call('HGET', pay, 'lease_until') or '0') <= now then
  update_attempt(pay, ARGV[1], {outcome = 'stale_before_call', ended = now})
  return 0
end
redis.call('HSET', pay, 'phase', 'calling', 'lease_until', now + tonumber(ARGV[2]))
update_attempt(pay, ARGV[1], {calling = now})
return 1
