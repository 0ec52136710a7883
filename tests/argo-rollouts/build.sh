#!/usr/bin/env bash
# Build the Argo Rollouts controller (github.com/argoproj/argo-rollouts/cmd/rollouts-controller,
# the version go.mod pins) into a cache dir outside the repo, with its CRDs beside it, keyed by a
# hash of the inputs:
#   ${LANEWAY_TOOLS_DIR:-$HOME/.cache/laneway/tools}/argo-rollouts-<hash>/{bin/rollouts-controller,crds/}
# Skips the build when they exist. Prints that directory as the last (only) line on stdout; all
# progress goes to stderr. Usage: ARGO=$(build.sh)
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/../go-tool.sh"

build() {
  local module=github.com/argoproj/argo-rollouts version
  version=$(awk -v m=$module '$1 == m { print $2; exit }' go.mod)
  echo "build.sh: building rollouts-controller ($module $version) into $out" >&2
  go_build "$1/bin" "-s -w" $module/cmd/rollouts-controller
  mkdir -p "$1/crds"
  cp "$(go list -m -f '{{.Dir}}' $module)"/manifests/crds/*-crd.yaml "$1/crds/"
  chmod -R u+w "$1/crds"
}
go_tool "argo-rollouts-$hash" . bin/rollouts-controller crds/rollout-crd.yaml
