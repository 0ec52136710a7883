#!/usr/bin/env bash
# Runs every test against a real control plane, ZooKeeper, Nacos and Dubbo peers (see
# in-cluster.sh): the Argo Rollouts plugin's Go tests, `cargo test`, then the Helm chart checks
# (tests/chart.sh), the GitOps health checks on recorded objects (tests/gitops/selftest.sh) and
# the demo's own answers (tests/demo-check.sh).
# Extra arguments go to `cargo test`, e.g. `tests/run.sh --test dubbo`.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -z "${LANEWAY_NETNS:-}" ]; then
  exec tests/in-cluster.sh "$0" "$@"
fi
status=0
(cd integrations/argo-rollouts && PATH=$PATH:/usr/local/go/bin GOTOOLCHAIN=local go test -mod=readonly ./...) || status=$?
cargo test --locked --offline --no-fail-fast --features cluster-tests "$@" || status=$?
LANEWAY_BIN=target/debug/laneway tests/chart.sh || status=$?
tests/gitops/selftest.sh || status=$?
LANEWAY_BIN=target/debug/laneway tests/demo-check.sh || status=$?
exit "$status"
