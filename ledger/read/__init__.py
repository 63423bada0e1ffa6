"""The ledger as people and programs read it: one typed object per thing shown, one module
per noun (events, payments and their timeline, what refunds and disputes took back, stats,
rejections, secrets, the gate of fulfilment, reconcile runs, a person's decisions) with the
readers that build its objects from the Redis records (or the SQLite downstream's tables);
the modules that run reconcile
and take decisions build theirs (ledger/reconcile.py, ledger/decisions.py).

The ops API, ``webhook-ledger --json``, the dashboard, evidence bundles and the replay report
all show these objects (what is stored does not change: hashes of strings, JSON inside
strings, epoch milliseconds; ledger/stored.py reads those). Here times are aware UTC
datetimes (ISO-8601 with ``Z`` in JSON), amounts are integer minor units with their currency,
counts are integers, attempts are objects and secrets are named by label.
webhook/openapi.yaml documents every field; a test checks that its schemas are exactly these
classes'.
"""
