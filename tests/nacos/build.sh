#!/usr/bin/env bash
# Builds the Nacos test server (nacos-harness.jar + lib/) into the tools cache; the last line on
# stdout is the path of nacos-harness.jar.
#
#   JAR=$(tests/nacos/build.sh | tail -n1)
#   java -Dnacos.home=/tmp/nacos -Dnacos.server.main.port=8848 -jar "$JAR"   # or use start.sh
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
exec "$here/../maven-build.sh" nacos "$here" nacos-harness.jar
