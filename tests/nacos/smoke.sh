#!/usr/bin/env bash
# Self-checking proof of the Nacos harness and of the config HTTP API a tag-router publisher uses.
# Starts a server without auth, then a fresh one with auth, runs the requests documented in
# README.md against each and prints PASS/FAIL lines and "N passed, N failed"; exits non-zero on
# any failure. Stops every server it started.
#
#   tests/nacos/smoke.sh            # SMOKE_PORT (default 28848; also uses +1000, +1001, -1000)
#   SMOKE_KEEP=1 tests/nacos/smoke.sh   # keep the data dirs and logs
set -uo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
port=${SMOKE_PORT:-28848}
base="http://127.0.0.1:$port/nacos"
work=$(mktemp -d "${TMPDIR:-/tmp}/nacos-smoke.XXXXXX")
passed=0 failed=0 dir=

cleanup() {
  [[ -n $dir ]] && "$here/stop.sh" "$dir" 2>/dev/null
  if [[ -n ${SMOKE_KEEP:-} ]]; then echo "kept $work" >&2; else rm -rf "$work"; fi
}
trap cleanup EXIT

check() { # name, then a command that must succeed
  local name=$1; shift
  if "$@"; then echo "PASS $name"; passed=$((passed + 1)); else echo "FAIL $name"; failed=$((failed + 1)); fi
}
# curl wrapper: prints "<status> <body>" (body on one line)
req() { curl -s -m 10 -w '\n%{http_code}' "$@" | { body=$(cat); code=${body##*$'\n'}; body=${body%$'\n'*}; printf '%s %s' "$code" "${body//$'\n'/\\n}"; }; }
is() { [[ $1 == "$2" ]] || { echo "  got: $1" >&2; echo "  want: $2" >&2; return 1; }; }
# shellcheck disable=SC2053 # $2 is a glob pattern on purpose
like() { [[ $1 == $2 ]] || { echo "  got: $1" >&2; echo "  want like: $2" >&2; return 1; }; }
# poll a GET until its "<status> <body>" equals the wanted one (reads lag writes by ~0.1 s)
eventually() { local want=$1 got; shift; for _ in $(seq 1 50); do got=$(req "$@"); [[ $got == "$want" ]] && return 0; sleep 0.1; done; is "$got" "$want"; }

jar=$("$here/build.sh" | tail -n1) || { echo "FAIL build"; echo "0 passed, 1 failed"; exit 1; }
export NACOS_JAR=$jar

rule=$(cat <<'EOF'
configVersion: v3.0
force: false
enabled: true
key: order-service
tags:
  - name: gray
    match:
      - key: dubbo.tag
        value:
          exact: gray
    addresses: ["10.0.0.2:20880"]
EOF
)
rule_md5=$(printf '%s' "$rule" | md5sum | cut -c1-32)
q="dataId=order-service.tag-router&group=dubbo"

# ---------------------------------------------------------------- no auth
dir="$work/open"
if "$here/start.sh" "$port" "$dir" >/dev/null; then
  check "start (no auth)" true
  check "readiness" is "$(req "$base/v3/admin/core/state/readiness")" '200 {"code":0,"message":"success","data":"ok"}'
  check "v1 publish" is "$(req -X POST "$base/v1/cs/configs" --data-urlencode dataId=order-service.tag-router \
    --data-urlencode group=dubbo --data-urlencode "content=$rule" --data-urlencode type=yaml)" "200 true"
  check "v1 get = published YAML" eventually "200 ${rule//$'\n'/\\n}" "$base/v1/cs/configs?$q"
  hdrs=$(curl -s -m 10 -D - -o /dev/null "$base/v1/cs/configs?$q" | tr -d '\r')
  check "v1 get headers Config-Type/Content-MD5" like "$hdrs" "*Config-Type: yaml*Content-MD5: $rule_md5*"
  check "v3 admin get" like "$(req "$base/v3/admin/cs/config?dataId=order-service.tag-router&groupName=dubbo")" \
    "200 {\"code\":0,*\"namespaceId\":\"public\",\"groupName\":\"dubbo\",\"dataId\":\"order-service.tag-router\",\"md5\":\"$rule_md5\",\"type\":\"yaml\"*"
  check "casMd5 header mismatch rejected" is "$(req -X POST -H 'casMd5: 00000000000000000000000000000000' \
    "$base/v1/cs/configs" -d dataId=order-service.tag-router -d group=dubbo -d content=stale)" "500 false"
  check "casMd5 header match accepted" is "$(req -X POST -H "casMd5: $rule_md5" "$base/v1/cs/configs" \
    --data-urlencode dataId=order-service.tag-router --data-urlencode group=dubbo \
    --data-urlencode "content=$rule" --data-urlencode type=yaml)" "200 true"
  check "v1 publish tenant" is "$(req -X POST "$base/v1/cs/configs" -d dataId=order-service.tag-router \
    -d group=dubbo -d content=in-tenant -d type=yaml -d tenant=lanes-dev)" "200 true"
  check "v1 get tenant" eventually "200 in-tenant" "$base/v1/cs/configs?$q&tenant=lanes-dev"
  check "v1 get public unchanged" eventually "200 ${rule//$'\n'/\\n}" "$base/v1/cs/configs?$q"
  check "v1 delete" is "$(req -X DELETE "$base/v1/cs/configs?$q")" "200 true"
  check "v1 get after delete" eventually "404 config data not exist\\n" "$base/v1/cs/configs?$q"
  check "v1 delete again (idempotent)" is "$(req -X DELETE "$base/v1/cs/configs?$q")" "200 true"
  check "v1 delete tenant" is "$(req -X DELETE "$base/v1/cs/configs?$q&tenant=lanes-dev")" "200 true"
  check "v1 publish without group" like "$(req -X POST "$base/v1/cs/configs" -d dataId=x -d content=x)" "400 *group*"
  check "v2 off by default (410)" like "$(req "$base/v2/cs/config?$q")" "410 *nacos.core.api.compatibility.admin.enabled*"
  check "v3 admin publish" is "$(req -X POST "$base/v3/admin/cs/config" -d dataId=v3.tag-router \
    -d groupName=dubbo -d content=v3 -d type=yaml)" '200 {"code":0,"message":"success","data":true}'
  check "v3 admin delete" is "$(req -X DELETE "$base/v3/admin/cs/config?dataId=v3.tag-router&groupName=dubbo")" \
    '200 {"code":0,"message":"success","data":true}'
  "$here/stop.sh" "$dir" 2>/dev/null
  pid_gone() { ! curl -s -m 2 "$base/v3/admin/core/state/readiness" >/dev/null; }
  check "stopped (no auth)" pid_gone
else
  check "start (no auth)" false
fi

# ---------------------------------------------------------------- auth
dir="$work/auth"
if NACOS_ADMIN_PASSWORD=laneway-Test1 NACOS_OPTS=-Dnacos.core.api.compatibility.admin.enabled=true \
  "$here/start.sh" "$port" "$dir" --auth >/dev/null; then
  check "start (auth, admin created)" true
  check "publish without token -> 403" like "$(req -X POST "$base/v1/cs/configs" -d dataId=a -d group=dubbo -d content=a)" \
    "403 *User not found*"
  login=$(req -X POST "$base/v1/auth/login" -d username=nacos -d password=laneway-Test1)
  check "v1 login" like "$login" '200 {"accessToken":"*","tokenTtl":18000,"globalAdmin":true,"username":"nacos"}'
  token=${login#*\"accessToken\":\"}; token=${token%%\"*}
  check "v3 login" like "$(req -X POST "$base/v3/auth/user/login" -d username=nacos -d password=laneway-Test1)" '200 {"accessToken":"*'
  check "v1 login wrong password" like "$(req -X POST "$base/v1/auth/login" -d username=nacos -d password=nope)" "500 *"
  check "admin init again -> 409 in body" is "$(req -X POST "$base/v3/auth/user/admin" -d password=x)" \
    '200 {"code":409,"message":"have admin user cannot use it.","data":null}'
  check "v1 publish ?accessToken=" is "$(req -X POST "$base/v1/cs/configs?accessToken=$token" \
    --data-urlencode dataId=order-service.tag-router --data-urlencode group=dubbo \
    --data-urlencode "content=$rule" --data-urlencode type=yaml)" "200 true"
  check "v1 get with token" eventually "200 ${rule//$'\n'/\\n}" "$base/v1/cs/configs?$q&accessToken=$token"
  check "v1 get without token -> 403" like "$(req "$base/v1/cs/configs?$q")" "403 *"
  check "v1 get bogus token -> 403" like "$(req "$base/v1/cs/configs?$q&accessToken=bogus")" "403 *token invalid*"
  check "token as accessToken header" is "$(req -X POST -H "accessToken: $token" "$base/v1/cs/configs" \
    -d dataId=h.tag-router -d group=dubbo -d content=h)" "200 true"
  check "token as Authorization: Bearer" is "$(req -X POST -H "Authorization: Bearer $token" "$base/v1/cs/configs" \
    -d dataId=h.tag-router -d group=dubbo -d content=h2)" "200 true"
  check "server identity header bypass" is "$(req -X DELETE -H 'laneway-test: laneway-test' \
    "$base/v1/cs/configs?dataId=h.tag-router&group=dubbo")" "200 true"
  check "v2 publish (compat on)" is "$(req -X POST "$base/v2/cs/config?accessToken=$token" -d dataId=v2.tag-router \
    -d group=dubbo -d content=v2 -d type=yaml -d namespaceId=lanes-dev)" '200 {"code":0,"message":"success","data":true}'
  check "v2 get" eventually '200 {"code":0,"message":"success","data":"v2"}' \
    "$base/v2/cs/config?dataId=v2.tag-router&group=dubbo&namespaceId=lanes-dev&accessToken=$token"
  check "v2 delete" is "$(req -X DELETE "$base/v2/cs/config?dataId=v2.tag-router&group=dubbo&namespaceId=lanes-dev&accessToken=$token")" \
    '200 {"code":0,"message":"success","data":true}'
  check "v1 delete with token" is "$(req -X DELETE "$base/v1/cs/configs?$q&accessToken=$token")" "200 true"
  "$here/stop.sh" "$dir" 2>/dev/null
  # a restart keeps the admin user: start.sh's login check passes
  if NACOS_ADMIN_PASSWORD=laneway-Test1 "$here/start.sh" "$port" "$dir" --auth >/dev/null; then
    check "restart keeps admin user" true
  else
    check "restart keeps admin user" false
  fi
else
  check "start (auth, admin created)" false
fi

echo "$passed passed, $failed failed"
[[ $failed -eq 0 ]]
