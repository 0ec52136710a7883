#!/usr/bin/env bash
# Stop a Nacos server started by start.sh: SIGTERM, then SIGKILL after NACOS_STOP_TIMEOUT seconds
# (default 20). Accepts the DATA_DIR given to start.sh (reads DATA_DIR/nacos.pid) or a PID.
#
#   tests/nacos/stop.sh DATA_DIR|PID
set -euo pipefail

[[ $# -eq 1 ]] || { echo "usage: $0 DATA_DIR|PID" >&2; exit 2; }
pidfile=
if [[ $1 =~ ^[0-9]+$ ]]; then
  pid=$1
else
  pidfile="$1/nacos.pid"
  [[ -f $pidfile ]] || { echo "stop.sh: no $pidfile" >&2; exit 0; }
  pid=$(cat "$pidfile")
fi

if kill -0 "$pid" 2>/dev/null; then
  # only ever a java process we started
  if ! grep -q nacos-harness "/proc/$pid/cmdline" 2>/dev/null; then
    echo "stop.sh: pid $pid is not a nacos harness; not touching it" >&2; exit 1
  fi
  kill "$pid"
  for _ in $(seq 1 $(( ${NACOS_STOP_TIMEOUT:-20} * 10 ))); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  if kill -0 "$pid" 2>/dev/null; then
    echo "stop.sh: pid $pid ignored SIGTERM; killing" >&2
    kill -9 "$pid" 2>/dev/null || true
  fi
  echo "stop.sh: stopped nacos pid $pid" >&2
fi
[[ -n $pidfile ]] && rm -f "$pidfile"
exit 0
