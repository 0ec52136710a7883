#!/usr/bin/env bash
# Checks the Helm chart charts/laneway with the real helm CLI (tests/helm, pinned Go modules) and
# a real kube-apiserver (tests/envtest):
#   - its crds/ are byte-identical to the repository's crds/;
#   - helm lint and helm template pass with default and with non-default values, and bad values
#     fail with the schema's message;
#   - the API server accepts every rendered object (server-side dry run);
#   - helm install / uninstall work, in cluster mode and in namespaced mode, and the
#     ServiceAccount gets what it needs and nothing more: `kubectl auth can-i` spot checks, then
#     the real operator runs with the ServiceAccount's token and does its job (lane EndpointSlice,
#     LaneRoute status, Dubbo rule in the ConfigMap) without an RBAC denial, and fails loudly
#     (log + laneway_errors_total) once one permission is taken away.
# Uses the cluster in $KUBECONFIG when set (tests/run.sh); otherwise starts its own envtest in a
# temp dir and stops it on exit. The operator is target/release/laneway, built by cargo (a no-op
# when fresh), or $LANEWAY_BIN (e.g. target/debug/laneway, already built by the Rust tests).
# Prints PASS/FAIL lines and ends with "chart: N passed, M failed"; exits non-zero on a failure.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
root=$PWD
chart=$root/charts/laneway
release=laneway                   # the chart's full name is then "laneway"
release_ns=laneway-system
sa_user=system:serviceaccount:$release_ns:$release
ns_a=laneway-chart-a ns_b=laneway-chart-b    # watched namespaces in namespaced mode
began=$SECONDS

passed=0 failed=0
pass() { echo "PASS $*"; passed=$((passed + 1)); }
fail() { echo "FAIL $*"; failed=$((failed + 1)); }
indent() { tail -n 25 | sed 's/^/    /'; }
# check NAME CMD...: PASS when CMD succeeds, else FAIL with the end of its output.
check() {
  local name=$1 out; shift
  if out=$("$@" 2>&1); then pass "$name"; else fail "$name"; printf '%s\n' "$out" | indent; fi
}
# eventually SECONDS CMD...: retries CMD every half second until it succeeds or time runs out.
eventually() {
  local deadline=$((SECONDS + $1)); shift
  until "$@" >/dev/null 2>&1; do
    (( SECONDS < deadline )) || return 1
    sleep 0.5
  done
}

tmp=$(mktemp -d "${TMPDIR:-/tmp}/laneway-chart.XXXXXX")
own_envtest="" operator_pid=""
stop_operator() {
  [ -n "$operator_pid" ] || return 0
  kill -TERM "$operator_pid" 2>/dev/null || true
  for _ in $(seq 100); do kill -0 "$operator_pid" 2>/dev/null || break; sleep 0.1; done
  kill -KILL "$operator_pid" 2>/dev/null || true
  wait "$operator_pid" 2>/dev/null || true
  operator_pid=""
}
cleanup() {
  stop_operator
  if [ -n "$own_envtest" ]; then tests/envtest/stop.sh "$own_envtest" >/dev/null 2>&1 || true; fi
  rm -rf "$tmp"
}
trap cleanup EXIT

# --- tools: helm, and kubectl matching the envtest API server -------------------------------
helm=$(tests/helm/build.sh | tail -n1)
export HELM_CACHE_HOME=$tmp/helm/cache HELM_CONFIG_HOME=$tmp/helm/config HELM_DATA_HOME=$tmp/helm/data
PATH=$(tests/envtest/build.sh | tail -n1):$PATH
if [ -z "${KUBECONFIG:-}" ]; then
  echo "chart.sh: KUBECONFIG is not set; starting a local envtest in $tmp/envtest" >&2
  own_envtest=$tmp/envtest
  eval "$(tests/envtest/start.sh "$own_envtest")"
fi
kubectl get --raw /readyz >/dev/null
echo "chart.sh: $("$helm" version --short), kubectl $(kubectl version -o json | python3 -c \
  'import json,sys; v=json.load(sys.stdin); print(v["clientVersion"]["gitVersion"], "/ server", v["serverVersion"]["gitVersion"])')"

# --- the CRDs the chart ships ---------------------------------------------------------------
check "chart crds/ are byte-identical to the repository's crds/ (copy them over after make crds)" \
  diff -r crds "$chart/crds"

# --- lint and render --------------------------------------------------------------------------
# Non-default values: namespaced mode with two namespaces, both config centres with credentials
# from existing Secrets, ServiceMonitor, PrometheusRule, Grafana dashboard and NetworkPolicy on.
cat >"$tmp/values-full.yaml" <<EOF
replicas: 3
watchNamespaces: [$ns_a, $ns_b]
laneLabel: example.com/lane
serviceClusterIP: none
statusEntriesPerSecond: 100
routeGrace: 3s
writes: {maxConcurrent: 8, qps: 2.5, burst: 10, debounce: 100ms}
logLevel: info,laneway=debug
logFormat: json
leaderElection: {leaseName: chart-leader, leaseDuration: 20s, renewDeadline: 12s, retryPeriod: 3s}
configCentres:
  configMap: {name: chart-dubbo-rules}
  ruleGrace: 1m
  resync: 2m
  zookeeper:
    addresses: [zk-0.zk.infra:2181, zk-1.zk.infra:2181]
    auth: {existingSecret: zk-digest, key: digest}
  nacos:
    address: http://nacos.infra:8848
    namespace: dev
    marksResync: 10s
    auth: {existingSecret: nacos-credentials, usernameKey: user, passwordKey: pass}
serviceMonitor: {enabled: true, labels: {release: prometheus}}
prometheusRule: {enabled: true, labels: {release: prometheus}, alertLabels: {team: lanes}}
grafanaDashboard: {enabled: true, namespace: $ns_a, annotations: {grafana_folder: Platform}}
kruiseRollout: {luaScript: true}
networkPolicy: {enabled: true, apiServer: {cidrs: [10.0.0.1/32]}}
podAnnotations: {example.com/team: lanes}
EOF
check "helm lint --strict (default values)" "$helm" lint --strict "$chart"
check "helm lint --strict (namespaced mode, zookeeper + nacos with existing secrets, serviceMonitor, networkPolicy)" \
  "$helm" lint --strict "$chart" -f "$tmp/values-full.yaml"

