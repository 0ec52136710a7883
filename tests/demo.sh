#!/usr/bin/env bash
# The main job: builds laneway and runs it with examples/ applied, then shows the lanes it
# resolved.
#
# Without KUBECONFIG: starts a local control plane (tests/envtest), a gateway (Traefik,
# tests/traefik) and one small HTTP server per example pod, all in a private network namespace
# holding the pod IPs (tests/dubbo/netns.sh), and ends by sending requests through the gateway
# and printing which pod answered each. With KUBECONFIG: uses that cluster, applies the CRDs and
# examples and shows what laneway resolved (your gateway serves the routes).
#
# Keeps the operator running until Ctrl-C; with --once it stops everything after showing.
set -euo pipefail
cd "$(dirname "$0")/.."
. tests/demo-lib.sh "$@"
port=${LANEWAY_DEMO_METRICS_PORT:-8080}

if [ -z "${KUBECONFIG:-}" ] && [ -z "${LANEWAY_NETNS:-}" ]; then
  cargo build --locked --release --bin laneway
  tests/envtest/build.sh >/dev/null
  tests/traefik/build.sh >/dev/null
  in_netns "$@"
fi

pids=()
local_plane=false
if [ -n "${LANEWAY_NETNS:-}" ]; then
  local_plane=true
  state=$(mktemp -d "${TMPDIR:-/tmp}/laneway-demo.XXXXXX")
  eval "$(tests/envtest/start.sh "$state/envtest")"
else
  cargo build --locked --release --bin laneway
  state=$(mktemp -d "${TMPDIR:-/tmp}/laneway-demo.XXXXXX")
  export PATH="$(tests/envtest/build.sh | tail -n1):$PATH"
fi
stop() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  if $local_plane; then
    tests/traefik/stop.sh "$state/traefik" >/dev/null 2>&1 || true
    tests/envtest/stop.sh "$state/envtest" >/dev/null 2>&1 || true
  fi
}
trap stop EXIT
echo "== control plane: $(kubectl config view --minify -o jsonpath='{.clusters[0].cluster.server}')"

kubectl apply --server-side -f crds/ >/dev/null
established laneroutes.laneway.io tagrules.laneway.io laneentries.laneway.io

web=127.0.0.1:8000
if $local_plane; then
  # The shop's gateway: Traefik, serving the Gateway `shop` that the example LaneEntry names.
  kubectl apply --server-side -f "$(tests/traefik/build.sh --crds | tail -n1)" >/dev/null
  established httproutes.gateway.networking.k8s.io gateways.gateway.networking.k8s.io gatewayclasses.gateway.networking.k8s.io
  kubectl apply --server-side -f examples/00-namespace.yaml >/dev/null
  gateway shop "$web"
fi

target/release/laneway --metrics-addr "127.0.0.1:$port" --lease-namespace default \
  >"$state/laneway.log" 2>&1 &
operator=$!
pids+=("$operator")

kubectl apply --server-side -f examples/ >/dev/null
if $local_plane; then
  # No kubelet runs here: each Deployment's pods are reported running and ready, and each
  # answers HTTP with its name at its pod IP.
  python3 tests/fake-kubelet.py --serve 198.18.0.10 shop >"$state/pods.log" 2>&1 &
  pids+=("$!")
  until grep -q '^serving' "$state/pods.log"; do
    kill -0 "${pids[-1]}" 2>/dev/null || { cat "$state/pods.log"; exit 1; }
    sleep 0.1
  done
fi

echo "== waiting for laneway to resolve every lane"
for _ in $(seq 1 300); do
  resolved=$(kubectl get laneroutes -n shop -o jsonpath='{range .items[*]}{.status.observedGeneration}{" "}{end}' | wc -w)
  [ "$resolved" -ge 4 ] && break
  sleep 0.1
done
kubectl get laneroutes,tagrules,laneentries -n shop
echo
echo "== subsets per lane (service=source/ready endpoints)"
kubectl get laneroutes -n shop -o jsonpath='{range .items[*]}{.status.lane}{":"}{range .status.services[*]}{"  "}{.name}={.source}/{.endpoints}{end}{"\n"}{end}'

if $local_plane; then
  ask() { # path [lane]: the answering pod, or the status when no pod answered
    local h=()
    [ -n "${2:-}" ] && h=(-H "x-lane: $2")
    local out code
    out=$(curl -s -w '\n%{http_code}' -H 'Host: shop.example.com' "${h[@]}" "http://$web$1")
    code=${out##*$'\n'}
    out=${out%$'\n'*}
    if [ "$code" = 200 ]; then echo "${out%$'\n'}"; else echo "HTTP $code"; fi
  }
  echo
  echo "== waiting for the gateway to accept the routes"
  for _ in $(seq 1 300); do
    [ "$(ask /orders dev-alice)" = order-alice-0 ] && break
    sleep 0.1
  done
  echo
  echo "== requests to shop.example.com through the gateway ($web)"
  printf '%-18s %-8s %s\n' "x-lane" "path" "answered by"
  for req in "- /" "- /orders" "dev-alice /orders" "dev-alice /users" "dev-alice /pay" \
             "feature-x /users" "dev-bob /users" "dev-bob /pay" "gray /orders" "gray /pay"; do
    lane=${req%% *} path=${req#* }
    [ "$lane" = - ] && lane=""
    printf '%-18s %-8s %s\n' "${lane:-(none)}" "$path" "$(ask "$path" "$lane")"
  done
  echo
  echo "== 200 requests to /orders without x-lane (gray takes 5%)"
  for _ in $(seq 200); do ask /orders; done | sort | uniq -c | awk '{printf "  %-14s %s\n", $2, $1}'
  echo
  echo "Try it (the gateway and pods live in this demo's network namespace):"
  echo "  nsenter --net=/proc/$$/ns/net curl -H 'Host: shop.example.com' -H 'x-lane: dev-alice' http://$web/orders"
  echo "  nsenter --net=/proc/$$/ns/net curl -H 'Host: shop.example.com' http://$web/users"
  echo "  nsenter --net=/proc/$$/ns/net env KUBECONFIG=$KUBECONFIG $(command -v kubectl) get laneentries -n shop"
fi
echo
echo "== ready in $(($(date +%s) - LANEWAY_DEMO_STARTED))s; operator log: $state/laneway.log; metrics: http://127.0.0.1:$port/metrics"
if ! $once; then
  echo "laneway keeps running; press Ctrl-C to stop"
  wait "$operator"
fi
