-- Put on disk (the append-only file) and on the replicas the rejections record_rejection.lua
-- kept in memory only, once per sweeper pass and only when some came since the last time:
-- their counts (absolute values, so a replay sets them), the records added since (in
-- their order) and the last hours' per-minute series. A flood of forged
-- requests then costs one write a pass, not one a request; a restart or a failover loses
-- at most the rejections of the last pass. `wl:rejections:kept` says how many were kept
-- (written the same way, so what the disk has and that count agree after a restart).
-- hours: how many hours of the per-minute series to write, this one and those before it.
-- Returns the number of rejections newly kept.
local ARG = named(ARGV, 'hours')
local hours = whole_arg(ARG, 'hours', 1, 48)
local now = now_ms()
local counted = tonumber(redis.call('HGET', STATS, 'rejected') or '0')
local kept = tonumber(redis.call('HGET', REJECTIONS_KEPT, 'rejected') or '0')
if counted == kept then return 0 end
local new = counted > kept and math.min(counted - kept, REJECTIONS_CAP) or REJECTIONS_CAP
-- The records added since, newest first: taken off in memory only, then pushed back the
-- way record_rejection.lua pushed them, this time written: memory ends as it was.
redis.set_repl(redis.REPL_NONE)
local records = redis.call('LPOP', REJECTIONS, new) or {}
redis.set_repl(redis.REPL_ALL)
for i = #records, 1, -1 do
  redis.call('LPUSH', REJECTIONS, records[i])
end
redis.call('LTRIM', REJECTIONS, 0, REJECTIONS_CAP - 1)
local counts = {}
local stats = redis.call('HGETALL', STATS)
for i = 1, #stats, 2 do
  if stats[i] == 'rejected' or string.sub(stats[i], 1, 9) == 'rejected:' then
    counts[#counts + 1] = stats[i]
    counts[#counts + 1] = stats[i + 1]
  end
end
redis.call('HSET', STATS, unpack(counts))
local hour = series_hour(now)
for h = hour - hours + 1, hour do
  local series = SERIES_PREFIX .. h
  local fields = redis.call('HGETALL', series)
  local minutes = {}
  for i = 1, #fields, 2 do
    if string.sub(fields[i], 1, 2) == 'r:' then
      minutes[#minutes + 1] = fields[i]
      minutes[#minutes + 1] = fields[i + 1]
    end
  end
  if #minutes > 0 then
    redis.call('HSET', series, unpack(minutes))
    redis.call('EXPIRE', series, SERIES_TTL)
  end
end
redis.call('HSET', REJECTIONS_KEPT, 'rejected', counted, 'at', now)
return counted - kept
