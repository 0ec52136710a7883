# Sourced by tests/demo.sh and tests/demo-dubbo.sh, which run from the repository root, with the
# demo's arguments: --once (stop everything after showing) sets once=true.
once=false
[ "${1:-}" = "--once" ] && once=true
export LANEWAY_DEMO_STARTED=${LANEWAY_DEMO_STARTED:-$(date +%s)}

# in_netns ARGS...: runs the demo again with ARGS, in a private network namespace holding the pod
# IPs 198.18.0.2 to .40 (tests/dubbo/netns.sh).
in_netns() {
  local addrs=() i
  for i in $(seq 2 40); do addrs+=(--addr "198.18.0.$i"); done
  exec tests/dubbo/netns.sh "${addrs[@]}" -- "$0" "$@"
}

established() { # CRD names: waits until the API server serves them
  for crd in "$@"; do
    for _ in $(seq 1 600); do
      [ "$(kubectl get crd "$crd" -o jsonpath='{.status.conditions[?(@.type=="Established")].status}' 2>/dev/null)" = True ] && break
      sleep 0.1
    done
  done
}

# gateway NAME WEB: the GatewayClass traefik and the Gateway NAME in namespace NAME, listening on
# WEB's port, served by Traefik (state in $state/traefik; its exports land in this shell).
gateway() {
  kubectl apply --server-side -f - >/dev/null <<YAML
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {name: traefik}
spec: {controllerName: traefik.io/gateway-controller}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: $1, namespace: $1}
spec:
  gatewayClassName: traefik
  listeners: [{name: web, protocol: HTTP, port: ${2##*:}}]
YAML
  eval "$(LANEWAY_TRAEFIK_PORT=${2##*:} LANEWAY_TRAEFIK_THROTTLE=1s tests/traefik/start.sh "$state/traefik" 2>/dev/null)"
}