render() { "$helm" template "$release" "$chart" --namespace "$release_ns" "$@"; }
rendered=()
for variant in default full; do
  args=(); [ "$variant" = full ] && args=(-f "$tmp/values-full.yaml")
  if render "${args[@]}" >"$tmp/$variant.yaml" 2>"$tmp/$variant.err"; then
    pass "helm template renders ($variant values: $(grep -c '^kind:' "$tmp/$variant.yaml") objects)"
    rendered+=("$variant")
  else
    fail "helm template renders ($variant values)"; indent <"$tmp/$variant.err"
  fi
done

# bad_values NAME EXPECTED --set ...: rendering fails with the schema's message, naming the value.
bad_values() {
  local name=$1 expected=$2 out; shift 2
  if out=$(render "$@" 2>&1); then
    fail "schema rejects $name (it rendered)"
  elif grep -qF "values don't meet the specifications of the schema" <<<"$out" \
       && grep -qF -- "$expected" <<<"$out"; then
    pass "schema rejects $name: $(grep -F -- "$expected" <<<"$out" | head -n1 | sed 's/^ *//')"
  else
    fail "schema rejects $name (expected \"$expected\")"; printf '%s\n' "$out" | indent
  fi
}
bad_values "replicas: 0" "at '/replicas': minimum: got 0, want 1" --set replicas=0
bad_values "replicas: 1.5" "at '/replicas': got number, want integer" --set-json replicas=1.5
bad_values "logFormat: xml" "at '/logFormat': value must be one of 'text', 'json'" --set logFormat=xml
bad_values "serviceClusterIP: static" "at '/serviceClusterIP': value must be one of 'allocate', 'none'" \
  --set serviceClusterIP=static
bad_values "statusEntriesPerSecond: 0" "at '/statusEntriesPerSecond': minimum: got 0, want 1" \
  --set statusEntriesPerSecond=0
bad_values "writes.maxConcurrent: 0" "at '/writes/maxConcurrent': minimum: got 0, want 1" \
  --set writes.maxConcurrent=0
bad_values "writes.qps: -1" "at '/writes/qps': minimum: got -1, want 0" --set writes.qps=-1
bad_values "a bad routeGrace" "at '/routeGrace': '5 s' does not match pattern" --set 'routeGrace=5 s'
bad_values "a laneLabel that is not a label key" "at '/laneLabel': 'lane label' does not match pattern" \
  --set 'laneLabel=lane label'
bad_values "a watchNamespaces entry that is not a DNS label" "at '/watchNamespaces/1': 'Team_B' does not match pattern" \
  --set 'watchNamespaces={team-a,Team_B}'
bad_values "a bad leaseDuration" "at '/leaderElection/leaseDuration': '15 seconds' does not match pattern" \
  --set 'leaderElection.leaseDuration=15 seconds'
bad_values "a ZooKeeper address without a port" "at '/configCentres/zookeeper/addresses/0': 'zk-0' does not match pattern" \
  --set 'configCentres.zookeeper.addresses={zk-0}'
bad_values "a misspelt top-level key" "additional properties 'replica' not allowed" --set replica=3

# --- the API server accepts every rendered object ---------------------------------------------
# kruise-rollout: Kruise Rollout's own namespace, where the full values put its LaneRoute script.
for ns in "$release_ns" "$ns_a" "$ns_b" kruise-rollout; do
  kubectl create namespace "$ns" --dry-run=client -o yaml | kubectl apply -f - >/dev/null
done
for variant in "${rendered[@]}"; do
  # envtest has no Prometheus Operator: ServiceMonitor and PrometheusRule (monitoring.coreos.com/v1)
  # are the kinds left out of the dry run (they are checked as text and by Prometheus' parser below).
  awk -v out="$tmp/$variant.dry.yaml" '
    function flush() {
      if (doc ~ /\nkind: (ServiceMonitor|PrometheusRule)\n/) skipped++; else if (doc ~ /\nkind: /) printf "---\n%s", doc > out
      doc = "\n"
    }
    BEGIN { doc = "\n" } /^---$/ { flush(); next } { doc = doc $0 "\n" }
    END { flush(); print skipped + 0 }' "$tmp/$variant.yaml" >"$tmp/$variant.skipped"
  skipped=$(cat "$tmp/$variant.skipped")
  note=""; (( skipped > 0 )) && note=" (skipped $skipped of ServiceMonitor and PrometheusRule: their CRDs are not installed in envtest)"
  if kubectl apply --server-side --dry-run=server --field-manager=chart-test -o json \
       -f "$tmp/$variant.dry.yaml" >"$tmp/$variant.json" 2>"$tmp/$variant.dry.err"; then
    pass "kubectl apply --dry-run=server accepts every rendered object ($variant values)$note"
  else
    fail "kubectl apply --dry-run=server accepts every rendered object ($variant values)"
    indent <"$tmp/$variant.dry.err"; rm -f "$tmp/$variant.json"
  fi
done

