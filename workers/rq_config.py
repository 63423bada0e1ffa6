"""RQ's settings module for the service's workers: ``rq worker -c workers.rq_config``.

The queue and Redis come from the service's settings, which are checked first; then the
fulfilment action is resolved (module imported, URL parsed, SQLite file writable). A worker
whose settings are wrong refuses to start, one line per problem, instead of failing
payments. RQ reads the upper-case names below.
"""

from dataclasses import fields

from ledger import declared, settings
from workers.actions import unusable

_settings = settings.load_or_exit()
_why = unusable(
    _settings.FULFILMENT_ACTION, _settings.FULFILMENT_TIMEOUT, _settings.FULFILMENT_REPLAY_SAFE
)
if _why:
    _field = next(f for f in fields(settings.Settings) if f.name == "FULFILMENT_ACTION")
    _shown = declared.shown(_field, _settings.FULFILMENT_ACTION)
    declared.exit_with([f"invalid setting FULFILMENT_ACTION={_shown}: {_why}"])

REDIS_URL = _settings.REDIS_URL
QUEUES = [_settings.QUEUE_NAME]
