"""Fixed limits and intervals of the service: constants, not settings (no environment
variable changes them). Each says why it has its value. Standard library only: gunicorn's
master reads the settings, which use MAX_DURATION_*, before anything else is imported.
"""

DEFAULT_WEB_PORT = 8000
"""The web process's port when neither WEB_PORT nor the platform's PORT is set (also the
port the banner and ``scripts/run.sh`` assume)."""

MAX_DURATION_DAYS = 36525
"""Longest duration in days any setting may hold (100 years): the event TTL it becomes
(EXPIRE, in seconds) and the times in milliseconds computed from it stay far inside what
Redis accepts (an expiry of at most 2**63 - 1 ms from the epoch) and exact as Lua numbers
(2**53). A longer one is refused at start-up, naming the setting."""

MAX_DURATION_SECONDS = 3652 * 86400
"""Longest duration in seconds any setting may hold (ten years): besides Redis's limits,
the process timers take it (a worker's RQ job timeout, RATE_WAIT_SECONDS + LEASE_SECONDS +
FULFILMENT_TIMEOUT + JOB_TIMEOUT_MARGIN_SECONDS, is a C int of seconds, at most 2**31 - 1,
for SIGALRM)."""

REQUEST_ID_TTL = 300
"""Seconds a request id's answer is kept so a retried ledger write is not counted twice
(redis-py retries within seconds; the answer is one small string per delivery)."""

NOTES_KEPT = 100
"""Refunds and disputes whose reason and metadata a payment keeps (ledger/refund_notes.py):
a later one's note is not kept (its reversal is told none), so a payment refunded a
thousand times does not grow a field every refund event decodes and writes again."""
NOTE_BYTES = 8192
"""A note's metadata at most, as JSON: keys past it are left out (Stripe's own bounds allow
27 KB; metadata that names what a refund takes back is a few keys)."""

QUEUE_SCAN_CAP = 1000
"""The longest fulfilment queue the sweeper scans for a queued payment's job (LPOS, one
element at a time in Redis's main thread: its cost grows with the queue). A longer queue is a
backlog being worked, taken to still hold it; a lost job is found once it is shorter."""

RECENT_REJECTIONS = 1000
"""Length of the capped list of recent rejections: enough to read an incident, bounded
memory under a flood."""

FULFIL_BUCKETS_MS = (
    50,
    100,
    250,
    500,
    1000,
    2500,
    5000,
    10000,
    30000,
    60000,
    90000,
    120000,
    180000,
    300000,
)
"""Bucket bounds (ms) of the fulfil latency histogram kept in Redis for Prometheus: from a
fast local downstream to a call cut at the longest lease people set."""

RQ_FAILURE_TTL = 7 * 86400
"""Seconds RQ keeps a failed fulfilment job: a week, for the sweeper to count such failures
and a person to read them."""

JOB_TIMEOUT_MARGIN_SECONDS = 5
"""RQ's timeout of a fulfilment job is RATE_WAIT_SECONDS + LEASE_SECONDS + FULFILMENT_TIMEOUT
+ this: after its wait at the gate, longer than any lease, so the ledger's lease, not RQ,
decides when an attempt is given up."""

LEASE_MARGIN_SECONDS = 2
"""LEASE_SECONDS must exceed FULFILMENT_TIMEOUT by at least this: the call's hard deadline
ends it before its lease can expire, so two calls for one payment never overlap."""

PAUSE_RECHECK_SECONDS = 3600
"""A payment deferred by a pause is due again only after this long: the sweeper releases
the waiting payments as soon as fulfilment is resumed, so this is a backstop, long enough
that a paused backlog is not re-queued over and over (each time a job, a deferral)."""

RATE_WAIT_SECONDS = 10.0
"""Longest a worker waits in its job for a free slot under FULFILMENT_MAX_RATE before it
defers the payment to the sweeper: a short wait smooths a burst, a long one would hold
the worker from other payments. Part of the job's RQ timeout, so the wait never gets the
job killed (a job whose timeout leaves less defers sooner: workers/gating.py)."""

MOVED_CHECK_SECONDS = 5.0
"""Longest a worker's start waits for the answer to the HEAD that asks whether an HTTP
FULFILMENT_ACTION moved for good (workers/actions.py ``moved``): a downstream that does
not answer soon is left to the calls, not allowed to hold the start."""

DUPLICATE_WINDOW_SECONDS = 7 * 86400
"""How long a paid payment's customer, amount and currency are remembered to catch a
possible duplicate purchase (only with FULFIL_UNLINKED_INVOICES): longer than Stripe's
three days of retries of the event that would tie the two."""

REPLAY_HEADER = "X-Webhook-Replay"
"""Header the replay script sets; the ledger records such deliveries as source ``replay``."""

STRIPE_EVENTS_KEPT_DAYS = 30
"""How far back Stripe's Events API lists events, so how far back reconcile can look."""

RECONCILE_RUNS_KEPT = 50
"""Reconcile runs kept in Redis (newest first) for the dashboard and the API."""

RECONCILE_MISSING_KEPT = 100
"""Missing events listed in a stored run (the count is always whole): a run's record stays
small however much is missing."""

BUNDLE_MAX_FILE_BYTES = 1024 * 1024 * 1024
"""Largest file ``webhook-ledger verify`` reads from an evidence bundle (``--max-file-mb``);
a larger one is a verification failure, not an out-of-memory error."""

LATENCY_WINDOW_SECONDS = 3600
"""Fulfil latency percentiles (summary, dashboard) are over the payments fulfilled this
recently, so an old backlog stops dominating them once it is older."""

LATENCY_SAMPLES = 10000
"""Most payments (the latest) those percentiles read."""

STRIPE_API_TIMEOUT_SECONDS = 10.0
"""Longest a request to Stripe's API for a purchase (line items) may take before it counts
as unanswered and the payment waits."""

STRIPE_WAIT_SECONDS = (1.0, 60.0)
"""How long a payment waits when Stripe's API did not answer for its purchase: the first
wait, doubled each time up to the second (or Stripe's Retry-After, when longer)."""

CHECKOUT_RECHECK_MS = 1000
"""While a payment waits for its Checkout Session's event (CHECKOUT_WAIT_SECONDS), how often
it looks whether the event came: the wait is a second at a time."""

LANDING_RATE_WAIT_SECONDS = 2.0
"""Longest a landing page's request (POST /ops/api/checkout-sessions/{id}/fulfil) waits for
a free slot under STRIPE_API_MAX_RATE before it is answered 503 with a Retry-After: a web
request is not held as long as a worker's job."""

LANDING_RETRY_AFTER_SECONDS = 2
"""The Retry-After of a landing page's 503 when Stripe's API named none."""

PURCHASE_WAITS_READ = 10_000
"""Most retrying payments (the oldest) read to count those waiting for Stripe's API or for
their Checkout Session (ledger/read/fulfilment.py), so a scrape stays cheap in an outage."""