# --- what the rendered objects say (as the API server returned them) ------------------------
structure_checks() {
  python3 - "$tmp" "$release" "$release_ns" "$ns_a" "$ns_b" <<'PY'
import json, os, sys

tmp, release, release_ns, ns_a, ns_b = sys.argv[1:]

def result(ok, name):
    print(("PASS " if ok else "FAIL ") + name)

def load(variant):
    path = os.path.join(tmp, variant + ".json")
    if not os.path.exists(path):
        return None
    doc = json.load(open(path))
    return doc["items"] if doc.get("kind") == "List" else [doc]

def find(objs, kind, name=None, ns=None):
    return [o for o in objs if o["kind"] == kind
            and (name is None or o["metadata"]["name"] == name)
            and (ns is None or o["metadata"].get("namespace") == ns)]

def grants(rules):
    """(group, resource, verb, resourceName or '') for every rule, wildcards kept as they are."""
    out = set()
    for r in rules:
        for g in r.get("apiGroups", []):
            for res in r.get("resources", []):
                for v in r.get("verbs", []):
                    for n in r.get("resourceNames") or [""]:
                        out.add((g, res, v, n))
    return out

def expand(spec):
    return {(g, res, v, n) for (g, resources, verbs, n) in spec for res in resources for v in verbs}

# Exactly what the operator does against the API (README, "what the operator does").
WATCH_RULES = expand([
    ("", ["pods"], ["get", "list", "watch"], ""),
    ("", ["services"], ["get", "list", "watch", "create", "update", "delete"], ""),
    ("discovery.k8s.io", ["endpointslices"], ["get", "list", "watch", "create", "update", "delete"], ""),
    ("laneway.io", ["laneroutes", "tagrules", "laneentries"], ["get", "list", "watch", "patch"], ""),
    ("laneway.io", ["laneroutes/status", "tagrules/status", "laneentries/status"], ["update"], ""),
    ("gateway.networking.k8s.io", ["httproutes"], ["get", "list", "watch", "create", "patch", "delete"], ""),
    ("events.k8s.io", ["events"], ["create", "patch"], ""),
])
# Cluster mode also reads Gateways and GatewayClasses (their supported features).
CLUSTER_RULES = WATCH_RULES | expand([
    ("gateway.networking.k8s.io", ["gateways", "gatewayclasses"], ["list", "watch"], ""),
])
def local_rules(lease, configmap):
    return expand([
        ("coordination.k8s.io", ["leases"], ["get", "update"], lease),
        ("coordination.k8s.io", ["leases"], ["create"], ""),
        ("", ["configmaps"], ["get", "patch"], configmap),
        ("", ["configmaps"], ["create"], ""),
    ])

def container(objs):
    deps = find(objs, "Deployment", release, release_ns)
    return deps[0] if deps else None, deps[0]["spec"]["template"]["spec"]["containers"][0] if deps else {}

def env(c):
    return {e["name"]: e for e in c.get("env", [])}

objs = load("default")
if objs is not None:
    kinds = sorted({o["kind"] for o in objs})
    want = sorted(["ClusterRole", "ClusterRoleBinding", "Deployment", "PodDisruptionBudget",
                   "Role", "RoleBinding", "Service", "ServiceAccount"])
    result(kinds == want, f"default: the objects are {', '.join(want)} (got {', '.join(kinds)})")
    cr = find(objs, "ClusterRole", release)
    result(bool(cr) and grants(cr[0]["rules"]) == CLUSTER_RULES,
           "default: the ClusterRole grants exactly pods r/o; services, endpointslices r/w by create and update; httproutes r/w by apply; laneroutes, tagrules, laneentries read+patch; their status update; gateways, gatewayclasses read; events.k8s.io create+patch")
    crb = find(objs, "ClusterRoleBinding", release)
    result(bool(crb) and crb[0]["subjects"] == [{"kind": "ServiceAccount", "name": release, "namespace": release_ns}]
           and crb[0]["roleRef"]["name"] == release, "default: the ClusterRoleBinding binds the chart's ServiceAccount")
    local = find(objs, "Role", release + "-local", release_ns)
    result(bool(local) and grants(local[0]["rules"]) == local_rules("laneway-leader", "laneway-dubbo-rules"),
           "default: the release-namespace Role grants only the Lease and the rules ConfigMap (get/update, get/patch by name; create)")
    roles = find(objs, "Role")
    result(len(roles) == 1, "default: no namespaced Roles besides the release-namespace one (cluster mode)")
    dep, c = container(objs)
    ok = dep is not None
    result(ok and dep["spec"]["replicas"] == 2, "default: the Deployment runs 2 replicas")
    result(c.get("image", "").endswith(":0.1.0"), f"default: the image tag defaults to appVersion ({c.get('image')})")
    pod = dep["spec"]["template"]["spec"] if ok else {}
    psc, csc = pod.get("securityContext", {}), c.get("securityContext", {})
    result(psc.get("runAsNonRoot") is True and psc.get("runAsUser") == 65532
           and psc.get("seccompProfile", {}).get("type") == "RuntimeDefault"
           and csc.get("runAsNonRoot") is True and csc.get("runAsUser") == 65532
           and csc.get("readOnlyRootFilesystem") is True and csc.get("allowPrivilegeEscalation") is False
           and csc.get("capabilities", {}).get("drop") == ["ALL"]
           and csc.get("seccompProfile", {}).get("type") == "RuntimeDefault",
           "default: non-root 65532, read-only root filesystem, no privilege escalation, capabilities drop ALL, seccomp RuntimeDefault")
    lp, rp = c.get("livenessProbe", {}).get("httpGet", {}), c.get("readinessProbe", {}).get("httpGet", {})
    ports = {p["name"]: p["containerPort"] for p in c.get("ports", [])}
    result(lp.get("path") == "/healthz" and rp.get("path") == "/readyz" and lp.get("port") == "metrics"
           and rp.get("port") == "metrics" and ports.get("metrics") == 8080,
           "default: liveness /healthz and readiness /readyz on the metrics port 8080")
    e = env(c)
    result(e.get("POD_NAME", {}).get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") == "metadata.name"
           and e.get("POD_NAMESPACE", {}).get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") == "metadata.namespace",
           "default: POD_NAME and POD_NAMESPACE come from the downward API")
    args = c.get("args", [])
    result(not any(a.startswith("--namespaces") for a in args) and "--lane-label=laneway.io/lane" in args
           and "--service-cluster-ip=allocate" in args and "--status-entries-per-second=500" in args
           and all(a in args for a in ("--route-grace=5s", "--max-concurrent-writes=16", "--api-qps=0",
                                        "--api-burst=30", "--debounce=0s"))
           and e.get("LANEWAY_CENTRE_RESYNC", {}).get("value") == "60s"
           and not any(k.startswith(("LANEWAY_ZOOKEEPER", "LANEWAY_NACOS")) for k in e),
           "default: cluster-wide (no --namespaces), default lane label, Services with a cluster IP, 500 status entries a second, the flags' own route grace, write limits, debounce and centre resync, no ZooKeeper/Nacos settings")
    res = c.get("resources", {})
    result(bool(res.get("requests")) and bool(res.get("limits")), "default: resource requests and limits are set")
    aff = pod.get("affinity", {}).get("podAntiAffinity", {}).get("preferredDuringSchedulingIgnoredDuringExecution", [])
    result(bool(aff) and aff[0]["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
           and bool(pod.get("topologySpreadConstraints")),
           "default: replicas prefer different nodes (anti-affinity) and zones (topology spread)")
    pdb = find(objs, "PodDisruptionBudget", release, release_ns)
    result(bool(pdb) and pdb[0]["spec"]["minAvailable"] == 1, "default: a PodDisruptionBudget keeps 1 replica available")
    svc = find(objs, "Service", release + "-metrics", release_ns)
    labels = dep["spec"]["template"]["metadata"]["labels"] if ok else {}
    result(bool(svc) and svc[0]["spec"]["ports"][0]["port"] == 8080 and svc[0]["spec"]["ports"][0]["targetPort"] == "metrics"
           and all(labels.get(k) == v for k, v in svc[0]["spec"]["selector"].items()),
           "default: the metrics Service selects the operator's pods on port 8080")

objs = load("full")
if objs is not None:
    result(not find(objs, "ClusterRole") and not find(objs, "ClusterRoleBinding"),
           "namespaced: no ClusterRole or ClusterRoleBinding")
    for ns in (ns_a, ns_b):
        role, rb = find(objs, "Role", release, ns), find(objs, "RoleBinding", release, ns)
        result(bool(role) and grants(role[0]["rules"]) == WATCH_RULES and bool(rb)
               and rb[0]["subjects"][0]["name"] == release and rb[0]["subjects"][0]["namespace"] == release_ns,
               f"namespaced: Role + RoleBinding with the watch rules in {ns}")
    local = find(objs, "Role", release + "-local", release_ns)
    result(bool(local) and grants(local[0]["rules"]) == local_rules("chart-leader", "chart-dubbo-rules"),
           "namespaced: the release-namespace Role names the configured Lease and ConfigMap")
    dep, c = container(objs)
    args, e = c.get("args", []), env(c)
    want_args = [f"--namespaces={ns_a},{ns_b}", "--lane-label=example.com/lane", "--log-format=json",
                 "--service-cluster-ip=none", "--status-entries-per-second=100",
                 "--route-grace=3s", "--max-concurrent-writes=8", "--api-qps=2.5", "--api-burst=10",
                 "--debounce=100ms",
                 "--lease-name=chart-leader", "--lease-duration=20s", "--lease-renew-deadline=12s",
                 "--lease-retry=3s", "--write-timeout=4s"]
    result(dep is not None and dep["spec"]["replicas"] == 3 and all(a in args for a in want_args),
           f"namespaced: 3 replicas and args {' '.join(want_args)}")
    def secret(name):
        ref = e.get(name, {}).get("valueFrom", {}).get("secretKeyRef", {})
        return (ref.get("name"), ref.get("key"))
    result(e.get("LANEWAY_ZOOKEEPER", {}).get("value") == "zk-0.zk.infra:2181,zk-1.zk.infra:2181"
           and secret("LANEWAY_ZOOKEEPER_AUTH") == ("zk-digest", "digest")
           and e.get("LANEWAY_NACOS_ADDR", {}).get("value") == "http://nacos.infra:8848"
           and e.get("LANEWAY_NACOS_NAMESPACE", {}).get("value") == "dev"
           and e.get("LANEWAY_NACOS_MARKS_RESYNC", {}).get("value") == "10s"
           and secret("LANEWAY_NACOS_USERNAME") == ("nacos-credentials", "user")
           and secret("LANEWAY_NACOS_PASSWORD") == ("nacos-credentials", "pass")
           and e.get("LANEWAY_CONFIGMAP_NAME", {}).get("value") == "chart-dubbo-rules"
           and e.get("LANEWAY_RULE_GRACE", {}).get("value") == "1m"
           and e.get("LANEWAY_CENTRE_RESYNC", {}).get("value") == "2m"
           and e.get("RUST_LOG", {}).get("value") == "info,laneway=debug",
           "namespaced: ZooKeeper and Nacos settings (marks resync too), credentials from the existing Secrets, ConfigMap name, rule grace, centre resync, RUST_LOG")
    netpol = find(objs, "NetworkPolicy", release, release_ns)
    if netpol:
        spec = netpol[0]["spec"]
        ingress_ports = [p["port"] for r in spec.get("ingress", []) for p in r.get("ports", [])]
        egress_ports = {p["port"] for r in spec.get("egress", []) for p in r.get("ports", [])}
        api = [r for r in spec.get("egress", []) if any(p["port"] == 443 for p in r.get("ports", []))]
        result(ingress_ports == ["metrics"] and {53, 443, 6443, 2181, 8848} <= egress_ports
               and api and api[0].get("to") == [{"ipBlock": {"cidr": "10.0.0.1/32"}}],
               f"namespaced: the NetworkPolicy admits only the metrics port and lets out DNS, the API server, ZooKeeper and Nacos (egress ports {sorted(egress_ports, key=str)})")
    else:
        result(False, "namespaced: a NetworkPolicy is rendered")
    sm = open(os.path.join(tmp, "full.yaml")).read()
    result("kind: ServiceMonitor" in sm and "port: metrics" in sm and "release: prometheus" in sm,
           "namespaced: a ServiceMonitor is rendered for the metrics port, with the extra labels")
PY
}
# run_checks FUNCTION WHAT: runs a function that prints PASS/FAIL lines, and counts them.
run_checks() {
  local out line
  if out=$("$1" 2>&1); then :; else echo "$out" | indent; fail "$2 ran"; fi
  while IFS= read -r line; do
    case $line in
      PASS\ *) pass "${line#PASS }" ;;
      FAIL\ *) fail "${line#FAIL }" ;;
    esac
  done <<<"$out"
}
run_checks structure_checks "structure checks"

