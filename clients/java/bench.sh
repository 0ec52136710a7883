#!/usr/bin/env bash
# Builds the JMH benchmarks (laneway-benchmarks/target/benchmarks.jar + lib/) and runs them with
# short settings and the GC profiler, then prints one line per benchmark: time and bytes
# allocated per operation. JMH's own output goes to stderr; the full results to a CSV file.
#
#   clients/java/bench.sh                 # all benchmarks
#   clients/java/bench.sh 'Dubbo.*'       # a regular expression of benchmark names
#
# Env: MVN (default mvn), JAVA (default java), BENCH_ARGS (JMH options; default below),
# BENCH_CSV (default: a temporary file).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
mvn=${MVN:-mvn}
java=${JAVA:-java}
args=${BENCH_ARGS:--f 1 -wi 3 -w 1s -i 5 -r 1s}
csv=${BENCH_CSV:-$(mktemp "${TMPDIR:-/tmp}/laneway-bench.XXXXXX.csv")}

echo "bench: building" >&2
(cd "$here" && nice "$mvn" -q -B -Dstyle.color=never -DskipTests package) >&2

# shellcheck disable=SC2086  # BENCH_ARGS is a list of options
"$java" -jar "$here/laneway-benchmarks/target/benchmarks.jar" $args -prof gc -rf csv -rff "$csv" "$@" >&2

echo "bench: results in $csv" >&2
awk -F, '
  NR == 1 { next }
  {
    sub(/\r$/, ""); gsub(/"/, "")
    name = $1; score = $5; err = $6; unit = $7
    sub(/^io\.laneway\.lane\.benchmarks\./, "", name)
    if (name ~ /:gc\.alloc\.rate\.norm$/) {
      sub(/:gc\.alloc\.rate\.norm$/, "", name); alloc[name] = score
    } else if (name !~ /:/) {
      order[++n] = name; time[name] = score; error[name] = err; units[name] = unit
    }
  }
  END {
    printf "%-58s %8s %7s %7s\n", "benchmark", "ns/op", "±", "B/op"
    for (i = 1; i <= n; i++) {
      b = order[i]
      if (units[b] != "ns/op") { printf "%-58s (unit %s)\n", b, units[b]; continue }
      printf "%-58s %8.1f %7s %7.1f\n", b, time[b], (error[b] == "NaN" ? "-" : sprintf("%.1f", error[b])), alloc[b]
    }
  }' "$csv"
