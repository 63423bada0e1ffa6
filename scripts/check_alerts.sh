#!/usr/bin/env bash
# Check the shipped alerting rules: `promtool check rules` (syntax, templates) and
# `promtool test rules` (each alert fires after its `for:` on the series that should fire
# it, and stays silent on healthy series and near misses). Installs promtool when missing.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_tools.sh
promtool check rules deploy/prometheus/alerts.yml
promtool check config --syntax-only deploy/prometheus/prometheus.yml
(cd deploy/prometheus && promtool test rules alerts_test.yml)
