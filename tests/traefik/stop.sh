#!/usr/bin/env bash
# Stop the Traefik started by start.sh:   tests/traefik/stop.sh [STATE_DIR]
# SIGTERM, wait up to 15s, then SIGKILL.
set -euo pipefail

dir=${1:-${LANEWAY_TRAEFIK_DIR:-${TMPDIR:-/tmp}/laneway-traefik}}
pidfile=$dir/traefik.pid
if [ ! -f "$pidfile" ]; then
  echo "stop.sh: no $pidfile; nothing to stop" >&2; exit 0
fi
pid=$(cat "$pidfile")
if ! kill -0 "$pid" 2>/dev/null || ! grep -q traefik "/proc/$pid/cmdline" 2>/dev/null; then
  echo "stop.sh: traefik (pid $pid) is not running" >&2; rm -f "$pidfile" "$dir/traefik.web"; exit 0
fi
kill -TERM "$pid"
for _ in $(seq 150); do
  kill -0 "$pid" 2>/dev/null || break
  sleep 0.1
done
if kill -0 "$pid" 2>/dev/null; then
  echo "stop.sh: traefik (pid $pid) ignored SIGTERM for 15s; killing it" >&2
  kill -KILL "$pid" 2>/dev/null || true
fi
rm -f "$pidfile" "$dir/traefik.web"
echo "stop.sh: stopped traefik (pid $pid)" >&2
