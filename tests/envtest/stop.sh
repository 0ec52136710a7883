#!/usr/bin/env bash
# Stop the envtest started by start.sh:   tests/envtest/stop.sh [STATE_DIR]
# SIGTERM, wait up to 30s for a clean shutdown, then SIGKILL.
set -euo pipefail

dir=${1:-${LANEWAY_ENVTEST_DIR:-${TMPDIR:-/tmp}/laneway-envtest}}
pidfile=$dir/envtest.pid
if [ ! -f "$pidfile" ]; then
  echo "stop.sh: no $pidfile; nothing to stop" >&2; exit 0
fi
pid=$(cat "$pidfile")
if ! kill -0 "$pid" 2>/dev/null || ! grep -q envtest "/proc/$pid/cmdline" 2>/dev/null; then
  echo "stop.sh: envtest (pid $pid) is not running" >&2; rm -f "$pidfile"; exit 0
fi
kill -TERM "$pid"
for _ in $(seq 300); do
  kill -0 "$pid" 2>/dev/null || break
  sleep 0.1
done
if kill -0 "$pid" 2>/dev/null; then
  echo "stop.sh: envtest (pid $pid) ignored SIGTERM for 30s; killing it" >&2
  kill -KILL "$pid" 2>/dev/null || true
fi
rm -f "$pidfile" "$dir/kubeconfig"
echo "stop.sh: stopped envtest (pid $pid)" >&2
