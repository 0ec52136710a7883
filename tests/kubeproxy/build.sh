#!/usr/bin/env bash
# Build kube-proxy from the pinned Go modules (same k8s.io/kubernetes v1.34.4 pins as
# tests/envtest) into a cache dir outside the repo, keyed by a hash of the inputs:
#   ${LANEWAY_TOOLS_DIR:-$HOME/.cache/laneway/tools}/kube-proxy-<hash>/bin/kube-proxy
# Skips the build when that binary already exists. Prints the bin dir as the last (only) line
# on stdout; all progress goes to stderr. Usage: BIN=$(build.sh)
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/../go-tool.sh"

build() {
  k8s_ldflags
  echo "build.sh: building kube-proxy ($k8s) into $out (first build takes a few minutes)" >&2
  go_build "$1/bin" "$ld" ./cmd/kube-proxy
}
go_tool "kube-proxy-$hash" bin bin/kube-proxy
