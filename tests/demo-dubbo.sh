#!/usr/bin/env bash
# The front-end chain (`make demo-dubbo`): examples/dubbo-chain/ on a local control plane, with a
# gateway (Traefik), ZooKeeper and one JVM per pod (tests/dubbo's `bff` and `hop` roles, with
# laneway's Java libraries from clients/java), in a private network namespace holding the pod
# IPs. It sends requests through the gateway and prints the chain of pods that served each one.
#
# Keeps running until Ctrl-C; with --once it stops everything after showing.
set -euo pipefail
cd "$(dirname "$0")/.."
. tests/demo-lib.sh "$@"

if [ -z "${LANEWAY_NETNS:-}" ]; then
  [ -z "${KUBECONFIG:-}" ] || echo "demo-dubbo: runs on its own local control plane (KUBECONFIG is not used)" >&2
  cargo build --locked --release --bin laneway
  tests/envtest/build.sh >/dev/null
  tests/traefik/build.sh >/dev/null
  LANEWAY_DUBBO_JAR=$(tests/dubbo/build.sh | tail -n1)
  export LANEWAY_DUBBO_JAR
  in_netns "$@"
fi

pids=()
state=$(mktemp -d "${TMPDIR:-/tmp}/laneway-demo-dubbo.XXXXXX")
stop() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  tests/traefik/stop.sh "$state/traefik" >/dev/null 2>&1 || true
  tests/envtest/stop.sh "$state/envtest" >/dev/null 2>&1 || true
}
trap stop EXIT
eval "$(tests/envtest/start.sh "$state/envtest")"
java_role() { # log-name role args...: starts one JVM, waits for its READY line
  local name=$1
  shift
  java -Xms32m -Xmx160m -XX:TieredStopAtLevel=1 -jar "$LANEWAY_DUBBO_JAR" "$@" \
    >"$state/$name.out" 2>"$state/$name.log" &
  pids+=("$!")
}
await_ready() { # log-names...
  for name in "$@"; do
    for _ in $(seq 1 900); do
      grep -q '^READY' "$state/$name.out" 2>/dev/null && continue 2
      sleep 0.1
    done
    echo "demo-dubbo: $name did not start; its log:" >&2
    tail -20 "$state/$name.log" >&2
    exit 1
  done
}

kubectl apply --server-side -f crds/ >/dev/null
kubectl apply --server-side -f "$(tests/traefik/build.sh --crds | tail -n1)" >/dev/null
established laneroutes.laneway.io tagrules.laneway.io laneentries.laneway.io \
  httproutes.gateway.networking.k8s.io gateways.gateway.networking.k8s.io gatewayclasses.gateway.networking.k8s.io
kubectl create namespace chain >/dev/null
web=127.0.0.1:8000
gateway chain "$web"

java_role zk zk --port 2181 --dir "$state/zk"
await_ready zk
target/release/laneway --metrics-addr 127.0.0.1:8081 --lease-namespace default \
  --zookeeper 127.0.0.1:2181 >"$state/laneway.log" 2>&1 &
pids+=("$!")
kubectl apply --server-side -f examples/dubbo-chain/ >/dev/null

# No kubelet runs here: each Deployment's pods are reported running and ready at an address of
# this namespace, and the downward-API labels file of each is written as the kubelet would.
python3 tests/fake-kubelet.py --ips 198.18.0.10 chain >"$state/pods.log"
mkdir -p "$state/labels"
started=$(date +%s)
names=()
while read -r name ip app lane; do
  { echo "app=\"$app\""; [ "$lane" = "<none>" ] || echo "laneway.io/lane=\"$lane\""; } >"$state/labels/$name"
  case $app in
    gateway-bff) java_role "$name" bff --id "$name" --ip "$ip" --http-port 8080 --zk 127.0.0.1:2181 \
                   --next order-service --labels "$state/labels/$name" ;;
    order) java_role "$name" hop --app order-service --id "$name" --ip "$ip" --zk 127.0.0.1:2181 \
             --next user-service --labels "$state/labels/$name" ;;
    user) java_role "$name" hop --app user-service --id "$name" --ip "$ip" --zk 127.0.0.1:2181 \
            --labels "$state/labels/$name" ;;
  esac
  names+=("$name")
done < <(kubectl get pods -n chain --no-headers \
  -o custom-columns='N:.metadata.name,IP:.status.podIP,APP:.metadata.labels.app,LANE:.metadata.labels.laneway\.io/lane')
await_ready "${names[@]}"
echo "== ${#names[@]} JVMs (one per pod) ready in $(($(date +%s) - started))s"
kubectl get laneroutes,tagrules,laneentries -n chain

chain_of() { # curl args...: the pods that served the request, or the status
  local out code
  out=$(curl -s -w '\n%{http_code}' -H 'Host: chain.example.com' "$@" "http://$web/")
  code=${out##*$'\n'}
  out=${out%$'\n'*}
  if [ "$code" = 200 ]; then
    python3 -c 'import json,sys; print(" -> ".join(json.loads(sys.argv[1])["chain"]))' "$out"
  else
    echo "HTTP $code"
  fi
}
echo
echo "== waiting for the gateway and the Dubbo rules"
for _ in $(seq 1 600); do
  [ "$(chain_of -H 'x-lane: dev-alice')" = "gateway-bff-0 -> order-alice-0 -> user-feature-x-0" ] && break
  sleep 0.1
done
echo
echo "== requests to chain.example.com through the gateway ($web)"
printf '%-26s %s\n' "request" "served by"
for req in "-" "x-lane: dev-alice" "baggage: lane=dev-alice" "x-lane: feature-x" "x-lane: gray"; do
  if [ "$req" = - ]; then
    printf '%-26s %s\n' "(no lane)" "$(chain_of)"
  else
    printf '%-26s %s\n' "$req" "$(chain_of -H "$req")"
  fi
done
echo
echo "== 100 requests without a lane (gray takes 20%, and keeps it at every hop)"
for _ in $(seq 100); do chain_of; done | sort | uniq -c | awk '{c=$1; $1=""; printf "  %3s %s\n", c, $0}'
echo
echo "Try it (the gateway and pods live in this demo's network namespace):"
echo "  nsenter --net=/proc/$$/ns/net curl -H 'Host: chain.example.com' -H 'x-lane: dev-alice' http://$web/"
echo
echo "== ready in $(($(date +%s) - LANEWAY_DEMO_STARTED))s; operator log: $state/laneway.log"
if ! $once; then
  echo "laneway keeps running; press Ctrl-C to stop"
  wait "${pids[1]}"
fi
