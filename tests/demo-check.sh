#!/usr/bin/env bash
# Runs `tests/demo.sh --once` and fails unless it printed every request it sends through the
# gateway, each answered by a pod that `laneway explain` names for it (or 503 where it says so).
set -euo pipefail
cd "$(dirname "$0")/.."
out=$(tests/demo.sh --once 2>&1) || { echo "$out" | tail -n 30; echo "demo-check: the demo failed" >&2; exit 1; }
table=$(awk '/^== requests to shop.example.com/ { on = 1; next } on && /^$/ { exit } on' <<<"$out")
rows=$(tail -n +2 <<<"$table")
wrong=$(awk '{
  answered = substr($0, 29, 18); gsub(/ +$/, "", answered)
  says = " " substr($0, 48) " "
  if (answered == "" || index(says, " " answered " ") == 0) print
}' <<<"$rows")
count=$(grep -c . <<<"$rows" || true)
if [ "$count" -ne 10 ] || [ -n "$wrong" ] || grep -q '^(after 60 s' <<<"$out"; then
  echo "$table"
  echo "demo-check: $count rows; answered otherwise than laneway says:${wrong:+$'\n'$wrong}" >&2
  exit 1
fi
# The subsets table, printed once the gateway settled, agrees with the answers: each lane's
# answer comes from a pod of a Service its status says serves it, and a 503 from an empty subset.
subsets=$(awk '/^== subsets per lane/ { on = 1; next } on && /^$/ { exit } on' <<<"$out")
disagree=$(while read -r lane path; do
  [ "$lane" = "(none)" ] && continue
  answered=$(awk -v l="$lane" -v p="$path" '$1 == l && $2 == p { a = substr($0, 29, 18); gsub(/ +$/, "", a); print a }' <<<"$rows")
  line=$(grep "^$lane:" <<<"$subsets" || true)
  if [ "$answered" = "HTTP 503" ]; then
    [[ "$line" == *"=Empty@"* ]] || echo "$lane $path: HTTP 503, status: ${line:-none}"
  else
    [[ "$line" =~ [\[,]$answered[],] ]] || echo "$lane $path: $answered, status: ${line:-none}"
  fi
done < <(awk '{ print $1, $2 }' <<<"$rows"))
if [ -z "$subsets" ] || [ -n "$disagree" ]; then
  echo "$subsets"
  echo "demo-check: the subsets table disagrees with the answers:${disagree:+$'\n'$disagree}" >&2
  exit 1
fi
# The preview hostname and the lane link answer as a dev-alice request for /orders does.
says=$(awk '$1 == "dev-alice" && $2 == "/orders" { print " " substr($0, 48) " " }' <<<"$rows")
browser=$(awk '/^== dev-alice from a browser/ { on = 1; next } on && /^$/ { exit } on' <<<"$out")
for url in "http://dev-alice.preview.shop.example.com/orders" "http://shop.example.com/orders?lane=dev-alice"; do
  got=$(awk -v u="$url" '$1 == u { print $2 }' <<<"$browser")
  if [ -z "$got" ] || [[ "$says" != *" $got "* ]]; then
    echo "$browser"
    echo "demo-check: $url answered ${got:-nothing}, laneway says:$says" >&2
    exit 1
  fi
done
grep -q '^the link answers with: Set-Cookie: x-lane=dev-alice; Path=/; HttpOnly; SameSite=Lax$' <<<"$browser" \
  || { echo "$browser"; echo "demo-check: the lane link set no lane cookie" >&2; exit 1; }
echo "demo-check: the demo's $count answers are the ones laneway gives, its subsets table agrees with them, and so do its preview hostname's and lane link's"
