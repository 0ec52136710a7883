#!/usr/bin/env bash
# Build the Nacos test server (nacos-harness.jar + lib/) into a cache directory outside the
# repository, keyed by the hash of pom.xml and src/. Skips the build when that directory exists.
# Logs go to stderr; the last line on stdout is the path of nacos-harness.jar.
#
#   JAR=$(tests/nacos/build.sh | tail -n1)
#   java -Dnacos.home=/tmp/nacos -Dnacos.server.main.port=8848 -jar "$JAR"   # or use start.sh
#
# Env: LANEWAY_TOOLS_DIR (default ~/.cache/laneway/tools), MVN (default mvn).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
tools=${LANEWAY_TOOLS_DIR:-$HOME/.cache/laneway/tools}
mvn=${MVN:-mvn}

hash=$(cd "$here" && { echo pom.xml; cat pom.xml; find src -type f | LC_ALL=C sort | while read -r f; do
  echo "$f"; cat "$f"; done; } | sha256sum | cut -c1-16)
out="$tools/nacos-$hash"

if [[ -f "$out/nacos-harness.jar" ]]; then
  echo "nacos harness: cached at $out" >&2
  echo "$out/nacos-harness.jar"
  exit 0
fi

command -v java >/dev/null || { echo "build.sh: java (17+) is required" >&2; exit 1; }
command -v "$mvn" >/dev/null || { echo "build.sh: maven is required" >&2; exit 1; }

mkdir -p "$tools"
work=$(mktemp -d "$tools/.build-nacos-$hash.XXXXXX")
trap 'rm -rf "$work"' EXIT
cp -r "$here/pom.xml" "$here/src" "$work/"

echo "nacos harness: building in $work" >&2
start=$(date +%s)
(cd "$work" && nice "$mvn" -q -B -Dstyle.color=never package) >&2
mkdir -p "$work/out"
cp "$work/target/nacos-harness.jar" "$work/out/"
cp -r "$work/target/lib" "$work/out/lib"
# publish atomically; a concurrent build of the same hash may have won the race
if ! mv -T "$work/out" "$out" 2>/dev/null; then
  [[ -f "$out/nacos-harness.jar" ]] || { echo "build.sh: cannot create $out" >&2; exit 1; }
fi
echo "nacos harness: built in $(( $(date +%s) - start )) s at $out" >&2
echo "$out/nacos-harness.jar"
