#!/usr/bin/env bash
# Builds the Kafka broker harness (kafka-harness.jar + lib/) into the tools cache; the last line
# on stdout is the path of kafka-harness.jar.
#
#   JAR=$(tests/kafka/build.sh | tail -n1)
#   java -jar "$JAR" --dir /tmp/kafka --port 9092 --controller-port 9093 --topics orders:4
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
exec "$here/../maven-build.sh" kafka "$here" kafka-harness.jar
