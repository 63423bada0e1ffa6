#!/usr/bin/env bash
# The example shop with the whole service, on this machine: a PostgreSQL server of its own
# (data in var/shop, port SHOP_PG_PORT, 5433 by default), the shop's table and the service's
# migrated, then scripts/run.sh's stack with FULFILMENT_ACTION pointing at that database
# (FULFILMENT_SQL=@examples/shop/grant.sql: one entitlement per paid purchase) and the shop's
# page on http://127.0.0.1:SHOP_PORT (5000). Ctrl-C stops it all, PostgreSQL included.
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
mkdir -p var/shop
if [ ! -f var/shop/password ]; then
  (umask 077 && head -c 18 /dev/urandom | base64 | tr -d '+/=' > var/shop/password)
fi
if [ ! -d "$DATA" ]; then
  [ "$(id -u)" = 0 ] && chown postgres var/shop var/shop/password
  as_postgres "$PG_BIN/initdb" -D "$DATA" -U shop --pwfile=var/shop/password \
    --auth=scram-sha-256 --encoding=UTF8 --locale=C >/dev/null
fi
as_postgres "$PG_BIN/pg_ctl" -D "$DATA" -l var/shop/postgres.log -w start \
  -o "-p $PG_PORT -c listen_addresses=127.0.0.1 -c unix_socket_directories=''" >/dev/null
SHOP_PID=
stop() {
  [ -n "$SHOP_PID" ] && kill "$SHOP_PID" 2>/dev/null
  as_postgres "$PG_BIN/pg_ctl" -D "$DATA" -m fast -w stop >/dev/null
}
trap stop EXIT
export SHOP_DATABASE_URL="postgresql://shop:$(cat var/shop/password)@127.0.0.1:$PG_PORT/postgres"
export FULFILMENT_ACTION="$SHOP_DATABASE_URL" FULFILMENT_SQL=@examples/shop/grant.sql
export CHECKOUT_WAIT_SECONDS=${CHECKOUT_WAIT_SECONDS:-10}  # a purchase waits for its session
.venv/bin/python -m examples.shop migrate
.venv/bin/flask --app examples.shop run --host 127.0.0.1 --port "$SHOP_PORT" &
SHOP_PID=$!
.venv/bin/python -m ledgerctl.run_local "$@"
