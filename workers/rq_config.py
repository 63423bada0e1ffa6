"""RQ's settings module for the service's workers: ``rq worker -c workers.rq_config``.

The queue and Redis come from the service's settings, which are checked first; then the
fulfilment action is resolved (module imported, URL parsed, SQLite file writable). A worker
whose settings are wrong refuses to start, one line per problem, instead of failing
payments. RQ reads the upper-case names below. (A replicated ledger, found through
Sentinel, runs ``fulfilment-worker`` instead: workers/worker.py.)
"""

from workers.actions import settings_or_exit

_settings = settings_or_exit()
REDIS_URL = _settings.REDIS_URL
QUEUES = [_settings.QUEUE_NAME]
