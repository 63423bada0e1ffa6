#!/usr/bin/env bash
# Install the monitoring tools the checks need when they are missing: Debian's `prometheus`
# package, for `promtool` (the alerting rules' checks and unit tests) and the `prometheus`
# binary (the system test that scrapes a running service). Only the binaries are used: the
# package's own service is stopped and disabled if the install started one. Safe to re-run.
set -euo pipefail
if command -v promtool >/dev/null 2>&1 && command -v prometheus >/dev/null 2>&1; then
  exit 0
fi
echo "install_tools: installing prometheus (for promtool and the alerting system test)" >&2
if [ "$(id -u)" = 0 ]; then SUDO=""; else SUDO="sudo"; fi
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends \
  prometheus >/dev/null
# Debian's postinst may start prometheus on :9090; the checks start their own instances.
if [ -d /run/systemd/system ]; then
  $SUDO systemctl disable --now prometheus >/dev/null 2>&1 || true
elif command -v service >/dev/null 2>&1; then
  $SUDO service prometheus stop >/dev/null 2>&1 || true
  $SUDO update-rc.d prometheus disable >/dev/null 2>&1 || true
fi
