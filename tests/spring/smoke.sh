#!/usr/bin/env bash
# Self-checking end-to-end proof of the harness and of laneway-spring-cloud: a real Nacos 3.1
# server with auth (tests/nacos), and one harness JVM running six real Spring Cloud applications on
# 127.0.0.1 that register with it over gRPC: order-service x2, user-service x2, stock-service, and a
# Spring Cloud Gateway routing /order/** to lb://order-service. The chain is
# gateway > order-service > user-service > stock-service. laneway.lanes metadata written through
# Nacos' admin API (as the operator writes it) must steer the gateway's and the services' choices.
#
#   tests/spring/smoke.sh          # builds what it needs; PASS/FAIL lines, then "N passed, N failed"
#
# Env: SMOKE_KEEP=1 keeps the work dir (nacos/, harness.log, harness.out); JAVA_OPTS extra JVM
# flags for the harness; SMOKE_LB_CACHE=on runs the harness with Spring Cloud LoadBalancer's cache.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
nacos_dir=$(cd "$here/../nacos" && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/laneway-spring-smoke.XXXXXX")
password=Smoke-$RANDOM-pass
passed=0
failed=0
hpid=
nacos_started=

pass() { passed=$((passed + 1)); echo "PASS $*"; }
fail() { failed=$((failed + 1)); echo "FAIL $*"; }
info() { echo "INFO $*"; }
now_ms() { echo $(( $(date +%s%N) / 1000000 )); }

cleanup() {
  set +e
  exec 5>&- 2>/dev/null
  if [[ -n "$hpid" ]] && kill -0 "$hpid" 2>/dev/null; then
    kill "$hpid" 2>/dev/null
    for _ in $(seq 100); do kill -0 "$hpid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$hpid" 2>/dev/null
  fi
  [[ -n "$nacos_started" ]] && "$nacos_dir/stop.sh" "$work/nacos" >/dev/null 2>&1
  wait 2>/dev/null
  if [[ "${SMOKE_KEEP:-}" == 1 || $failed -gt 0 ]]; then
    echo "INFO logs kept in $work"
  else
    rm -rf "$work"
  fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

finish() {
  echo "$passed passed, $failed failed"
  [[ $failed -eq 0 ]]
  exit
}

# free TCP ports on 127.0.0.1: "free N" prints N of them; "nacos_port" one whose Nacos set is free
free() {
  python3 - "$1" <<'EOF'
import socket, sys
socks = []
for _ in range(int(sys.argv[1])):
    s = socket.socket(); s.bind(("127.0.0.1", 0)); socks.append(s)
print(" ".join(str(s.getsockname()[1]) for s in socks))
EOF
}
nacos_port() {
  python3 - <<'EOF'
import random, socket
def free(p):
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", p)); return True
    except OSError:
        return False
    finally:
        s.close()
for _ in range(200):
    p = random.randint(21000, 30000)
    if all(free(q) for q in (p, p + 1000, p + 1001, p - 1000)):
        print(p); break
EOF
}

# ---------------------------------------------------------------- build
t0=$(now_ms)
jar=$("$here/build.sh" | tail -n1) || { fail "build the harness"; finish; }
info "harness jar $jar (build.sh took $(( $(now_ms) - t0 )) ms)"
t0=$(now_ms)
nacos_jar=$("$nacos_dir/build.sh" | tail -n1) || { fail "build the Nacos server"; finish; }
info "nacos jar $nacos_jar (build.sh took $(( $(now_ms) - t0 )) ms)"

# ---------------------------------------------------------------- Nacos, auth on
nport=$(nacos_port)
[[ -n "$nport" ]] || { fail "no free port set for Nacos"; finish; }
base=http://127.0.0.1:$nport/nacos
t0=$(now_ms)
if NACOS_JAR=$nacos_jar NACOS_ADMIN_PASSWORD=$password "$nacos_dir/start.sh" "$nport" "$work/nacos" --auth \
    > "$work/nacos-start.out" 2> "$work/nacos-start.log"; then
  nacos_started=1
  pass "nacos with auth up on 127.0.0.1:$nport ($(( $(now_ms) - t0 )) ms)"
else
  fail "nacos start"; cat "$work/nacos-start.log" >&2; finish
fi
token=$(curl -s -m 10 -X POST "$base/v1/auth/login" --data-urlencode username=nacos --data-urlencode "password=$password" \
  | python3 -c 'import json,sys; print(json.load(sys.stdin)["accessToken"])') || { fail "nacos login"; finish; }

# ---------------------------------------------------------------- the harness
read -r pA pB pD pE pF pG pH <<<"$(free 7)"
h=127.0.0.1
A=$h:$pA B=$h:$pB D=$h:$pD E=$h:$pE F=$h:$pF G=$h:$pG H=$h:$pH
cache=${SMOKE_LB_CACHE:-off}
# how long a change of marks may take to show: a Nacos push, or Spring Cloud's 35 s cache
settle=10000
[[ $cache == on ]] && settle=45000
mkfifo "$work/in"
# shellcheck disable=SC2086 # JAVA_OPTS is a list of options
java -XX:TieredStopAtLevel=1 -XX:+UseSerialGC -Xmx256m -Xss512k -XX:-UsePerfData ${JAVA_OPTS:-} -jar "$jar" \
  --nacos "127.0.0.1:$nport" --username nacos --password "$password" --lb-cache "$cache" \
  --service "order-service@$A,next=user-service" --service "order-service@$B,next=user-service" \
  --service "user-service@$D,next=stock-service" --service "user-service@$E,next=stock-service" \
  --service "stock-service@$F" \
  --gateway "$G" --route order=order-service --route user=user-service \
  < "$work/in" > "$work/harness.out" 2> "$work/harness.log" &
hpid=$!
exec 5> "$work/in"
t0=$(now_ms)

# await_count PATTERN N TIMEOUT_S: waits for N lines of harness.out matching the grep -E pattern
await_count() {
  local deadline=$(( $(date +%s) + $3 ))
  while (( $(date +%s) < deadline )); do
    (( $(grep -cE "$1" "$work/harness.out" 2>/dev/null) >= $2 )) && return 0
    kill -0 "$hpid" 2>/dev/null || return 1
    sleep 0.1
  done
  return 1
}
if await_count "^READY gateway $G " 1 240; then
  ready=$(( $(now_ms) - t0 ))
  pass "six applications READY ($ready ms from launch: $(grep -c '^READY' "$work/harness.out") READY lines)"
  sed 's/^/INFO   /' "$work/harness.out"
else
  fail "harness start"; cat "$work/harness.out"; tail -40 "$work/harness.log" >&2; finish
fi

# get PATH [curl args]: "<status> <body>" of a GET through the gateway
get() { local p=$1; shift; curl -s -m 15 -w ' %{http_code}' "$@" "http://$G$p" | tr -d '\n'; }
# steady WANT N PATH [curl args]: the next N answers are all WANT (round-robin sees every instance)
steady() {
  local want=$1 n=$2 got; shift 2
  for _ in $(seq "$n"); do
    got=$(get "$@")
    [[ "$got" == "$want" ]] || { echo "  got: $got" >&2; echo "  want: $want" >&2; return 1; }
  done
}
# converge WANT TIMEOUT_MS PATH [curl args]: until 4 answers in a row are WANT; prints the ms taken
converge() {
  local want=$1 timeout=$2 begin; begin=$(now_ms); shift 2
  while (( $(now_ms) - begin < timeout )); do
    if steady "$want" 4 "$@" 2>/dev/null; then echo $(( $(now_ms) - begin )); return 0; fi
    sleep 0.05
  done
  steady "$want" 4 "$@"
  return 1
}
# until_status CODE TIMEOUT_MS PATH [curl args]: until an answer has status CODE
until_status() {
  local code=$1 timeout=$2 begin got; begin=$(now_ms); shift 2
  while (( $(now_ms) - begin < timeout )); do
    got=$(get "$@")
    [[ "$got" == *" $code" ]] && return 0
    sleep 0.05
  done
  echo "  got: $got" >&2
  return 1
}
# metadata SERVICE IP:PORT LANES [LANE]: laneway's marks on one instance, through the v3 admin API
metadata() {
  local json="{\"laneway.lanes\":\"$3\"${4:+,\"laneway.lane\":\"$4\"}}"
  curl -s -m 10 -X PUT -H "accessToken: $token" "$base/v3/admin/ns/instance/metadata/batch" \
    --data-urlencode "serviceName=$1" --data-urlencode groupName=DEFAULT_GROUP --data-urlencode namespaceId=public \
    --data-urlencode "instances=[{\"ip\":\"${2%:*}\",\"port\":${2##*:},\"clusterName\":\"DEFAULT\"}]" \
    --data-urlencode "metadata=$json" --data-urlencode consistencyType=ephemeral
}
# instances SERVICE: "ip:port=laneway.lanes" per instance, sorted, from the admin API
instances() {
  curl -s -m 10 -H "accessToken: $token" \
    "$base/v3/admin/ns/instance/list?serviceName=$1&groupName=DEFAULT_GROUP&namespaceId=public" \
  | python3 -c '
import json, sys
d = json.load(sys.stdin)
rows = d["data"] if d.get("code") == 0 and isinstance(d.get("data"), list) else []
print(" ".join(sorted("%s:%s=%s" % (i["ip"], i["port"], i["metadata"].get("laneway.lanes", "-")) for i in rows)))'
}
# sorted WORD...: the words sorted, on one line, as instances prints them
sorted() { printf '%s\n' "$@" | LC_ALL=C sort | paste -sd' '; }
# until_instances SERVICE WANT TIMEOUT_MS: until instances SERVICE prints WANT (the admin API lags a write)
until_instances() {
  local begin got; begin=$(now_ms)
  while (( $(now_ms) - begin < $3 )); do
    got=$(instances "$1")
    [[ "$got" == "$2" ]] && return 0
    sleep 0.1
  done
  echo "  got: $got" >&2; echo "  want: $2" >&2
  return 1
}

# ---------------------------------------------------------------- not governed yet: plain round-robin
seen=$(for _ in 1 2 3 4 5 6; do get /order/hop; echo; done | sort -u | tr '\n' '|')
if [[ "$seen" == *"order-service $A > "* && "$seen" == *"order-service $B > "* && "$seen" == *"user-service $D > "* \
      && "$seen" == *"user-service $E > "* && "$seen" == *"stock-service $F 200"* ]]; then
  pass "no laneway.lanes anywhere: every instance takes requests (ungoverned services pass unchanged)"
else
  fail "no laneway.lanes anywhere: every instance takes requests"; echo "  seen: $seen" >&2
fi

# ---------------------------------------------------------------- laneway marks the instances
# A, D baseline; B, E in dev-alice; dev-bob has no instance of its own and falls back to baseline
ok=1
for m in "order-service $A baseline,dev-bob" "order-service $B dev-alice dev-alice" \
         "user-service $D baseline,dev-bob" "user-service $E dev-alice dev-alice"; do
  # shellcheck disable=SC2086 # four words on purpose
  out=$(metadata $m)
  read -r svc addr _ <<<"$m"
  if [[ "$out" != '{"code":0,"message":"success","data":{"updated":["'"${addr%:*}:${addr##*:}"':unknown:DEFAULT:ephemeral"]}}' ]]; then
    ok=0; echo "  $svc $addr: $out" >&2
  fi
done
marked=$(now_ms)
[[ $ok == 1 ]] && pass "admin API PUT /v3/admin/ns/instance/metadata/batch answers code 0, updated [ip:port:unknown:DEFAULT:ephemeral]" \
  || fail "admin API metadata/batch"
if until_instances order-service "$(sorted "$A=baseline,dev-bob" "$B=dev-alice")" 5000; then
  pass "admin API instance/list shows the marks"
else
  fail "admin API instance/list shows the marks"
fi

alice="order-service $B > user-service $E > stock-service $F 200"
baseline="order-service $A > user-service $D > stock-service $F 200"
if converge "$alice" "$settle" /order/hop -H 'x-lane: dev-alice' >/dev/null; then
  pass "x-lane: dev-alice through the gateway reaches the dev-alice instances on every hop (seen $(( $(now_ms) - marked )) ms after the marks)"
else
  fail "x-lane: dev-alice through the gateway reaches the dev-alice instances on every hop"
fi
if converge "$baseline" "$settle" /order/hop >/dev/null; then
  pass "a request in no lane reaches the baseline instances on every hop"
else
  fail "a request in no lane reaches the baseline instances on every hop"
fi
if steady "$baseline" 4 /order/hop -H 'x-lane: dev-bob'; then
  pass "x-lane: dev-bob (listed by the baseline instances) reaches them, and the lane travels on"
else
  fail "x-lane: dev-bob reaches the baseline instances"
fi
if steady "$alice" 4 /order/hop -H 'baggage: userId=7,lane=dev-alice'; then
  pass "baggage lane=dev-alice counts as the lane"
else
  fail "baggage lane=dev-alice counts as the lane"
fi
if steady "user-service $E > stock-service $F 200" 4 /user/hop -H 'x-lane: dev-alice'; then
  pass "second route: /user/hop in dev-alice reaches the dev-alice user-service"
else
  fail "second route: /user/hop in dev-alice"
fi
got=$(get /order/hop -H 'x-lane: dev-carol')
if [[ "$got" == *' 503' ]]; then
  pass "a lane no instance lists gets 503 from the gateway"
else
  fail "a lane no instance lists gets 503 from the gateway"; echo "  got: $got" >&2
fi
got=$(curl -s -m 15 -w ' %{http_code}' -H 'x-lane: dev-alice' "http://$A/hop" | tr -d '\n')
if [[ "$got" == "order-service $A > user-service $E > stock-service $F 200" ]]; then
  pass "straight to the baseline order-service in dev-alice: its call goes to the dev-alice user-service"
else
  fail "straight to the baseline order-service in dev-alice"; echo "  got: $got" >&2
fi
got=$(curl -s -m 15 -w ' %{http_code}' -H 'x-lane: dev-carol' "http://$A/hop" | tr -d '\n')
if [[ "$got" == "order-service $A > error: "*" 503" ]]; then
  pass "a service whose next hop has no instance for the lane answers 503 with the error"
  info "  $got"
else
  fail "a service whose next hop has no instance for the lane answers 503"; echo "  got: $got" >&2
fi

# ---------------------------------------------------------------- a change of marks takes effect
metadata order-service "$B" "" >/dev/null
metadata order-service "$A" "baseline,dev-bob,dev-alice" >/dev/null
changed=$(now_ms)
want="order-service $A > user-service $E > stock-service $F 200"
if converge "$want" "$settle" /order/hop -H 'x-lane: dev-alice' >/dev/null; then
  pass "re-marked (dev-alice falls back to baseline order-service, B serves nothing): seen after $(( $(now_ms) - changed )) ms (lb-cache $cache)"
else
  fail "re-marked order-service takes effect within $((settle / 1000)) s (lb-cache $cache)"
fi
metadata order-service "$A" "baseline,dev-bob" >/dev/null
metadata order-service "$B" "dev-alice" "dev-alice" >/dev/null
converge "$alice" "$settle" /order/hop -H 'x-lane: dev-alice' >/dev/null || true

# ---------------------------------------------------------------- a pod restart
echo "stop order-service@$B" >&5
if await_count "^STOPPED order-service $B " 1 30; then
  pass "stdin 'stop order-service@$B': STOPPED"
else
  fail "stdin 'stop order-service@$B'"
fi
if until_instances order-service "$A=baseline,dev-bob" 10000; then
  pass "the stopped instance is gone from Nacos"
else
  fail "the stopped instance is gone from Nacos"
fi
if until_status 503 "$settle" /order/hop -H 'x-lane: dev-alice'; then
  pass "with the dev-alice instance stopped and not re-marked, dev-alice gets 503"
else
  fail "with the dev-alice instance stopped, dev-alice gets 503"
fi
echo "start order-service@$B" >&5
t1=$(now_ms)
if await_count "^READY order-service $B " 2 60; then
  pass "stdin 'start order-service@$B': READY again ($(( $(now_ms) - t1 )) ms)"
else
  fail "stdin 'start order-service@$B'"
fi
for _ in $(seq 100); do [[ "$(instances order-service)" == *"$B="* ]] && break; sleep 0.1; done
after=$(instances order-service)
if [[ "$after" == *"$B=dev-alice"* ]]; then
  info "order-service in Nacos after the restart: $after (Nacos kept the marks of the same ip:port)"
else
  info "order-service in Nacos after the restart: $after"
fi
metadata order-service "$B" "dev-alice" "dev-alice" >/dev/null
if converge "$alice" "$settle" /order/hop -H 'x-lane: dev-alice' >/dev/null; then
  pass "the restarted instance serves dev-alice"
else
  fail "the restarted instance serves dev-alice"
fi

# ---------------------------------------------------------------- a new instance, not marked yet
echo "start order-service@$H,next=user-service" >&5
if await_count "^READY order-service $H " 1 60 \
    && until_instances order-service "$(sorted "$A=baseline,dev-bob" "$B=dev-alice" "$H=-")" 10000; then
  pass "stdin 'start order-service@$H,next=user-service': a new instance, READY and in Nacos unmarked"
  sleep 1
  if steady "$baseline" 8 /order/hop && steady "$alice" 4 /order/hop -H 'x-lane: dev-alice'; then
    pass "the unmarked instance of a governed service takes no request"
  else
    fail "the unmarked instance of a governed service takes no request"
  fi
  metadata order-service "$H" "baseline,dev-bob" >/dev/null
  begin=$(now_ms) seen=
  while (( $(now_ms) - begin < settle )) && [[ "$seen" != *"order-service $H > "* ]]; do
    seen+="$(get /order/hop)|"
    sleep 0.05
  done
  if [[ "$seen" == *"order-service $H > "* ]]; then
    pass "once marked baseline, it takes baseline requests"
  else
    fail "once marked baseline, it takes baseline requests"; echo "  seen: ${seen:0:300}" >&2
  fi
else
  fail "stdin 'start order-service@$H,next=user-service'"
fi

# ---------------------------------------------------------------- cost
rss=$(awk '/VmRSS/ {print $2}' "/proc/$hpid/status" 2>/dev/null || echo 0)
info "harness: 7 applications, RSS $(( rss / 1024 )) MiB, all READY $ready ms after launch"

# ---------------------------------------------------------------- stdin closes: everything deregisters
exec 5>&-
t1=$(now_ms)
for _ in $(seq 300); do kill -0 "$hpid" 2>/dev/null || break; sleep 0.1; done
if ! kill -0 "$hpid" 2>/dev/null && wait "$hpid"; then
  pass "stdin closed: the harness exits 0 ($(( $(now_ms) - t1 )) ms)"
else
  fail "stdin closed: the harness exits 0"
fi
hpid=
if [[ -z "$(instances order-service)$(instances user-service)$(instances stock-service)" ]]; then
  pass "and its instances are gone from Nacos"
else
  fail "its instances are gone from Nacos"; echo "  left: $(instances order-service) $(instances user-service)" >&2
fi
if grep -qE '^(ERROR|Exception)' "$work/harness.out"; then
  fail "no ERROR lines on the harness's stdout"; grep -E '^ERROR' "$work/harness.out" >&2
fi
finish
