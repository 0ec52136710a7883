#!/usr/bin/env bash
# Build kstatus (cmd/kstatus) and argocd-lua (cmd/argocd-lua) from the pinned
# Go modules into a cache dir outside the repo, keyed by a hash of the inputs:
#   ${LANEWAY_TOOLS_DIR:-$HOME/.cache/laneway/tools}/<hash>/bin/{kstatus,argocd-lua}
# Skips the build when those binaries already exist. Prints the bin dir as the
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
if [ -x "$out/bin/kstatus" ] && [ -x "$out/bin/argocd-lua" ]; then
  echo "$out/bin"
  exit 0
fi

mkdir -p "$tools"
exec 9>"$tools/.$hash.lock"
command -v flock >/dev/null && flock 9    # serialize concurrent builds
if [ ! -x "$out/bin/kstatus" ] || [ ! -x "$out/bin/argocd-lua" ]; then
  k8s=$(awk '$1 == "k8s.io/client-go" { print $2; exit }' go.mod)  # e.g. v0.34.4
  tmp=$(mktemp -d "$tools/.build-$hash.XXXXXX")
  trap 'rm -rf "$tmp"' EXIT
  echo "build.sh: building kstatus + argocd-lua (client-go $k8s) into $out" >&2
  start=$SECONDS
  mkdir -p "$tmp/bin"
  CGO_ENABLED=0 nice -n 10 go build -mod=readonly -trimpath -ldflags "-s -w" \
    -o "$tmp/bin/" ./cmd/kstatus ./cmd/argocd-lua >&2
  rm -rf "$out"
  mv "$tmp" "$out"
  echo "build.sh: built in $((SECONDS - start))s" >&2
fi
echo "$out/bin"