# --- helpers for installs and for running the operator as a ServiceAccount ----------------------
# helm_install RELEASE NAMESPACE [helm args...]: a fresh install (an old one is removed first).
helm_install() {
  local rel=$1 ns=$2 out; shift 2
  if "$helm" status "$rel" -n "$ns" >/dev/null 2>&1; then "$helm" uninstall "$rel" -n "$ns" >/dev/null; fi
  if out=$("$helm" install "$rel" "$chart" --namespace "$ns" --create-namespace "$@" 2>&1); then
    pass "helm install $rel into $ns${*:+ ($*)}"; printf '%s\n' "$out" >"$tmp/notes-$rel.txt"
  else
    fail "helm install $rel into $ns${*:+ ($*)}"; printf '%s\n' "$out" | indent; return 1
  fi
}
# can USER yes|no VERB RESOURCE [kubectl flags...]: `kubectl auth can-i` as USER says yes/no.
can() {
  local user=$1 want=$2 got; shift 2
  got=$(kubectl auth can-i "$@" --as="$user" 2>/dev/null || true)
  if [ "$got" = "$want" ]; then pass "can-i as ${user##*:}: $* -> $want"
  else fail "can-i as ${user##*:}: $* -> ${got:-error}, want $want"; fi
}
whoami_is() { [ "$(kubectl --kubeconfig "$1" auth whoami -o jsonpath='{.status.userInfo.username}')" = "$2" ]; }
# sa_kubeconfig NAMESPACE NAME OUT: a kubeconfig holding a fresh token of that ServiceAccount.
sa_kubeconfig() {
  local server ca token
  server=$(kubectl config view --minify -o jsonpath='{.clusters[0].cluster.server}')
  ca=$(kubectl config view --minify --raw -o jsonpath='{.clusters[0].cluster.certificate-authority-data}')
  if [ -z "$ca" ]; then
    ca=$(base64 -w0 <"$(kubectl config view --minify -o jsonpath='{.clusters[0].cluster.certificate-authority}')")
  fi
  token=$(kubectl -n "$1" create token "$2" --duration=1h)
  cat >"$3" <<KUBECONFIG
apiVersion: v1
kind: Config
clusters: [{name: envtest, cluster: {server: "$server", certificate-authority-data: "$ca"}}]
users: [{name: $2, user: {token: "$token"}}]
contexts: [{name: $2, context: {cluster: envtest, user: $2}}]
current-context: $2
KUBECONFIG
  check "a token of ServiceAccount $1/$2 authenticates as system:serviceaccount:$1:$2" \
    whoami_is "$3" "system:serviceaccount:$1:$2"
}
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
metrics=http://127.0.0.1:$port
# start_operator LOG KUBECONFIG [laneway flags...]: the real binary, in the background.
start_operator() {
  local log=$1 kc=$2; shift 2
  env -u LANEWAY_NAMESPACES -u LANEWAY_LANE_LABEL -u LANEWAY_LEASE_NAME -u POD_NAME -u POD_NAMESPACE \
    KUBECONFIG="$kc" RUST_LOG=info NO_COLOR=1 \
    "$operator_bin" --identity chart-test --lease-retry 1s --metrics-addr "127.0.0.1:$port" "$@" >"$log" 2>&1 &
  operator_pid=$!
}
leading() { curl -fsS "$metrics/metrics" | grep -Eq '^laneway_leader(\{\})? 1(\.0)?$'; }
errors_total() { curl -fsS "$metrics/metrics" | awk '/^laneway_errors_total/ { s += $NF } END { print s + 0 }'; }
# ready_and_leading LOG WHAT: /readyz answers and this replica holds the Lease.
ready_and_leading() {
  if eventually 60 curl -fsS "$metrics/readyz" && eventually 30 leading; then
    pass "$2: ready and leader"
  else
    if kill -0 "$operator_pid" 2>/dev/null; then fail "$2: ready and leader (not within 90s)"
    else fail "$2: ready and leader (the operator exited)"; fi
    indent <"$1"; return 1
  fi
}
# scenario NS: Service order (app=order, port 80 -> http), pods order-plain (baseline, 10.9.0.1)
# and order-gray (lane gray, 10.9.0.2) reported running and ready, LaneRoute gray for order, and
# TagRule order publishing Dubbo application order-NS (unique: one application, one TagRule).
running() {  # running NS POD IP: what a kubelet would report
  kubectl -n "$1" patch pod "$2" --subresource=status --type=merge \
    -p "{\"status\":{\"phase\":\"Running\",\"podIP\":\"$3\",\"podIPs\":[{\"ip\":\"$3\"}],\"conditions\":[{\"type\":\"Ready\",\"status\":\"True\"}]}}" >/dev/null
}
order_pod() {  # order_pod NAME EXTRA-LABELS
  printf -- '---\napiVersion: v1\nkind: Pod\nmetadata: {name: %s, labels: {app: order%s}}\nspec:\n  containers: [{name: order, image: registry.k8s.io/pause:3.10, ports: [{name: http, containerPort: 8080}]}]\n' "$1" "$2"
}
scenario() {
  {
    printf -- '---\napiVersion: v1\nkind: Service\nmetadata: {name: order}\nspec:\n  selector: {app: order}\n  ports: [{name: http, port: 80, targetPort: http}]\n'
    order_pod order-plain ""
    order_pod order-gray ", laneway.io/lane: gray"
  } | kubectl -n "$1" apply -f - >/dev/null
  running "$1" order-plain 10.9.0.1
  running "$1" order-gray 10.9.0.2
  printf -- '---\napiVersion: laneway.io/v1alpha1\nkind: LaneRoute\nmetadata: {name: gray}\nspec: {services: [order]}\n---\napiVersion: laneway.io/v1alpha1\nkind: TagRule\nmetadata: {name: order}\nspec:\n  selector: {matchLabels: {app: order}}\n  dubbo: {application: order-%s, portName: http}\n' "$1" \
    | kubectl -n "$1" apply -f - >/dev/null
}
lane_service() { kubectl -n "$1" get lr gray -o jsonpath='{.status.services[0].laneService}'; }
has_lane_service() { [ -n "$(lane_service "$1")" ]; }
slice_ips() {  # slice_ips NS SERVICE: the sorted addresses in that Service's EndpointSlices
  kubectl -n "$1" get endpointslices -l "kubernetes.io/service-name=$2" \
    -o jsonpath='{range .items[*].endpoints[*]}{.addresses[0]}{"\n"}{end}' | sort | xargs
}
slice_is() { [ "$(slice_ips "$1" "$2")" = "$3" ]; }
generation_observed() {
  local g; g=$(kubectl -n "$1" get lr gray -o jsonpath='{.metadata.generation} {.status.observedGeneration}')
  [ "${g% *}" = "${g#* }" ]
}
# rule_published RULES-NS NS: the ConfigMap centre holds order-NS's tag-router rule, gray pod in it.
rule_published() {
  kubectl -n "$1" get configmap laneway-dubbo-rules -o json | python3 -c '
import json, sys
data = json.load(sys.stdin).get("data") or {}
rule = data.get(sys.argv[1] + ".tag-router", "")
sys.exit(0 if "10.9.0.2:8080" in rule and "10.9.0.1" not in rule else 1)' "order-$2"
}
# lane_works NS RULES-NS LOG WHAT: the operator resolved the scenario in NS and published its
# Dubbo rule to the ConfigMap in RULES-NS, without an RBAC denial.
lane=""
lane_works() {
  local ns=$1 rules_ns=$2 log=$3 what=$4
  eventually 60 has_lane_service "$ns" || true
  lane=$(lane_service "$ns" || true)
  if [ -n "$lane" ] && eventually 60 slice_is "$ns" "$lane" 10.9.0.2; then
    pass "$what: lane Service $lane has an EndpointSlice holding only the gray pod"
  else
    fail "$what: the lane Service's EndpointSlice holds the gray pod (lane Service '$lane', addresses '$( [ -n "$lane" ] && slice_ips "$ns" "$lane")')"
    indent <"$log"
  fi
  check "$what: the LaneRoute status has observedGeneration = metadata.generation" \
    eventually 30 generation_observed "$ns"
  check "$what: the Dubbo rule of order-$ns is in ConfigMap $rules_ns/laneway-dubbo-rules, gray pod only" \
    eventually 30 rule_published "$rules_ns" "$ns"
  # An RBAC denial reads "... is forbidden: User \"system:serviceaccount:...\" cannot <verb> ...".
  # (Other errors, e.g. from objects earlier tests left in terminating namespaces, are not RBAC's.)
  if grep -q 'forbidden.*cannot' "$log"; then
    fail "$what: no RBAC denial in the operator's log"; grep -m3 'forbidden.*cannot' "$log" | indent
  else
    pass "$what: no RBAC denial in the operator's log (laneway_errors_total=$(errors_total))"
  fi
}
forget_scenario() {  # no operator is left to remove the finalizers: drop them so the objects can go
  local obj
  for obj in lr/gray tr/order; do
    kubectl -n "$1" patch "$obj" --type=merge -p '{"metadata":{"finalizers":null}}' >/dev/null 2>&1 || true
    kubectl -n "$1" delete "$obj" --wait=false >/dev/null 2>&1 || true
  done
}

