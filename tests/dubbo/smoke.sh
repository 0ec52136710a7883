#!/usr/bin/env bash
# Self-checking end-to-end proof of the harness and of the tag-router rule format:
# real ZooKeeper + 3 real Dubbo 3.3 providers of order-service + 1 long-running consumer, all in a
# private network namespace (see netns.sh) where the "pod IPs" 198.18.0.2/3/4 live on lo.
# A rule written to /dubbo/config/dubbo/order-service.tag-router must steer the consumer's calls.
#
#   tests/dubbo/smoke.sh            # builds the harness if needed; exit 0 only if every check passes
#
# Env: SMOKE_MODE=interface (default) | instance | dubbo-default  (registration/discovery model:
#        interface-level; instance-level; Dubbo's own default = provider registers both, consumer
#        APPLICATION_FIRST)
#      SMOKE_KEEP=1 keeps the work dir (logs: zk.log, p*.log, consumer.log); JAVA_OPTS extra JVM flags.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
net=${SMOKE_NET:-198.18.0}
ips=("$net.2" "$net.3" "$net.4" "$net.5")   # p1, p2, p3, p4 (p4: static tag, last section)
mode=${SMOKE_MODE:-interface}
case "$mode" in
  interface|instance) pmode=$mode cmode=$mode ;;
  dubbo-default) pmode=all cmode=auto ;;
  *) echo "SMOKE_MODE must be interface, instance or dubbo-default" >&2; exit 2 ;;
esac
port=20880
app=order-service

if [[ "${LANEWAY_NETNS:-}" != 1 ]]; then
  t0=$(date +%s%N)
  jar=$("$here/build.sh" | tail -n1)
  echo "INFO harness jar $jar (build.sh took $(( ($(date +%s%N) - t0) / 1000000 )) ms)"
  export HARNESS_JAR=$jar
  exec "$here/netns.sh" --addr "${ips[0]}" --addr "${ips[1]}" --addr "${ips[2]}" --addr "${ips[3]}" \
    -- bash "$0" "$@"
fi

# ---------------------------------------------------------------- inside the private namespace
jar=${HARNESS_JAR:?}
work=$(mktemp -d "${TMPDIR:-/tmp}/laneway-dubbo-smoke.XXXXXX")
jopts=(-XX:TieredStopAtLevel=1 -XX:+UseSerialGC -Xmx256m -Xss512k -XX:-UsePerfData ${JAVA_OPTS:-})
zkport=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])' 2>/dev/null || echo 2181)
zk=127.0.0.1:$zkport
rule_path=/dubbo/config/dubbo/$app.tag-router
passed=0
failed=0
declare -A ppid=()
zkpid=
cpid=

now_ms() { echo $(( $(date +%s%N) / 1000000 )); }
pass() { passed=$((passed + 1)); echo "PASS $*"; }
fail() { failed=$((failed + 1)); echo "FAIL $*"; }
info() { echo "INFO $*"; }
# field KEY JSON: value of the last "KEY" in a one-line JSON object (string or scalar)
field() {
  local v
  v=$(sed -n "s/.*\"$1\":\"\\([^\"]*\\)\".*/\\1/p" <<<"$2")
  [[ -n "$v" ]] || v=$(sed -n "s/.*\"$1\":\\([^,}\"]*\\).*/\\1/p" <<<"$2")
  echo "$v"
}

