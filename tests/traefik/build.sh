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

result=bin
case "${1:-}" in
  "") ;;
  --crds) result=gateway-api/standard ;;
  *) echo "usage: build.sh [--crds]" >&2; exit 2 ;;
esac
. "$(dirname "${BASH_SOURCE[0]}")/../go-tool.sh"

build() {
  local version json dir sum ld
  version=$(awk '$1 == "require" && $2 == "github.com/traefik/traefik/v3" { print $3; exit }' go.mod)
  [ -n "$version" ] || { echo "build.sh: no traefik version in go.mod" >&2; exit 1; }
  chmod 755 "$1"

  echo "build.sh: fetching Gateway API $gateway_api CRDs" >&2
  # Outside the wrapper module, so go.mod/go.sum stay untouched.
  json=$(cd "$1" && GOFLAGS=-mod=mod go mod download -json "sigs.k8s.io/gateway-api@$gateway_api")
  dir=$(sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p' <<<"$json")
  sum=$(sed -n 's/^[[:space:]]*"Sum": "\(.*\)",\{0,1\}$/\1/p' <<<"$json")
  if [ "$sum" != "$gateway_api_sum" ]; then
    echo "build.sh: sigs.k8s.io/gateway-api@$gateway_api has sum $sum, expected $gateway_api_sum" >&2
    exit 1
  fi
  mkdir -p "$1/gateway-api/standard"
  cp "$dir"/config/crd/standard/*.yaml "$1/gateway-api/standard/"
  chmod -R u+w "$1/gateway-api"
  echo "$gateway_api" >"$1/gateway-api/standard/.complete"

  if [ -x "$out/bin/traefik" ]; then
    mkdir -p "$1/bin" && cp -p "$out/bin/traefik" "$1/bin/"
  else
    echo "build.sh: building traefik $version into $out (first build takes a while)" >&2
    ld="-s -w -X github.com/traefik/traefik/v3/pkg/version.Version=$version"
    ld+=" -X github.com/traefik/traefik/v3/pkg/version.BuildDate=1970-01-01T00:00:00Z"
    go_build "$1/bin" "$ld" github.com/traefik/traefik/v3/cmd/traefik
  fi
}
go_tool "$hash" "$result" bin/traefik gateway-api/standard/.complete