# LANEWAY_BIN picks another build (e.g. target/debug/laneway). Otherwise cargo builds the release
# binary: a no-op when it is fresh, and never a stale binary left in target/ by an older tree.
operator_bin=${LANEWAY_BIN:-$root/target/release/laneway}
have_bin=""
if [ -n "${LANEWAY_BIN:-}" ]; then
  [ -x "$operator_bin" ] && have_bin=1
elif nice cargo build --release --locked --bin laneway >&2; then
  have_bin=1
fi
[ -n "$have_bin" ] || fail "the operator binary: ${LANEWAY_BIN:+$LANEWAY_BIN is not executable}${LANEWAY_BIN:-cargo build --release --locked --bin laneway failed}"

# --- the operator takes every flag and setting the chart renders ------------------------------
# Its container's args, and its plain LANEWAY_* env values as the flags they stand for
# (LANEWAY_RULE_GRACE: --rule-grace), given to the binary with --help last: a flag it does not
# know or a value it cannot parse fails before the help is printed.
if [ -n "$have_bin" ]; then
  for variant in "${rendered[@]}"; do
    [ -f "$tmp/$variant.json" ] || continue
    mapfile -d '' flags < <(python3 - "$tmp/$variant.json" <<'PY'
import json, sys
doc = json.load(open(sys.argv[1]))
items = doc["items"] if doc.get("kind") == "List" else [doc]
c = next(o for o in items if o["kind"] == "Deployment")["spec"]["template"]["spec"]["containers"][0]
env = [("--" + e["name"][len("LANEWAY_"):].lower().replace("_", "-"), e["value"])
       for e in c.get("env", []) if e["name"].startswith("LANEWAY_") and "value" in e]
sys.stdout.write("".join(a + "\0" for a in c.get("args", []) + [f"{k}={v}" for k, v in env]))
PY
)
    if out=$("$operator_bin" "${flags[@]}" --help 2>&1); then
      pass "the operator takes the rendered args and LANEWAY_* env values ($variant values: $(printf '%s ' "${flags[@]%%=*}"))"
    else
      fail "the operator takes the rendered args and LANEWAY_* env values ($variant values)"; printf '%s\n' "$out" | indent
    fi
  done
