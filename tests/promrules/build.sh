#!/usr/bin/env bash
# Build promrules (cmd/promrules: Prometheus' own rule-file and PromQL parsers) from the pinned
# Go modules into a cache dir outside the repo, keyed by a hash of the inputs:
#   ${LANEWAY_TOOLS_DIR:-$HOME/.cache/laneway/tools}/<hash>/bin/promrules
# Skips the build when the binary already exists. Prints the binary's path as the last (only)
# line on stdout; all progress goes to stderr. Usage: PROMRULES=$(build.sh)
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/../go-tool.sh"

build() {
  echo "build.sh: building promrules (prometheus $(awk '$1 == "github.com/prometheus/prometheus" { print $2; exit }' go.mod)) into $out" >&2
  go_build "$1/bin" "-s -w" ./cmd/promrules
}
go_tool "$hash" bin/promrules bin/promrules
