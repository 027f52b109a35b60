#!/usr/bin/env bash
# deploy/prometheus/check.sh — checks the alert rules with Prometheus' own
# tool: `promtool check rules` (syntax, templates) and `promtool test rules`
# on alerts_test.yaml (each alert fires on the series that should trigger it,
# after its `for`, with its rendered annotations, and not on a healthy
# connector); the same for the inbox consumer's rules (inbox_alerts.yaml,
# inbox_alerts_test.yaml). promtool comes from Debian's `prometheus` package, installed
# when missing (as root; otherwise the command to run is printed).
set -euo pipefail
HERE=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd -P)
log() { echo "prometheus/check.sh: $*" >&2; }
die() { log "error: $*"; exit 1; }
# shellcheck source=deploy/dev/lib.sh
. "$HERE/../dev/lib.sh"
need_command promtool prometheus "promtool (Prometheus)"
cd "$HERE"
promtool check rules alerts.yaml inbox_alerts.yaml
promtool test rules alerts_test.yaml inbox_alerts_test.yaml
