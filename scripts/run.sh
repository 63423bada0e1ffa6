#!/usr/bin/env bash
# Set up and run the whole service on this machine: Redis (config/redis.conf), the web
# receiver (gunicorn), two RQ workers and the sweeper, from the Procfile via honcho.
# --ha: a replicated ledger instead (Procfile.ha): a primary, two replicas and three
# Sentinels on loopback (ledgerctl/ha.py, data in var/ha), LEDGER_MIN_REPLICAS=1, the same
# web, workers (fulfilment-worker) and sweeper finding the primary through the Sentinels.
# Embedded defaults; anything already set in the environment wins. Ctrl-C stops it all.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh
mkdir -p var/redis
PROCFILE=Procfile
if [ "${1:-}" = "--ha" ]; then
  PROCFILE=Procfile.ha
  # shellcheck disable=SC2046
  export $(.venv/bin/python -m ledgerctl.ha var/ha)
  export LEDGER_MIN_REPLICAS="${LEDGER_MIN_REPLICAS:-1}"
fi

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

DEV_WEBHOOK_SECRET="$DEV_WEBHOOK_SECRET" python -m ledgerctl.banner
exec honcho start -f "$PROCFILE" -c "worker=$WORKERS"
