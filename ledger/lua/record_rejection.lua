-- Count one rejected request by reason and keep a capped, body-free record of it.
-- Idempotent per request id: a retried call counts once.
local KEY = named(KEYS, 'request')
local ARG, ARGC = named(ARGV, 'reason', 'record')
local short = too_few('record_rejection', ARGC)
if short then return short end
local ok, record = pcall(cjson.decode, ARG.record)
if not (ok and type(record) == 'table') then
  return refuse('record_rejection', 'record must be a JSON object')
end
if redis.call('SET', KEY.request, '1', 'NX', 'EX', REQUEST_TTL) == false then
  return 0
end
local now = now_ms()
redis.call('HINCRBY', STATS, 'rejected', 1)
redis.call('HINCRBY', STATS, 'rejected:' .. ARG.reason, 1)
record['at'] = now
redis.call('LPUSH', REJECTIONS, cjson.encode(record))
redis.call('LTRIM', REJECTIONS, 0, REJECTIONS_CAP - 1)
bump_series('r', now)
return 1
