#!/usr/bin/env bash
# Runs every test: the pure core, then the operator against a real kube-apiserver + etcd
# (tests/envtest) that this script starts and stops.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo test --locked --no-fail-fast
