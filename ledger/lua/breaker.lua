-- How a downstream call went, for the circuit breaker of the downstream it went to (KEYS
-- breaker and its witnesses: ledger/keys.py BREAKERS), which every worker shares.
-- kind: up (it answered: success or this payment's own refusal) | down (refused or reset
-- before sending, DNS, connect timeout, 502/503/504, 429) | none (no call after all).
-- The breaker opens on evidence that the downstream as a whole is down, never on one
-- customer's word: since the last up answer, BREAKER_WITNESSES holds each customer refused
-- (the payment's p_customer; a payment of none stands for itself), once however often (the
-- same customer refused again says nothing new: a per-customer quota answers 429 to all its
-- payments), and each payment whose request never left (once however often: no customer
-- can refuse a connection, but one payment's code may say so of itself again and again).
-- `failures` counts them; the breaker opens once it reaches BREAKER_THRESHOLD (0: never) and
-- a witness other than this customer's answers corroborates it (another customer refused,
-- or a request that never left) since the last failed probe. It stays open a cool-down or
-- the Retry-After, whichever is longer; a corroborated failed probe re-opens it, a probe
-- that nothing else corroborates closes it (the refusal is that payment's own); any up
-- answer closes it and clears the witnesses (counted: `answers`). The attempt is refunded
-- (budget_base + 1: it does not count against MAX_ATTEMPTS) when its request never left
-- and the downstream answered no one since this payment's last request that never left
-- (`unsent_answers`), or when the breaker is open on corroborated evidence: the
-- downstream's outage, not this payment's failure; a refused payment's attempt otherwise
-- counts, so one payment refused (or never sent) again and again while the others succeed
-- spends its attempts and ends `failed`. Of the refunded attempts only the last keeps its
-- record (`refunds` counts them), so refunds cannot grow the hash.
-- A Retry-After defers this payment's next attempt until then (retry_at in its attempt
-- record, read by retry_later); a failed prober also waits until after the next probe, so
-- that probe is another payment's.
-- Returns the breaker's state after it.
local KEY = named(KEYS, 'payment', 'breaker', 'witnesses')
local BREAKER, BREAKER_WITNESSES = KEY.breaker, KEY.witnesses
local ARG = named(ARGV, 'token', 'kind', 'sent', 'threshold', 'cooldown_ms',
  'retry_after_ms', 'probe_ms', 'detail')
local threshold, cooldown_ms = whole_arg(ARG, 'threshold', 0), whole_arg(ARG, 'cooldown_ms', 1)
local retry_after_ms = whole_arg(ARG, 'retry_after_ms', 0, MAX_TTL_MS)
local probe_ms = whole_arg(ARG, 'probe_ms', 1, MAX_TTL_MS)
choice_arg(ARG, 'kind', {up = true, down = true, none = true})
choice_arg(ARG, 'sent', BIT)
local pay, pk = KEY.payment, id_of(KEY.payment, PAYMENT_PREFIX)
local now = now_ms()
local probed = redis.call('HGET', BREAKER, 'probe_payment') == pk
if probed then
  redis.call('HSET', BREAKER, 'probe_until', 0, 'probe_payment', '')
end
local state = redis.call('HGET', BREAKER, 'state') or 'closed'
if ARG.kind == 'none' then return state end

local function close()
  if state == 'open' then
    redis.call('HSET', BREAKER, 'state', 'closed', 'closed_at', now)
    redis.call('HINCRBY', BREAKER, 'closes', 1)
  end
  redis.call('HSET', BREAKER, 'failures', 0, 'probe_failed_at', 0, 'probe_failed_by', '')
  redis.call('DEL', BREAKER_WITNESSES)
  state = 'closed'
end
if ARG.kind == 'up' then
  -- counted when it clears a failure (the same answer sent again, its reply lost, finds none)
  if redis.call('HGET', BREAKER, 'failures') ~= '0' or state == 'open' then
    redis.call('HINCRBY', BREAKER, 'answers', 1)
  end
  close()
  return state
end

-- The attempt is still this payment's live one: its report may change the attempt.
local live = redis.call('HGET', pay, 'token') == ARG.token
  and redis.call('HGET', pay, 'state') == 'in_progress'
