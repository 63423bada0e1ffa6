"""The start-up banner of ``scripts/run.sh``: where to point Stripe, which secret to use.

Configured URLs are shown with their credentials masked (``ledger.redact``): REDIS_URL may
carry a password and FULFILMENT_ACTION an API key in its query.
"""

import os
import sys
from collections.abc import Mapping

from ledger.redact import redact


def banner(env: Mapping[str, str]) -> str:
    """The banner for this environment (``DEV_WEBHOOK_SECRET`` is the local secret)."""
    port, local = env.get("WEB_PORT", "8000"), env.get("DEV_WEBHOOK_SECRET", "")
    return f"""\
Stripe webhook ledger
  endpoint      http://127.0.0.1:{port}/webhooks/stripe
  forward with  stripe listen --forward-to localhost:{port}/webhooks/stripe
  secret        the one 'stripe listen' prints; run with both it and the local one:
                STRIPE_WEBHOOK_SECRET="$(stripe listen --print-secret),{local}" \\
                STRIPE_WEBHOOK_SECRET_LABELS=cli,local scripts/run.sh
  local secret  {local}   (used by scripts/replay_events.py; kept in var/dev.env)
  ops token     {env.get("OPS_TOKEN", "")}   \
(curl -H "Authorization: Bearer $OPS_TOKEN" .../ops/api/summary)
  redis         {redis_line(env)}
  downstream    {redact(env.get("FULFILMENT_ACTION", ""))}
  stripe mode   {env.get("STRIPE_MODE", "live")}   \
(events of the other mode are held for a person; production defaults to live)
"""


def redis_line(env: Mapping[str, str]) -> str:
    """Where the ledger is: one Redis, or the Sentinels of a replicated one."""
    if env.get("REDIS_SENTINELS"):
        return (
            f"primary {env.get('REDIS_SENTINEL_MASTER', 'ledger')!r} of the Sentinels at "
            f"{env['REDIS_SENTINELS']}\n                "
            f"(LEDGER_MIN_REPLICAS={env.get('LEDGER_MIN_REPLICAS', '0')}; run.sh --ha: var/ha)"
        )
    return f"{redact(env.get('REDIS_URL', ''))} (data in var/redis, append-only, fsync always)"


if __name__ == "__main__":
    sys.stdout.write(banner(os.environ))
