#!/usr/bin/env bash
# Set up (scripts/bootstrap.sh) and run every check: ruff lint, ruff format, mypy, pytest.
# Extra arguments go to pytest, e.g. scripts/test.sh -k ledger
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh
export PATH="$PWD/.venv/bin:$PATH"
echo "== ruff check" && ruff check .
echo "== ruff format --check" && ruff format --check .
echo "== mypy" && mypy
echo "== pytest" && exec pytest "$@"
