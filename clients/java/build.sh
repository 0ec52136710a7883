#!/usr/bin/env bash
# Builds laneway's Java libraries (clients/java) with their tests and installs them into the local
# Maven repository, where the test harnesses (tests/dubbo, tests/spring) find them; the benchmarks
# module is compiled and packaged but neither run nor installed. Skips the build when this exact
# source (every pom.xml and src/ file here, hashed) was built before and the jars it installed are
# still the ones in the local repository. Logs go to stderr; the last line on stdout is the hash.
#
#   HASH=$(clients/java/build.sh | tail -n1)
#
# Env: LANEWAY_TOOLS_DIR (default ~/.cache/laneway/tools), MVN (default mvn),
# MAVEN_REPO (the local repository; default ~/.m2/repository).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$here/../../tests/maven-build.sh"
repo=${MAVEN_REPO:-$HOME/.m2/repository}
version=0.1.0
artifacts=(laneway-lane laneway-dubbo laneway-servlet laneway-spring-cloud laneway-kafka laneway-rocketmq)

hash=$(cd "$here" && { find . -name target -prune -o -type f \( -name pom.xml -o -path '*/src/*' \) -print; } \
  | LC_ALL=C sort | while read -r f; do echo "$f"; cat "$f"; done | sha256sum | cut -c1-16)
out="$tools/clients-java-$hash"

# what the local repository holds now, one "sha256  path" line per installed file
installed() {
  local a
  (cd "$repo/io/laneway" 2>/dev/null && {
    echo "laneway-clients/$version/laneway-clients-$version.pom"
    for a in "${artifacts[@]}"; do
      echo "$a/$version/$a-$version.pom"
      echo "$a/$version/$a-$version.jar"
    done
  } | xargs sha256sum 2>/dev/null) || true
}

if [[ -f "$out/ok" ]] && [[ "$(installed)" == "$(cat "$out/ok")" ]]; then
  echo "clients-java: cached ($out), installed in $repo" >&2
  echo "$hash"
  exit 0
fi

maven_work clients-java "$hash"
# a copy, so that the build leaves no target/ in the repository and concurrent builds do not meet
mkdir -p "$work/src-tree"
(cd "$here" && tar --exclude=./target --exclude='./*/target' -cf - .) | (cd "$work/src-tree" && tar -xf -)

echo "clients-java: building in $work" >&2
start=$(date +%s)
(cd "$work/src-tree" && nice "$mvn" -q -B -Dstyle.color=never "-Dmaven.repo.local=$repo" install) >&2
mkdir -p "$work/out"
installed > "$work/out/ok"
[[ $(wc -l < "$work/out/ok") -eq $(( 1 + 2 * ${#artifacts[@]} )) ]] || {
  echo "clients-java: the build did not install every artifact into $repo" >&2
  exit 1
}
# publish atomically; a concurrent build of the same hash may have won the race
if ! mv -T "$work/out" "$out" 2>/dev/null; then
  rm -f "$out/ok" && cp "$work/out/ok" "$out/ok"
fi
echo "clients-java: built, tested and installed in $(( $(date +%s) - start )) s ($out)" >&2
echo "$hash"
