#!/usr/bin/env bash
# Set up (scripts/bootstrap.sh: .venv from uv.lock with the dev group) and run every check:
# the lock is current, ruff lint, ruff format, mypy, the import layers (import-linter), dead
# code (vulture), promtool (the alerting rules), pytest.
# Extra arguments go to pytest, e.g. scripts/test.sh -k ledger
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh
# The browser test drives Debian's Chromium (Playwright's own browser download is not used).
if ! command -v chromium >/dev/null 2>&1; then
  echo "test: installing chromium for the browser test" >&2
  if [ "$(id -u)" = 0 ]; then SUDO=""; else SUDO="sudo"; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium >/dev/null
fi
scripts/install_stripe_cli.sh  # the pinned Stripe CLI, for the tests that run it
export PATH="$PWD/.venv/bin:$PATH"
echo "== uv lock --check (uv.lock matches pyproject.toml)" && uv lock --check --quiet
echo "== ruff check" && ruff check .
echo "== ruff format --check" && ruff format --check .
echo "== mypy" && mypy
echo "== lint-imports (the layers: [tool.importlinter] in pyproject.toml)" && lint-imports --no-cache --no-logo
echo "== vulture (dead code: [tool.vulture] in pyproject.toml)" && vulture
# The alerting rules (deploy/prometheus): promtool's checks and unit tests.
echo "== promtool" && scripts/check_alerts.sh
echo "== pytest" && exec pytest "$@"
