#!/usr/bin/env bash
# Start a real standalone Nacos 3.1 server (embedded Derby, no console UI) in the background and
# wait until it serves requests. The last line on stdout is its PID; logs go to stderr.
#
#   tests/nacos/start.sh PORT DATA_DIR [--auth]
#
# Ports used: PORT (HTTP, context path /nacos, bound to 127.0.0.1), PORT+1000 (client gRPC),
# PORT+1001 (cluster gRPC) and PORT-1000 (Raft); the last three listen on all interfaces (Nacos
# has no bind-address setting for them). All four must be free; PORT must be 1001..64534.
#
# DATA_DIR becomes nacos.home: data/ (Derby), logs/ (Nacos' own log files), server.log (stdout+stderr),
# nacos.pid. Reusing a DATA_DIR keeps its configs (and the admin user).
#
# --auth turns on Nacos auth for the OpenAPI, admin API and console API, and makes sure the admin
# user "nacos" exists with password $NACOS_ADMIN_PASSWORD (default: nacos): Nacos 3.x has no
# default user, so on a fresh DATA_DIR this script creates it with POST /nacos/v3/auth/user/admin.
# Log in with: curl -X POST http://127.0.0.1:PORT/nacos/v1/auth/login -d username=nacos -d password=...
#
# Env: NACOS_JAR (skip build.sh and use this jar), JAVA (default java), NACOS_HEAP (default 256m),
#      NACOS_OPTS (extra JVM/-D options, e.g. -Dnacos.core.api.compatibility.admin.enabled=true to
#      re-enable the deprecated /nacos/v2/cs/config API), NACOS_START_TIMEOUT (seconds, default 180),
#      NACOS_ADMIN_PASSWORD.
set -euo pipefail

usage() { echo "usage: $0 PORT DATA_DIR [--auth]" >&2; exit 2; }
[[ $# -ge 2 ]] || usage
port=$1 dir=$2 auth=false
[[ ${3:-} == --auth ]] && auth=true
[[ $# -le 3 && ( $# -eq 2 || $auth == true ) ]] || usage
if ! [[ $port =~ ^[0-9]+$ ]] || (( port <= 1000 || port >= 64535 )); then
  echo "start.sh: bad PORT $port" >&2; exit 2
fi

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
java=${JAVA:-java}
jar=${NACOS_JAR:-$("$here/build.sh" | tail -n1)}
timeout=${NACOS_START_TIMEOUT:-180}
password=${NACOS_ADMIN_PASSWORD:-nacos}

mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
log="$dir/server.log"
if [[ -f "$dir/nacos.pid" ]] && kill -0 "$(cat "$dir/nacos.pid")" 2>/dev/null; then
  echo "start.sh: a server already runs from $dir (pid $(cat "$dir/nacos.pid"))" >&2; exit 1
fi
for p in "$port" $((port + 1000)) $((port + 1001)) $((port - 1000)); do
  if (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
    echo "start.sh: port $p is in use (Nacos needs $port, $((port + 1000)), $((port + 1001)), $((port - 1000)))" >&2
    exit 1
  fi
done

opts=(-Dnacos.home="$dir" -Dnacos.server.main.port="$port")
if $auth; then
  opts+=(-Dnacos.core.auth.enabled=true -Dnacos.core.auth.admin.enabled=true -Dnacos.core.auth.console.enabled=true)
fi
# shellcheck disable=SC2206 # NACOS_OPTS is a list of options
extra=(${NACOS_OPTS:-})

begin=$(date +%s%N)
# setsid: own process group, so the caller's Ctrl-C or job control does not reach the server
setsid nice "$java" -Xms64m -Xmx"${NACOS_HEAP:-256m}" -XX:+UseSerialGC -XX:TieredStopAtLevel=1 \
  "${opts[@]}" "${extra[@]}" -jar "$jar" >"$log" 2>&1 </dev/null &
pid=$!
echo "$pid" >"$dir/nacos.pid"

base="http://127.0.0.1:$port/nacos"
fail() {
  echo "start.sh: $1; last lines of $log:" >&2
  tail -n 40 "$log" >&2 || true
  kill "$pid" 2>/dev/null || true
  for _ in $(seq 1 150); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -9 "$pid" 2>/dev/null || true
  rm -f "$dir/nacos.pid"
  exit 1
}
while :; do
  kill -0 "$pid" 2>/dev/null || fail "nacos exited during start-up"
  if [[ $(curl -s -m 2 "$base/v3/admin/core/state/readiness" 2>/dev/null) == *'"data":"ok"'* ]]; then
    break
  fi
  (( ($(date +%s%N) - begin) / 1000000000 < timeout )) || fail "not ready after ${timeout}s"
  sleep 0.3
done
ms=$(( ($(date +%s%N) - begin) / 1000000 ))

if $auth; then
  # 3.x: the first admin is created by this call (HTTP 200 either way; the body says
  # {"code":409,"message":"have admin user cannot use it."} once one exists)
  out=$(curl -s -m 10 -X POST "$base/v3/auth/user/admin" --data-urlencode "password=$password") || true
  echo "start.sh: admin init: $out" >&2
  login=$(curl -s -m 10 -X POST "$base/v1/auth/login" -d username=nacos --data-urlencode "password=$password") || true
  [[ $login == *'"accessToken"'* ]] || fail "login as nacos failed: $login"
fi

echo "start.sh: nacos ready at $base (pid $pid, ${ms} ms, auth=$auth, log $log)" >&2
echo "$pid"