cleanup() {
  set +e
  exec 5>&- 2>/dev/null
  [[ -n "$cpid" ]] && kill "$cpid" 2>/dev/null
  for p in "${ppid[@]}"; do kill "$p" 2>/dev/null; done
  for p in "${ppid[@]}" $cpid; do
    for _ in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$p" 2>/dev/null
  done
  [[ -n "$zkpid" ]] && { kill "$zkpid" 2>/dev/null; sleep 0.3; kill -9 "$zkpid" 2>/dev/null; }
  wait 2>/dev/null
  if [[ "${SMOKE_KEEP:-}" == 1 || $failed -gt 0 ]]; then
    echo "INFO logs kept in $work"
  else
    rm -rf "$work"
  fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# wait_line FILE REGEX TIMEOUT_S: wait until FILE has a line matching REGEX; prints it
wait_line() {
  local deadline=$(( $(date +%s) + $3 ))
  while (( $(date +%s) < deadline )); do
    if grep -m1 -E "$2" "$1" 2>/dev/null; then return 0; fi
    sleep 0.05
  done
  return 1
}

start_provider() { # id ip [static-tag]
  local id=$1 ip=$2 tag=(${3:+--tag "$3"})
  java "${jopts[@]}" -jar "$jar" provider --app "$app" --id "$id" --ip "$ip" --port $port --zk $zk \
    --mode "$pmode" "${tag[@]}" >"$work/$id.out" 2>"$work/$id.log" &
  ppid[$id]=$!
}

# Consumer commands. The consumer answers each command with one JSON line on consumer.out (line 1
# is its READY line). Results land in the global R (no subshells: they would lose the counter).
creq=0
csend() { echo "$*" >&5; creq=$((creq + 1)); }
cresult() {
  local want=$((creq + 1)) deadline=$(( $(date +%s) + 60 ))
  while (( $(wc -l <"$work/consumer.out") < want )); do
    if (( $(date +%s) >= deadline )); then R='{"error":"consumer timeout"}'; return; fi
    if ! kill -0 "$cpid" 2>/dev/null; then R='{"error":"consumer died"}'; return; fi
    sleep 0.02
  done
  R=$(sed -n "${want}p" "$work/consumer.out")
}
ccmd() { csend "$@"; cresult; }

# expect_call NAME TAG N WANT_OUTCOMES [force]
expect_call() {
  local name=$1 tag=$2 n=$3 want=$4 force=${5:-}
  ccmd call "$tag" "$n" $force
  if [[ $(field outcomes "$R") == "$want" ]]; then pass "$name: $R"; else fail "$name: want outcomes $want, got $R"; fi
}

# put_rule FILE: write the rule, print the epoch ms at which the write request was sent
put_rule() {
  local line
  line=$(java "${jopts[@]}" -jar "$jar" zkput --zk $zk --path $rule_path --file "$1" 2>>"$work/zkput.log")
  awk '{print $5}' <<<"$line"
}

# write_and_await NAME FILE TAG WANT: issue "await" on the consumer, write the rule, report latency
write_and_await() {
  local name=$1 file=$2 tag=$3 want=$4 wrote at
  csend await "$tag" "$want" 15000
  sleep 0.2
  wrote=$(put_rule "$file")
  cresult
  at=$(field at "$R")
  if [[ $(field ok "$R") == true ]]; then
    pass "$name: routing followed the write after $((at - wrote)) ms (batches=$(field batches "$R"))"
    echo "LATENCY $((at - wrote)) ms: $name"
  else
    fail "$name: routing did not follow within 15 s: $R"
  fi
}

rule() { # FILE TAGNAME ADDRESS FORCE [ENABLED]
  cat >"$1" <<EOF
configVersion: v3.0
key: $app
force: $4
enabled: ${5:-true}
runtime: true
tags:
  - name: $2
    addresses: ["$3"]
EOF
}

info "work dir $work; zookeeper $zk; pod IPs ${ips[*]}; mode $mode"

# ---------------------------------------------------------------- start everything
t=$(now_ms)
java "${jopts[@]}" -jar "$jar" zk --port "$zkport" --dir "$work/zk" >"$work/zk.out" 2>"$work/zk.log" &
zkpid=$!
wait_line "$work/zk.out" '^READY' 30 >/dev/null || { fail "zookeeper did not start (see $work/zk.log)"; exit 1; }
info "zookeeper ready in $(( $(now_ms) - t )) ms"

t=$(now_ms)
for i in 1 2 3; do start_provider "p$i" "${ips[$((i - 1))]}"; done
for i in 1 2 3; do
  if line=$(wait_line "$work/p$i.out" '^READY' 60); then
    info "$line (wall $(( $(now_ms) - t )) ms since launch of all three)"
  else
    fail "provider p$i did not start (see $work/p$i.log)"; exit 1
  fi
done
pass "3 providers ready in $(( $(now_ms) - t )) ms (launched together)"

mkfifo "$work/consumer.in"
java "${jopts[@]}" -jar "$jar" consumer --app "$app" --zk $zk --mode "$cmode" \
  <"$work/consumer.in" >"$work/consumer.out" 2>"$work/consumer.log" &
cpid=$!
exec 5>"$work/consumer.in"
wait_line "$work/consumer.out" '^READY' 60 >/dev/null || { fail "consumer did not start"; exit 1; }
info "$(head -n1 "$work/consumer.out")"

ccmd await - p1,p2,p3 20000
if [[ $(field ok "$R") == true ]]; then pass "consumer sees all 3 providers"; else fail "consumer sees: $R"; exit 1; fi

# ---------------------------------------------------------------- no rule
expect_call "no rule: untagged calls spread over all" - 30 p1,p2,p3
expect_call "no rule: gray calls fall back to all" gray 30 p1,p2,p3

# ---------------------------------------------------------------- the rule from the brief
rule "$work/rule1.yaml" gray "${ips[1]}:$port" false
write_and_await "rule gray=${ips[1]}: gray hits p2" "$work/rule1.yaml" gray p2
expect_call "rule gray=p2: gray calls all hit p2" gray 30 p2
expect_call "rule gray=p2: untagged calls never hit p2" - 30 p1,p3
expect_call "rule gray=p2: tag dev-bob (not in rule) falls back to untagged p1,p3" dev-bob 30 p1,p3
expect_call "rule gray=p2: dev-bob with dubbo.force.tag=true fails" dev-bob 5 error force
expect_call "rule gray=p2: gray with dubbo.force.tag=true hits p2" gray 10 p2 force

# ---------------------------------------------------------------- move gray to p3
rule "$work/rule2.yaml" gray "${ips[2]}:$port" false
write_and_await "rule gray=${ips[2]}: gray moves to p3" "$work/rule2.yaml" gray p3
expect_call "rule gray=p3: gray calls all hit p3" gray 30 p3
expect_call "rule gray=p3: untagged calls hit p1,p2 only" - 30 p1,p2

# ---------------------------------------------------------------- gray's pod goes away (force: false)
t=$(now_ms)
kill "${ppid[p3]}"; wait "${ppid[p3]}" 2>/dev/null || true; unset 'ppid[p3]'
info "p3 stopped (SIGTERM) in $(( $(now_ms) - t )) ms"
ccmd await gray p1,p2 15000
if [[ $(field ok "$R") == true ]]; then
  pass "force:false, p3 gone: gray falls back to p1,p2 ($(field ms "$R") ms after p3 exited)"
else
  fail "force:false, p3 gone: gray did not fall back: $R"
fi

# ---------------------------------------------------------------- force: true
rule "$work/rule3.yaml" gray "${ips[2]}:$port" true
write_and_await "rule gray=p3 force:true, p3 gone: gray fails" "$work/rule3.yaml" gray error
expect_call "force:true, p3 gone: gray calls fail" gray 10 error
expect_call "force:true, p3 gone: untagged calls hit p1,p2" - 30 p1,p2

t=$(now_ms)
start_provider p3 "${ips[2]}"
wait_line "$work/p3.out" '^READY' 60 >/dev/null || { fail "p3 did not restart"; exit 1; }
ccmd await gray p3 15000
if [[ $(field ok "$R") == true ]]; then
  pass "force:true, p3 back: gray hits p3 again ($(( $(now_ms) - t )) ms after restart began)"
else
  fail "force:true, p3 back: $R"
fi

# ---------------------------------------------------------------- delete the rule
csend await - p1,p2,p3 15000
sleep 0.2
line=$(java "${jopts[@]}" -jar "$jar" zkdel --zk $zk --path $rule_path 2>>"$work/zkput.log")
wrote=$(awk '{print $4}' <<<"$line")
cresult
if [[ $(field ok "$R") == true ]]; then
  pass "rule deleted: untagged calls return to all providers after $(( $(field at "$R") - wrote )) ms"
  echo "LATENCY $(( $(field at "$R") - wrote )) ms: delete"
else
  fail "rule deleted: $R"
fi
expect_call "no rule again: untagged spread over all" - 30 p1,p2,p3
expect_call "no rule again: gray falls back to all" gray 30 p1,p2,p3

# ---------------------------------------------------------------- edge cases laneway relies on
write_and_await "edge: rule gray=p2 again" "$work/rule1.yaml" gray p2

printf '' >"$work/empty.yaml"
put_rule "$work/empty.yaml" >/dev/null
sleep 1.5
expect_call "edge: writing an empty string keeps the old rule (gray still p2)" gray 30 p2

rule "$work/disabled.yaml" gray "${ips[1]}:$port" false false
write_and_await "edge: enabled:false switches routing off" "$work/disabled.yaml" - p1,p2,p3
expect_call "edge: enabled:false: gray spreads over all" gray 30 p1,p2,p3

write_and_await "edge: rule gray=p2 again" "$work/rule1.yaml" gray p2
cat >"$work/emptytag.yaml" <<EOF
configVersion: v3.0
key: $app
force: false
enabled: true
runtime: true
tags:
  - name: gray
    addresses: []
  - name: blue
    addresses: ["${ips[2]}:$port"]
EOF
put_rule "$work/emptytag.yaml" >/dev/null
sleep 1.5
ccmd call blue 30
blue=$(field outcomes "$R")
if [[ $blue == p3 ]]; then
  info "edge: a rule with a tag whose addresses is [] is accepted (blue -> p3): $R"
  expect_call "edge: after the addresses:[] rule, gray (no addresses) falls back to p1,p2" gray 30 p1,p2
else
  info "edge: a rule with a tag whose addresses is [] is IGNORED, the old rule stays (blue -> $blue): $R"
  expect_call "edge: after the ignored addresses:[] rule, gray still hits p2" gray 30 p2
fi

cat >"$work/notags.yaml" <<EOF
configVersion: v3.0
key: $app
force: false
enabled: true
runtime: true
tags: []
EOF
write_and_await "edge: a rule with tags: [] acts as no rule" "$work/notags.yaml" - p1,p2,p3

java "${jopts[@]}" -jar "$jar" zkdel --zk $zk --path $rule_path >/dev/null 2>>"$work/zkput.log"

# ---------------------------------------------------------------- static tag, for comparison
start_provider p4 "${ips[3]}" canary
wait_line "$work/p4.out" '^READY' 60 >/dev/null || { fail "p4 did not start"; exit 1; }
ccmd await canary p4 15000
if [[ $(field ok "$R") == true ]]; then pass "static tag: canary calls hit p4 (dubbo.provider.tag=canary)"; else fail "static tag: $R"; fi
expect_call "static tag, no rule: untagged calls never hit p4" - 40 p1,p2,p3
write_and_await "static tag: rule gray=p2 (does not name canary)" "$work/rule1.yaml" gray p2
expect_call "static tag + rule: untagged calls hit p1,p3 (p4 excluded though the rule does not name it)" - 40 p1,p3
expect_call "static tag + rule: canary (not in rule) still hits p4" canary 20 p4
java "${jopts[@]}" -jar "$jar" zkdel --zk $zk --path $rule_path >/dev/null 2>>"$work/zkput.log"

echo "$passed passed, $failed failed"
[[ $failed -eq 0 ]]
