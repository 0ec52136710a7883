#!/usr/bin/env bash
# The main job: builds laneway, starts a local control plane (tests/envtest) unless KUBECONFIG
# points at a cluster, installs the CRDs, runs the operator, applies examples/ and shows the
# lanes it resolved. Keeps the operator running until Ctrl-C; with --once it exits after showing.
set -euo pipefail
cd "$(dirname "$0")/.."
once=false
[ "${1:-}" = "--once" ] && once=true
started=$SECONDS

cargo build --locked --release --bin laneway
local_plane=false
if [ -z "${KUBECONFIG:-}" ]; then
  state=${LANEWAY_DEMO_DIR:-${TMPDIR:-/tmp}/laneway-demo}
  eval "$(tests/envtest/start.sh "$state")"
  local_plane=true
else
  state=$(mktemp -d "${TMPDIR:-/tmp}/laneway-demo.XXXXXX")
  export PATH="$(tests/envtest/build.sh | tail -n1):$PATH"
fi
echo "== control plane: $(kubectl config view --minify -o jsonpath='{.clusters[0].cluster.server}')"

kubectl apply --server-side -f crds/
kubectl wait --for condition=Established crd/laneroutes.laneway.io crd/tagrules.laneway.io --timeout=60s

target/release/laneway --metrics-addr 127.0.0.1:${LANEWAY_DEMO_METRICS_PORT:-8080} --lease-namespace default \
  >"$state/laneway.log" 2>&1 &
operator=$!
stop() {
  kill "$operator" 2>/dev/null || true
  wait "$operator" 2>/dev/null || true
  if $local_plane && $once; then tests/envtest/stop.sh "$state" >/dev/null 2>&1 || true; fi
}
trap stop EXIT

kubectl apply --server-side -f examples/
if $local_plane; then
  # No kubelet runs here: report the Deployments' pods as running and ready.
  python3 tests/fake-kubelet.py shop
fi

echo "== waiting for laneway to resolve every lane"
for _ in $(seq 1 300); do
  resolved=$(kubectl get laneroutes -n shop -o jsonpath='{range .items[*]}{.status.observedGeneration}{" "}{end}' | wc -w)
  [ "$resolved" -ge 4 ] && break
  sleep 0.1
done
kubectl get laneroutes,tagrules -n shop
echo
echo "== subsets per lane (service=source/ready endpoints)"
kubectl get laneroutes -n shop -o jsonpath='{range .items[*]}{.status.lane}{":"}{range .status.services[*]}{"  "}{.name}={.source}/{.endpoints}{end}{"\n"}{end}'
echo
echo "== lane EndpointSlices"
kubectl get endpointslices -n shop -l endpointslice.kubernetes.io/managed-by=controller.laneway.io
echo
echo "== ready in $((SECONDS - started))s; operator log: $state/laneway.log; metrics: http://127.0.0.1:${LANEWAY_DEMO_METRICS_PORT:-8080}/metrics"
if ! $once; then
  echo "laneway keeps running; press Ctrl-C to stop (KUBECONFIG=$KUBECONFIG)"
  wait "$operator"
fi