fi

# --- cluster mode: helm install, RBAC spot checks, the operator with the chart's RBAC ------------
if helm_install "$release" "$release_ns"; then
  check "CRDs laneroutes, tagrules and laneentries (laneway.io) are Established" \
    kubectl wait --for condition=Established crd/laneroutes.laneway.io crd/tagrules.laneway.io crd/laneentries.laneway.io --timeout=60s
  check "Deployment, ServiceAccount, Role/RoleBinding, metrics Service and PodDisruptionBudget exist in $release_ns" \
    kubectl -n "$release_ns" get "deployment/$release" "serviceaccount/$release" "role/$release-local" \
      "rolebinding/$release-local" "service/$release-metrics" "poddisruptionbudget/$release"
  check "ClusterRole and ClusterRoleBinding exist" \
    kubectl get "clusterrole/$release" "clusterrolebinding/$release"
  notes_ok() { grep -q "kind: LaneRoute" "$1" && grep -q "kubectl get lr,tr -A" "$1" && grep -q "/metrics" "$1"; }
  check "NOTES tell what to do next (apply a LaneRoute, kubectl get lr,tr -A, metrics)" \
    notes_ok "$tmp/notes-$release.txt"

  can "$sa_user" yes watch pods --all-namespaces
  can "$sa_user" yes update endpointslices.discovery.k8s.io -n default
  can "$sa_user" no patch endpointslices.discovery.k8s.io -n default
  can "$sa_user" yes update services -n default
  can "$sa_user" no patch services -n default
  can "$sa_user" yes delete services -n default
  can "$sa_user" yes update laneroutes.laneway.io --subresource=status -n default
  can "$sa_user" no patch laneroutes.laneway.io --subresource=status -n default
  can "$sa_user" yes patch tagrules.laneway.io -n default
  can "$sa_user" yes create events.events.k8s.io -n default
  can "$sa_user" yes update leases.coordination.k8s.io/laneway-leader -n "$release_ns"
  can "$sa_user" yes patch configmaps/laneway-dubbo-rules -n "$release_ns"
  can "$sa_user" yes create configmaps -n "$release_ns"
  can "$sa_user" no patch configmaps/someone-elses -n "$release_ns"
  can "$sa_user" no delete pods --all-namespaces
  can "$sa_user" no patch pods -n default
  can "$sa_user" no get secrets -n "$release_ns"
  can "$sa_user" no list secrets --all-namespaces
  can "$sa_user" no update laneroutes.laneway.io -n default
  can "$sa_user" no delete laneroutes.laneway.io -n default
  can "$sa_user" no update deployments.apps -n "$release_ns"
  can "$sa_user" no update leases.coordination.k8s.io/someone-else -n "$release_ns"
  can "$sa_user" no create leases.coordination.k8s.io -n default
  can "$sa_user" no list configmaps -n default
  can "$sa_user" no create events -n default
  can "$sa_user" no create clusterroles.rbac.authorization.k8s.io

  if [ -n "$have_bin" ]; then
    sa_kubeconfig "$release_ns" "$release" "$tmp/sa.kubeconfig"
    flags=(--lease-namespace "$release_ns" --lease-name laneway-leader)
    start_operator "$tmp/operator.log" "$tmp/sa.kubeconfig" "${flags[@]}"
    if ready_and_leading "$tmp/operator.log" "cluster mode: the operator with the chart's RBAC"; then
      ns=laneway-chart-rbac-$(date +%s)-$$
      kubectl create namespace "$ns" >/dev/null
      scenario "$ns"
      lane_works "$ns" "$release_ns" "$tmp/operator.log" "cluster mode"
      curl -fsS "$metrics/metrics" >"$tmp/metrics.txt" || true
      stop_operator

      # Take one permission away (EndpointSlices can no longer be written), restart,
      # and change something: the operator must say so, in its log and in its metrics.
      kubectl get clusterrole "$release" -o json | python3 -c '