local unsent = ARG.sent == '0'
local customer = redis.call('HGET', pay, 'p_customer')
local party = (customer and customer ~= '') and ('cus:' .. customer) or pk
local witness = unsent and ('unsent:' .. pk) or party
local since = tonumber(redis.call('HGET', BREAKER, 'probe_failed_at') or '0')
-- Another witness than this payment's answers, since the last failed probe; a request that
-- never left is one (counted once a payment: one payment alone never reaches a threshold
-- above 1).
local function corroborated()
  if unsent then return true end
  local found = redis.call('ZRANGEBYSCORE', BREAKER_WITNESSES, since, '+inf', 'LIMIT', 0, 2)
  for _, other in ipairs(found) do  -- this customer's answers are one witness at most
    if other ~= party then return true end
  end
  return false
end
-- Never sent again after the downstream answered another payment: this payment's own
-- failure (its code says so of itself), not an outage.
local answers, unsent_seen, answered_since
if unsent then
  answers = redis.call('HGET', BREAKER, 'answers') or '0'
  unsent_seen = redis.call('HMGET', pay, 'unsent_at', 'unsent_answers')
  answered_since = unsent_seen[2] and unsent_seen[2] ~= answers
end
local evidence = corroborated()
local failures = tonumber(redis.call('HGET', BREAKER, 'failures') or '0')
if redis.call('ZADD', BREAKER_WITNESSES, now, witness) == 1 then
  failures = redis.call('HINCRBY', BREAKER, 'failures', 1)
  redis.call('ZREMRANGEBYRANK', BREAKER_WITNESSES, 0, -BREAKER_WITNESSES_KEPT - 1)
end
redis.call('HSET', BREAKER, 'last_error', ARG.detail, 'last_failure_at', now)

local hold_until = now + math.max(cooldown_ms, retry_after_ms)
if threshold > 0 and evidence and (state == 'open' or failures >= threshold) then
  if state ~= 'open' then
    redis.call('HSET', BREAKER, 'state', 'open', 'opened_at', now)
    redis.call('HINCRBY', BREAKER, 'opens', 1)
    state = 'open'
  end
  local open_until = tonumber(redis.call('HGET', BREAKER, 'open_until') or '0')
  redis.call('HSET', BREAKER, 'open_until', math.max(open_until, hold_until))
elseif probed and state == 'open' then
  close()  -- only this customer's own refusals: the downstream answers
  redis.call('ZADD', BREAKER_WITNESSES, now, witness)
  redis.call('HSET', BREAKER, 'failures', 1)
end
if probed and state == 'open' then
  redis.call('HSET', BREAKER, 'probe_failed_at', now, 'probe_failed_by', unsent and '' or party)
end
if not live then return state end

-- The same report sent again (its reply lost: ledger/connection.py retries a command)
-- changes the attempt no further: its retry_at only moves later, it is refunded once.
local raw = redis.call('HGET', pay, 'attempt:' .. ARG.token)
if unsent and raw then  -- its request never left: it reached no downstream
  never_reached(pay, ARG.token, raw)
  raw = redis.call('HGET', pay, 'attempt:' .. ARG.token)
end
local record = raw and cjson.decode(raw) or {}
local retry_at = retry_after_ms > 0 and now + retry_after_ms or nil
if probed and state == 'open' then  -- the next probe is another payment's
  retry_at = math.max(retry_at or 0, hold_until + probe_ms + cooldown_ms)
end
if retry_at and retry_at > (tonumber(record.retry_at) or 0) then
  update_attempt(pay, ARG.token, {retry_at = retry_at}, nil, raw)
end
-- Once an attempt: the same report sent again changes nothing, nor refunds what its first
-- sending did not (that one moved unsent_answers up to the breaker's answers).
local first_unsent = unsent and tonumber(unsent_seen[1] or '-1') < (tonumber(record.started) or 0)
if first_unsent then
  redis.call('HSET', pay, 'unsent_at', now, 'unsent_answers', answers)
end
local refund = (first_unsent and not answered_since) or (state == 'open' and evidence)
if refund and not record.refunded and attempts_used(pay) >= 1 then
  redis.call('HINCRBY', pay, 'budget_base', 1)
  redis.call('HINCRBY', pay, 'refunds', 1)
  update_attempt(pay, ARG.token, {refunded = unsent and 'not_sent' or 'breaker'})
  local kept = redis.call('HGET', pay, 'refund_kept')
  if kept and kept ~= ARG.token then redis.call('HDEL', pay, 'attempt:' .. kept) end
  redis.call('HSET', pay, 'refund_kept', ARG.token)
  redis.call('HINCRBY', STATS, 'attempts_refunded', 1)
end
return state
