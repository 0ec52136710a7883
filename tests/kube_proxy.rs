//! What plain in-cluster callers of Services reach: a real kube-proxy (tests/kubeproxy, v1.34.4,
//! nftables mode) programs this network namespace from the test API server, and `curl` calls
//! ClusterIPs the way a pod that knows nothing of lanes calls a Service. Each pod is a small HTTP
//! server at its pod IP that answers with its name (tests/gateway's backends); every request
//! opens a new TCP connection (`Connection: close`, checked with curl's `num_connects`), so each
//! one is load-balanced by kube-proxy's rules anew.
//!
//! kube-proxy starts once for the binary (Node `node-1`, route for the Service range on `lo`)
//! and stops, removing its nftables tables and the route, when the binary exits. Its
//! `minSyncPeriod` is upstream's default (1 s) unless `LANEWAY_KUBE_PROXY_MIN_SYNC` says
//! otherwise (e.g. `100ms`).

mod cluster;
mod gateway;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cluster::process::{free_port, http_get, metric, tail};
use cluster::*;
use gateway::{Backend, Backends};
use k8s_openapi::api::core::v1::{Node, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{ListParams, Patch, PatchParams};
use kube::{Api, ResourceExt};
use laneway::api::LaneRoute;
use serde_json::json;

/// Requests per assertion.
const N: usize = 1000;
/// curl processes sending them side by side.
const CURLS: usize = 8;
/// The envtest API server's `--service-cluster-ip-range` (tests/envtest/cmd/envtest/main.go):
/// routed to `lo`, so that a connect to a ClusterIP reaches netfilter instead of failing with
/// "network unreachable" in a namespace with no default route.
const SERVICE_CIDR: &str = "10.0.0.0/16";
/// The pods' range (`clusterCIDR`, the Node's `podCIDR`); tests/in-cluster.sh puts
/// 198.18.0.2-40 on `lo`.
const POD_CIDR: &str = "198.18.0.0/24";
const NODE: &str = "node-1";
const NODE_IP: &str = "198.18.0.1";
/// The address the calling "pod" sends from (a pod IP: traffic kube-proxy sees as the cluster's
/// own, not masqueraded). No test gives it to a backend.
const CALLER_IP: &str = "198.18.0.40";
const LANE_LABEL: &str = "laneway.io/lane";

/// One scenario at a time: the 1,000-request loads and the relabel timings share two cores.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

// ---------------------------------------------------------------------------------------------
// kube-proxy

struct KubeProxy {
    /// The wrapper's stdin: it stops kube-proxy and cleans up when this closes, i.e. when the
    /// test binary exits, however it exits.
    _stdin: Mutex<ChildStdin>,
    metrics: String,
    healthz: String,
    log: PathBuf,
    config: PathBuf,
    min_sync: Duration,
}

impl KubeProxy {
    fn metric(&self, name: &str) -> f64 {
        metric(&self.metrics, name, "").unwrap_or_default()
    }

    fn healthy(&self) -> bool {
        http_get(&format!("http://{}/healthz", self.healthz)).is_some()
    }

    fn log_tail(&self) -> String {
        format!("kube-proxy log {}:\n{}", self.log.display(), tail(&self.log, 30))
    }
}

/// The kube-proxy binary: `$LANEWAY_KUBE_PROXY_BIN` (its bin dir, as tests/in-cluster.sh
/// exports it, or the binary), else the one tests/kubeproxy/build.sh builds.
fn kube_proxy_bin() -> PathBuf {
    let bin = match std::env::var_os("LANEWAY_KUBE_PROXY_BIN") {
        Some(bin) if !bin.is_empty() => PathBuf::from(bin),
        _ => {
            let out = Command::new(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/kubeproxy/build.sh"))
                .stderr(Stdio::inherit())
                .output()
                .expect("run tests/kubeproxy/build.sh");
            let stdout = String::from_utf8_lossy(&out.stdout);
            let last = stdout.lines().last().unwrap_or_default().trim().to_owned();
            assert!(
                out.status.success() && !last.is_empty(),
                "tests/kubeproxy/build.sh failed ({}); it needs the Go module proxy the first time: \
                 run it outside the network namespace before the tests",
                out.status
            );
            PathBuf::from(last)
        }
    };
    if bin.is_dir() {
        bin.join("kube-proxy")
    } else {
        bin
    }
}

/// Stops kube-proxy when the test binary closes its end of stdin, then removes what it set up.
const WRAPPER: &str = r#"
ip route replace "$4" dev lo
"$1" --config "$2" -v=2 &
kp=$!
cat >/dev/null
kill -TERM "$kp" 2>/dev/null; wait "$kp"
nft delete table ip kube-proxy 2>/dev/null; nft delete table ip6 kube-proxy 2>/dev/null
ip route del "$4" dev lo 2>/dev/null
echo "wrapper: kube-proxy stopped, tables and route removed"
"#;

/// kube-proxy, started by the first test that needs it.
async fn kube_proxy(c: &Cluster) -> &'static KubeProxy {
    static KP: tokio::sync::OnceCell<KubeProxy> = tokio::sync::OnceCell::const_new();
    KP.get_or_init(|| start_kube_proxy(c)).await
}

async fn start_kube_proxy(c: &Cluster) -> KubeProxy {
    assert!(
        std::env::var_os("LANEWAY_NETNS").is_some(),
        "kube-proxy rewrites the network namespace's nftables: run under tests/in-cluster.sh"
    );
    assert!(
        Command::new("nft")
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success()),
        "nft is missing (apt-get install nftables; tests/in-cluster.sh does it)"
    );
    // The Node this kube-proxy runs on: it waits for the Node's addresses at start.
    let node = json!({"apiVersion": "v1", "kind": "Node",
        "metadata": {"name": NODE}, "spec": {"podCIDR": POD_CIDR, "podCIDRs": [POD_CIDR]}});
    apply(&c.client, "", &node.to_string()).await.expect("Node");
    let status = json!({"status": {"addresses": [{"type": "InternalIP", "address": NODE_IP},
        {"type": "Hostname", "address": NODE}]}});
    Api::<Node>::all(c.client.clone())
        .patch_status(NODE, &PatchParams::default(), &Patch::Merge(&status))
        .await
        .expect("Node status");

    let min_sync = std::env::var("LANEWAY_KUBE_PROXY_MIN_SYNC").unwrap_or_else(|_| "1s".into());
    let min_sync_d = parse_duration(&min_sync);
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("kube-proxy");
    std::fs::create_dir_all(&dir).expect("kube-proxy dir");
    let id = std::process::id();
    let (config, log) = (
        dir.join(format!("config-{id}.yaml")),
        dir.join(format!("kube-proxy-{id}.log")),
    );
    let kubeconfig =
        std::fs::canonicalize(std::env::var_os("KUBECONFIG").expect("KUBECONFIG")).expect("KUBECONFIG");
    let (healthz, metrics) = (
        format!("127.0.0.1:{}", free_port()),
        format!("127.0.0.1:{}", free_port()),
    );
    // Upstream's defaults but for: the node's name, loopback-only health and metrics ports,
    // the pods' range as the cluster's, no OOM score, and conntrack sysctls left as they are
    // (a network namespace may not set nf_conntrack_max).
    std::fs::write(
        &config,
        format!(
            "apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: nftables
hostnameOverride: {NODE}
clientConnection: {{kubeconfig: {kubeconfig}}}
healthzBindAddress: {healthz}
metricsBindAddress: {metrics}
clusterCIDR: {POD_CIDR}
detectLocalMode: ClusterCIDR
oomScoreAdj: 0
conntrack: {{maxPerCore: 0, min: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}}
nftables: {{minSyncPeriod: {min_sync}, syncPeriod: 30s}}
",
            kubeconfig = kubeconfig.display()
        ),
    )
    .expect("kube-proxy config");
    let file = std::fs::File::create(&log).expect("kube-proxy log");
    let bin = kube_proxy_bin();
    let mut child = Command::new("bash")
        .args(["-c", WRAPPER, "kube-proxy-wrapper"])
        .arg(&bin)
        .arg(&config)
        .arg(&log)
        .arg(SERVICE_CIDR)
        .stdin(Stdio::piped())
        .stdout(file.try_clone().expect("log"))
        .stderr(file)
        .spawn()
        .expect("start kube-proxy");
    let stdin = child.stdin.take().expect("stdin");
    let kp = KubeProxy {
        _stdin: Mutex::new(stdin),
        metrics,
        healthz,
        log,
        config,
        min_sync: min_sync_d,
    };
    let started = Instant::now();
    while !kp.healthy() {
        if let Ok(Some(status)) = child.try_wait() {
            panic!("kube-proxy exited ({status}); {}", kp.log_tail());
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "kube-proxy not healthy after 60 s; {}",
            kp.log_tail()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    println!(
        "kube-proxy {} (nftables, minSyncPeriod {min_sync}) healthy after {:?}; config {}",
        bin.display(),
        started.elapsed(),
        kp.config.display()
    );
    // The wrapper lives until the binary exits; nothing waits for it.
    drop(child);
    kp
}

fn parse_duration(s: &str) -> Duration {
    let s = s.trim();
    if let Some(ms) = s.strip_suffix("ms") {
        Duration::from_millis(ms.parse().expect("LANEWAY_KUBE_PROXY_MIN_SYNC"))
    } else if let Some(secs) = s.strip_suffix('s') {
        Duration::from_secs_f64(secs.parse().expect("LANEWAY_KUBE_PROXY_MIN_SYNC"))
    } else {
        panic!("LANEWAY_KUBE_PROXY_MIN_SYNC: a duration like 1s or 100ms, not {s:?}")
    }
}

/// kube-proxy's nftables table (IPv4), as `nft list table ip kube-proxy` prints it.
fn nft_table() -> String {
    let out = Command::new("nft")
        .args(["list", "table", "ip", "kube-proxy"])
        .output()
        .expect("nft");
    assert!(
        out.status.success(),
        "nft: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

// ---------------------------------------------------------------------------------------------
// Plain callers: curl

/// What callers got: answers per pod, and every request that was not answered 200 on a new
/// connection.
#[derive(Debug, Default)]
struct Calls {
    by_pod: BTreeMap<String, usize>,
    failures: Vec<String>,
    total: usize,
}

impl Calls {
    fn pods(&self) -> BTreeSet<&str> {
        self.by_pod.keys().map(String::as_str).collect()
    }

    /// All `n` requests answered, each by one of `pods`, and each of `pods` answered some.
    fn assert_served_by(&self, n: usize, pods: &[&str], what: &str) {
        assert!(
            self.failures.is_empty(),
            "{what}: {} of {} requests failed, first ones: {:?}",
            self.failures.len(),
            self.total,
            &self.failures[..self.failures.len().min(5)]
        );
        assert_eq!(self.total, n, "{what}: requests sent");
        assert_eq!(
            self.pods(),
            pods.iter().copied().collect::<BTreeSet<_>>(),
            "{what}: pods that answered {:?}",
            self.by_pod
        );
    }

    /// Parses curl's output: each answer's body (the pod's JSON) followed by the `-w` line.
    fn record(&mut self, out: &str) {
        let mut body = String::new();
        for line in out.lines() {
            if let Some(rest) = line.strip_prefix("@@ ") {
                self.total += 1;
                let mut fields = rest.split(' ');
                let (code, connects) = (fields.next().unwrap_or(""), fields.next().unwrap_or(""));
                match (code, connects, pod_of(&body)) {
                    ("200", "1", Some(pod)) => *self.by_pod.entry(pod).or_default() += 1,
                    _ => self.failures.push(format!(
                        "HTTP {code} over {connects} new connection(s), body {body:?}"
                    )),
                }
                body.clear();
            } else {
                body.push_str(line);
            }
        }
    }
}

fn pod_of(body: &str) -> Option<String> {
    let v: serde_json::Value = serde_json::from_str(body.trim()).ok()?;
    v["pod"].as_str().map(str::to_owned)
}

/// curl's arguments for plain calls from [`CALLER_IP`], one new connection per request.
fn curl_args() -> Vec<&'static str> {
    vec![
        "-sS",
        "--interface",
        CALLER_IP,
        "-H",
        "Connection: close",
        "--connect-timeout",
        "2",
        "--max-time",
        "5",
        "-w",
        "\n@@ %{http_code} %{num_connects}\n",
    ]
}

/// `n` GETs to `http://{ip}:{port}/`, [`CURLS`] curl processes side by side, each sending its
/// share of URLs one after another.
async fn curl(ip: &str, port: u16, n: usize) -> Calls {
    let per = n.div_ceil(CURLS);
    let runs = (0..CURLS)
        .map(|i| per.min(n.saturating_sub(i * per)))
        .filter(|count| *count > 0)
        .map(|count| {
            tokio::process::Command::new("curl")
                .args(curl_args())
                .arg(format!("http://{ip}:{port}/?[1-{count}]"))
                .output()
        });
    let mut calls = Calls::default();
    for out in futures::future::join_all(runs).await {
        let out = out.expect("run curl");
        calls.record(&String::from_utf8_lossy(&out.stdout));
    }
    calls
}

/// One GET: the pod that answered, or what went wrong.
fn curl_once(ip: &str, port: u16) -> Result<String, String> {
    let out = Command::new("curl")
        .args(curl_args())
        .args(["--max-time", "2"])
        .arg(format!("http://{ip}:{port}/"))
        .output()
        .expect("run curl");
    let mut calls = Calls::default();
    calls.record(&String::from_utf8_lossy(&out.stdout));
    match calls.by_pod.into_keys().next() {
        Some(pod) => Ok(pod),
        None => Err(format!(
            "{:?} {}",
            calls.failures,
            String::from_utf8_lossy(&out.stderr).trim()
        )),
    }
}

/// Calls `ip:port` until `pod` answers (kube-proxy has programmed it); 30 s at most.
async fn await_answer_from(kp: &KubeProxy, ip: &str, port: u16, pod: &str) {
    let started = Instant::now();
    loop {
        let (ip2, pod2) = (ip.to_owned(), pod.to_owned());
        let last = tokio::task::spawn_blocking(move || curl_once(&ip2, port).map(|p| p == pod2))
            .await
            .expect("join");
        if last == Ok(true) {
            return;
        }
        assert!(
            started.elapsed() < TIMEOUT,
            "{ip}:{port} not answered by {pod} after {TIMEOUT:?}; last: {last:?}; {}",
            kp.log_tail()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// One request of a [`Prober`]: when it was sent, and who answered (Err: what failed).
#[derive(Clone, Debug)]
struct Probe {
    sent: Instant,
    answer: Result<String, String>,
}

/// One caller calling `ip:port` without pause, one curl process (and connection) per request.
struct Prober {
    stop: Arc<AtomicBool>,
    probes: Arc<Mutex<Vec<Probe>>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Prober {
    fn start(ip: &str, port: u16) -> Prober {
        let stop = Arc::new(AtomicBool::new(false));
        let probes = Arc::new(Mutex::new(Vec::new()));
        let (ip, s, p) = (ip.to_owned(), stop.clone(), probes.clone());
        let thread = std::thread::spawn(move || {
            while !s.load(Ordering::SeqCst) {
                let sent = Instant::now();
                let answer = curl_once(&ip, port);
                p.lock().unwrap().push(Probe { sent, answer });
            }
        });
        Prober {
            stop,
            probes,
            thread: Some(thread),
        }
    }

    fn since(&self, t: Instant) -> Vec<Probe> {
        self.probes
            .lock()
            .unwrap()
            .iter()
            .filter(|p| p.sent >= t)
            .cloned()
            .collect()
    }

    fn stop(mut self) -> Vec<Probe> {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        self.probes.lock().unwrap().clone()
    }
}

impl Drop for Prober {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

// ---------------------------------------------------------------------------------------------
// The cluster side

/// One scenario: its namespace, backend pods and kube-proxy; [`SERIAL`] is held while it lives.
struct Scenario {
    c: Cluster,
    kp: &'static KubeProxy,
    backends: Backends,
    _serial: tokio::sync::MutexGuard<'static, ()>,
}

impl Scenario {
    async fn new(test: &str) -> Scenario {
        let serial = SERIAL.lock().await;
        let c = cluster(test).await;
        let kp = kube_proxy(&c).await;
        Scenario {
            c,
            kp,
            backends: Backends::start(),
            _serial: serial,
        }
    }

    /// A pod of `app` at `ip`, serving HTTP on its container port `http`, Running and Ready.
    async fn pod(&self, name: &str, app: &str, lane: Option<&str>, ip: &str) {
        let mut b = Backend::new(name, app, ip);
        if let Some(lane) = lane {
            b = b.lane(lane);
        }
        self.backends.deploy(&self.c.client, &self.c.ns, &b).await;
    }

    /// Applies a Service: `spec` is the YAML flow mapping after `spec:`.
    async fn service_yaml(&self, name: &str, annotations: &str, spec: &str) {
        self.c
            .apply_yaml(&format!(
                "apiVersion: v1\nkind: Service\nmetadata: {{name: {name}, annotations: {{{annotations}}}}}\nspec: {spec}\n"
            ))
            .await
            .unwrap_or_else(|e| panic!("Service {name}: {e}"));
    }

    /// The (Service that serves the lane, baseline Service) LaneRoute `route` names for
    /// `service` in its status, once it names both.
    async fn outputs(&self, route: &str, service: &str) -> (String, String) {
        let deadline = Instant::now() + TIMEOUT;
        loop {
            let status = self
                .c
                .api::<LaneRoute>()
                .get(route)
                .await
                .ok()
                .and_then(|r| r.status);
            let entry = status.and_then(|s| s.services.into_iter().find(|s| s.name == service));
            let last = match entry {
                Some(e) => match (e.served_by.clone(), e.baseline_service.clone()) {
                    (Some(lane), Some(baseline)) => return (lane, baseline),
                    _ => format!("{e:?}"),
                },
                None => "no entry".to_owned(),
            };
            assert!(
                Instant::now() < deadline,
                "LaneRoute {route} names no lane and baseline Service of {service} after {TIMEOUT:?}: {last}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// A Service's `spec.clusterIP` (`None` for a headless one), once it exists.
    async fn cluster_ip(&self, service: &str) -> String {
        let deadline = Instant::now() + TIMEOUT;
        loop {
            let svc = self.c.api::<Service>().get_opt(service).await.ok().flatten();
            if let Some(ip) = svc.and_then(|s| s.spec?.cluster_ip) {
                return ip;
            }
            assert!(
                Instant::now() < deadline,
                "Service {service} has no clusterIP after {TIMEOUT:?}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1]
}

// ---------------------------------------------------------------------------------------------
// Tests

/// Pods 198.18.0.2-6.
#[tokio::test(flavor = "multi_thread")]
async fn plain_callers_of_the_lane_and_baseline_services_reach_only_their_subsets() {
    let s = Scenario::new("kube-proxy-subsets").await;
    s.c.service("order").await;
    let untagged = ["order-0", "order-1", "order-2"];
    for (name, ip) in untagged.iter().zip(["198.18.0.2", "198.18.0.3", "198.18.0.4"]) {
        s.pod(name, "order", None, ip).await;
    }
    s.pod("order-gray-0", "order", Some("gray"), "198.18.0.5").await;
    s.pod("order-gray-1", "order", Some("gray"), "198.18.0.6").await;
    s.c.apply_route("gray", &["order"], &[], false).await;
    let _op = s.c.operator("lease").await;

    let (lane, baseline) = s.outputs("gray", "order").await;
    let (lane_ip, baseline_ip) = (s.cluster_ip(&lane).await, s.cluster_ip(&baseline).await);
    println!("lane Service {lane} at {lane_ip}, baseline Service {baseline} at {baseline_ip}");
    await_answer_from(s.kp, &lane_ip, 80, "order-gray-0").await;
    await_answer_from(s.kp, &baseline_ip, 80, "order-0").await;

    let started = Instant::now();
    let calls = curl(&lane_ip, 80, N).await;
    println!(
        "{N} calls to the lane Service in {:?}: {:?}",
        started.elapsed(),
        calls.by_pod
    );
    calls.assert_served_by(N, &["order-gray-0", "order-gray-1"], "lane Service");

    let calls = curl(&baseline_ip, 80, N).await;
    println!("{N} calls to the baseline Service: {:?}", calls.by_pod);
    calls.assert_served_by(N, &untagged, "baseline Service");
}

/// Pods 198.18.0.7-8. `order-1` moves into `gray` and back (`LANEWAY_KUBE_PROXY_MOVES`, 12 by
/// default); a caller calls the baseline Service without pause. Time = from sending the label
/// PATCH until the first of 20 calls in a row that avoid `order-1` (into the lane), or the first
/// call it answers again (out of it).
#[tokio::test(flavor = "multi_thread")]
async fn a_relabel_moves_plain_callers_of_the_baseline_service() {
    let s = Scenario::new("kube-proxy-relabel").await;
    s.c.service("order").await;
    s.pod("order-0", "order", None, "198.18.0.7").await;
    s.pod("order-1", "order", None, "198.18.0.8").await;
    s.c.apply_route("gray", &["order"], &[], false).await;
    let _op = s.c.operator("lease").await;
    let (_, baseline) = s.outputs("gray", "order").await;
    let ip = s.cluster_ip(&baseline).await;
    await_answer_from(s.kp, &ip, 80, "order-1").await;
    await_answer_from(s.kp, &ip, 80, "order-0").await;

    let moves: usize = std::env::var("LANEWAY_KUBE_PROXY_MOVES")
        .ok()
        .and_then(|m| m.parse().ok())
        .unwrap_or(12);
    // A move is kube-proxy's to make within one minSyncPeriod of laneway's slice write (a sync
    // that ran just before it holds the next one back that long), plus a sync and laneway's own
    // part: 1.5 s of slack on two shared cores.
    let bound = s.kp.min_sync + Duration::from_millis(1500);
    // Every move starts with kube-proxy at rest, as a relabel in a quiet cluster does: a sync
    // that removed endpoints is followed one minSyncPeriod later by one that deletes the stale
    // chains, and the next sync may run one minSyncPeriod after that. (Moves 1.2 s apart with
    // the default 1 s wait for it: p50 ~460 ms, max ~1.2 s.)
    let quiet = s.kp.min_sync * 2 + Duration::from_millis(300);
    let prober = Prober::start(&ip, 80);
    let (mut into, mut out) = (Vec::new(), Vec::new());
    for i in 0..moves {
        tokio::time::sleep(quiet).await;
        let lane = (i % 2 == 0).then_some("gray");
        let sent = Instant::now();
        s.c.label_pod("order-1", LANE_LABEL, lane).await;
        let deadline = sent + TIMEOUT;
        let moved = loop {
            let probes = prober.since(sent);
            let found = match lane {
                // The first call of 20 in a row that avoid order-1.
                Some(_) => probes
                    .windows(20)
                    .find(|w| w.iter().all(|p| p.answer.as_deref() == Ok("order-0")))
                    .map(|w| w[0].sent),
                None => probes
                    .iter()
                    .find(|p| p.answer.as_deref() == Ok("order-1"))
                    .map(|p| p.sent),
            };
            if let Some(at) = found {
                break at - sent;
            }
            assert!(
                Instant::now() < deadline,
                "move {i} ({lane:?}): plain callers not moved after {TIMEOUT:?}; {}",
                s.kp.log_tail()
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        };
        if lane.is_some() {
            into.push(moved);
        } else {
            out.push(moved);
        }
    }
    let probes = prober.stop();
    let failed: Vec<&Probe> = probes.iter().filter(|p| p.answer.is_err()).collect();
    assert!(
        failed.is_empty(),
        "{} of {} calls failed during the moves: {:?}",
        failed.len(),
        probes.len(),
        &failed[..failed.len().min(5)]
    );
    let mut all: Vec<Duration> = into.iter().chain(&out).copied().collect();
    all.sort();
    println!(
        "relabel -> plain callers of the baseline Service moved (kube-proxy nftables, minSyncPeriod {:?}), {} moves: p50 {:?}, p99 {:?}, max {:?}; into the lane {:?}; out {:?}; {} calls, none failed; kube-proxy network programming latency (laneway's trigger time -> rules) {}",
        s.kp.min_sync,
        all.len(),
        percentile(&all, 0.5),
        percentile(&all, 0.99),
        all.last().copied().unwrap_or_default(),
        into,
        out,
        probes.len(),
        programming_latency(s.kp),
    );
    let worst = all.last().copied().unwrap_or_default();
    assert!(
        worst <= bound,
        "a move took {worst:?}, more than {bound:?}: {all:?}"
    );

    // At rest again (order-1 back in baseline): both pods, and only they, answer.
    let calls = curl(&ip, 80, N).await;
    if calls.pods() != BTreeSet::from(["order-0", "order-1"]) {
        let ns = &s.c.ns;
        let rules: Vec<String> = nft_table()
            .lines()
            .filter(|l| l.contains(&format!("{ns}/{baseline}")))
            .map(str::to_owned)
            .collect();
        println!(
            "after the moves: the baseline slices hold {:?}; kube-proxy's rules for it: {rules:#?}; {}",
            s.c.slice_pods(&baseline).await,
            s.kp.log_tail()
        );
    }
    calls.assert_served_by(N, &["order-0", "order-1"], "baseline Service after the moves");
}

/// kube-proxy's `network_programming_duration_seconds`: from the EndpointSlices'
/// `last-change-trigger-time` (set by laneway) to the rules being in place; count and mean.
fn programming_latency(kp: &KubeProxy) -> String {
    let count = kp.metric("kubeproxy_network_programming_duration_seconds_count");
    let sum = kp.metric("kubeproxy_network_programming_duration_seconds_sum");
    if count > 0.0 {
        format!("{count} samples, mean {:.0} ms", sum / count * 1000.0)
    } else {
        "no samples".into()
    }
}

/// Pods 198.18.0.10-13. A headless Service in a lane beside a normal one: laneway's outputs for
/// it are headless too, kube-proxy programs nothing for them and keeps serving the other one,
/// and the LaneRoute is Ready.
#[tokio::test(flavor = "multi_thread")]
async fn a_headless_service_in_a_lane_breaks_nothing() {
    let s = Scenario::new("kube-proxy-headless").await;
    s.service_yaml(
        "search",
        "",
        "{clusterIP: None, selector: {app: search}, ports: [{name: http, port: 80, targetPort: http}]}",
    )
    .await;
    s.c.service("pay").await;
    s.pod("search-0", "search", None, "198.18.0.10").await;
    s.pod("search-gray", "search", Some("gray"), "198.18.0.11").await;
    s.pod("pay-0", "pay", None, "198.18.0.12").await;
    s.pod("pay-gray", "pay", Some("gray"), "198.18.0.13").await;
    s.c.apply_route("gray", &["search", "pay"], &[], false).await;
    let _op = s.c.operator("lease").await;

    let (search_lane, search_baseline) = s.outputs("gray", "search").await;
    let (pay_lane, pay_baseline) = s.outputs("gray", "pay").await;
    wait_for(
        "LaneRoute gray Ready",
        ("True".to_owned(), String::new()),
        || async {
            let (status, _) = condition(&s.c, "gray", "Ready").await;
            (status, String::new())
        },
    )
    .await;
    for svc in [&search_lane, &search_baseline] {
        assert_eq!(
            s.cluster_ip(svc).await,
            "None",
            "laneway's {svc} is headless like search"
        );
    }
    wait_for("search's lane slice", names(&["search-gray"]), || {
        s.c.slice_pods(&search_lane)
    })
    .await;
    wait_for("search's baseline slice", names(&["search-0"]), || {
        s.c.slice_pods(&search_baseline)
    })
    .await;

    // kube-proxy has caught up with laneway's writes (the same plan wrote both services) ...
    let (pay_lane_ip, pay_baseline_ip) = (s.cluster_ip(&pay_lane).await, s.cluster_ip(&pay_baseline).await);
    await_answer_from(s.kp, &pay_lane_ip, 80, "pay-gray").await;
    await_answer_from(s.kp, &pay_baseline_ip, 80, "pay-0").await;
    // ... and programs nothing for the headless ones.
    let table = nft_table();
    let ns = &s.c.ns;
    for svc in [&pay_lane, &pay_baseline] {
        assert!(
            table.contains(&format!("{ns}/{svc}/")),
            "kube-proxy programs {svc}"
        );
    }
    for svc in ["search", &search_lane, &search_baseline] {
        assert!(
            !table.contains(&format!("{ns}/{svc}/")),
            "kube-proxy programmed headless {svc}:\n{table}"
        );
    }
    let calls = curl(&pay_lane_ip, 80, N).await;
    calls.assert_served_by(N, &["pay-gray"], "pay's lane Service beside a headless one");
    let calls = curl(&pay_baseline_ip, 80, N).await;
    calls.assert_served_by(N, &["pay-0"], "pay's baseline Service beside a headless one");
    assert_eq!(
        s.kp.metric("kubeproxy_sync_proxy_rules_nftables_sync_failures_total"),
        0.0,
        "{}",
        s.kp.log_tail()
    );
    assert!(s.kp.healthy(), "kube-proxy healthy; {}", s.kp.log_tail());
}

/// Pods 198.18.0.14-16. A guarded Service (no `spec.selector`, its pods named by the
/// `laneway.io/selector` annotation): laneway writes its own EndpointSlices with the untagged
/// pods only, and is its baseline, so plain callers of the Service itself never reach a tagged
/// pod.
#[tokio::test(flavor = "multi_thread")]
async fn a_guarded_service_sends_plain_callers_to_untagged_pods_only() {
    let s = Scenario::new("kube-proxy-guarded").await;
    s.service_yaml(
        "order",
        "laneway.io/selector: app=order",
        "{ports: [{name: http, port: 80, targetPort: http}]}",
    )
    .await;
    s.pod("order-0", "order", None, "198.18.0.14").await;
    s.pod("order-1", "order", None, "198.18.0.15").await;
    s.pod("order-gray", "order", Some("gray"), "198.18.0.16").await;
    s.c.apply_route("gray", &["order"], &[], false).await;
    let _op = s.c.operator("lease").await;

    wait_for(
        "laneway's EndpointSlices for the guarded Service order: its untagged pods",
        names(&["order-0", "order-1"]),
        || s.c.slice_pods("order"),
    )
    .await;
    let lp = ListParams::default().labels("kubernetes.io/service-name=order");
    for slice in s.c.api::<EndpointSlice>().list(&lp).await.expect("slices").items {
        assert_eq!(
            slice
                .labels()
                .get("endpointslice.kubernetes.io/managed-by")
                .map(String::as_str),
            Some("controller.laneway.io"),
            "slice {}",
            slice.name_any()
        );
    }
    let (lane, baseline) = s.outputs("gray", "order").await;
    assert_eq!(baseline, "order", "the guarded Service is its own baseline");
    let mut want = vec!["order".to_owned(), lane.clone()];
    want.sort();
    assert_eq!(
        s.c.services().await,
        want,
        "no baseline Service besides the guarded one"
    );
    let (order_ip, lane_ip) = (s.cluster_ip("order").await, s.cluster_ip(&lane).await);
    // kube-proxy may have programmed a first slice with one of the two pods.
    await_answer_from(s.kp, &order_ip, 80, "order-0").await;
    await_answer_from(s.kp, &order_ip, 80, "order-1").await;
    await_answer_from(s.kp, &lane_ip, 80, "order-gray").await;

    let calls = curl(&order_ip, 80, N).await;
    println!("{N} calls to the guarded Service order: {:?}", calls.by_pod);
    calls.assert_served_by(N, &["order-0", "order-1"], "the guarded Service");
    let calls = curl(&lane_ip, 80, N).await;
    calls.assert_served_by(N, &["order-gray"], "the lane Service");
}
