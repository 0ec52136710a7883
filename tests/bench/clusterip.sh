#!/usr/bin/env bash
# What a ClusterIP costs a Service create: against a fresh local kube-apiserver + etcd
# (tests/envtest), creates N Services (default 2000) one request at a time with a ClusterIP,
# then N headless ones (clusterIP: None), twice each in turn, and prints the time per create.
#   tests/bench/clusterip.sh [N]
set -euo pipefail
cd "$(dirname "$0")/../.."
n=${1:-2000}
state=$(mktemp -d "${TMPDIR:-/tmp}/laneway-clusterip.XXXXXX")
trap 'tests/envtest/stop.sh "$state" >/dev/null 2>&1 || true; rm -rf "$state"' EXIT
tests/envtest/build.sh >/dev/null
eval "$(tests/envtest/start.sh "$state" 2>/dev/null)"
for mode in ip none; do
  headless=$([ "$mode" = none ] && echo '  clusterIP: None\n' || true)
  for i in $(seq 1 "$n"); do
    printf -- "---\napiVersion: v1\nkind: Service\nmetadata: {name: s-%s}\nspec:\n  selector: {app: x}\n  ports: [{name: http, port: 80}]\n$headless" "$i"
  done >"$state/$mode.yaml"
done
echo "Services created one at a time (kubectl create), $n per run, $(nproc) cores:"
for round in 1 2; do
  for mode in ip none; do
    kubectl create namespace "bench-$round-$mode" >/dev/null
    start=$(date +%s%N)
    kubectl create -n "bench-$round-$mode" -f "$state/$mode.yaml" >/dev/null
    took=$(( $(date +%s%N) - start ))
    label=$([ "$mode" = ip ] && echo "with a ClusterIP" || echo "headless        ")
    awk -v r="$round" -v l="$label" -v t="$took" -v n="$n" \
      'BEGIN { printf "  run %d, %s: %.1f s, %.2f ms per Service\n", r, l, t / 1e9, t / 1e6 / n }'
  done
done
