#!/usr/bin/env bash
# Runs every test against a real control plane, ZooKeeper, Nacos and Dubbo peers (see
# in-cluster.sh): `cargo test`, then the Helm chart checks (tests/chart.sh), the GitOps
# health checks on recorded objects (tests/gitops/selftest.sh) and the demo's own answers
# (tests/demo-check.sh).
# Extra arguments go to `cargo test`, e.g. `tests/run.sh --test dubbo`.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -z "${LANEWAY_NETNS:-}" ]; then
  exec tests/in-cluster.sh "$0" "$@"
fi
status=0
cargo test --locked --offline --no-fail-fast --features cluster-tests "$@" || status=$?
LANEWAY_BIN=target/debug/laneway tests/chart.sh || status=$?
tests/gitops/selftest.sh || status=$?
LANEWAY_BIN=target/debug/laneway tests/demo-check.sh || status=$?
exit "$status"
