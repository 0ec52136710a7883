#!/usr/bin/env bash
# Builds a Maven test project (JAR + lib/) into a cache directory outside the repository, keyed by
# the hash of its pom.xml and src/, and skips the build when that directory exists. Logs go to
# stderr; the last line on stdout is the path of the JAR.
#
#   tests/maven-build.sh NAME PROJECT_DIR JAR_NAME
#
# Env: LANEWAY_TOOLS_DIR (default ~/.cache/laneway/tools), MVN (default mvn), LANEWAY_BUILD_SALT
# (part of the key: what else the build takes in, e.g. the hash of libraries it installs first).
# Sourced (as clients/java/build.sh does), it only sets $tools and $mvn and defines maven_work.
set -euo pipefail

tools=${LANEWAY_TOOLS_DIR:-$HOME/.cache/laneway/tools}
mvn=${MVN:-mvn}

# maven_work NAME HASH: checks that java and maven are there, then makes $work, a fresh build
# directory in $tools that is removed on exit.
maven_work() {
  command -v java >/dev/null || { echo "$1: java (17+) is required" >&2; exit 1; }
  command -v "$mvn" >/dev/null || { echo "$1: maven is required" >&2; exit 1; }
  mkdir -p "$tools"
  work=$(mktemp -d "$tools/.build-$1-$2.XXXXXX")
  trap 'rm -rf "$work"' EXIT
}

[[ "${BASH_SOURCE[0]}" == "$0" ]] || return 0

name=$1 project=$(cd "$2" && pwd) jar=$3

hash=$(cd "$project" && { echo "${LANEWAY_BUILD_SALT:-}"; echo pom.xml; cat pom.xml; find src -type f | LC_ALL=C sort | while read -r f; do
  echo "$f"; cat "$f"; done; } | sha256sum | cut -c1-16)
out="$tools/$name-$hash"

if [[ -f "$out/$jar" ]]; then
  echo "$name: cached at $out" >&2
  echo "$out/$jar"
  exit 0
fi

maven_work "$name" "$hash"
cp -r "$project/pom.xml" "$project/src" "$work/"

echo "$name: building in $work" >&2
start=$(date +%s)
(cd "$work" && nice "$mvn" -q -B -Dstyle.color=never package) >&2
mkdir -p "$work/out"
cp "$work/target/$jar" "$work/out/"
cp -r "$work/target/lib" "$work/out/lib"
# publish atomically; a concurrent build of the same hash may have won the race
if ! mv -T "$work/out" "$out" 2>/dev/null; then
  [[ -f "$out/$jar" ]] || { echo "$name: cannot create $out" >&2; exit 1; }
fi
echo "$name: built in $(( $(date +%s) - start )) s at $out" >&2
echo "$out/$jar"
