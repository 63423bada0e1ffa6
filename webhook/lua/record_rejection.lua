-- Count one rejected request by reason and keep a capped, body-free record of it.
-- In memory only: nothing here reaches the append-only file or a replica, so a flood of
-- forged requests costs no fsync and no disk (the counts are kept on disk by the next
-- snapshot or AOF rewrite; a crash loses those since). No per-request key either: a
-- client retry may count a rejection twice, which only rejections can afford.
-- KEYS: 1 stats, 2 rejections list
-- ARGV: 1 reason, 2 JSON record (without time), 3 cap, 4 series key prefix
local short = too_few('record_rejection', 4)
if short then return short end
local ok, record = pcall(cjson.decode, ARGV[2])
if not (ok and type(record) == 'table' and whole(ARGV[3], 1)) then
  return refuse('record_rejection', 'record must be a JSON object; cap a whole number')
end
redis.set_repl(redis.REPL_NONE)
local now = now_ms()
redis.call('HINCRBY', KEYS[1], 'rejected', 1)
redis.call('HINCRBY', KEYS[1], 'rejected:' .. ARGV[1], 1)
record['at'] = now
redis.call('LPUSH', KEYS[2], cjson.encode(record))
redis.call('LTRIM', KEYS[2], 0, tonumber(ARGV[3]) - 1)
local minute = math.floor(now / 60000)
local series = ARGV[4] .. math.floor(minute / 60)
if redis.call('HINCRBY', series, 'r:' .. minute, 1) == 1 then
  redis.call('EXPIRE', series, 172800)
end
return 1
