#!/usr/bin/env bash
# Build the stock helm v3 CLI from the pinned Go modules in go.mod (the `tool` directive)
# into a cache dir outside the repo, keyed by a hash of the inputs:
#   ${LANEWAY_TOOLS_DIR:-$HOME/.cache/laneway/tools}/helm-<hash>/helm
# Skips the build when that file already exists. Prints the binary's path as the last (only)
# line on stdout; all progress goes to stderr. Usage: HELM=$(tests/helm/build.sh)
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cd "$here"
export GOTOOLCHAIN=${GOTOOLCHAIN:-local}
if ! command -v go >/dev/null && [ -x /usr/local/go/bin/go ]; then
  PATH=/usr/local/go/bin:$PATH
fi
command -v go >/dev/null || { echo "build.sh: go not found" >&2; exit 1; }

hash=$(
  {
    go env GOVERSION GOOS GOARCH
    for f in build.sh go.mod go.sum; do echo "$f"; cat "$f"; done
  } | sha256sum | cut -c1-16
)
tools=${LANEWAY_TOOLS_DIR:-$HOME/.cache/laneway/tools}
out=$tools/helm-$hash
if [ -x "$out/helm" ]; then
  echo "$out/helm"
  exit 0
fi

mkdir -p "$tools"
exec 9>"$tools/.helm-$hash.lock"
command -v flock >/dev/null && flock 9    # serialize concurrent builds
if [ ! -x "$out/helm" ]; then
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
  tmp=$(mktemp -d "$tools/.build-helm-$hash.XXXXXX")
  trap 'rm -rf "$tmp"' EXIT
  echo "build.sh: building helm $helm into $out" >&2
  start=$SECONDS
  CGO_ENABLED=0 nice -n 10 go build -mod=readonly -trimpath -ldflags "$ld" \
    -o "$tmp/helm" helm.sh/helm/v3/cmd/helm >&2
  rm -rf "$out"
  mv "$tmp" "$out"
  echo "build.sh: built in $((SECONDS - start))s" >&2
fi
echo "$out/helm"
