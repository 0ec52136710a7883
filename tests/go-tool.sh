# Sourced by tests/<tool>/build.sh, which builds Go binaries from the pinned modules of its own
# directory into a cache dir outside the repo, in ${LANEWAY_TOOLS_DIR:-$HOME/.cache/laneway/tools}
# and named after $hash: a hash of the Go version, OS and arch, that build.sh, this file, go.mod,
# go.sum and every .go file in the tool's directory. All progress goes to stderr.
#
#   . "$(dirname "${BASH_SOURCE[0]}")/../go-tool.sh"    # cds to the tool's directory
#   build() { ...; }                 # fills "$1", the new cache dir; $out is where it will be
#   go_tool NAME RESULT PATH...      # NAME: the cache dir's, "$hash" or e.g. "helm-$hash"
#
# go_tool prints $tools/NAME/RESULT as the last line on stdout, after calling build unless every
# PATH is a file there already. Concurrent builds of one NAME are serialized with flock; a failed
# build leaves nothing behind.

here=$(cd "$(dirname "${BASH_SOURCE[1]}")" && pwd)
cd "$here"
export GOTOOLCHAIN=${GOTOOLCHAIN:-local}
if ! command -v go >/dev/null && [ -x /usr/local/go/bin/go ]; then
  PATH=/usr/local/go/bin:$PATH
fi
command -v go >/dev/null || { echo "build.sh: go not found" >&2; exit 1; }

tools=${LANEWAY_TOOLS_DIR:-$HOME/.cache/laneway/tools}
hash=$(
  {
    echo "${here##*/}"
    go env GOVERSION GOOS GOARCH
    for f in build.sh ../go-tool.sh go.mod go.sum $(find . -name '*.go' | LC_ALL=C sort); do
      echo "$f"; cat "$f"
    done
  } | sha256sum | cut -c1-16
)

go_tool() { # NAME RESULT PATH...
  local name=$1 result=$2 start
  shift 2
  out=$tools/$name
  if ! go_tool_has "$@"; then
    mkdir -p "$tools"
    exec 9>"$tools/.$name.lock"
    command -v flock >/dev/null && flock 9    # serialize concurrent builds
    if ! go_tool_has "$@"; then
      tmp=$(mktemp -d "$tools/.build-$name.XXXXXX")
      trap 'rm -rf "$tmp"' EXIT
      start=$SECONDS
      build "$tmp"
      rm -rf "$out"
      mv "$tmp" "$out"
      echo "build.sh: built in $((SECONDS - start))s" >&2
    fi
  fi
  echo "$out/$result"
}

go_tool_has() { # PATH...: whether each is a file in $out
  local p
  for p in "$@"; do
    [ -f "$out/$p" ] || return 1
  done
}

go_build() { # DIR LDFLAGS PACKAGE...: static binaries of the packages, into DIR
  mkdir -p "$1"
  CGO_ENABLED=0 nice -n 10 go build -mod=readonly -trimpath -ldflags "$2" -o "$1/" "${@:3}" >&2
}

# Sets k8s (go.mod's k8s.io/kubernetes version) and ld: "-s -w" plus the version stamps that
# Kubernetes' own build sets.
k8s_ldflags() {
  local minor pkg
  k8s=$(awk '$1 == "k8s.io/kubernetes" { print $2; exit }' go.mod)  # e.g. v1.34.4
  minor=${k8s#v1.}; minor=${minor%%.*}
  ld="-s -w"
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ld+=" -X $pkg.gitVersion=$k8s -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
    ld+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
  done
}
