-- wrk script: POST pre-signed Stripe events from a pool file, cycling through it in order.
-- The pool path comes from the environment (WLBENCH_POOL), written by bench/events.py:
--   "WLPOOL <count>\n" then per request "<len sig> <len body>\n<sig><body>".
-- Requests are formatted once in init(); request() only hands out the next one.
-- done() prints one JSON line with the totals and latency percentiles (microseconds).

local requests = {}
local count = 0
local index = 0

function init(args)
  local path = os.getenv("WLBENCH_POOL")
  local f = assert(io.open(path, "rb"))
  local head = f:read("*l")
  local n = tonumber(string.match(head, "^WLPOOL (%d+)$"))
  for i = 1, n do
    local lens = f:read("*l")
    local nsig, nbody = string.match(lens, "^(%d+) (%d+)$")
    local sig = f:read(tonumber(nsig))
    local body = f:read(tonumber(nbody))
    requests[i] = wrk.format("POST", wrk.path, {
      ["Host"] = wrk.host .. ":" .. wrk.port,
      ["Content-Type"] = "application/json; charset=utf-8",
      ["User-Agent"] = "Stripe/1.0 (+https://stripe.com/docs/webhooks)",
      ["Accept"] = "*/*; q=0.5, application/xml",
      ["Cache-Control"] = "no-cache",
      ["Stripe-Signature"] = sig,
    }, body)
  end
  f:close()
  count = n
end

function request()
  index = index + 1
  if index > count then index = 1 end
  return requests[index]
end

function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    '{"requests": %d, "duration_us": %d, "bytes": %d, "connect": %d, "read": %d, ' ..
    '"write": %d, "status": %d, "timeout": %d, "mean_us": %.1f, "p50_us": %d, ' ..
    '"p90_us": %d, "p99_us": %d, "p999_us": %d, "max_us": %d}\n',
    summary.requests, summary.duration, summary.bytes, e.connect, e.read, e.write,
    e.status, e.timeout, latency.mean, latency:percentile(50), latency:percentile(90),
    latency:percentile(99), latency:percentile(99.9), latency.max))
end
