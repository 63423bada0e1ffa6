"""Every tunable and constant of the service, documented in one place.

The upper-case names that are fields of :class:`ledger.settings.Settings` are read from the
environment under the same plain name (``REDIS_URL``) by the web app, the workers and the
CLI alike (:func:`ledger.settings.load`); the others are constants.
"""

REDIS_URL = "redis://127.0.0.1:6389/0"
"""Where the ledger lives. The bundled ``config/redis.conf`` listens on 6389 so a
system Redis on 6379 is never touched by accident."""

DEFAULT_WEB_PORT = 8000
"""The web process's port when neither WEB_PORT nor the platform's PORT is set (also the
port the banner and ``scripts/run.sh`` assume)."""

REDIS_SOCKET_TIMEOUT = 2.0
"""Seconds a ledger command may take before redis-py gives up on the reply."""

REDIS_MAX_CONNECTIONS = 50
"""Redis connections one process opens at most; a request finding none free waits for one
(up to REDIS_SOCKET_TIMEOUT). A web process serves up to GUNICORN_WORKER_CONNECTIONS
requests at once, but a ledger write holds a connection for a millisecond or so."""

REDIS_RETRIES = 3
"""Retries of a ledger command after a timeout or a dropped connection. Safe
because every ledger write is idempotent per request id."""

MAX_DURATION_DAYS = 36525
"""Longest duration in days any setting may hold (100 years): the event TTL it becomes
(EXPIRE, in seconds) and the times in milliseconds computed from it stay far inside what
Redis accepts (an expiry of at most 2**63 - 1 ms from the epoch) and exact as Lua numbers
(2**53). A longer one is refused at start-up, naming the setting."""

MAX_DURATION_SECONDS = 3652 * 86400
"""Longest duration in seconds any setting may hold (ten years): besides Redis's limits,
the process timers take it (a worker's RQ job timeout, LEASE_SECONDS + FULFILMENT_TIMEOUT +
JOB_TIMEOUT_MARGIN_SECONDS, is a C int of seconds, at most 2**31 - 1, for SIGALRM)."""

REDIS_SENTINELS = ""
"""Comma-separated ``host:port`` of Redis Sentinels. Set, every process (web, workers,
sweeper, CLI, the replay script's read-back) asks them for the current primary of
REDIS_SENTINEL_MASTER instead of using REDIS_URL, and finds a new one after a failover
(docs/DEPLOYMENT.md)."""

REDIS_SENTINEL_MASTER = "ledger"
"""The name the Sentinels monitor the ledger's primary under (``sentinel monitor NAME``)."""

REDIS_SENTINEL_PASSWORD = ""
"""Password of the Sentinels themselves (their ``requirepass``); empty: none."""

REDIS_PASSWORD = ""
"""Password of the primary and replicas when found through Sentinel (with REDIS_URL, put
it in the URL); empty: none."""

LEDGER_MIN_REPLICAS = 0
"""Replicas that must have a ledger write before it counts: a delivery is answered 2xx,
and a fulfilment transition that hands out or checks a fencing token goes ahead, only
once its write reached this many replicas (Redis ``WAIT``), besides the primary's own
fsync. 0: single-node behaviour, nothing waits."""

LEDGER_WAIT_TIMEOUT = 1.0
"""Seconds a write waits for LEDGER_MIN_REPLICAS replicas; then the delivery is answered
503 (Stripe retries) and a worker does not call. Must be under REDIS_SOCKET_TIMEOUT."""

STRIPE_WEBHOOK_SECRET = ""
"""The webhook signing secrets (``whsec_...``), comma-separated, tried in order: the old and
the new one during a rotation, or a dashboard endpoint's and ``stripe listen``'s. The web
app refuses to start without one."""

STRIPE_WEBHOOK_SECRET_LABELS = ""
"""A label per secret, comma-separated, in the same order (e.g. ``dashboard,cli``): what the
ledger counts deliveries under. A secret without one is labelled ``sha256:`` and the first 8
hex digits of its SHA-256. Labels are unique and not plain numbers; ``cli`` marks deliveries
as source ``stripe-cli``."""

