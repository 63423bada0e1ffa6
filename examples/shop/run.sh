#!/usr/bin/env bash
# The example shop with the whole service, on this machine: a PostgreSQL server of its own
# (data in var/shop, port SHOP_PG_PORT, 5433 by default), the shop's table and the service's
# migrated, then scripts/run.sh's stack with FULFILMENT_ACTION pointing at that database
# (FULFILMENT_SQL=@examples/shop/grant.sql: one entitlement per paid purchase; REVERSAL_SQL=
# @examples/shop/revoke.sql: revoked once the payment is taken back in full) and the shop's
# page on http://127.0.0.1:SHOP_PORT (5000). Ctrl-C stops it all, PostgreSQL included.
# Before it changes anything it refuses (one line) what would stop the start: another run of
# it, a port taken, the service's own checks (its ports, var/redis held by another stack:
# ledgerctl/run_local.py --check). Only then is a server an earlier run left (its launcher
# killed) stopped, and only when no process is connected to it.
# Another terminal's tools (replay_events.py, webhook-ledger) get these settings, the
# password too, from var/run.env, which the banner tells it to source.
set -euo pipefail
cd "$(dirname "$0")/../.."
scripts/bootstrap.sh
PG_PORT=${SHOP_PG_PORT:-5433}
SHOP_PORT=${SHOP_PORT:-5000}
DATA=var/shop/pg
PG_BIN=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)
as_postgres() {  # PostgreSQL refuses to run as root
  if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}
pg_ctl() { as_postgres "$PG_BIN/pg_ctl" -D "$DATA" "$@"; }
port_free() {  # nothing listens on 127.0.0.1:$1
  .venv/bin/python -c 'import socket, sys
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[1])))' "$1" 2>/dev/null
}
LEFT=  # the port of a server an earlier run left running on $DATA
if [ -d "$DATA" ] && pg_ctl status >/dev/null 2>&1; then
  running=$(cat var/shop/run.pid 2>/dev/null || true)
  if [ -n "$running" ] && [ "$running" != $$ ] && grep -qs run.sh "/proc/$running/cmdline"; then
    echo "examples/shop: already running (pid $running) on $DATA; stop it first" >&2
    exit 1
  fi
  LEFT=$(sed -n 4p "$DATA/postmaster.pid")
fi
for named in "SHOP_PG_PORT=$PG_PORT" "SHOP_PORT=$SHOP_PORT"; do
  port=${named#*=}
  if [ "$named" = "SHOP_PG_PORT=$LEFT" ]; then continue; fi  # the left server's: stopped below
  if ! port_free "$port"; then
    echo "examples/shop: port $port is in use; set ${named%%=*} to another" >&2
    exit 1
  fi
done
mkdir -p var/shop
if [ ! -f var/shop/password ]; then
  (umask 077 && head -c 18 /dev/urandom | base64 | tr -d '+/=' > var/shop/password)
fi
export SHOP_DATABASE_URL="postgresql://shop:$(cat var/shop/password)@127.0.0.1:$PG_PORT/postgres"
export FULFILMENT_ACTION="$SHOP_DATABASE_URL" FULFILMENT_SQL=@examples/shop/grant.sql
export REVERSAL_ACTION="$SHOP_DATABASE_URL" REVERSAL_SQL=@examples/shop/revoke.sql
export CHECKOUT_WAIT_SECONDS=${CHECKOUT_WAIT_SECONDS:-10}  # a purchase waits for its session
.venv/bin/python -m ledgerctl.run_local --check "$@"  # exit 2, one line each, if it would refuse
if [ -n "$LEFT" ]; then
  users=$(.venv/bin/python -m examples.shop clients "$LEFT" | paste -sd, -)
  if [ -n "$users" ]; then
    echo "examples/shop: the PostgreSQL server an earlier run left ($DATA, port $LEFT) is in use by pid $users; stop them first" >&2
    exit 1
  fi
  echo "examples/shop: stopping the PostgreSQL server an earlier run left running ($DATA)"
  pg_ctl -m fast -w stop >/dev/null
fi
if [ ! -d "$DATA" ]; then
  [ "$(id -u)" = 0 ] && chown postgres var/shop var/shop/password
  as_postgres "$PG_BIN/initdb" -D "$DATA" -U shop --pwfile=var/shop/password \
    --auth=scram-sha-256 --encoding=UTF8 --locale=C >/dev/null
fi
SHOP_PID= STARTED=
stop() {  # only what this run started: another run's server stays up
  if [ -n "$SHOP_PID" ]; then kill "$SHOP_PID" 2>/dev/null || true; fi
  if [ -n "$STARTED" ]; then pg_ctl -m fast -w stop >/dev/null 2>&1 || true; fi
  if [ "$(cat var/shop/run.pid 2>/dev/null)" = $$ ]; then rm -f var/shop/run.pid; fi
}
trap stop EXIT
echo $$ > var/shop/run.pid
if ! pg_ctl -l var/shop/postgres.log -w start \
  -o "-p $PG_PORT -c listen_addresses=127.0.0.1 -c unix_socket_directories=''" >/dev/null; then
  echo "examples/shop: PostgreSQL did not start; its log is var/shop/postgres.log" >&2
  exit 1
fi
STARTED=1
.venv/bin/python -m examples.shop migrate
# The landing page triggers the fulfilment too (the service's landing-page trigger), with
# the ops token scripts/run.sh gives the service: OPS_TOKEN's first, else the local one.
SHOP_OPS_TOKEN=${OPS_TOKEN:-}
SHOP_OPS_TOKEN=${SHOP_OPS_TOKEN%%,*}
if [ -z "$SHOP_OPS_TOKEN" ]; then
  SHOP_OPS_TOKEN=$(.venv/bin/python -c 'from ledgerctl.run_local import dev_values; print(dev_values()["DEV_OPS_TOKEN"])')
fi
SHOP_SERVICE_URL="http://127.0.0.1:${WEB_PORT:-8000}" SHOP_OPS_TOKEN="$SHOP_OPS_TOKEN" \
  .venv/bin/flask --app examples.shop run --host 127.0.0.1 --port "$SHOP_PORT" &
SHOP_PID=$!
echo "examples/shop: the shop's landing page is http://127.0.0.1:$SHOP_PORT/?session_id=cs_... (Checkout's success_url: what that session granted)"
.venv/bin/python -m ledgerctl.run_local "$@"
