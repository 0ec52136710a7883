#!/usr/bin/env bash
# Runs every test against a real control plane, ZooKeeper and Dubbo peers (see in-cluster.sh).
# Extra arguments go to `cargo test`, e.g. `tests/run.sh --test dubbo`.
set -euo pipefail
cd "$(dirname "$0")/.."
exec tests/in-cluster.sh cargo test --locked --offline --no-fail-fast "$@"
