#!/usr/bin/env bash
# Builds the Dubbo/ZooKeeper test harness (harness.jar + lib/) into the tools cache, after
# installing laneway's Java libraries (clients/java) that its chain roles use; the last line on
# stdout is the path of harness.jar.
#
#   JAR=$(tests/dubbo/build.sh | tail -n1)
#   java -jar "$JAR" zk --port 2181 --dir /tmp/zk
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
LANEWAY_BUILD_SALT=$("$here/../../clients/java/build.sh" | tail -n1)
export LANEWAY_BUILD_SALT
exec "$here/../maven-build.sh" dubbo "$here" harness.jar
