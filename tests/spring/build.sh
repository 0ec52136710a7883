#!/usr/bin/env bash
# Builds the Spring Cloud / Nacos test harness (harness.jar + lib/) into the tools cache, after
# installing laneway's Java libraries (clients/java), whose laneway-spring-cloud every application
# in it uses; the last line on stdout is the path of harness.jar.
#
#   JAR=$(tests/spring/build.sh | tail -n1)
#   java -jar "$JAR" --nacos 127.0.0.1:8848 --username nacos --password P \
#     --service order-service@198.18.0.5:8080,next=user-service --service user-service@198.18.0.7:8080 \
#     --gateway 198.18.0.2:8080 --route order=order-service
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
LANEWAY_BUILD_SALT=$("$here/../../clients/java/build.sh" | tail -n1)
export LANEWAY_BUILD_SALT
exec "$here/../maven-build.sh" spring "$here" harness.jar
