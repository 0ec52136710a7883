#!/usr/bin/env bash
# Build kstatus, argocd-lua and kruise-lua (cmd/*) from the pinned
# Go modules into a cache dir outside the repo, keyed by a hash of the inputs:
#   ${LANEWAY_TOOLS_DIR:-$HOME/.cache/laneway/tools}/<hash>/bin/{kstatus,argocd-lua,kruise-lua}
# Skips the build when those binaries already exist. Prints the bin dir as the
# last (only) line on stdout; all progress goes to stderr. Usage: BIN=$(build.sh)
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/../go-tool.sh"

build() {
  local k8s
  k8s=$(awk '$1 == "k8s.io/client-go" { print $2; exit }' go.mod)  # e.g. v0.34.4
  echo "build.sh: building kstatus + argocd-lua + kruise-lua (client-go $k8s) into $out" >&2
  go_build "$1/bin" "-s -w" ./cmd/kstatus ./cmd/argocd-lua ./cmd/kruise-lua
}
go_tool "$hash" bin bin/kstatus bin/argocd-lua bin/kruise-lua