import json, sys
role = json.load(sys.stdin)
for rule in role["rules"]:
    if "endpointslices" in rule.get("resources", []):
        rule["verbs"] = [v for v in rule["verbs"] if v not in ("create", "update")]
json.dump(role, sys.stdout)' | kubectl replace -f - >/dev/null
      can "$sa_user" no update endpointslices.discovery.k8s.io -n "$ns"
      start_operator "$tmp/operator-broken.log" "$tmp/sa.kubeconfig" "${flags[@]}"
      if ready_and_leading "$tmp/operator-broken.log" "cluster mode, endpointslices create/update removed: the operator restarted"; then
        kubectl -n "$ns" label pod order-plain laneway.io/lane=gray --overwrite >/dev/null   # gray: 2 pods now
        denied='forbidden.*cannot (create|update) resource.*endpointslices'
        forbidden_and_counted() { grep -Eq "$denied" "$tmp/operator-broken.log" && (( $(errors_total) > 0 )); }
        if eventually 60 forbidden_and_counted; then
          pass "cluster mode, endpointslices create/update removed: the operator fails loudly: laneway_errors_total=$(errors_total); log: $(grep -Em1 "$denied" "$tmp/operator-broken.log" | cut -c1-400)"
        else
          fail "cluster mode, endpointslices create/update removed: the operator logs 'forbidden' and counts laneway_errors_total (now $(errors_total))"
          indent <"$tmp/operator-broken.log"
        fi
        if [ -n "$lane" ] && slice_is "$ns" "$lane" 10.9.0.2; then
          pass "cluster mode, endpointslices create/update removed: the last good EndpointSlice stays in place"
        else
          fail "cluster mode, endpointslices create/update removed: the last good EndpointSlice stays in place (now '$( [ -n "$lane" ] && slice_ips "$ns" "$lane")')"
        fi
      fi
      stop_operator
      forget_scenario "$ns"
    fi
    stop_operator
  fi

  check "helm uninstall $release" "$helm" uninstall "$release" --namespace "$release_ns" --wait --timeout 60s
  release_gone() {
    ! kubectl -n "$release_ns" get "deployment/$release" && ! kubectl get "clusterrole/$release" &&
      ! kubectl get "clusterrolebinding/$release" && ! kubectl -n "$release_ns" get "role/$release-local"
  }
  check "the release's objects are gone (Deployment, ClusterRole, ClusterRoleBinding, Role)" \
    eventually 30 release_gone
  check "the CRDs stay after uninstall (Helm never deletes CRDs)" \
    kubectl get crd laneroutes.laneway.io tagrules.laneway.io
fi

