#!/usr/bin/env bash
# Self-test of the GitOps health checks (see README.md):
#   tests/gitops/selftest.sh            # offline: testdata/*.json against testdata/expected.tsv
#   tests/gitops/selftest.sh --write-snippet   # rewrite the Argo CD values in charts/laneway/README.md
# Offline, every sample goes through four evaluators and each must give the
# row of testdata/expected.tsv:
#   argocd-health.sh (Debian lua5.1 + dkjson), argocd-health.sh with the python3
#   decoder, argocd-lua (gopher-lua, Argo CD's VM) and kstatus -f (cli-utils).
# Needs Go, python3, and lua5.1 (installed with apt-get when missing and root).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cd "$here"
for a in "$@"; do
  case $a in
    --write-snippet) write_snippet=1 ;;
    *) echo "usage: selftest.sh [--write-snippet]" >&2; exit 2 ;;
  esac
done
readme=$here/../../charts/laneway/README.md

snippet() {
  cat <<'EOF'
```yaml
configs:
  cm:
    resource.customizations.health.laneway.io_LaneRoute: &laneway-health |
EOF
  sed 's/^/      /; s/^ *$//' argocd-health.lua
  cat <<'EOF'
    resource.customizations.health.laneway.io_TagRule: *laneway-health
    resource.customizations.health.laneway.io_LaneEntry: *laneway-health
```
EOF
}
# The chart README with the block between its argocd-health markers replaced by the snippet.
readme_with_snippet() {
  awk -v snippet="$1" '
    /<!-- argocd-health:start -->/ { print; while ((getline line < snippet) > 0) print line; skip = 1; next }
    /<!-- argocd-health:end -->/ { skip = 0 }
    !skip' "$readme"
}
if [ -n "${write_snippet:-}" ]; then
  tmp=$(mktemp)
  snippet >"$tmp.snippet"
  readme_with_snippet "$tmp.snippet" >"$tmp" && mv "$tmp" "$readme"
  rm -f "$tmp.snippet"
  echo "selftest.sh: wrote the Argo CD values into $readme" >&2
  exit 0
fi

if ! command -v lua5.1 >/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "selftest.sh: installing lua5.1 and lua-dkjson" >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq lua5.1 lua-dkjson >/dev/null 2>&1 \
      || { apt-get update -qq >/dev/null 2>&1 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq lua5.1 lua-dkjson >/dev/null; }
  else
    echo "selftest.sh: lua5.1 missing (apt-get install lua5.1 lua-dkjson)" >&2; exit 1
  fi
fi
command -v jq >/dev/null || { echo "selftest.sh: jq missing" >&2; exit 1; }

bin=$("$here/build.sh" | tail -n1)
pass=0 fail=0
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL $*" >&2; }
check() { # name expected actual
  if [ "$2" = "$3" ]; then ok; else bad "$1: expected [$2] got [$3]"; fi
}

# --- every sample against expected.tsv -------------------------------------
tab=$'\t'
declare -A seen=()
printf '%-28s %-12s %-12s %s\n' SAMPLE ARGO-CD KSTATUS "ARGO-CD MESSAGE | KSTATUS MESSAGE"
while IFS=$tab read -r name astat amsg kstat kmsg; do
  [ "$name" = sample ] && continue
  f=testdata/$name.json
  seen[$name]=1
  [ -f "$f" ] || { bad "$name: $f missing"; continue; }
  want="$astat$tab$amsg"
  check "$name argocd-health.sh (dkjson)" "$want" "$(./argocd-health.sh "$f")"
  check "$name argocd-health.sh (python)" "$want" "$(LANEWAY_LUA_JSON=python ./argocd-health.sh "$f")"
  check "$name argocd-lua (gopher-lua)" "$want" "$("$bin/argocd-lua" -script argocd-health.lua "$f")"
  got=$("$bin/kstatus" -f "$f")
  check "$name kstatus -f" "$kstat$tab$kmsg" "$(jq -r '[.status, .message] | @tsv' <<<"$got")"
  check "$name kstatus kind/name" "$(jq -r '[.kind, .metadata.name] | @tsv' "$f")" \
    "$(jq -r '[.kind, .name] | @tsv' <<<"$got")"
  printf '%-28s %-12s %-12s %s | %s\n' "$name" "$astat" "$kstat" "$amsg" "$kmsg"
done <testdata/expected.tsv
for f in testdata/*.json; do
  n=$(basename "$f" .json)
  [ -n "${seen[$n]:-}" ] || bad "$f has no row in testdata/expected.tsv"
done

# --- odds and ends ----------------------------------------------------------
check "kstatus -f - (stdin)" Current \
  "$("$bin/kstatus" -f - <testdata/ready-true.json | jq -r .status)"
check "kstatus several -f" 2 "$("$bin/kstatus" -f testdata/ready-true.json -f testdata/stalled.json | wc -l)"
if "$bin/kstatus" -f testdata/nope.json >/dev/null 2>&1; then bad "kstatus -f missing file exits 0"; else ok; fi
if "$bin/kstatus" bogus/x >/dev/null 2>&1; then bad "kstatus bogus kind exits 0"; else ok; fi

# Argo CD opens no string library; both harnesses must refuse one, so a
# script that passes here cannot fail in Argo CD for that reason.
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
printf 'return { status = "Healthy", message = ("x"):upper() }\n' >"$tmp/strmeth.lua"
printf 'return { status = "Healthy", message = string.format("%%d", 1) }\n' >"$tmp/strlib.lua"
printf 'return { status = "Fine" }\n' >"$tmp/invalid.lua"
for s in strmeth strlib; do
  out=$(ARGOCD_HEALTH_LUA=$tmp/$s.lua ./argocd-health.sh testdata/ready-true.json || true)
  check "argocd-health.sh refuses $s" Unknown "${out%%$tab*}"
  out=$("$bin/argocd-lua" -script "$tmp/$s.lua" testdata/ready-true.json || true)
  check "argocd-lua refuses $s" Unknown "${out%%$tab*}"
done
check "argocd-health.sh invalid status" "Unknown${tab}Lua returned an invalid health status" \
  "$(ARGOCD_HEALTH_LUA=$tmp/invalid.lua ./argocd-health.sh testdata/ready-true.json)"
check "argocd-lua invalid status" "Unknown${tab}Lua returned an invalid health status" \
  "$("$bin/argocd-lua" -script "$tmp/invalid.lua" testdata/ready-true.json)"

snippet >"$tmp/snippet"
if readme_with_snippet "$tmp/snippet" | cmp -s - "$readme"; then ok; else
  bad "charts/laneway/README.md is out of date with argocd-health.lua (run tests/gitops/selftest.sh --write-snippet)"
fi

echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
