#!/usr/bin/env bash
# Smoke test for the standalone EndpointSlice controller: starts a fresh
# envtest (kube-apiserver + etcd) in a temp dir, runs the controller against
# it, and checks that a selector Service gets a managed EndpointSlice whose
# endpoints and ready conditions follow the pods. No kubelet runs, so the test
# sets pod status itself. Also measures how long a readiness flip takes to
# show up in the slice. Exits non-zero on the first failure.
#   tests/endpointslice/smoke.sh            (FLIPS=N, default 10; KEEP=1 keeps the temp dir)
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
flips=${FLIPS:-10}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/endpointslice-smoke.XXXXXX")
ctrl_pid='' watch_pids=()

cleanup() {
  local rc=$?
  [ "${#watch_pids[@]}" -gt 0 ] && kill "${watch_pids[@]}" 2>/dev/null
  if [ -n "$ctrl_pid" ] && kill -0 "$ctrl_pid" 2>/dev/null; then
    kill -TERM "$ctrl_pid"; wait "$ctrl_pid" 2>/dev/null || true
  fi
  "$root/tests/envtest/stop.sh" "$tmp/envtest" 2>/dev/null || true
  if [ "$rc" -ne 0 ]; then
    echo "smoke: FAILED; last controller log lines ($tmp/controller.log):" >&2
    tail -n 20 "$tmp/controller.log" >&2 2>/dev/null || true
  fi
  if [ "${KEEP:-0}" = 1 ] || [ "$rc" -ne 0 ]; then
    echo "smoke: kept $tmp" >&2
  else
    rm -rf "$tmp"
  fi
  exit "$rc"
}
trap cleanup EXIT
fail() { echo "smoke: FAIL: $*" >&2; exit 1; }
now() { echo "$EPOCHREALTIME"; }
ms() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.0f", (b - a) * 1000 }'; }
# Pod status as a kubelet would write it. $3: Ready condition's lastTransitionTime.
set_status() {  # pod ready(True|False) [lastTransitionTime]
  local ltt=${3:+,\"lastTransitionTime\":\"$3\"} ip=10.244.0.1${1#web-}
  kubectl -n "$ns" patch pod "$1" --subresource=status --type=merge -p \
    "{\"status\":{\"phase\":\"Running\",\"podIP\":\"$ip\",\"podIPs\":[{\"ip\":\"$ip\"}],\"conditions\":[{\"type\":\"Ready\",\"status\":\"$2\"$ltt}]}}" >/dev/null
}
endpoints() {  # "ip=ready/serving/terminating node pod" per endpoint, sorted
  kubectl get endpointslices "${sel[@]}" -o jsonpath='{range .items[*]}{range .endpoints[*]}{.addresses[0]}={.conditions.ready}/{.conditions.serving}/{.conditions.terminating} {.nodeName} {.targetRef.name}{"\n"}{end}{end}' | sort
}
wait_for() {  # description expected-output command...
  local what=$1 want=$2 got; shift 2
  local t0; t0=$(now)
  while :; do
    got=$("$@" 2>/dev/null || true)
    [ "$got" = "$want" ] && return 0
    [ "$(ms "$t0" "$(now)")" -lt 30000 ] || fail "$what: want
$want
got
$got"
    sleep 0.05
  done
}

eval "$("$root/tests/envtest/start.sh" "$tmp/envtest")"
bin=$("$here/build.sh" | tail -n1)

"$bin/endpointslice-controller" --metrics-addr 127.0.0.1:0 -v=2 \
  >"$tmp/controller.out" 2>"$tmp/controller.log" &
ctrl_pid=$!
t0=$(now)
until grep -qx 'endpointslice-controller ready' "$tmp/controller.out"; do
  kill -0 "$ctrl_pid" 2>/dev/null || fail "controller exited before becoming ready"
  [ "$(ms "$t0" "$(now)")" -lt 60000 ] || fail "controller not ready after 60s"
  sleep 0.05
done
echo "smoke: controller ready after $(ms "$t0" "$(now)") ms (pid $ctrl_pid)" >&2
sleep 2
echo "smoke: controller RSS at idle (synced, empty cluster): $(( $(awk '/^VmRSS/ { print $2 }' "/proc/$ctrl_pid/status") / 1024 )) MB" >&2
metrics=$(sed -n 's/.*"serving metrics" addr="\([^"]*\)".*/\1/p' "$tmp/controller.log" | head -n1)
[ -n "$metrics" ] || fail "no metrics address in the controller log"

ns=eps-smoke
sel=(-n "$ns" -l 'kubernetes.io/service-name=web,endpointslice.kubernetes.io/managed-by=endpointslice-controller.k8s.io')
kubectl create namespace "$ns" >/dev/null
kubectl apply -f - >/dev/null <<YAML
apiVersion: v1
kind: Node
metadata: {name: smoke-node, labels: {kubernetes.io/hostname: smoke-node}}
---
apiVersion: v1
kind: Service
metadata: {name: web, namespace: $ns}
spec:
  selector: {app: web}
  ports: [{name: http, port: 80, targetPort: web-http}]
YAML
# A Service with no ready pods still gets a (placeholder) slice at once,
# annotated with the Service's creationTimestamp.
svc_created=$(kubectl -n "$ns" get svc web -o jsonpath='{.metadata.creationTimestamp}')
placeholder() {  # "<endpoint count> <trigger time>" per slice of web
  kubectl get endpointslices "${sel[@]}" -o json \
    | jq -r '.items[] | "\(.endpoints | length) \(.metadata.annotations["endpoints.kubernetes.io/last-change-trigger-time"])"'
}
wait_for "placeholder slice" "0 $svc_created" placeholder
for i in 0 1 2; do
  kubectl apply -f - >/dev/null <<YAML
apiVersion: v1
kind: Pod
metadata: {name: web-$i, namespace: $ns, labels: {app: web}}
spec:
  nodeName: smoke-node
  containers:
  - name: web
    image: registry.invalid/none:1
    ports: [{name: web-http, containerPort: 8080}]
YAML
done

ltt0=$(date -u -d '-1 min' +%Y-%m-%dT%H:%M:%SZ)
set_status web-0 True "$ltt0"
set_status web-1 True "$ltt0"
set_status web-2 False "$ltt0"
wait_for "initial endpoints" "10.244.0.10=true/true/false smoke-node web-0
10.244.0.11=true/true/false smoke-node web-1
10.244.0.12=false/false/false smoke-node web-2" endpoints
slice=$(kubectl get endpointslices "${sel[@]}" -o jsonpath='{.items[0].metadata.name}')
[ "$(kubectl get endpointslices "${sel[@]}" -o name | wc -l)" = 1 ] || fail "expected exactly one EndpointSlice"
got=$(kubectl -n "$ns" get endpointslice "$slice" -o jsonpath='{.addressType} {.ports[0].name} {.ports[0].port} {.ports[0].protocol} {.metadata.ownerReferences[0].kind}/{.metadata.ownerReferences[0].name} {.metadata.labels.endpointslice\.kubernetes\.io/managed-by} {.metadata.managedFields[*].manager}')
# managedFields' manager comes from the User-Agent, as does the audit log's userAgent.
[ "$got" = "IPv4 http 8080 TCP Service/web endpointslice-controller.k8s.io endpointslice-controller" ] || fail "slice fields: $got"
echo "smoke: slice $slice: $got" >&2
trig() { kubectl -n "$ns" get endpointslice "$slice" -o jsonpath='{.metadata.annotations.endpoints\.kubernetes\.io/last-change-trigger-time}'; }
[ "$(trig)" = "$ltt0" ] || fail "last-change-trigger-time '$(trig)', want the pods' Ready lastTransitionTime $ltt0"
echo "smoke: last-change-trigger-time: Service creationTimestamp on the placeholder slice, then the pods' Ready lastTransitionTime" >&2

# Readiness flips of web-2, timed with two raw watches (jq stamps each event
# as it arrives): one on the pod, one on the slice. Pod event -> slice event
# is the controller's reaction as a watcher sees it; "kubectl patch start"
# also counts kubectl's own startup. Each flip gets a Ready
# lastTransitionTime 1s after the previous one (the field has second
# precision), which the controller copies into last-change-trigger-time.
stamped_watch() {  # collection-path name jq-filter out
  local rv; rv=$(kubectl get --raw "$1" | jq -r .metadata.resourceVersion)
  kubectl get --raw "$1?watch=1&resourceVersion=$rv&fieldSelector=metadata.name%3D$2" 2>/dev/null \
    > >(jq --unbuffered -r "\"\\(now) \\($3)\"" >"$4") &
  watch_pids+=("$!")
}
watch_pids=()
stamped_watch "/apis/discovery.k8s.io/v1/namespaces/$ns/endpointslices" "$slice" \
  '[.object.endpoints[]? | select(.targetRef.name == "web-2") | .conditions.ready][0]' "$tmp/slice-watch.log"
stamped_watch "/api/v1/namespaces/$ns/pods" web-2 \
  '[.object.status.conditions[]? | select(.type == "Ready") | .status][0] | ascii_downcase' "$tmp/pod-watch.log"
sleep 0.5
first_after() {  # file line-count value -> timestamp of the first newer event with that value
  tail -n +"$(($2 + 1))" "$1" | awk -v w="$3" '$2 == w { print $1; f = 1; exit } END { exit !f }'
}
: >"$tmp/flips"
state=False base=$(date -u -d '-1 min' +%s)
for i in $(seq "$flips"); do
  if [ "$state" = False ]; then state=True; else state=False; fi
  want=$(tr '[:upper:]' '[:lower:]' <<<"$state")
  ltt=$(date -u -d "@$((base + i))" +%Y-%m-%dT%H:%M:%SZ)
  sl=$(wc -l <"$tmp/slice-watch.log") pl=$(wc -l <"$tmp/pod-watch.log")
  tp=$(now); set_status web-2 "$state" "$ltt"
  until te=$(first_after "$tmp/slice-watch.log" "$sl" "$want") && tpod=$(first_after "$tmp/pod-watch.log" "$pl" "$want"); do
    [ "$(ms "$tp" "$(now)")" -lt 30000 ] || fail "flip $i to $state not seen in the slice"
    sleep 0.01
  done
  echo "$(ms "$tpod" "$te") $(ms "$tp" "$te")" >>"$tmp/flips"
  [ "$(trig)" = "$ltt" ] || fail "flip $i: last-change-trigger-time '$(trig)', want $ltt"
  sleep 0.2
done
kill "${watch_pids[@]}" 2>/dev/null; watch_pids=()
stats() {  # column of $tmp/flips -> "median X ms, min Y ms, max Z ms"
  cut -d' ' -f"$1" "$tmp/flips" | sort -n | awk '{ v[NR] = $1 } END { printf "median %d ms, min %d ms, max %d ms", v[int((NR + 1) / 2)], v[1], v[NR] }'
}
echo "smoke: readiness flip (n=$flips): pod watch event -> slice watch event $(stats 1); kubectl patch start -> slice event $(stats 2)" >&2
echo "smoke: last-change-trigger-time follows each flip's lastTransitionTime" >&2

# Two more flips: one whose Ready lastTransitionTime is not newer than the
# last one the controller saw, one with none at all (the API server does not
# fill it in). Either way the controller has no trigger time and drops the
# annotation from the slice it writes.
flip_wait() {  # pod-ready(True|False) [lastTransitionTime]
  set_status web-2 "$@"
  wait_for "flip web-2 to $1" "$(tr '[:upper:]' '[:lower:]' <<<"$1")" \
    kubectl -n "$ns" get endpointslice "$slice" -o jsonpath='{.endpoints[?(@.targetRef.name=="web-2")].conditions.ready}'
}
if [ "$state" = False ]; then state=True; else state=False; fi
flip_wait "$state" "$ltt"
[ -z "$(trig)" ] || fail "annotation kept after a flip with an unchanged lastTransitionTime: '$(trig)'"
if [ "$state" = False ]; then state=True; else state=False; fi
flip_wait "$state"
[ -z "$(trig)" ] || fail "annotation kept after a flip without lastTransitionTime: '$(trig)'"
echo "smoke: no newer lastTransitionTime (same second, or none) -> annotation removed" >&2

# A fourth pod joins the slice; a pod that turns terminal (phase Failed)
# leaves it.
kubectl apply -f - >/dev/null <<YAML
apiVersion: v1
kind: Pod
metadata: {name: web-3, namespace: $ns, labels: {app: web}}
spec:
  nodeName: smoke-node
  containers: [{name: web, image: registry.invalid/none:1, ports: [{name: web-http, containerPort: 8080}]}]
YAML
set_status web-3 True
wait_for "fourth pod" 4 sh -c "kubectl get endpointslices -n $ns -l kubernetes.io/service-name=web -o jsonpath='{range .items[*].endpoints[*]}x{\"\n\"}{end}' | wc -l"
kubectl -n "$ns" patch pod web-0 --subresource=status --type=merge -p '{"status":{"phase":"Failed"}}' >/dev/null
wait_for "failed pod removed" 3 sh -c "kubectl get endpointslices -n $ns -l kubernetes.io/service-name=web -o jsonpath='{range .items[*].endpoints[*]}x{\"\n\"}{end}' | wc -l"
[ -z "$(trig)" ] || fail "annotation kept after pod changes that are not readiness transitions: '$(trig)'"

rss=$(awk '/^VmRSS/ { print $2 }' "/proc/$ctrl_pid/status")
echo "smoke: controller RSS after the test: $((rss / 1024)) MB" >&2
curl -fsS "$metrics" >"$tmp/metrics" || fail "cannot scrape $metrics"
grep -E '^endpointslice_controller_api_requests_total|^endpoint_slice_controller_syncs|^endpoint_slice_controller_changes' "$tmp/metrics" | sed 's/^/smoke: metric /' >&2
grep -q '^endpoint_slice_controller_syncs{result="success"}' "$tmp/metrics" || fail "no endpoint_slice_controller_syncs metric"
grep -q 'endpointslice_controller_api_requests_total{client="controller",code="201",resource="endpointslices",verb="create"}' "$tmp/metrics" \
  || fail "no counted EndpointSlice create"

kill -TERM "$ctrl_pid"
rc=0; wait "$ctrl_pid" || rc=$?
pid=$ctrl_pid; ctrl_pid=''
[ "$rc" = 0 ] || fail "controller exited $rc on SIGTERM"
grep -q '"stopped"' "$tmp/controller.log" || fail "no clean shutdown in the log"
echo "smoke: controller (pid $pid) stopped cleanly on SIGTERM" >&2
echo "smoke: OK" >&2
