#!/usr/bin/env bash
# Set up and run the whole service on this machine: Redis (config/redis.conf), the web
# receiver (gunicorn), two RQ workers and the sweeper, from the Procfile via honcho.
# Embedded defaults; anything already set in the environment wins. Ctrl-C stops it all.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh
mkdir -p var/redis

# A local secret and ops token, made once and kept in var/dev.env.
if [ ! -f var/dev.env ]; then
  umask 077
  py=.venv/bin/python
  {
    echo "DEV_WEBHOOK_SECRET=whsec_$($py -c 'import secrets; print(secrets.token_hex(24))')"
    echo "DEV_OPS_TOKEN=$($py -c 'import secrets; print(secrets.token_urlsafe(24))')"
  } > var/dev.env
fi
# shellcheck disable=SC1091
. var/dev.env

export PATH="$PWD/.venv/bin:$PATH"
export REDIS_PORT="${REDIS_PORT:-6389}"
export REDIS_URL="${REDIS_URL:-redis://127.0.0.1:$REDIS_PORT/0}"
export WEB_PORT="${WEB_PORT:-8000}"
export STRIPE_WEBHOOK_SECRET="${STRIPE_WEBHOOK_SECRET:-$DEV_WEBHOOK_SECRET}"
export OPS_TOKEN="${OPS_TOKEN:-$DEV_OPS_TOKEN}"
export QUEUE_NAME="${QUEUE_NAME:-fulfilment}"
# Local work forwards test-mode events (stripe listen, the replay script): they must fulfil.
export STRIPE_MODE="${STRIPE_MODE:-test}"
export FULFILMENT_ACTION="${FULFILMENT_ACTION:-sqlite:///$PWD/var/downstream.sqlite3}"
WORKERS="${WORKERS:-2}"

cat <<BANNER
Stripe webhook ledger
  endpoint      http://127.0.0.1:$WEB_PORT/webhooks/stripe
  forward with  stripe listen --forward-to localhost:$WEB_PORT/webhooks/stripe
  secret        the one 'stripe listen' prints; run with both it and the local one:
                STRIPE_WEBHOOK_SECRET="\$(stripe listen --print-secret),$DEV_WEBHOOK_SECRET" \\
                STRIPE_WEBHOOK_SECRET_LABELS=cli,local scripts/run.sh
  local secret  $DEV_WEBHOOK_SECRET   (used by scripts/replay_events.py; kept in var/dev.env)
  ops token     $OPS_TOKEN   (curl -H "Authorization: Bearer \$OPS_TOKEN" .../ops/api/summary)
  redis         $REDIS_URL (data in var/redis, append-only, fsync always)
  downstream    $FULFILMENT_ACTION
  stripe mode   $STRIPE_MODE   (events of the other mode are held for a person; production
                defaults to live: set STRIPE_MODE=live there)
BANNER
exec honcho start -f Procfile -c "worker=$WORKERS"
