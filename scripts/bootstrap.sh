#!/usr/bin/env bash
# Install what the service needs on this machine: redis-server and redis-sentinel (system
# packages) and a virtual environment in .venv with the project and its dev tools. Safe to
# re-run.
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

PYTHON="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  echo "bootstrap: creating .venv" >&2
  "$PYTHON" -m venv .venv
fi
stamp=".venv/.installed-$(sha256sum pyproject.toml | cut -c1-16)"
if [ ! -f "$stamp" ]; then
  echo "bootstrap: installing the project into .venv" >&2
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q -e '.[dev]'
  rm -f .venv/.installed-*
  touch "$stamp"
fi
