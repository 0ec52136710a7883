#!/usr/bin/env bash
# Runs every test: the pure core, then the operator against a real kube-apiserver + etcd
# (tests/envtest, built from pinned Go modules) that this script starts and stops.
set -euo pipefail
cd "$(dirname "$0")/.."

state=$(mktemp -d "${TMPDIR:-/tmp}/laneway-test.XXXXXX")
cleanup() {
  tests/envtest/stop.sh "$state" >/dev/null 2>&1 || true
  rm -rf "$state"
}
trap cleanup EXIT

cargo build --locked --bin laneway
eval "$(tests/envtest/start.sh "$state")"

echo "== the operator refuses to start without its CRDs"
if out=$(timeout 30 target/debug/laneway --metrics-addr 127.0.0.1:0 2>&1); then
  echo "laneway started without CRDs"; exit 1
fi
grep -q "CRDs (laneway.io/v1alpha1) are not installed" <<<"$out" || { echo "$out"; exit 1; }

kubectl apply --server-side -f crds/ >/dev/null
kubectl wait --for condition=Established crd/laneroutes.laneway.io crd/tagrules.laneway.io --timeout=60s >/dev/null

cargo test --locked --no-fail-fast
