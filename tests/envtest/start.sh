#!/usr/bin/env bash
# Start envtest (etcd + kube-apiserver) in the background and print shell
# exports for it:   eval "$(tests/envtest/start.sh [STATE_DIR] [-- ENVTEST_ARGS...])"
# STATE_DIR defaults to $LANEWAY_ENVTEST_DIR, else ${TMPDIR:-/tmp}/laneway-envtest.
# It keeps etcd data, pki, kubeconfig, envtest.log and envtest.pid; restarting
# on the same dir keeps the data. If envtest already runs there, just print.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$here/../daemon.sh"
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

if running envtest "$pidfile" && [ -f "$kubeconfig" ]; then
  echo "start.sh: envtest already running (pid $pid, $dir)" >&2
  print_exports "$pid"
  exit 0
fi

rm -f "$pidfile" "$kubeconfig"
: >"$log"   # before the launch: the background redirect empties it only once the child runs
# setsid: own session, so Ctrl-C in the calling shell/make does not reach it.
setsid "$bin/envtest" --dir "$dir" "$@" </dev/null >"$log" 2>&1 &
pid=$!
echo "$pid" >"$pidfile"

await_up envtest "becoming ready" ready grep -q '^envtest ready' "$log"
ready=$(grep -m1 '^envtest ready' "$log")
pid=$(sed -n 's/.* pid=\([0-9]*\).*/\1/p' <<<"$ready")   # authoritative
echo "$pid" >"$pidfile"
echo "start.sh: $ready" >&2
print_exports "$pid"
