#!/usr/bin/env bash
# Install what the service needs on this machine: redis-server, redis-sentinel and PostgreSQL
# (system packages) and a virtual environment in .venv with the project (editable) and its dev
# tools, every version the one pinned in uv.lock (uv sync --frozen: the lock is never
# re-resolved here). Installs uv itself (pinned, into .tools/uv) when it is not on PATH.
# Extra arguments go to uv sync (scripts/bench.sh: --group bench). Safe to re-run.
set -euo pipefail
cd "$(dirname "$0")/.."

# redis-sentinel (the same binary in Sentinel mode) runs the replicated topology
# (scripts/run.sh --ha, tests/system/test_failover.py).
missing=""
for tool in redis-server redis-sentinel; do
  command -v "$tool" >/dev/null 2>&1 || missing="$missing $tool"
done
if [ -n "$missing" ]; then
  echo "bootstrap: installing$missing" >&2
  if [ "$(id -u)" = 0 ]; then SUDO=""; else SUDO="sudo"; fi
  $SUDO apt-get update -qq
  # shellcheck disable=SC2086
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq $missing >/dev/null
fi

# PostgreSQL (Debian's postgresql: initdb and postgres under /usr/lib/postgresql/N/bin): the
# tests start their own servers as the user's database of the PostgreSQL action
# (tests/support/postgres.py). The package's own cluster is stopped and not started again.
if ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 && ! command -v initdb >/dev/null 2>&1; then
  echo "bootstrap: installing postgresql" >&2
  if [ "$(id -u)" = 0 ]; then SUDO=""; else SUDO="sudo"; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq postgresql >/dev/null
  if [ -d /run/systemd/system ]; then
    $SUDO systemctl disable --now postgresql >/dev/null 2>&1 || true
  elif command -v service >/dev/null 2>&1; then
    $SUDO service postgresql stop >/dev/null 2>&1 || true
    $SUDO update-rc.d postgresql disable >/dev/null 2>&1 || true
  fi
fi

PYTHON="${PYTHON:-python3}"
UV_VERSION="0.13.9"
stamp=".venv/.installed-$(cat pyproject.toml uv.lock <(echo "$*") | sha256sum | cut -c1-16)"
if [ -f "$stamp" ]; then
  exit 0
fi
uv="$(command -v uv || true)"
if [ -z "$uv" ]; then
  uv=".tools/uv/bin/uv"
  if [ ! -x "$uv" ]; then
    echo "bootstrap: installing uv $UV_VERSION into .tools/uv" >&2
    "$PYTHON" -m venv .tools/uv
    .tools/uv/bin/python -m pip install -q "uv==$UV_VERSION"
  fi
fi
echo "bootstrap: installing the project into .venv from uv.lock" >&2
# The system's Python (never one uv would download); the project's .venv, whatever
# VIRTUAL_ENV the caller has active.
UV_PYTHON_DOWNLOADS=never UV_PROJECT_ENVIRONMENT=.venv VIRTUAL_ENV="" \
  "$uv" sync --quiet --frozen --python "$(command -v "$PYTHON")" "$@"
rm -f .venv/.installed-*
touch "$stamp"
