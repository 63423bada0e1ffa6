#!/usr/bin/env bash
# Set up and run the benchmarks (docs/BENCHMARKS.md): wrk from the system packages,
# py-spy into .venv (uv.lock's bench group; gevent is a dependency of the service itself), then
# bench.run_all with any arguments given (--quick).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh --group bench
if ! command -v wrk >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ]; then SUDO=""; else SUDO="sudo"; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq wrk >/dev/null
fi
exec .venv/bin/python -m bench.run_all "$@"
