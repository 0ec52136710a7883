#!/usr/bin/env bash
# Stop the Traefik started by start.sh:   tests/traefik/stop.sh [STATE_DIR]
# SIGTERM, wait up to 15s, then SIGKILL.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/../daemon.sh"

dir=${1:-${LANEWAY_TRAEFIK_DIR:-${TMPDIR:-/tmp}/laneway-traefik}}
stop_pidfile traefik "$dir/traefik.pid" 15 "$dir/traefik.web"
