-- Put on disk (the append-only file) and on the replicas the rejections record_rejection.lua
-- kept in memory only, once per sweeper pass and only when some came since the last time,
-- each as a value (never a delta, so an AOF rewrite or a replica's full resync between two
-- passes, which copy memory, cannot double it): the counts, the whole capped list, and the
-- last hours' per-minute series. A flood of forged requests then costs one write a pass,
-- not one a request; a restart or a failover loses at most the rejections of the last
-- pass. `wl:rejections:kept` says how many were kept (written the same way).
-- hours: how many hours of the per-minute series to write, this one and those before it.
-- Returns the number of rejections newly kept (0 also when the count went back: set by hand).
local ARG = named(ARGV, 'hours')
local hours = whole_arg(ARG, 'hours', 1, 48)
local now = now_ms()
local counted = tonumber(redis.call('HGET', STATS, 'rejected') or '0')
local kept = tonumber(redis.call('HGET', REJECTIONS_KEPT, 'rejected') or '0')
if counted == kept then return 0 end
if counted > 0 then
  local counts = {}
  local stats = redis.call('HGETALL', STATS)
  for i = 1, #stats, 2 do
    if stats[i] == 'rejected' or string.sub(stats[i], 1, 9) == 'rejected:' then
      counts[#counts + 1] = stats[i]
      counts[#counts + 1] = stats[i + 1]
    end
  end
  redis.call('HSET', STATS, unpack(counts))
end
-- The list as it is, oldest first: read in memory only, then written whole.
redis.set_repl(redis.REPL_NONE)
local records = redis.call('LRANGE', REJECTIONS, 0, REJECTIONS_CAP - 1)
redis.set_repl(redis.REPL_ALL)
redis.call('DEL', REJECTIONS)
for i = #records, 1, -100 do
  local chunk = {}
  for j = i, math.max(1, i - 99), -1 do chunk[#chunk + 1] = records[j] end
  redis.call('LPUSH', REJECTIONS, unpack(chunk))
end
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
    local ttl = redis.call('TTL', series)  -- as the series has it: kept, not extended
    redis.call('HSET', series, unpack(minutes))
    if ttl > 0 then redis.call('EXPIRE', series, ttl) end
  end
end
redis.call('HSET', REJECTIONS_KEPT, 'rejected', counted, 'at', now)
return math.max(0, counted - kept)
