#!/usr/bin/env bash
# Start Traefik out of cluster as a Gateway API implementation against the
# cluster in $KUBECONFIG, in the background, and print shell exports for it:
#   eval "$(tests/traefik/start.sh [STATE_DIR] [-- EXTRA_TRAEFIK_FLAGS...])"
# STATE_DIR defaults to $LANEWAY_TRAEFIK_DIR, else ${TMPDIR:-/tmp}/laneway-traefik;
# it gets traefik.log, traefik.pid (and access.log when enabled).
# Environment:
#   KUBECONFIG                  required; the cluster to watch
#   LANEWAY_TRAEFIK_ADDR        IP of the `web` entrypoint (default 127.0.0.1)
#   LANEWAY_TRAEFIK_PORT        its port (default: a free port). Gateway listeners
#                               must use this port (Traefik maps listener port ->
#                               entrypoint by the address's port).
#   LANEWAY_TRAEFIK_THROTTLE    providers.providersThrottleDuration (default 2s)
#   LANEWAY_TRAEFIK_LOG_LEVEL   DEBUG|INFO|WARN|ERROR (default INFO)
#   LANEWAY_TRAEFIK_ACCESSLOG   1: write STATE_DIR/access.log
#   LANEWAY_TRAEFIK_TIMEOUT     seconds to wait until it answers (default 60)
# Prints: TRAEFIK_PID, TRAEFIK_WEB (ip:port), TRAEFIK_WEB_PORT, LANEWAY_TRAEFIK_DIR.
# If Traefik already runs in STATE_DIR, only prints the exports.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$here/../daemon.sh"
dir=${LANEWAY_TRAEFIK_DIR:-${TMPDIR:-/tmp}/laneway-traefik}
if [ $# -gt 0 ] && [ "$1" != "--" ]; then dir=$1; shift; fi
[ "${1:-}" = "--" ] && shift
timeout=${LANEWAY_TRAEFIK_TIMEOUT:-60}
addr=${LANEWAY_TRAEFIK_ADDR:-127.0.0.1}
throttle=${LANEWAY_TRAEFIK_THROTTLE:-2s}
level=${LANEWAY_TRAEFIK_LOG_LEVEL:-INFO}

[ -n "${KUBECONFIG:-}" ] || { echo "start.sh: KUBECONFIG is not set" >&2; exit 1; }
[ -f "$KUBECONFIG" ] || { echo "start.sh: KUBECONFIG $KUBECONFIG does not exist" >&2; exit 1; }
kubeconfig=$(cd "$(dirname "$KUBECONFIG")" && pwd)/$(basename "$KUBECONFIG")

bin=$("$here/build.sh" | tail -n1)
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
pidfile=$dir/traefik.pid log=$dir/traefik.log portfile=$dir/traefik.web

print_exports() {   # pid web
  printf 'export TRAEFIK_PID=%s\nexport TRAEFIK_WEB=%q\nexport TRAEFIK_WEB_PORT=%s\nexport LANEWAY_TRAEFIK_DIR=%q\n' \
    "$1" "$2" "${2##*:}" "$dir"
}

if running traefik "$pidfile" && [ -f "$portfile" ]; then
  echo "start.sh: traefik already running (pid $pid, $dir)" >&2
  print_exports "$pid" "$(cat "$portfile")"
  exit 0
fi

port=${LANEWAY_TRAEFIK_PORT:-}
if [ -z "$port" ]; then
  port=$(python3 -c 'import socket,sys; s=socket.socket(); s.bind((sys.argv[1],0)); print(s.getsockname()[1])' "$addr")
fi
case $addr in *:*) host="[$addr]" ;; *) host=$addr ;; esac
web=$host:$port

flags=(
  --global.checkNewVersion=false
  --global.sendAnonymousUsage=false
  --log.level="$level"
  --log.noColor=true
  --entryPoints.web.address="$web"
  --entryPoints.web.transport.lifeCycle.graceTimeOut=1s
  --providers.providersThrottleDuration="$throttle"
  --providers.kubernetesGateway=true
)
case $addr in
  0.0.0.0|::) ;;
  *) flags+=(--providers.kubernetesGateway.statusAddress.ip="$addr") ;;
esac
if [ "${LANEWAY_TRAEFIK_ACCESSLOG:-0}" = 1 ]; then
  flags+=(--accessLog=true --accessLog.filePath="$dir/access.log")
fi

rm -f "$pidfile" "$portfile"
# setsid: own session, so Ctrl-C in the calling shell does not reach it.
# No KUBERNETES_SERVICE_HOST: Traefik would prefer in-cluster config over KUBECONFIG.
setsid env -u KUBERNETES_SERVICE_HOST -u KUBERNETES_SERVICE_PORT KUBECONFIG="$kubeconfig" \
  "$bin/traefik" "${flags[@]}" "$@" </dev/null >"$log" 2>&1 &
pid=$!
echo "$pid" >"$pidfile"

# Up = the entrypoint answers HTTP (404 until a route exists).
answers() {
  local code
  code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 1 "http://$web/") && [ "$code" != 000 ]
}
await_up traefik "answering on $web" "answering on $web" answers
echo "$web" >"$portfile"
echo "start.sh: traefik up (pid $pid, web $web, log $log)" >&2
print_exports "$pid" "$web"
