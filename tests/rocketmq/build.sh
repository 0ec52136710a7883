#!/usr/bin/env bash
# Builds the RocketMQ harness (rocketmq-harness.jar + lib/: name server and broker) into the tools
# cache; the last line on stdout is the path of rocketmq-harness.jar.
#
#   JAR=$(tests/rocketmq/build.sh | tail -n1)
#   java -jar "$JAR" --dir /tmp/rocketmq --namesrv-port 9876 --broker-port 10911 --topics orders:4
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
exec "$here/../maven-build.sh" rocketmq "$here" rocketmq-harness.jar
