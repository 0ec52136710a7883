#!/usr/bin/env bash
# Start envtest (etcd + kube-apiserver) in the background and print shell
# exports for it:   eval "$(tests/envtest/start.sh [STATE_DIR] [-- ENVTEST_ARGS...])"
# STATE_DIR defaults to $LANEWAY_ENVTEST_DIR, else ${TMPDIR:-/tmp}/laneway-envtest.
# It keeps etcd data, pki, kubeconfig, envtest.log and envtest.pid; restarting
# on the same dir keeps the data. If envtest already runs there, just print.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
dir=${LANEWAY_ENVTEST_DIR:-${TMPDIR:-/tmp}/laneway-envtest}
if [ $# -gt 0 ] && [ "$1" != "--" ]; then dir=$1; shift; fi
[ "${1:-}" = "--" ] && shift
timeout=${LANEWAY_ENVTEST_TIMEOUT:-120}

bin=$("$here/build.sh" | tail -n1)
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
pidfile=$dir/envtest.pid log=$dir/envtest.log kubeconfig=$dir/kubeconfig

print_exports() {
  printf 'export KUBECONFIG=%q\nexport PATH=%q:"$PATH"\nexport LANEWAY_ENVTEST_DIR=%q\nexport LANEWAY_ENVTEST_PID=%s\n' \
    "$kubeconfig" "$bin" "$dir" "$1"
}

if [ -f "$pidfile" ] && pid=$(cat "$pidfile") && kill -0 "$pid" 2>/dev/null \
   && grep -q envtest "/proc/$pid/cmdline" 2>/dev/null && [ -f "$kubeconfig" ]; then
  echo "start.sh: envtest already running (pid $pid, $dir)" >&2
  print_exports "$pid"
  exit 0
fi

rm -f "$pidfile" "$kubeconfig"
# setsid: own session, so Ctrl-C in the calling shell/make does not reach it.
setsid "$bin/envtest" --dir "$dir" "$@" </dev/null >"$log" 2>&1 &
pid=$!
echo "$pid" >"$pidfile"

start=$SECONDS
until grep -q '^envtest ready' "$log" 2>/dev/null; do
  if ! kill -0 "$pid" 2>/dev/null; then
    echo "start.sh: envtest exited before becoming ready; last log lines ($log):" >&2
    tail -n 30 "$log" >&2; rm -f "$pidfile"; exit 1
  fi
  if (( SECONDS - start >= timeout )); then
    echo "start.sh: envtest not ready after ${timeout}s; stopping it. Last log lines ($log):" >&2
    tail -n 30 "$log" >&2; "$here/stop.sh" "$dir" >&2 || true; exit 1
  fi
  sleep 0.1
done
ready=$(grep -m1 '^envtest ready' "$log")
pid=$(sed -n 's/.* pid=\([0-9]*\).*/\1/p' <<<"$ready")   # authoritative
echo "$pid" >"$pidfile"
echo "start.sh: $ready" >&2
print_exports "$pid"