# --- alerts and dashboard: Prometheus' own parsers, and every metric they name is exported --------
# The PrometheusRule and the dashboard of the full render; the metrics the operator exported in
# cluster mode above (every family is listed there, with or without samples).
monitoring_checks() {
  python3 - "$tmp" "$promrules" "$ns_a" <<'PY'
import json, os, re, subprocess, sys

tmp, promrules, ns_a = sys.argv[1:]

def result(ok, name):
    print(("PASS " if ok else "FAIL ") + name)

docs = json.loads(subprocess.run([promrules, "json", os.path.join(tmp, "full.yaml")],
                                 capture_output=True, text=True, check=True).stdout)
rules = [d for d in docs if d["kind"] == "PrometheusRule"]
boards = [d for d in docs if d["kind"] == "ConfigMap" and "laneway.json" in d.get("data", {})]
exported = {}
if os.path.exists(os.path.join(tmp, "metrics.txt")):
    for line in open(os.path.join(tmp, "metrics.txt")):
        m = re.match(r"# TYPE (\S+) (\S+)", line)
        if m:
            exported[m.group(1)] = m.group(2)
result(bool(exported), f"the operator's /metrics lists its families ({len(exported)})")

def family(series):
    """The exported family a series name belongs to, if any."""
    for suffix, kinds in (("_total", ("counter",)), ("_bucket", ("histogram",)), ("_sum", ("histogram",)),
                          ("_count", ("histogram",)), ("", ("gauge", "counter", "histogram"))):
        base = series[: len(series) - len(suffix)] if suffix and series.endswith(suffix) else (series if not suffix else None)
        if base is not None and exported.get(base) in kinds and (suffix or exported[base] == "gauge"):
            return base
    return None

def named(kind, names, what):
    missing = [n for n in names if family(n) is None]
    result(bool(names) and not missing,
           f"{what}: every metric named is exported ({', '.join(names)})" if not missing
           else f"{what}: metrics not exported: {', '.join(missing)}")

def parse(args, what, stdin=None):
    out = subprocess.run([promrules, *args], input=stdin, capture_output=True, text=True)
    result(out.returncode == 0, f"{what}: Prometheus' parser accepts it" + ("" if out.returncode == 0 else ": " + out.stderr.strip()))
    return out.stdout.split()

if rules:
    rule = rules[0]
    groups = os.path.join(tmp, "rules.yaml")
    json.dump(rule["spec"], open(groups, "w"))  # JSON is YAML: the rule file Prometheus reads
    alerts = [r["alert"] for g in rule["spec"]["groups"] for r in g["rules"]]
    result(rule["metadata"]["labels"].get("release") == "prometheus"
           and all(r["labels"].get("team") == "lanes" for g in rule["spec"]["groups"] for r in g["rules"])
           and all('job="laneway-metrics"' in r["expr"] for g in rule["spec"]["groups"] for r in g["rules"]),
           f"PrometheusRule: {len(alerts)} alerts with the extra labels, each on job laneway-metrics ({', '.join(alerts)})")
    named("rule", parse(["rules", groups], "PrometheusRule"), "PrometheusRule")
else:
    result(False, "a PrometheusRule is rendered with prometheusRule.enabled")

if boards:
    board = boards[0]
    dash = json.loads(board["data"]["laneway.json"])
    exprs = [t["expr"] for p in dash["panels"] for t in p.get("targets", [])]
    # Grafana's variables, as Grafana would fill them in.
    promql = "\n".join(e.replace("$__rate_interval", "1m").replace("$job", ".+") for e in exprs)
    result(board["metadata"]["namespace"] == ns_a and board["metadata"]["labels"].get("grafana_dashboard") == "1"
           and board["metadata"].get("annotations", {}).get("grafana_folder") == "Platform",
           f"Grafana dashboard: a ConfigMap in {ns_a} with the sidecar's label and folder annotation ({len(exprs)} queries)")
    named("dashboard", parse(["exprs"], "Grafana dashboard queries", promql), "Grafana dashboard")
else:
    result(False, "a Grafana dashboard ConfigMap is rendered with grafanaDashboard.enabled")

kruise = [d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "kruise-rollout-configuration"]
script = open("charts/laneway/lua/kruise-rollout-laneroute.lua").read().rstrip("\n")
result(len(kruise) == 1 and kruise[0]["metadata"]["namespace"] == "kruise-rollout"
       and kruise[0]["data"] == {"lua.traffic.routing.LaneRoute.laneway.io": script},
       "Kruise Rollout: the chart's LaneRoute script in kruise-rollout/kruise-rollout-configuration, as in the file")
PY
}
promrules=$(tests/promrules/build.sh | tail -n1)
run_checks monitoring_checks "monitoring checks"

# --- namespaced mode: one watched namespace, nothing cluster-wide --------------------------------
ns_release=laneway-ns ns_release_ns=laneway-ns-system
ns_user=system:serviceaccount:$ns_release_ns:$ns_release
watched=laneway-chart-ns-$(date +%s)-$$
kubectl create namespace "$watched" >/dev/null
if helm_install "$ns_release" "$ns_release_ns" --set "watchNamespaces={$watched}" \
     --set leaderElection.leaseName=laneway-ns-leader --set replicas=1; then
  namespaced_objects() {
    kubectl -n "$watched" get "role/$ns_release" "rolebinding/$ns_release" && ! kubectl get "clusterrole/$ns_release" &&
      ! kubectl -n "$ns_release_ns" get "poddisruptionbudget/$ns_release"
  }
  check "namespaced mode: a Role and RoleBinding in $watched, no ClusterRole, no PodDisruptionBudget for 1 replica" \
    namespaced_objects
  can "$ns_user" yes watch pods -n "$watched"
  can "$ns_user" yes update laneroutes.laneway.io --subresource=status -n "$watched"
  can "$ns_user" no watch pods --all-namespaces
  can "$ns_user" no list pods -n default
  can "$ns_user" no update endpointslices.discovery.k8s.io -n default
  can "$ns_user" yes update leases.coordination.k8s.io/laneway-ns-leader -n "$ns_release_ns"
  can "$ns_user" no update leases.coordination.k8s.io/laneway-leader -n "$ns_release_ns"
  if [ -n "$have_bin" ]; then
    sa_kubeconfig "$ns_release_ns" "$ns_release" "$tmp/sa-ns.kubeconfig"
    start_operator "$tmp/operator-ns.log" "$tmp/sa-ns.kubeconfig" --namespaces "$watched" \
      --lease-namespace "$ns_release_ns" --lease-name laneway-ns-leader
    if ready_and_leading "$tmp/operator-ns.log" "namespaced mode: the operator with the chart's RBAC"; then
      scenario "$watched"
      lane_works "$watched" "$ns_release_ns" "$tmp/operator-ns.log" "namespaced mode"
    fi
    stop_operator
    forget_scenario "$watched"
  fi
  check "helm uninstall $ns_release" "$helm" uninstall "$ns_release" --namespace "$ns_release_ns" --wait --timeout 60s
fi

echo "chart.sh: took $((SECONDS - began))s" >&2
echo "chart: $passed passed, $failed failed"
(( failed == 0 ))
