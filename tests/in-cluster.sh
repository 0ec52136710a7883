#!/usr/bin/env bash
# Runs a command against a real kube-apiserver + etcd with laneway's CRDs installed, inside a
# private network namespace holding the pod IPs 198.18.0.2-40 (tests/dubbo/netns.sh).
# Everything that needs the network is built first, outside: the Rust tests, the
# control plane (tests/envtest, Go), helm (tests/helm, Go), Traefik and the Gateway API CRDs
# (tests/traefik, Go), kstatus and gopher-lua (tests/gitops, Go), kube-proxy (tests/kubeproxy,
# Go), Argo Rollouts and laneway's plugin for it (tests/argo-rollouts, integrations/argo-rollouts,
# Go), Debian's Lua 5.1, nftables (`nft`, which kube-proxy runs) and Chromium with chromedriver
# (the browser check, tests/browser), the Dubbo harness (tests/dubbo, Java), Nacos (tests/nacos)
# and the Spring Cloud harness (tests/spring, Java).
# usage: tests/in-cluster.sh COMMAND [ARGS...]
set -euo pipefail
cd "$(dirname "$0")/.."

if [ -z "${LANEWAY_NETNS:-}" ]; then
  cargo test --locked --no-run --features cluster-tests
  tests/envtest/build.sh >/dev/null
  tests/helm/build.sh >/dev/null
  LANEWAY_TRAEFIK_BIN=$(tests/traefik/build.sh | tail -n1)
  LANEWAY_GATEWAY_CRDS=$(tests/traefik/build.sh --crds | tail -n1)
  LANEWAY_GITOPS_BIN=$(tests/gitops/build.sh | tail -n1)
  LANEWAY_KUBE_PROXY_BIN=$(tests/kubeproxy/build.sh | tail -n1)
  LANEWAY_ARGO_ROLLOUTS_DIR=$(tests/argo-rollouts/build.sh | tail -n1)
  LANEWAY_ARGO_PLUGIN=$(integrations/argo-rollouts/build.sh | tail -n1)
  export LANEWAY_TRAEFIK_BIN LANEWAY_GATEWAY_CRDS LANEWAY_GITOPS_BIN LANEWAY_KUBE_PROXY_BIN
  export LANEWAY_ARGO_ROLLOUTS_DIR LANEWAY_ARGO_PLUGIN
  if ! command -v lua5.1 >/dev/null || ! lua5.1 -e 'require "dkjson"' 2>/dev/null; then
    [ "$(id -u)" = 0 ] || { echo "in-cluster.sh: needs lua5.1 and lua-dkjson (apt-get install lua5.1 lua-dkjson)" >&2; exit 1; }
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq lua5.1 lua-dkjson >/dev/null 2>&1 \
      || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq lua5.1 lua-dkjson >/dev/null; }
  fi
  if ! command -v nft >/dev/null; then
    [ "$(id -u)" = 0 ] || { echo "in-cluster.sh: needs nft for kube-proxy (apt-get install nftables)" >&2; exit 1; }
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nftables >/dev/null 2>&1 \
      || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nftables >/dev/null; }
  fi
  if [ ! -x /usr/bin/chromium ] || [ ! -x /usr/bin/chromedriver ]; then
    [ "$(id -u)" = 0 ] || { echo "in-cluster.sh: needs Chromium for the browser check (apt-get install chromium chromium-driver)" >&2; exit 1; }
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null 2>&1 \
      || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null; }
  fi
  LANEWAY_DUBBO_JAR=$(tests/dubbo/build.sh | tail -n1)
  NACOS_JAR=$(tests/nacos/build.sh | tail -n1)
  LANEWAY_SPRING_JAR=$(tests/spring/build.sh | tail -n1)
  export LANEWAY_DUBBO_JAR NACOS_JAR LANEWAY_SPRING_JAR
  # the message-lane tests' brokers: Kafka (tests/kafka, KRaft mode) and RocketMQ (tests/rocketmq)
  LANEWAY_KAFKA_JAR=$(tests/kafka/build.sh | tail -n1)
  LANEWAY_ROCKETMQ_JAR=$(tests/rocketmq/build.sh | tail -n1)
  export LANEWAY_KAFKA_JAR LANEWAY_ROCKETMQ_JAR
  addrs=()
  for i in $(seq 2 40); do addrs+=(--addr "198.18.0.$i"); done
  exec tests/dubbo/netns.sh "${addrs[@]}" -- "$0" "$@"
fi

state=$(mktemp -d "${TMPDIR:-/tmp}/laneway-test.XXXXXX")
cleanup() {
  tests/envtest/stop.sh "$state" >/dev/null 2>&1 || true
  rm -rf "$state"
}
trap cleanup EXIT
eval "$(tests/envtest/start.sh "$state")"

echo "== the operator refuses to start without its CRDs"
if out=$(timeout 30 target/debug/laneway --metrics-addr 127.0.0.1:0 2>&1); then
  echo "laneway started without CRDs"; exit 1
fi
grep -q "CRDs (laneway.io/v1alpha1) are not installed" <<<"$out" || { echo "$out"; exit 1; }
echo "ok"

kubectl apply --server-side -f crds/ >/dev/null
kubectl wait --for condition=Established crd/laneroutes.laneway.io crd/tagrules.laneway.io --timeout=60s >/dev/null

"$@"
