#!/usr/bin/env bash
# Smoke test for a running envtest (after: eval "$(tests/envtest/start.sh)").
# Exercises what laneway's tests rely on; exits non-zero on the first failure.
set -euo pipefail
ns=envtest-smoke-$RANDOM
sa="system:serviceaccount:$ns:smoke"
k() { echo "+ kubectl $*" >&2; kubectl "$@"; }

[ "$(kubectl get --raw /readyz)" = ok ]
k create namespace "$ns"
k apply -f - <<'YAML'
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: smokes.envtest.laneway.io}
spec:
  group: envtest.laneway.io
  scope: Namespaced
  names: {plural: smokes, singular: smoke, kind: Smoke}
  versions:
  - name: v1
    served: true
    storage: true
    subresources: {status: {}}
    schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}
YAML
k wait --for=condition=Established crd/smokes.envtest.laneway.io --timeout=30s
k -n "$ns" run p1 --image=registry.invalid/none:1 --restart=Never
k -n "$ns" patch pod p1 --subresource=status --type=merge \
  -p '{"status":{"podIP":"10.0.0.5","podIPs":[{"ip":"10.0.0.5"}],"phase":"Running","conditions":[{"type":"Ready","status":"True"}]}}'
[ "$(kubectl -n "$ns" get pod p1 -o jsonpath='{.status.podIP}/{.status.phase}')" = 10.0.0.5/Running ]
k -n "$ns" create service clusterip web --tcp=80:8080
k -n "$ns" apply -f - <<YAML
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: web-1, labels: {kubernetes.io/service-name: web}}
addressType: IPv4
ports: [{port: 8080, protocol: TCP}]
endpoints: [{addresses: ["10.0.0.5"], conditions: {ready: true}}]
---
apiVersion: coordination.k8s.io/v1
kind: Lease
metadata: {name: smoke}
spec: {holderIdentity: smoke, leaseDurationSeconds: 15}
YAML
k -n "$ns" create serviceaccount smoke
token=$(kubectl -n "$ns" create token smoke --duration=10m)
[ "$(kubectl auth can-i list pods -n "$ns" --as="$sa" || true)" = no ]
k -n "$ns" create role pod-reader --verb=get,list,watch --resource=pods
k -n "$ns" create rolebinding smoke --role=pod-reader --serviceaccount="$ns:smoke"
[ "$(kubectl auth can-i list pods -n "$ns" --as="$sa")" = yes ]
[ "$(kubectl auth can-i delete pods -n "$ns" --as="$sa" || true)" = no ]
kubectl --token="$token" -n "$ns" get pods p1 -o name  # ServiceAccount token auth
if kubectl --token="$token" -n "$ns" get services >/dev/null 2>&1; then
  echo "expected RBAC to forbid listing services" >&2; exit 1
fi
echo "smoke: OK (namespace $ns left in place; no namespace controller runs)" >&2