STRIPE_WEBHOOK_TOLERANCE = 300
"""Seconds a signature timestamp may be away from now, in the past or the future (Stripe's
own default; 0 turns the check off, as in stripe-python)."""

SECRET_RETIRE_AFTER_DAYS = 7
"""A configured secret that has verified no delivery for this many days, while another one
has verified some since, is shown as safe to retire. Longer than Stripe's three days of
retries of one delivery, each signed again with the secrets active at the time."""

MAX_BODY_BYTES = 512 * 1024
"""Largest body accepted; larger ones get 413 and are not read."""

BODY_READ_TIMEOUT = 10.0
"""Seconds a request body may take to arrive, from the end of its headers; a body still
incomplete then is answered 408 (``body_timeout``) and its connection closed. Stripe sends
a whole event at once, so only a slow or hostile client ever comes near it."""

CONNECTIONS_PER_ADDRESS = 250
"""Connections one web process holds at once from one remote address (0: no cap); another
is answered 429 ``too_many_connections`` and closed. Half of the default
GUNICORN_WORKER_CONNECTIONS: one address cannot take a whole process, yet a load balancer
or ``stripe listen`` on one address is never near it. Trusted proxies are exempt
(TRUSTED_PROXIES): everyone behind one shares its address."""

REQUESTS_PER_CONNECTION = 100
"""Requests one kept-alive connection may carry; the answer to the last says
``Connection: close``. Any 4xx answer closes its connection at once."""

CONNECTION_LIFETIME = 60.0
"""Seconds a connection is kept alive; the first answer after that says
``Connection: close``."""

TRUSTED_PROXIES = ""
"""Comma-separated addresses or networks (``10.0.0.0/8``) of proxies in front of the web
process. A rejection the app makes of a request from one of them records the client
address its ``X-Forwarded-For`` names (the last one that is not a trusted proxy), and its
connections are exempt from CONNECTIONS_PER_ADDRESS; from anyone else ``X-Forwarded-For``
is ignored."""

EVENT_RETENTION_DAYS = 30
"""Event records and their payloads expire after this (Stripe keeps events 30 days)."""

OPS_TOKEN = ""
"""Bearer tokens (or HTTP basic passwords) of the dashboard, the ops API and, unless
METRICS_TOKEN is set, /metrics: one, or several comma-separated (one per person or system,
or the old and the new one during a rotation; a token cannot hold a comma). Unset: those
routes answer 401 to everyone."""

OPS_TOKEN_LABELS = ""
"""A label per ops token, comma-separated, in the same order (e.g. ``alice,deploy-bot``):
who an operator action is recorded as (``ops:alice`` from the API, ``dashboard:alice`` from
the dashboard). Unset: ``default`` for a single token, else ``token1``, ``token2``… by
position. When set, exactly one unique label per token."""

METRICS_TOKEN = ""
"""Bearer token of /metrics, when it should differ from OPS_TOKEN."""

PAYMENT_RETENTION_DAYS = 0
"""0 keeps payment records for ever. Otherwise the sweeper deletes fulfilled and never-paid
payments this many days after they settled; it must exceed EVENT_RETENTION_DAYS so that no
resend of one of their events can arrive afterwards and fulfil them again."""

REQUEST_ID_TTL = 300
"""Seconds a request id's answer is kept so a retried ledger write is not counted twice
(redis-py retries within seconds; the answer is one small string per delivery)."""

RECENT_REJECTIONS = 1000
"""Length of the capped list of recent rejections."""

RECENT_LATENCIES = 10000
"""Fulfil latencies kept in a capped list (written by the scripts; no reader since the
percentiles are taken over a time window, LATENCY_WINDOW_SECONDS)."""

LATENCY_WINDOW_SECONDS = 3600
"""Fulfil latency percentiles (summary, dashboard) are over the payments fulfilled this
recently, so an old backlog stops dominating them once it is older."""

