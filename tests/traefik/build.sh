#!/usr/bin/env bash
# Build Traefik (a Gateway API implementation) from the pinned Go module and
# fetch the Gateway API Standard-channel CRDs, into a cache dir outside the
# repo keyed by a hash of the inputs:
#   ${LANEWAY_TOOLS_DIR:-$HOME/.cache/laneway/tools}/<hash>/bin/traefik
#   ${LANEWAY_TOOLS_DIR:-$HOME/.cache/laneway/tools}/<hash>/gateway-api/standard/*.yaml
# Skips the work when both are there. Prints the bin dir (or, with --crds, the
# CRD dir) as the last (only) line on stdout; progress goes to stderr.
#   BIN=$(tests/traefik/build.sh)   CRDS=$(tests/traefik/build.sh --crds)
set -euo pipefail

# Gateway API release whose Standard CRDs are installed (module zip checksum).
gateway_api=v1.4.1
gateway_api_sum=h1:NPxFutNkKNa8UfLd2CMlEuhIPMQgDQ6DXNKG9sHbJU8=

what=bin
case "${1:-}" in
  "") ;;
  --crds) what=crds ;;
  *) echo "usage: build.sh [--crds]" >&2; exit 2 ;;
esac

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cd "$here"
export GOTOOLCHAIN=${GOTOOLCHAIN:-local}
if ! command -v go >/dev/null && [ -x /usr/local/go/bin/go ]; then
  PATH=/usr/local/go/bin:$PATH
fi
command -v go >/dev/null || { echo "build.sh: go not found" >&2; exit 1; }

hash=$(
  {
    echo traefik
    go env GOVERSION GOOS GOARCH
    for f in build.sh go.mod go.sum; do echo "$f"; cat "$f"; done
  } | sha256sum | cut -c1-16
)
tools=${LANEWAY_TOOLS_DIR:-$HOME/.cache/laneway/tools}
out=$tools/$hash
result() {
  if [ "$what" = crds ]; then echo "$out/gateway-api/standard"; else echo "$out/bin"; fi
}
if [ -x "$out/bin/traefik" ] && [ -f "$out/gateway-api/standard/.complete" ]; then
  result
  exit 0
fi

mkdir -p "$tools"
exec 9>"$tools/.$hash.lock"
command -v flock >/dev/null && flock 9    # serialize concurrent builds
if [ ! -x "$out/bin/traefik" ] || [ ! -f "$out/gateway-api/standard/.complete" ]; then
  version=$(awk '$1 == "require" && $2 == "github.com/traefik/traefik/v3" { print $3; exit }' go.mod)
  [ -n "$version" ] || { echo "build.sh: no traefik version in go.mod" >&2; exit 1; }
  tmp=$(mktemp -d "$tools/.build-$hash.XXXXXX") && chmod 755 "$tmp"
  trap 'rm -rf "$tmp"' EXIT
  start=$SECONDS

  echo "build.sh: fetching Gateway API $gateway_api CRDs" >&2
  # Outside the wrapper module, so go.mod/go.sum stay untouched.
  json=$(cd "$tmp" && GOFLAGS=-mod=mod go mod download -json "sigs.k8s.io/gateway-api@$gateway_api")
  dir=$(sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p' <<<"$json")
  sum=$(sed -n 's/^[[:space:]]*"Sum": "\(.*\)",\{0,1\}$/\1/p' <<<"$json")
  if [ "$sum" != "$gateway_api_sum" ]; then
    echo "build.sh: sigs.k8s.io/gateway-api@$gateway_api has sum $sum, expected $gateway_api_sum" >&2
    exit 1
  fi
  mkdir -p "$tmp/gateway-api/standard"
  cp "$dir"/config/crd/standard/*.yaml "$tmp/gateway-api/standard/"
  chmod -R u+w "$tmp/gateway-api"
  echo "$gateway_api" >"$tmp/gateway-api/standard/.complete"

  if [ -x "$out/bin/traefik" ]; then
    mkdir -p "$tmp/bin" && cp -p "$out/bin/traefik" "$tmp/bin/"
  else
    echo "build.sh: building traefik $version into $out (first build takes a while)" >&2
    mkdir -p "$tmp/bin"
    ld="-s -w -X github.com/traefik/traefik/v3/pkg/version.Version=$version"
    ld+=" -X github.com/traefik/traefik/v3/pkg/version.BuildDate=1970-01-01T00:00:00Z"
    CGO_ENABLED=0 nice -n 10 go build -mod=readonly -trimpath -ldflags "$ld" \
      -o "$tmp/bin/traefik" github.com/traefik/traefik/v3/cmd/traefik >&2
  fi
  rm -rf "$out"
  mv "$tmp" "$out"
  echo "build.sh: done in $((SECONDS - start))s" >&2
fi
result
