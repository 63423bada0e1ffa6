-- Record one accepted delivery, all or nothing, in one round trip.
-- Idempotent per request id: a retried call returns the first answer unchanged.
--
-- KEYS: 1 event hash, 2 stats, 3 request answer, 4 event index,
--       5 payment hash (or ""), 6 pending index, 7 payment states, 8 due set
-- (state indexes are named from STATE_INDEX_PREFIX, prepended from webhook/keys.py)
-- ARGV: 1 event id, 2 type, 3 created, 4 livemode, 5 api_version, 6 payment key,
--       7 role, 8 paid (0/1), 9 secret label, 10 source, 11 sha256, 12 payload,
--       13 event ttl s, 14 request ttl s, 15 grace ms, 16 amount, 17 currency, 18 job id,
--       19 series key prefix, 20.. enqueue commands as (n, arg1..argn)*
-- Payment records never expire here; the sweeper purges settled ones after
-- PAYMENT_RETENTION_DAYS (workers/lua/purge.lua), keeping every index consistent.
local cached = redis.call('GET', KEYS[3])
if cached then
  return cjson.decode(cached)
end

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ek, stats = KEYS[1], KEYS[2]
local id, etype, pk, role, src, sha = ARGV[1], ARGV[2], ARGV[6], ARGV[7], ARGV[10], ARGV[11]
local secret = ARGV[9]

local n = redis.call('HINCRBY', ek, 'n', 1)
local dup, conflict = 0, 0
if n == 1 then
  redis.call('HSET', ek, 'type', etype, 'created', ARGV[3], 'livemode', ARGV[4],
    'api', ARGV[5], 'pk', pk, 'role', role, 'paid', ARGV[8], 'sha', sha,
    'body', ARGV[12], 'first', now)
  redis.call('EXPIRE', ek, tonumber(ARGV[13]))
  redis.call('HINCRBY', stats, 'events', 1)
  redis.call('ZADD', KEYS[4], now, id)
  redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', now - tonumber(ARGV[13]) * 1000)
else
  dup = 1
  redis.call('HINCRBY', stats, 'duplicates', 1)
  if redis.call('HGET', ek, 'sha') ~= sha then
    conflict = 1
    redis.call('HINCRBY', ek, 'conflicts', 1)
    redis.call('HSET', ek, 'conflict_sha', sha)
    redis.call('HINCRBY', stats, 'conflicts', 1)
  end
end
redis.call('HSET', ek, 'last', now, 'secret', secret)
redis.call('HINCRBY', ek, 'src:' .. src, 1)
redis.call('HINCRBY', stats, 'deliveries', 1)
redis.call('HINCRBY', stats, 'source:' .. src, 1)
redis.call('HINCRBY', stats, 'secret:' .. secret, 1)
redis.call('HSET', SECRETS_LAST_SEEN, secret, now)
redis.call('HINCRBY', stats, 'type:' .. etype, 1)

local state, enqueued = '', 0
if pk ~= '' then
  local pay = KEYS[5]
  state = redis.call('HGET', pay, 'state')
  if not state then
    state = 'pending'
    redis.call('HSET', pay, 'state', state, 'token', 0)
    redis.call('ZADD', STATE_INDEX_PREFIX .. state, now, pk)
    redis.call('HINCRBY', KEYS[7], state, 1)
  end
  if n == 1 then
    local ev = redis.call('HGET', pay, 'events')
    redis.call('HSET', pay, 'events', ev and (ev .. ' ' .. id) or id)
  end
  redis.call('HINCRBY', pay, 'deliveries', 1)
  if role == 'failed' or role == 'refund' then
    redis.call('HSET', pay, 'last_' .. role, etype)
  end
  if ARGV[8] == '1' then
    -- The paying event is named by its position in `events`, not by its id again (memory).
    if redis.call('HSETNX', pay, 'paid_at', now) == 1 then
      -- Once per payment: this event's place among the payment's events (ids separated by ' ').
      local _, spaces = string.gsub(redis.call('HGET', pay, 'events'), ' ', '')
      redis.call('HSET', pay, 'paid_by_n', spaces + 1, 'amount', ARGV[16],
        'currency', ARGV[17], 'livemode', ARGV[4])
    end
    if state == 'pending' and ARGV[18] ~= '' then
      state = 'queued'
      redis.call('HSET', pay, 'state', state, 'job', ARGV[18])
      redis.call('HINCRBY', KEYS[7], 'pending', -1)
      redis.call('ZREM', STATE_INDEX_PREFIX .. 'pending', pk)
      redis.call('ZADD', STATE_INDEX_PREFIX .. state, now, pk)
      redis.call('HINCRBY', KEYS[7], state, 1)
      redis.call('ZADD', KEYS[8], now + tonumber(ARGV[15]), pk)
      local i = 20
      while i <= #ARGV do
        local count = tonumber(ARGV[i])
        redis.call(unpack(ARGV, i + 1, i + count))
        i = i + count + 1
      end
      enqueued = 1
    end
  end
end

-- Per-minute delivery counts for the dashboard's chart: one hash per hour, kept 48 hours.
local minute = math.floor(now / 60000)
local series = ARGV[19] .. math.floor(minute / 60)
if redis.call('HINCRBY', series, 'd:' .. minute, 1) == 1 then
  redis.call('EXPIRE', series, 172800)
end

local answer = {n, dup, conflict, enqueued, state}
redis.call('SET', KEYS[3], cjson.encode(answer), 'EX', tonumber(ARGV[14]))
return answer