LATENCY_SAMPLES = 10000
"""Most payments (the latest) those percentiles read."""

FULFIL_BUCKETS_MS = (50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000, 60000, 300000)
"""Bucket bounds (ms) of the fulfil latency histogram kept in Redis for Prometheus."""

QUEUE_NAME = "fulfilment"
"""The RQ queue that fulfilment jobs go to."""

RQ_RESULT_TTL = 0
"""Seconds RQ keeps a finished fulfilment job (and its finished-registry entry). 0: the
outcome lives in the ledger, so RQ deletes the job at once (less memory, less work). The
benchmark sets 3600 to read RQ's start/end times, as for the jobs it compares against."""

RQ_FAILURE_TTL = 7 * 86400
"""Seconds RQ keeps a failed fulfilment job (the sweeper counts such failures)."""

JOB_TIMEOUT_MARGIN_SECONDS = 5
"""RQ's timeout of a fulfilment job is LEASE_SECONDS + FULFILMENT_TIMEOUT + this: longer than
any lease, so the ledger's lease, not RQ, decides when an attempt is given up."""

FULFILMENT_ACTION = "sqlite:///var/downstream.sqlite3"
"""The downstream action: ``sqlite:///PATH``, ``http(s)://URL`` or ``module:function``."""

FULFILMENT_REPLAY_SAFE = False
"""Whether an HTTP or callable action may be re-run after an interrupted attempt."""

FULFILMENT_TIMEOUT = 10.0
"""Seconds one downstream call may take, in all: a hard wall-clock deadline for the whole
call (every action type), not per socket read."""

LEASE_SECONDS = 30
"""How long an attempt holds a payment; must exceed FULFILMENT_TIMEOUT."""

MAX_ATTEMPTS = 5
"""Attempts before a payment is failed (a dead letter)."""

RETRY_BASE_SECONDS = 1.0
"""Backoff of the first retry; doubles per attempt."""

RETRY_MAX_SECONDS = 300.0
"""Cap on the backoff."""

BREAKER_THRESHOLD = 5
"""Consecutive "down" failures of the downstream (connection refused or reset before
sending, DNS failure, a connect timeout, 502/503/504, 429), counted across every worker,
that open the circuit breaker: no worker calls until a probe succeeds. Five: one worker's
unlucky streak on a busy downstream rarely reaches it, an outage reaches it within a
second at any load. 0: no breaker."""

BREAKER_COOLDOWN_SECONDS = 30
"""Seconds the open breaker waits before one probe call (then again after a failed
probe): long enough that a restarting downstream is not hammered, short enough that the
backlog starts within half a minute of its return."""

BREAKER_MAX_RETRY_AFTER_SECONDS = 600
"""Longest ``Retry-After`` (of a 429 or 503) honoured: the breaker opens until then; a
longer one is cut to this, so a wrong header cannot stop fulfilment for a day."""

FULFILMENT_MAX_RATE = 0
"""Downstream calls per second across every worker on every host, counted in Redis (a
catch-up after an outage or a pause never exceeds it). 0: no limit."""

PAUSE_RECHECK_SECONDS = 3600
"""A payment deferred by a pause is due again only after this long: the sweeper releases
the waiting payments as soon as fulfilment is resumed, so this is a backstop, long enough
that a paused backlog is not re-queued over and over (each time a job, a deferral)."""

RATE_WAIT_SECONDS = 10.0
"""Longest a worker waits in its job for a free slot under FULFILMENT_MAX_RATE before it
defers the payment to the sweeper."""

QUEUED_GRACE_SECONDS = 30
"""A queued payment whose job is missing from RQ this long is re-enqueued by the sweeper."""

SWEEP_INTERVAL = 2.0
"""Seconds between sweeps of the sweeper process."""

