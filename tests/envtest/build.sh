#!/usr/bin/env bash
# Build envtest (etcd + kube-apiserver) and kubectl from the pinned Go modules
# into a cache dir outside the repo, keyed by a hash of the inputs:
#   ${LANEWAY_TOOLS_DIR:-$HOME/.cache/laneway/tools}/<hash>/bin/{envtest,kubectl}
# Skips the build when that dir already exists. Prints the bin dir as the last
# (only) line on stdout; all progress goes to stderr. Usage: BIN=$(build.sh)
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/../go-tool.sh"

build() {
  k8s_ldflags
  echo "build.sh: building envtest + kubectl ($k8s) into $out (first build takes a while)" >&2
  go_build "$1/bin" "$ld" ./cmd/envtest ./cmd/kubectl
}
go_tool "$hash" bin bin/envtest bin/kubectl
