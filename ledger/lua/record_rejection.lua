-- Count one rejected request by reason and keep a capped, body-free record of it.
-- In memory only: nothing here reaches the append-only file or a replica, so a flood of
-- forged requests costs no fsync and no disk; each sweeper pass puts those since its last
-- on disk in one write (keep_rejections.lua). No per-request key either: a
-- client retry may count a rejection twice, which only rejections can afford.
local ARG = named(ARGV, 'reason', 'record')
local ok, record = pcall(cjson.decode, ARG.record)
if not (ok and type(record) == 'table') then
  refuse('record must be a JSON object, got ' .. shown(ARG.record))
end
redis.set_repl(redis.REPL_NONE)
local now = now_ms()
redis.call('HINCRBY', STATS, 'rejected', 1)
redis.call('HINCRBY', STATS, 'rejected:' .. ARG.reason, 1)
record['at'] = now
redis.call('LPUSH', REJECTIONS, cjson.encode(record))
redis.call('LTRIM', REJECTIONS, 0, REJECTIONS_CAP - 1)
bump_series('r', now)
return 1
