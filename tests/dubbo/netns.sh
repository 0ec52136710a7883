#!/usr/bin/env bash
# Run a command in a fresh, private network namespace whose only interface is lo, carrying
# 127.0.0.1 plus the given "pod IPs" (as /32). There is no route out of it: every connection a
# test makes stays on this machine, inside this namespace. ZooKeeper, the Dubbo providers, the
# consumer (and whatever publishes rules to ZooKeeper) must all run inside the same namespace.
#
# Why not 127.0.0.x pod IPs: Dubbo treats every 127.x address as "no address" (it registers the
# machine's own address instead, binds 0.0.0.0, dials the machine's address instead of 127.x, and
# TagStateRouter cannot match "ip:port" tag addresses against loopback providers).
#
# usage: netns.sh [--addr IP]... -- COMMAND [ARGS...]
# Needs root, or unprivileged user namespaces (then `unshare -rn` is used).
set -euo pipefail

addrs=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --addr) addrs+=("$2"); shift 2 ;;
    --) shift; break ;;
    *) echo "usage: netns.sh [--addr IP]... -- COMMAND [ARGS...]" >&2; exit 2 ;;
  esac
done
[[ $# -gt 0 ]] || { echo "netns.sh: no command" >&2; exit 2; }
command -v unshare >/dev/null || { echo "netns.sh: unshare (util-linux) is missing" >&2; exit 2; }
command -v ip >/dev/null || { echo "netns.sh: ip (iproute2) is missing" >&2; exit 2; }

if [[ $(id -u) -eq 0 ]]; then
  unshare_args=(--net)
else
  unshare_args=(--net --map-root-user)
fi

# shellcheck disable=SC2016
exec unshare "${unshare_args[@]}" -- bash -euc '
  ip link set lo up
  n=$1; shift
  for ((i = 0; i < n; i++)); do ip addr add "$1/32" dev lo; shift; done
  if ip route show default | grep -q .; then
    echo "netns.sh: a default route exists; refusing to run" >&2; exit 1
  fi
  export LANEWAY_NETNS=1
  exec "$@"
' netns "${#addrs[@]}" "${addrs[@]}" "$@"
