#!/usr/bin/env bash
# Install the pinned Stripe CLI (tests/stripe-cli/package.json and package-lock.json) for the
# system tests that run it (tests/system/test_stripe_cli.py). `npm ci --ignore-scripts`: the
# linux binary comes from the registry in @stripe/cli-linux-x64; @stripe/cli's postinstall
# would only fetch it from GitHub when that package is missing, and is not run. Without npm
# there is nothing to do and those tests skip, saying so.
set -euo pipefail
cd "$(dirname "$0")/../tests/stripe-cli"
if ! command -v npm >/dev/null 2>&1; then
  echo "install_stripe_cli: no npm; the Stripe CLI tests will skip" >&2
  exit 0
fi
npm ci --ignore-scripts --no-audit --no-fund --loglevel=error
