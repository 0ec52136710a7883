#!/usr/bin/env bash
# Build the stock helm v3 CLI from the pinned Go modules in go.mod (the `tool` directive)
# into a cache dir outside the repo, keyed by a hash of the inputs:
#   ${LANEWAY_TOOLS_DIR:-$HOME/.cache/laneway/tools}/helm-<hash>/helm
# Skips the build when that file already exists. Prints the binary's path as the last (only)
# line on stdout; all progress goes to stderr. Usage: HELM=$(tests/helm/build.sh)
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/../go-tool.sh"

build() {
  local helm k8s minor pkg ld
  helm=$(awk '$1 == "helm.sh/helm/v3" { print $2; exit }' go.mod)         # e.g. v3.19.5
  k8s=$(awk '$1 == "k8s.io/client-go" { print $2; exit }' go.mod)         # e.g. v0.34.2
  minor=${k8s#v0.}; minor=${minor%%.*}
  # The same stamps helm's own Makefile sets: its version, and the Kubernetes version that
  # `helm template`/`helm lint` assume when no cluster is asked (1.<client-go minor>).
  ld="-s -w -X helm.sh/helm/v3/internal/version.version=$helm"
  ld+=" -X helm.sh/helm/v3/internal/version.gitTreeState=clean"
  for pkg in helm.sh/helm/v3/pkg/lint/rules helm.sh/helm/v3/pkg/chartutil; do
    ld+=" -X $pkg.k8sVersionMajor=1 -X $pkg.k8sVersionMinor=$minor"
  done
  echo "build.sh: building helm $helm into $out" >&2
  go_build "$1" "$ld" helm.sh/helm/v3/cmd/helm
}
go_tool "helm-$hash" helm helm
