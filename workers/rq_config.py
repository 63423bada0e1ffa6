"""RQ's settings module for the service's workers: ``rq worker -c workers.rq_config``.

The queue and Redis come from the service's settings, which are checked first; then the
fulfilment action is resolved (module imported, URL parsed, SQLite file writable). A worker
whose settings are wrong refuses to start, one line per problem, instead of failing
payments. RQ reads the upper-case names below. (A replicated ledger, found through
Sentinel, runs ``fulfilment-worker`` instead: workers/worker.py.) The job's module is
imported here, in the worker's own process: RQ's default forking Worker imports it in each
work-horse otherwise, once per job.
"""

import workers.jobs  # noqa: F401  (preloaded: every work-horse a forking Worker forks inherits it)
from workers.actions import settings_or_exit

_settings = settings_or_exit()
REDIS_URL = _settings.REDIS_URL
QUEUES = [_settings.QUEUE_NAME]
