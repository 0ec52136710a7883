#!/usr/bin/env bash
# Build the Argo Rollouts traffic router plugin (laneway/laneroute) from the pinned Go modules
# into a cache dir outside the repo, keyed by a hash of the inputs:
#   ${LANEWAY_TOOLS_DIR:-$HOME/.cache/laneway/tools}/<hash>/bin/laneway-argo-rollouts
# Skips the build when the binary already exists. Prints the binary's path as the last (only)
# line on stdout; all progress goes to stderr. Usage: PLUGIN=$(build.sh)
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/../go-tool.sh"

build() {
  echo "build.sh: building laneway-argo-rollouts (argo-rollouts $(awk '$1 == "github.com/argoproj/argo-rollouts" { print $2; exit }' go.mod)) into $out" >&2
  go_build "$1/bin" "-s -w" .
}
go_tool "$hash" bin/laneway-argo-rollouts bin/laneway-argo-rollouts
