#!/usr/bin/env bash
# Draws the bench-cluster plot (p99 latency and RSS against pods, laneway and the built-in
# EndpointSlice controller) from a results.json written by benches/cluster.rs.
# matplotlib comes from PyPI into a venv under target/ (created once, reused afterwards).
# usage: tests/bench/plot.sh RESULTS.json OUT.png
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
venv="${CARGO_TARGET_DIR:-$root/target}/bench-cluster/venv"
matplotlib="matplotlib==3.11.2"
if ! "$venv/bin/python" -c "import matplotlib" 2>/dev/null; then
  rm -rf "$venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check "$matplotlib" >&2
fi
exec "$venv/bin/python" "$root/tests/bench/plot.py" "$@"
