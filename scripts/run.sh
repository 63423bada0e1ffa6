#!/usr/bin/env bash
# Set up and run the whole service on this machine: Redis (config/redis.conf), the web
# receiver (gunicorn), two RQ workers and the sweeper, from the Procfile under honcho's
# manager (ledgerctl/run_local.py: local defaults, the banner, a "ready" line once its own
# server answers /readyz). --ha: a replicated ledger instead: Procfile.ha's primary, two
# replicas and three Sentinels on loopback (ledgerctl/ha.py, data in var/ha) in place of
# the Procfile's redis, LEDGER_MIN_REPLICAS=1. It refuses to start (one line, exit 2) on a
# taken WEB_PORT/REDIS_PORT or a data folder another run.sh holds. Anything already set in
# the environment wins. Ctrl-C stops it all, also when the output goes through a pipe
# (scripts/run.sh | tee log).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh
exec .venv/bin/python -m ledgerctl.run_local "$@"
