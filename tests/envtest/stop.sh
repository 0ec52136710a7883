#!/usr/bin/env bash
# Stop the envtest started by start.sh:   tests/envtest/stop.sh [STATE_DIR]
# SIGTERM, wait up to 30s for a clean shutdown, then SIGKILL.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/../daemon.sh"

dir=${1:-${LANEWAY_ENVTEST_DIR:-${TMPDIR:-/tmp}/laneway-envtest}}
stop_pidfile envtest "$dir/envtest.pid" 30 "$dir/kubeconfig"