PAID_EVENT_TYPES = (
    "payment_intent.succeeded",
    "charge.succeeded",
    "charge.captured",
    "checkout.session.completed",
    "checkout.session.async_payment_succeeded",
    "invoice.paid",
)
"""Event types that mean "paid" (each with its own condition, see events.py). A thin event
type (``v1.payment_intent.succeeded``) pays only when listed here, which it is not by
default: a thin event carries no object to check."""

FULFIL_UNLINKED_INVOICES = False
"""Whether an ``invoice.paid`` without a PaymentIntent (API 2025-03-31.basil and later, unless
``payments`` is expanded) fulfils under the invoice id. Off by default. When on, the ledger
ties the invoice to its PaymentIntent wherever Stripe sends both ids (a Checkout session
carries ``payment_intent`` and ``invoice``; an expanded invoice carries its payments), in
either order; where nothing ties them, a second paid payment of the same customer, amount
and currency within DUPLICATE_WINDOW_SECONDS is held for a person as a possible duplicate."""

DUPLICATE_WINDOW_SECONDS = 7 * 86400
"""How long a paid payment's customer, amount and currency are remembered to catch a
possible duplicate purchase (only with FULFIL_UNLINKED_INVOICES)."""

STRIPE_MODE = "live"
"""``live``, ``test`` or ``any``: which events may fulfil. An event of the other mode is
recorded and counted, but its payment is held for a person. ``scripts/run.sh`` sets test."""

FULFIL_CONNECT = False
"""Whether events of connected accounts (a top-level ``account``) fulfil; otherwise their
payments are held for a person."""

STUCK_QUEUED_SECONDS = 300
"""A payment queued longer than this is listed under "needs a person"."""

FULFILMENT_KILL_MARGIN_SECONDS = 0.5
"""Seconds after FULFILMENT_TIMEOUT at which a call that has still not stopped (blocked
inside C code, which the deadline's signal cannot interrupt) ends with its worker process:
a watchdog thread that needs no interpreter lock calls ``_exit``. FULFILMENT_TIMEOUT + 2 x
this must stay under LEASE_SECONDS: the process is gone before its lease can expire."""

LEASE_MARGIN_SECONDS = 2
"""LEASE_SECONDS must exceed FULFILMENT_TIMEOUT by at least this: the call's hard deadline
ends it before its lease can expire, so two calls for one payment never overlap."""

REPLAY_HEADER = "X-Webhook-Replay"
"""Header the replay script sets; the ledger records such deliveries as source ``replay``."""

STRIPE_API_KEY = ""
"""Stripe API key reconcile reads events with (none: reconcile is off); ``scripts/run.sh
--stripe-cli`` runs ``stripe listen`` with it too, instead of the CLI's login."""

STRIPE_API_BASE = "https://api.stripe.com"
"""Where ``webhook-ledger reconcile`` finds Stripe's API (tests point it at a local server).
The key is STRIPE_API_KEY: a restricted key with read access to events is enough.
``scripts/run.sh --stripe-cli`` gives it to ``stripe listen`` as ``--api-base`` when set."""

STRIPE_EVENTS_KEPT_DAYS = 30
"""How far back Stripe's Events API lists events, so how far back reconcile can look."""

RECONCILE_INTERVAL = 0.0
"""Seconds between the sweeper's reconcile runs (0: never). Each run looks back over
EVENT_RETENTION_DAYS (at most STRIPE_EVENTS_KEPT_DAYS) and records what is missing (source
``api``); one sweeper runs it per interval, however many run. Needs STRIPE_API_KEY."""

RECONCILE_RUNS_KEPT = 50
"""Reconcile runs kept in Redis (newest first) for the dashboard and the API."""

RECONCILE_MISSING_KEPT = 100
"""Missing events listed in a stored run (the count is always whole)."""

BUNDLE_MAX_FILE_BYTES = 1024 * 1024 * 1024
"""Largest file ``webhook-ledger verify`` reads from an evidence bundle (``--max-file-mb``);
a larger one is a verification failure, not an out-of-memory error."""
