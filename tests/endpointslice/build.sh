#!/usr/bin/env bash
# Build the standalone EndpointSlice controller from the pinned Go modules
# (same k8s.io/kubernetes v1.34.4 pins as tests/envtest) into a cache dir
# outside the repo, keyed by a hash of the inputs:
#   ${LANEWAY_TOOLS_DIR:-$HOME/.cache/laneway/tools}/<hash>/bin/endpointslice-controller
# Skips the build when that binary already exists. Prints the bin dir as the
# last (only) line on stdout; all progress goes to stderr. Usage: BIN=$(build.sh)
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
    for f in build.sh go.mod go.sum $(find cmd -name '*.go' | LC_ALL=C sort); do
      echo "$f"; cat "$f"
    done
  } | sha256sum | cut -c1-16
)
tools=${LANEWAY_TOOLS_DIR:-$HOME/.cache/laneway/tools}
out=$tools/$hash
if [ -x "$out/bin/endpointslice-controller" ]; then
  echo "$out/bin"
  exit 0
fi

mkdir -p "$tools"
exec 9>"$tools/.$hash.lock"
command -v flock >/dev/null && flock 9    # serialize concurrent builds
if [ ! -x "$out/bin/endpointslice-controller" ]; then
  k8s=$(awk '$1 == "k8s.io/kubernetes" { print $2; exit }' go.mod)  # e.g. v1.34.4
  minor=${k8s#v1.}; minor=${minor%%.*}
  ld="-s -w"
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ld+=" -X $pkg.gitVersion=$k8s -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
    ld+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
  done
  tmp=$(mktemp -d "$tools/.build-$hash.XXXXXX")
  trap 'rm -rf "$tmp"' EXIT
  echo "build.sh: building endpointslice-controller ($k8s) into $out" >&2
  start=$SECONDS
  mkdir -p "$tmp/bin"
  CGO_ENABLED=0 nice -n 10 go build -mod=readonly -trimpath -ldflags "$ld" \
    -o "$tmp/bin/" ./cmd/endpointslice-controller >&2
  rm -rf "$out"
  mv "$tmp" "$out"
  echo "build.sh: built in $((SECONDS - start))s" >&2
fi
echo "$out/bin"
