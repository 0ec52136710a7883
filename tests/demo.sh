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
bin=${LANEWAY_BIN:-target/release/laneway}   # tests/run.sh checks the demo with the debug build

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

"$bin" --metrics-addr "127.0.0.1:$port" --lease-namespace default \
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
# subsets: each lane's services as service=source@the Service that serves it, with that Service's
# ready pods in brackets.
subsets() {
  echo
  echo "== subsets per lane (service=source@the Service that serves it[its pods])"
  kubectl get laneroutes -n shop -o jsonpath='{range .items[*]}{.status.lane}{" "}{range .status.services[*]}{.name}={.source}@{.servedBy}{" "}{end}{"\n"}{end}' |
    while read -r lane services; do
      printf '%s:' "$lane"
      for s in $services; do
        pods=$(kubectl get endpointslices -n shop -l "kubernetes.io/service-name=${s#*@}" \
          -o jsonpath='{range .items[*]}{range .endpoints[*]}{.conditions.ready}={.targetRef.name}{" "}{end}{end}' 2>/dev/null |
          tr ' ' '\n' | sed -n 's/^true=//p' | sort | paste -sd, -)
        printf '  %s[%s]' "$s" "$pods"
      done
      echo
    done
}
$local_plane || subsets

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
  # expect PATH [LANE]: the pods laneway says may answer (from `laneway explain`), or "HTTP 503"
  # for a lane whose subset is empty.
  expect() {
    local args=(explain -n shop --host shop.example.com --path "$1") out svc lanes
    [ -n "${2:-}" ] && args+=(-H "x-lane=$2")
    out=$("$bin" "${args[@]}" 2>/dev/null) || return 0
    svc=$(sed -n 's/.*rule [0-9]* -> \([a-z0-9-]*\):.*/\1/p' <<<"$out" | head -n1)
    if [ -n "${2:-}" ]; then
      awk -v s="$svc" '$1 == s { $1 = $2 = $3 = ""; gsub(/[ ,]+/, " "); print ($0 ~ /^ *-? *$/) ? "HTTP 503" : $0 }' <<<"$out"
    else
      # Baseline pods, and those of the lanes that take a share by weight.
      lanes=$(sed -n 's/.*by weight: //p' <<<"$out" | grep -o '[A-Za-z0-9_.-]* [0-9]*%' | cut -d' ' -f1)
      kubectl get pods -n shop -l "app=$svc" \
        -o jsonpath='{range .items[*]}{.metadata.name}{" "}{.metadata.labels.laneway\.io/lane}{"\n"}{end}' |
        while read -r pod lane; do
          if [ -z "$lane" ] || grep -qx -- "$lane" <<<"$lanes"; then printf ' %s' "$pod"; fi
        done
    fi
  }
  requests=("- /" "- /orders" "dev-alice /orders" "dev-alice /users" "dev-alice /pay"
            "feature-x /users" "dev-bob /users" "dev-bob /pay" "gray /orders" "gray /pay")
  # Every request answers as the lanes say (a few answers each, for the weighted ones), within 60 s.
  declare -A want
  for req in "${requests[@]}"; do
    lane=${req%% *} path=${req#* }
    [ "$lane" = - ] && lane=""
    want[$req]=" $(expect "$path" "$lane") "
  done
  echo
  echo "== waiting for the gateway to answer every request below as the lanes say"
  settled=false
  deadline=$((SECONDS + 60))
  while (( SECONDS < deadline )); do
    wrong=""
    for req in "${requests[@]}"; do
      lane=${req%% *} path=${req#* }
      [ "$lane" = - ] && lane=""
      for _ in 1 2 3; do
        got=$(ask "$path" "$lane")
        [[ "${want[$req]}" == *" $got "* ]] || { wrong="$req: $got"; break 2; }
      done
    done
    [ -z "$wrong" ] && { settled=true; break; }
    sleep 0.2
  done
  $settled || echo "(after 60 s the gateway still answers differently from the lanes, e.g. $wrong)"
  subsets
  echo
  echo "== requests to shop.example.com through the gateway ($web)"
  printf '%-18s %-8s %-18s %s\n' "x-lane" "path" "answered by" "laneway says"
  for req in "${requests[@]}"; do
    lane=${req%% *} path=${req#* }
    [ "$lane" = - ] && lane=""
    printf '%-18s %-8s %-18s %s\n' "${lane:-(none)}" "$path" "$(ask "$path" "$lane")" "$(xargs <<<"${want[$req]}")"
  done
  echo
  echo "== dev-alice from a browser: its preview hostname and a lane link (which sets the cookie)"
  preview_url=http://dev-alice.preview.shop.example.com/orders
  link_url="http://shop.example.com/orders?lane=dev-alice"
  preview=$(curl -s -H 'Host: dev-alice.preview.shop.example.com' "http://$web/orders")
  link=$(curl -s -D "$state/link.headers" -H 'Host: shop.example.com' "http://$web/orders?lane=dev-alice")
  cookie=$(sed -n 's/^[Ss]et-[Cc]ookie: //p' "$state/link.headers" | tr -d '\r')
  printf '%-50s %s\n' "$preview_url" "$preview" "$link_url" "$link"
  echo "the link answers with: Set-Cookie: ${cookie:-(none)}"
  echo
  echo "== 200 requests to /orders without x-lane (gray takes 5%)"
  for _ in $(seq 200); do ask /orders; done | sort | uniq -c | awk '{printf "  %-14s %s\n", $2, $1}'
  echo
  echo "Try it (the gateway and pods live in this demo's network namespace):"
  echo "  nsenter --net=/proc/$$/ns/net curl -H 'Host: shop.example.com' -H 'x-lane: dev-alice' http://$web/orders"
  echo "  nsenter --net=/proc/$$/ns/net curl -H 'Host: shop.example.com' http://$web/users"
  echo "  nsenter --net=/proc/$$/ns/net curl --connect-to ::$web $preview_url"
  echo "  nsenter --net=/proc/$$/ns/net curl -i --connect-to ::$web '$link_url'"
  echo "  nsenter --net=/proc/$$/ns/net env KUBECONFIG=$KUBECONFIG $(command -v kubectl) get laneentries -n shop"
fi
echo
echo "== ready in $(($(date +%s) - LANEWAY_DEMO_STARTED))s; operator log: $state/laneway.log; metrics: http://127.0.0.1:$port/metrics"
if ! $once; then
  echo "laneway keeps running; press Ctrl-C to stop"
  wait "$operator"
fi
