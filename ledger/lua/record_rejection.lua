-- Count one rejected request by reason and keep a capped, body-free record of it.
-- KEYS: 1 stats, 2 rejections list, 3 request answer
-- ARGV: 1 reason, 2 JSON record (without time), 3 cap, 4 request ttl s, 5 series key prefix
local short = too_few('record_rejection', 5)
if short then return short end
local ok, record = pcall(cjson.decode, ARGV[2])
if not (ok and type(record) == 'table' and whole(ARGV[3], 1) and whole(ARGV[4], 1)) then
  return refuse('record_rejection', 'record must be a JSON object; cap and ttl numbers')
end
if redis.call('SET', KEYS[3], '1', 'NX', 'EX', tonumber(ARGV[4])) == false then
  return 0
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('HINCRBY', KEYS[1], 'rejected', 1)
redis.call('HINCRBY', KEYS[1], 'rejected:' .. ARGV[1], 1)
record['at'] = now
redis.call('LPUSH', KEYS[2], cjson.encode(record))
redis.call('LTRIM', KEYS[2], 0, tonumber(ARGV[3]) - 1)
local minute = math.floor(now / 60000)
local series = ARGV[5] .. math.floor(minute / 60)
if redis.call('HINCRBY', series, 'r:' .. minute, 1) == 1 then
  redis.call('EXPIRE', series, 172800)
end
return 1
