//! The fault suite: two replicas of the operator (each behind a proxy that can cut or partition
//! its connections, each with its own identity in the API server's audit log) against a private
//! control plane, a real ZooKeeper, a real Nacos and real Dubbo providers and consumer, while
//! pods churn. Each fault in turn; an invariant checker samples every 20 ms (tests/faults/
//! checker.rs) and the audit log proves that no replica wrote after its renew deadline. A real
//! Traefik serves the routes of a LaneEntry, and a load generator (tests/faults/load.rs) sends
//! tagged and untagged requests through it during each fault, counting those that fail or that a
//! pod of the wrong tier answers.
//!
//! `make test` runs the short variant; `make faults` the long one (`LANEWAY_FAULTS=long`), which
//! writes its table to `target/tmp/fault-report.md` (the figures in RELIABILITY.md).
//! `LANEWAY_FAULTS_RATE` sets the requests per second through the gateway: 200 in the long
//! variant; none in the short one that `make test` runs, whose checker tolerances leave the
//! load no room on two cores (set it to send some there too); 0 sends none.
//! `LANEWAY_FAULTS_ACCESS_LOG=1` has Traefik log every request (next to its log, in
//! target/tmp/gateway-logs), to see where a failed one went.
//! `LANEWAY_FAULTS_ONLY` runs only the faults whose names contain one of its comma-separated
//! parts, e.g. `LANEWAY_FAULTS_ONLY="API Priority,etcd compaction"`.
//!
//! The faults of a busy cluster: API Priority and Fairness shedding the replicas' requests
//! (they are not in `system:masters`, which it exempts) while the leader starts cold under a
//! burst; the leader's watches resuming behind an etcd compaction (pods are watched from etcd,
//! with no watch cache, so that they are answered 410 Gone); the API server slowed down by the
//! replicas' proxies; ZooKeeper and Nacos slowed down by theirs; a node drained. Each fault also
//! counts the replicas' writes against a calm spell of churn alone.

mod cluster;
mod faults;
mod gateway;
mod peers;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cluster::{eventually, Operator};
use faults::checker::{Centre, Checker, Incidents, REPAIR_PERIOD};
use faults::load::{self, Kind, Load, Target};
use faults::{audit, ControlPlane, Proxy, CHECKER, REPLICAS};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Namespace, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::flowcontrol::v1::{FlowSchema, PriorityLevelConfiguration};
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use peers::{provider, Consumer, Nacos, ZooKeeper, NACOS_PASSWORD};
use serde_json::json;

const NS: &str = "shop";
const SYSTEM: &str = "laneway-system";
const LEASE: &str = "laneway-leader";
const RENEW_DEADLINE: Duration = Duration::from_millis(2500);

/// Traefik's identity in the audit log. It reaches the API server directly, not through a
/// replica's proxy: a fault of the gateway's own is not one of laneway's.
const GATEWAY_IDENTITY: &str = "traefik";
/// The requests of the load: `Host: web.shop.test`, to Service `web` (never churned: two
/// baseline pods and one in lane dev-alice; feature-x has none of its own and falls back to
/// baseline), each pod a small HTTP server at an IP the suite uses for nothing else.
const WEB_HOST: &str = "web.shop.test";
const WEB_PODS: [(&str, Option<&str>, &str); 3] = [
    ("web-0", None, "198.18.0.20"),
    ("web-1", None, "198.18.0.21"),
    ("web-alice", Some("dev-alice"), "198.18.0.22"),
];
/// The node drain: the web pods that terminate, and the pods that replace them (name, lane,
/// IP). Every other churn pod terminates too, and is replaced by a `drained-*` pod.
const WEB_DRAINED: [&str; 2] = ["web-0", "web-alice"];
const WEB_REPLACEMENTS: [(&str, Option<&str>, &str); 2] = [
    ("web-0-new", None, "198.18.0.23"),
    ("web-alice-new", Some("dev-alice"), "198.18.0.24"),
];
/// The load starts this long before each fault and stops this long after it recovered (the
/// gateway applies a change up to its reload throttle, 200 ms, after the checker saw it).
const LOAD_LEAD: Duration = Duration::from_millis(500);
const LOAD_TAIL: Duration = Duration::from_secs(1);
/// Faults whose failed requests are shown to be unavoidable here, with the reason: their
/// figures are printed and reported, not asserted (a request a pod of the wrong tier answered
/// always is).
const UNAVOIDABLE: &[(&str, &str)] = &[(
    "Nacos down",
    "Nacos's JVM starting again takes both cores for about two seconds: the requests sent then time out at the gateway (the generator's own clock runs late as well); in a cluster Nacos does not share the gateway's CPUs",
)];

/// API Priority and Fairness for the throttling fault: the replicas' requests in the shop
/// namespace (not their Lease's, in laneway-system) go to a priority level of one nominal share
/// (3 seats of the API server's 600 here), lending none, borrowing none, queueing none: a
/// request past those seats is answered 429 with `Retry-After`.
const APF_NAME: &str = "laneway-throttled";
const APF_THROTTLE: &str = "\
apiVersion: flowcontrol.apiserver.k8s.io/v1
kind: PriorityLevelConfiguration
metadata: {name: laneway-throttled}
spec:
  type: Limited
  limited:
    nominalConcurrencyShares: 1
    lendablePercent: 0
    borrowingLimitPercent: 0
    limitResponse: {type: Reject}
---
apiVersion: flowcontrol.apiserver.k8s.io/v1
kind: FlowSchema
metadata: {name: laneway-throttled}
spec:
  priorityLevelConfiguration: {name: laneway-throttled}
  matchingPrecedence: 100
  distinguisherMethod: {type: ByUser}
  rules:
    - subjects: [{kind: Group, group: {name: laneway:throttlable}}]
      resourceRules:
        - {verbs: ['*'], apiGroups: ['*'], resources: ['*'], namespaces: [shop]}
";
/// The least `Retry-After` of API Priority and Fairness: no write throttled is sent again
/// sooner.
const THROTTLED_WAIT: Duration = Duration::from_secs(1);
/// How much longer than its tolerance the checker lets a slice or a rule trail the pods while
/// the replicas are throttled: a write shed twice, each time waiting the `Retry-After` API
/// Priority and Fairness gave, which it raises while it keeps shedding (up to 6 s seen here),
/// plus a write. While the server refuses laneway's writes, nothing laneway writes can change;
/// the longest trail is measured and reported.
const THROTTLED_SLACK: Duration = Duration::from_secs(15);
/// How long the longest trail is watched from the start of the throttled burst.
const THROTTLED_WATCH: Duration = Duration::from_secs(15);
/// The delay of a slow API server, each way, per chunk: a round trip about ten times the usual
/// here.
const SLOW_API: Duration = Duration::from_millis(100);
/// Writes a fault may make beyond its events' share: a cold start writes every status again.
const WRITES_SLACK: usize = 60;
/// A config centre that answers after seconds.
const SLOW_CENTRE: Duration = Duration::from_secs(2);

/// What the load sends, in turn: untagged twice as often as each lane.
fn load_kinds() -> Vec<Kind> {
    let baseline = ["web-0", "web-1", "web-0-new"];
    vec![
        Kind::untagged(&baseline),
        Kind::tagged("dev-alice", &["web-alice", "web-alice-new"]),
        Kind::untagged(&baseline),
        Kind::tagged("feature-x", &baseline),
    ]
}

/// Durations of the two variants.
struct Plan {
    api_down: Duration,
    cuts: Duration,
    cut_every: Duration,
    kills: u32,
    partition: Duration,
    zk_down: Duration,
    nacos_down: Duration,
    burst: u32,
    /// The burst while the replicas are throttled: enough for plans to write more at once
    /// than their seats allow.
    throttled_burst: u32,
    /// Pod events written while the leader's watches are cut off, before etcd is compacted.
    behind: u32,
    /// How long the API server (and the config centres) answer slowly.
    slow_api: Duration,
    slow_centre: Duration,
    /// How long the drained pods stay terminating.
    drain: Duration,
    /// A calm spell of churn alone, whose writes per pod event each fault is compared with.
    calm: Duration,
    /// Requests per second through the gateway during each fault.
    load_rate: u32,
    /// The longest a fault's load runs (then it stops and says so).
    load_bound: Duration,
}

impl Plan {
    fn from_env() -> (Plan, bool) {
        let long = std::env::var("LANEWAY_FAULTS").is_ok_and(|v| v == "long");
        let s = Duration::from_secs;
        let plan = if long {
            Plan {
                api_down: s(30),
                cuts: s(60),
                cut_every: s(3),
                kills: 20,
                partition: s(20),
                zk_down: s(60),
                nacos_down: s(60),
                burst: 1000,
                throttled_burst: 1000,
                behind: 300,
                slow_api: s(60),
                slow_centre: s(60),
                drain: s(20),
                calm: s(20),
                load_rate: 200,
                load_bound: s(400),
            }
        } else {
            Plan {
                api_down: s(5),
                cuts: s(10),
                cut_every: s(2),
                kills: 3,
                partition: s(8),
                zk_down: s(6),
                nacos_down: s(6),
                burst: 200,
                throttled_burst: 500,
                behind: 150,
                slow_api: s(10),
                slow_centre: s(10),
                drain: s(5),
                calm: s(5),
                load_rate: 0,
                load_bound: s(120),
            }
        };
        let mut plan = plan;
        if let Ok(rate) = std::env::var("LANEWAY_FAULTS_RATE") {
            plan.load_rate = rate.parse().expect("LANEWAY_FAULTS_RATE: requests per second");
        }
        (plan, long)
    }
}

/// One replica: a proxy in front of the API server, the identity it writes as, its process.
struct Replica {
    identity: &'static str,
    proxy: Proxy,
    op: Option<Operator>,
}

struct World {
    cp: ControlPlane,
    client: Client,
    replicas: Vec<Replica>,
    zk: Option<ZooKeeper>,
    zk_dir: std::path::PathBuf,
    zk_port: u16,
    nacos: Nacos,
    centre_args: Vec<String>,
    /// In front of ZooKeeper and Nacos, for the replicas.
    centre_proxies: [Proxy; 2],
}

impl World {
    fn spawn(&self, i: usize) -> Operator {
        let r = &self.replicas[i];
        let kubeconfig = self.cp.kubeconfig_for(r.identity, &r.proxy.url());
        let port = cluster::process::free_port();
        let metrics = format!("127.0.0.1:{port}");
        let dir = log_dir();
        let log = dir.join(format!("{}-{port}.log", r.identity));
        let file = std::fs::File::create(&log).expect("log");
        let child = std::process::Command::new(env!("CARGO_BIN_EXE_laneway"))
            .args([
                "--identity",
                r.identity,
                "--namespaces",
                NS,
                "--lease-namespace",
                SYSTEM,
            ])
            .args(["--lease-name", LEASE, "--metrics-addr", &metrics])
            .args(["--lease-duration", "4s", "--lease-renew-deadline", "2500ms"])
            .args(["--lease-retry", "500ms", "--write-timeout", "1s"])
            .args(["--rule-grace", "2s", "--centre-resync", "5s"])
            .args(&self.centre_args)
            .env("KUBECONFIG", kubeconfig)
            .env("RUST_LOG", "info,laneway=debug")
            .stdout(file.try_clone().expect("log"))
            .stderr(file)
            .spawn()
            .expect("start laneway");
        Operator { child, metrics, log }
    }

    fn start(&mut self, i: usize) {
        let op = self.spawn(i);
        self.replicas[i].op = Some(op);
    }

    /// The replica holding the Lease now, by the Lease record.
    async fn leader(&self) -> Option<usize> {
        let leases: Api<Lease> = Api::namespaced(self.client.clone(), SYSTEM);
        let holder = leases.get(LEASE).await.ok()?.spec?.holder_identity?;
        self.replicas
            .iter()
            .position(|r| r.identity == holder && r.op.is_some())
    }

    async fn wait_leader(&self) -> usize {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(i) = self.leader().await {
                let leading = self.replicas[i]
                    .op
                    .as_ref()
                    .expect("op")
                    .metric("laneway_leader", "")
                    .await;
                if leading == 1.0 {
                    return i;
                }
            }
            assert!(Instant::now() < deadline, "no replica leads");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// Where the replicas log: emptied at the start of a run.
fn log_dir() -> std::path::PathBuf {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("fault-logs");
    std::fs::create_dir_all(&dir).expect("log dir");
    dir
}

/// Pod churn: readiness flips, relabels and recreations of `churn-*` pods, at `rate` per second,
/// counting the events the API server accepted.
struct Churn {
    applied: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Churn {
    fn drop(&mut self) {
        self.task.abort();
    }
}

const CHURN_PODS: u32 = 12;
const APPS: [&str; 3] = ["order", "user", "pay"];
const LANES: [Option<&str>; 4] = [None, Some("gray"), Some("feature-x"), Some("dev-alice")];

fn churn_pod(i: u32) -> (String, &'static str, String) {
    (
        format!("churn-{i}"),
        APPS[(i % 3) as usize],
        format!("10.30.0.{}", i + 10),
    )
}

/// A tiny deterministic generator, so that a run can be repeated.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

async fn create_pod(
    pods: &Api<Pod>,
    name: &str,
    app: &str,
    lane: Option<&str>,
    ip: &str,
    ready: bool,
) -> bool {
    let mut labels = BTreeMap::from([("app".to_owned(), app.to_owned())]);
    if let Some(lane) = lane {
        labels.insert("laneway.io/lane".into(), lane.into());
    }
    let pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": labels},
        "spec": {"nodeName": "node-1", "containers": [{"name": "app", "image": "example/app:1",
            "ports": [{"name": "http", "containerPort": 8080}, {"name": "dubbo", "containerPort": 20880}]}]}
    });
    let pod: Pod = serde_json::from_value(pod).expect("pod");
    if pods.create(&PostParams::default(), &pod).await.is_err() {
        return false;
    }
    set_ready(pods, name, ip, ready).await
}

async fn set_ready(pods: &Api<Pod>, name: &str, ip: &str, ready: bool) -> bool {
    let status = json!({"status": {"phase": "Running", "podIP": ip, "podIPs": [{"ip": ip}],
        "conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }}]}});
    pods.patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
        .await
        .is_ok()
}

/// One random event on a churn pod; true when the API server took it.
async fn churn_event(pods: &Api<Pod>, rng: &mut Rng) -> bool {
    let i = rng.below(CHURN_PODS.into()) as u32;
    let (name, app, ip) = churn_pod(i);
    match rng.below(10) {
        0..=3 => set_ready(pods, &name, &ip, rng.below(2) == 0).await,
        4..=7 => {
            let lane = LANES[rng.below(LANES.len() as u64) as usize];
            let patch = json!({"metadata": {"labels": {"laneway.io/lane": lane}}});
            pods.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .is_ok()
        }
        _ => {
            let dp = DeleteParams {
                grace_period_seconds: Some(0),
                ..Default::default()
            };
            let _ = pods.delete(&name, &dp).await;
            for _ in 0..50 {
                if pods.get_opt(&name).await.ok().flatten().is_none() {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            let lane = LANES[rng.below(LANES.len() as u64) as usize];
            create_pod(pods, &name, app, lane, &ip, true).await
        }
    }
}

/// `n` churn events on the churn pods, eight at a time, stopping early at `until`; how many
/// the API server took.
async fn burst(pods: &Api<Pod>, n: u32, seed: u64, until: Option<Instant>) -> u64 {
    let mut rng = Rng(seed);
    let (mut sent, mut applied) = (0, 0);
    while sent < n && until.is_none_or(|t| Instant::now() < t) {
        let batch = (n - sent).min(8);
        let results = futures::future::join_all((0..batch).map(|k| {
            let pods = pods.clone();
            let mut rng = Rng(rng.next() ^ u64::from(k + 1));
            async move { churn_event(&pods, &mut rng).await }
        }))
        .await;
        applied += results.into_iter().filter(|ok| *ok).count() as u64;
        sent += batch;
    }
    applied
}

impl Churn {
    fn start(client: Client, rate: u32, seed: u64) -> Churn {
        let applied = Arc::new(AtomicU64::new(0));
        let counter = applied.clone();
        let task = tokio::spawn(async move {
            let pods: Api<Pod> = Api::namespaced(client, NS);
            let mut rng = Rng(seed);
            let mut tick = tokio::time::interval(Duration::from_secs(1) / rate);
            loop {
                tick.tick().await;
                if churn_event(&pods, &mut rng).await {
                    counter.fetch_add(1, Ordering::Relaxed);
                }
            }
        });
        Churn { applied, task }
    }

    fn applied(&self) -> u64 {
        self.applied.load(Ordering::Relaxed)
    }
}

/// Polls a centre's rule contents into `centre` (None while unreadable).
fn poll_zookeeper(address: String, centre: Centre) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut session: Option<zookeeper_client::Client> = None;
        loop {
            if session.is_none() {
                session = tokio::time::timeout(
                    Duration::from_secs(2),
                    zookeeper_client::Client::connect(&address),
                )
                .await
                .ok()
                .and_then(Result::ok);
            }
            let read = match &session {
                Some(s) => read_znodes(s).await,
                None => None,
            };
            if read.is_none() {
                session = None;
            }
            *centre.lock().expect("centre") = read;
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
}

async fn read_znodes(s: &zookeeper_client::Client) -> Option<BTreeMap<String, String>> {
    let root = "/dubbo/config/dubbo";
    let children = match s.list_children(root).await {
        Ok(c) => c,
        Err(zookeeper_client::Error::NoNode) => return Some(BTreeMap::new()),
        Err(_) => return None,
    };
    let mut out = BTreeMap::new();
    for child in children.into_iter().filter(|c| c.ends_with(".tag-router")) {
        match s.get_data(&format!("{root}/{child}")).await {
            Ok((data, _)) => {
                out.insert(child, String::from_utf8_lossy(&data).into_owned());
            }
            Err(zookeeper_client::Error::NoNode) => {}
            Err(_) => return None,
        }
    }
    Some(out)
}

fn poll_nacos(nacos: String, keys: Vec<String>, centre: Centre) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(2))
            .build()
            .expect("http");
        loop {
            let read = async {
                let login: serde_json::Value = http
                    .post(format!("{nacos}/nacos/v1/auth/login"))
                    .form(&[("username", "nacos"), ("password", NACOS_PASSWORD)])
                    .send()
                    .await
                    .ok()?
                    .json()
                    .await
                    .ok()?;
                let token = login["accessToken"].as_str()?.to_owned();
                let mut out = BTreeMap::new();
                for key in &keys {
                    let r = http
                        .get(format!("{nacos}/nacos/v1/cs/configs"))
                        .query(&[("dataId", key.as_str()), ("group", "dubbo")])
                        .header("accessToken", &token)
                        .send()
                        .await
                        .ok()?;
                    if r.status() == reqwest::StatusCode::NOT_FOUND {
                        continue;
                    }
                    if !r.status().is_success() {
                        return None;
                    }
                    out.insert(key.clone(), r.text().await.ok()?);
                }
                Some(out)
            };
            let read = read.await;
            *centre.lock().expect("centre") = read;
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    })
}

/// What one fault did.
struct Outcome {
    fault: &'static str,
    events: u64,
    lost: usize,
    incidents: Incidents,
    non_leader_writes: usize,
    recovery: Duration,
    /// The requests through the gateway, and when the fault began (their times are relative
    /// to it).
    traffic: load::Report,
    fault_started: Instant,
    /// The replicas' writes in the shop namespace during the fault.
    writes: Writes,
    /// Writes sent again sooner than the API server's Retry-After after a 429.
    early_retries: usize,
    /// The fault throttled the replicas.
    throttled: bool,
    /// For the compaction fault: the watches of the leader that resumed to 410 Gone.
    resumed_gone: Option<usize>,
    /// For the slow faults: how long outputs trailed the churn while the fault lasted.
    held_up: Option<Behind>,
}

/// How long outputs trailed the churn: the longest one slice, one rule in the ConfigMap and one
/// rule in ZooKeeper or Nacos differed from a full recomputation without a break.
#[derive(Clone, Copy, Debug, Default)]
struct Behind {
    slices: Duration,
    configmap: Duration,
    centres: Duration,
}

/// [`Behind`] over `period`, sampled every 20 ms.
async fn longest_behind(checker: &Checker, period: Duration) -> Behind {
    let end = Instant::now() + period;
    let mut since: BTreeMap<String, Instant> = BTreeMap::new();
    let mut out = Behind::default();
    while Instant::now() < end {
        let now = Instant::now();
        // "slice <name>: ...", "configmap <key> differs", "zookeeper <key> differs", ...
        let behind: BTreeSet<String> = checker
            .differences()
            .iter()
            .map(|d| d.split_whitespace().take(2).collect::<Vec<_>>().join(" "))
            .collect();
        since.retain(|k, _| behind.contains(k));
        for key in behind {
            let behind_for = now - *since.entry(key.clone()).or_insert(now);
            let longest = match key.split(' ').next() {
                Some("slice") => &mut out.slices,
                Some("configmap") => &mut out.configmap,
                _ => &mut out.centres,
            };
            *longest = (*longest).max(behind_for);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    out
}

/// The replicas' writes in the shop namespace (events aside) since a time, from the audit log.
#[derive(Clone, Copy, Debug, Default)]
struct Writes {
    succeeded: usize,
    /// Answered 429 (Too Many Requests).
    throttled: usize,
}

impl Writes {
    fn count(records: &[audit::Record], since: k8s_openapi::jiff::Timestamp) -> Writes {
        let mut w = Writes::default();
        for r in replica_writes(records, since) {
            if r.succeeded() {
                w.succeeded += 1;
            } else if r.code == Some(429) {
                w.throttled += 1;
            }
        }
        w
    }

    fn per_event(&self, events: u64) -> f64 {
        self.succeeded as f64 / events.max(1) as f64
    }
}

fn replica_writes(
    records: &[audit::Record],
    since: k8s_openapi::jiff::Timestamp,
) -> impl Iterator<Item = &audit::Record> {
    records.iter().filter(move |r| {
        REPLICAS.contains(&r.user.as_str())
            && r.is_write()
            && r.is_final()
            && r.namespace == NS
            && r.resource != "events"
            && r.received >= since
    })
}

/// Writes of an object by the replicas sent sooner than `wait` after a 429 for it (Events
/// aside: they are never sent again).
fn early_retries(
    records: &[audit::Record],
    since: k8s_openapi::jiff::Timestamp,
    wait: Duration,
) -> Vec<String> {
    let mut shed: BTreeMap<(String, String, String), &audit::Record> = BTreeMap::new();
    let mut early = Vec::new();
    let mut writes: Vec<&audit::Record> = replica_writes(records, since).collect();
    writes.sort_by_key(|r| r.received);
    let wait = k8s_openapi::jiff::SignedDuration::try_from(wait).expect("wait");
    for r in writes {
        let key = (r.resource.clone(), r.subresource.clone(), r.name.clone());
        if let Some(before) = shed.get(&key) {
            if r.received < before.completed + wait {
                early.push(format!("{r}, after {before}"));
            }
        }
        if r.code == Some(429) {
            shed.insert(key, r);
        } else {
            shed.remove(&key);
        }
    }
    early
}

/// (ready, serving, terminating) of the endpoint at `ip` in laneway's slices.
async fn endpoint_conditions(client: &Client, ip: &str) -> Option<(bool, bool, bool)> {
    let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), NS);
    let list = slices.list(&Default::default()).await.ok()?;
    let endpoint = list
        .items
        .into_iter()
        .flat_map(|s| s.endpoints)
        .find(|e| e.addresses.iter().any(|a| a == ip))?;
    let c = endpoint.conditions?;
    Some((c.ready?, c.serving?, c.terminating?))
}

/// Per replica, the watches its log says were answered 410 Gone so far.
fn watches_gone(world: &World) -> Vec<usize> {
    world
        .replicas
        .iter()
        .map(|r| {
            r.op.as_ref()
                .and_then(|op| std::fs::read_to_string(&op.log).ok())
                .map_or(0, |log| {
                    log.lines()
                        .filter(|l| {
                            l.contains("watch failed") && (l.contains("410") || l.contains("too old"))
                        })
                        .count()
                })
        })
        .collect()
}

/// Waits until the cluster and the centres equal a full recomputation; the time it took and
/// the outputs still differing at the end.
async fn recover(checker: &Checker, limit: Duration) -> (Duration, Vec<String>) {
    let started = Instant::now();
    loop {
        let diff = checker.differences();
        if diff.is_empty() || started.elapsed() > limit {
            return (started.elapsed(), diff);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn diff_incidents(after: &Incidents, before: &Incidents) -> Incidents {
    Incidents {
        emptied: after.emptied - before.emptied,
        wrong_tier: after.wrong_tier - before.wrong_tier,
        tagged_in_baseline: after.tagged_in_baseline - before.tagged_in_baseline,
        untagged_in_dubbo: after.untagged_in_dubbo - before.untagged_in_dubbo,
        centre_drift: after.centre_drift - before.centre_drift,
        notes: after.notes[before.notes.len()..].to_vec(),
    }
}

fn yaml(client: &Client, ns: &str, manifest: &str) -> impl std::future::Future<Output = ()> {
    let (client, ns, manifest) = (client.clone(), ns.to_owned(), manifest.to_owned());
    async move { cluster::apply(&client, &ns, &manifest).await.expect("apply") }
}

/// Waits until the API server serves LaneRoutes (after their CRD is created, or a restart).
async fn lane_routes_served(client: &Client, what: &str) {
    eventually(what, || async {
        Api::<laneway::api::LaneRoute>::namespaced(client.clone(), NS)
            .list(&Default::default())
            .await
            .is_ok()
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn faults_lose_no_event_empty_no_lane_and_never_let_two_replicas_write() {
    let (plan, long) = Plan::from_env();
    let _ = std::fs::remove_dir_all(log_dir());
    let identities: Vec<&str> = REPLICAS
        .iter()
        .copied()
        .chain([CHECKER, GATEWAY_IDENTITY])
        .collect();
    // The replicas are throttlable (not in system:masters, which API Priority and Fairness
    // exempts), and pods are watched from etcd itself (no watch cache for them), so that a
    // compaction answers a watch resuming behind it 410 Gone, as a watch cache does to a
    // watch whose outage outlived its window.
    let cp = ControlPlane::start_throttlable(&identities, &REPLICAS, &["--watch-cache-sizes=pods#0"]).await;
    let client = cp.client_for(CHECKER).await;
    let namespaces: Api<Namespace> = Api::all(client.clone());
    for ns in [NS, SYSTEM] {
        let obj = serde_json::from_value(json!({"metadata": {"name": ns}})).expect("ns");
        namespaces
            .create(&PostParams::default(), &obj)
            .await
            .expect("namespace");
    }
    let crds: Api<
        k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
    > = Api::all(client.clone());
    for (_, doc) in laneway::api::crd_documents() {
        let crd = serde_saphyr::from_str(&doc).expect("crd");
        crds.create(&PostParams::default(), &crd).await.expect("crd");
    }
    lane_routes_served(&client, "CRDs served").await;

    // The gateway: the Gateway API CRDs, a GatewayClass and a Gateway, and Traefik, which
    // watches this control plane straight from the API server, as an identity of its own.
    let options = gateway::TraefikOptions {
        access_log: std::env::var("LANEWAY_FAULTS_ACCESS_LOG").is_ok_and(|v| v == "1"),
        kubeconfig: Some(cp.kubeconfig_for(GATEWAY_IDENTITY, cp.server_url())),
        ..Default::default()
    };
    let traefik = gateway::Traefik::start_with(&client, NS, options).await;
    let backends = gateway::Backends::start();
    let target = Target {
        addr: traefik.web,
        host: WEB_HOST.into(),
        header: gateway::LANE_HEADER.into(),
    };

    // The shop: three Services; two real Dubbo providers of order-service (one baseline, one
    // gray); the churn pods; four lanes and two TagRules publishing Dubbo rules.
    for app in APPS {
        yaml(
            &client,
            NS,
            &format!("apiVersion: v1\nkind: Service\nmetadata: {{name: {app}}}\nspec:\n  selector: {{app: {app}}}\n  ports: [{{name: web, port: 80, targetPort: http}}]\n"),
        )
        .await;
    }
    yaml(
        &client,
        NS,
        "apiVersion: v1\nkind: Service\nmetadata: {name: web}\nspec:\n  selector: {app: web}\n  ports: [{name: http, port: 80, targetPort: http}]\n",
    )
    .await;
    for (name, lane, ip) in WEB_PODS {
        let mut pod = gateway::Backend::new(name, "web", ip);
        if let Some(lane) = lane {
            pod = pod.lane(lane);
        }
        backends.deploy(&client, NS, &pod).await;
    }
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    assert!(create_pod(&pods, "order-p1", "order", None, "198.18.0.2", true).await);
    assert!(create_pod(&pods, "order-p2", "order", Some("gray"), "198.18.0.3", true).await);
    for i in 0..CHURN_PODS {
        let (name, app, ip) = churn_pod(i);
        assert!(create_pod(&pods, &name, app, LANES[(i % 4) as usize], &ip, true).await);
    }
    for (name, services, fallback, strict) in [
        ("gray", "[order, user, pay]", "[]", false),
        ("feature-x", "[order, user, pay, web]", "[]", false),
        ("dev-alice", "[order, user, pay, web]", "[feature-x]", false),
        ("dev-bob", "[user, pay]", "[]", true),
    ] {
        yaml(
            &client,
            NS,
            &format!("apiVersion: laneway.io/v1alpha1\nkind: LaneRoute\nmetadata: {{name: {name}}}\nspec:\n  services: {services}\n  fallback: {fallback}\n  strict: {strict}\n"),
        )
        .await;
    }
    // Requests for web.shop.test enter lanes by x-lane at the gateway.
    let entry = json!({
        "apiVersion": "laneway.io/v1alpha1", "kind": "LaneEntry",
        "metadata": {"name": "web"},
        "spec": {
            "parentRefs": [traefik.parent_ref()],
            "hostnames": [WEB_HOST],
            "header": gateway::LANE_HEADER,
            "rules": [{"backend": {"service": "web", "port": 80}}],
        },
    });
    yaml(&client, NS, &entry.to_string()).await;
    for (app, application) in [("order", "order-service"), ("pay", "pay-service")] {
        yaml(
            &client,
            NS,
            &format!("apiVersion: laneway.io/v1alpha1\nkind: TagRule\nmetadata: {{name: {app}}}\nspec:\n  selector: {{matchLabels: {{app: {app}}}}}\n  dubbo: {{application: {application}, port: 20880}}\n"),
        )
        .await;
    }

    let zk_dir =
        std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("fault-zk-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&zk_dir);
    std::fs::create_dir_all(&zk_dir).expect("zk dir");
    let zk = tokio::task::block_in_place(|| ZooKeeper::start(&zk_dir));
    let nacos = tokio::task::block_in_place(Nacos::start);
    let p1 = tokio::task::block_in_place(|| provider("order-service", "p1", "198.18.0.2", &zk));
    let p2 = tokio::task::block_in_place(|| provider("order-service", "p2", "198.18.0.3", &zk));
    let mut consumer = tokio::task::block_in_place(|| Consumer::start("order-service", &zk));
    // The replicas reach ZooKeeper and Nacos through a proxy each, which can make them slow;
    // the checker reads them straight.
    let zk_proxy = Proxy::start(zk.address().parse().expect("ZooKeeper address"));
    let nacos_proxy = Proxy::start(
        nacos
            .url()
            .trim_start_matches("http://")
            .parse()
            .expect("Nacos address"),
    );
    let nacos_via_proxy = format!("http://{}", nacos_proxy.addr());
    let centre_args = vec![
        "--zookeeper".to_owned(),
        zk_proxy.addr().to_string(),
        "--nacos-addr".into(),
        nacos_via_proxy,
        "--nacos-username".into(),
        "nacos".into(),
        "--nacos-password".into(),
        NACOS_PASSWORD.into(),
    ];
    let zk_centre: Centre = Arc::new(Mutex::new(None));
    let nacos_centre: Centre = Arc::new(Mutex::new(None));
    let keys = vec![
        "order-service.tag-router".to_owned(),
        "pay-service.tag-router".to_owned(),
    ];
    let _zk_poll = poll_zookeeper(zk.address(), zk_centre.clone());
    let _nacos_poll = poll_nacos(nacos.url(), keys, nacos_centre.clone());
    let checker = Checker::start(
        client.clone(),
        NS,
        SYSTEM,
        "laneway-dubbo-rules",
        vec![("zookeeper", zk_centre), ("nacos", nacos_centre)],
    );

    let mut world = World {
        replicas: ["laneway-a", "laneway-b", "laneway-c"]
            .into_iter()
            .map(|identity| Replica {
                identity,
                proxy: Proxy::start(cp.addr()),
                op: None,
            })
            .collect(),
        client: client.clone(),
        zk_port: zk.port,
        zk: Some(zk),
        zk_dir,
        nacos,
        centre_args,
        centre_proxies: [zk_proxy, nacos_proxy],
        cp,
    };
    world.start(0);
    world.start(1);
    world.wait_leader().await;
    let (took, diff) = recover(&checker, Duration::from_secs(60)).await;
    assert!(diff.is_empty(), "never converged at start: {diff:#?}");
    eprintln!("converged from cold in {took:?}");
    tokio::task::block_in_place(|| {
        consumer.expect("gray calls land on the gray provider", Some("gray"), &["p2"])
    });
    tokio::task::block_in_place(|| consumer.expect("untagged calls never reach it", None, &["p1"]));
    load::wait_until_served(&target, &load_kinds(), 20, Duration::from_secs(60)).await;
    eprintln!(
        "the gateway serves {WEB_HOST} (Traefik at {}, log {})",
        traefik.web,
        traefik.log.display()
    );

    let churn = Churn::start(client.clone(), 10, 0x5eed_1a7e);
    // A calm spell: the writes a pod event of the churn costs with no fault, and how long the
    // outputs trail it.
    let (calm_began, calm_events) = (k8s_openapi::jiff::Timestamp::now(), churn.applied());
    let calm_behind = longest_behind(&checker, plan.calm).await;
    let calm = Writes::count(&world.cp.audit(), calm_began).per_event(churn.applied() - calm_events);
    eprintln!("calm: {calm:.2} writes per pod event, outputs behind at most {calm_behind:?}");
    let mut outcomes = Vec::new();
    let mut checked_writes = 0;
    let faults: [&'static str; 15] = [
        "API server stopped and restarted",
        "watch connections cut",
        "leader SIGKILLed",
        "leader partitioned from the API server",
        "rolling restart",
        "ZooKeeper down",
        "Nacos down",
        "burst of pod events",
        "user Service recreated headless",
        "znode deleted and another edited by hand",
        "API Priority and Fairness throttling",
        "watches resumed after etcd compaction",
        "API server slow",
        "ZooKeeper and Nacos slow",
        "node drained",
    ];
    // LANEWAY_FAULTS_ONLY picks faults by a part of their name, to look at one closely.
    let only = std::env::var("LANEWAY_FAULTS_ONLY").unwrap_or_default();
    for fault in faults
        .into_iter()
        .filter(|f| only.is_empty() || only.split(',').any(|o| f.contains(o)))
    {
        let traffic = (plan.load_rate > 0).then(|| {
            Load::start(
                &target,
                load_kinds(),
                load::Limits::new(plan.load_rate, plan.load_bound),
            )
        });
        tokio::time::sleep(LOAD_LEAD).await;
        eprintln!("fault: {fault} ({})", k8s_openapi::jiff::Timestamp::now());
        let fault_started = Instant::now();
        let events_before = churn.applied();
        let incidents_before = checker.incidents();
        let began = k8s_openapi::jiff::Timestamp::now();
        let mut extra_events = 0;
        let mut throttled = false;
        let mut gone = None;
        let mut held_up = None;
        let mut slowed_centres = false;
        let gone_before = watches_gone(&world);
        match fault {
            "API server stopped and restarted" => {
                world.cp.stop().await;
                tokio::time::sleep(plan.api_down).await;
                world.cp.start_again().await;
                // A LaneRoute edited right after the restart is served too.
                lane_routes_served(&client, "LaneRoutes served again").await;
                yaml(
                    &client,
                    NS,
                    "apiVersion: laneway.io/v1alpha1\nkind: LaneRoute\nmetadata: {name: dev-bob}\nspec:\n  services: [order, user, pay]\n  fallback: []\n  strict: true\n",
                )
                .await;
            }
            "watch connections cut" => {
                let end = Instant::now() + plan.cuts;
                while Instant::now() < end {
                    tokio::time::sleep(plan.cut_every).await;
                    for r in &world.replicas {
                        r.proxy.cut();
                    }
                }
            }
            "leader SIGKILLed" => {
                for _ in 0..plan.kills {
                    let leader = world.wait_leader().await;
                    if let Some(mut op) = world.replicas[leader].op.take() {
                        op.kill();
                    }
                    world.start(leader);
                    tokio::time::sleep(Duration::from_secs(2)).await;
                }
            }
            "leader partitioned from the API server" => {
                let leader = world.wait_leader().await;
                world.replicas[leader].proxy.partition(true);
                tokio::time::sleep(plan.partition).await;
                world.replicas[leader].proxy.partition(false);
            }
            "rolling restart" => {
                // As a Deployment rolls: a new pod (a new identity) starts, then an old one stops.
                let running: Vec<usize> = (0..world.replicas.len())
                    .filter(|i| world.replicas[*i].op.is_some())
                    .collect();
                let idle = (0..world.replicas.len())
                    .find(|i| world.replicas[*i].op.is_none())
                    .expect("idle");
                world.start(idle);
                let mut stopped = running[0];
                if let Some(mut op) = world.replicas[stopped].op.take() {
                    op.stop();
                }
                tokio::time::sleep(Duration::from_secs(3)).await;
                world.start(stopped);
                stopped = running[1];
                if let Some(mut op) = world.replicas[stopped].op.take() {
                    op.stop();
                }
                tokio::time::sleep(Duration::from_secs(3)).await;
            }
            "ZooKeeper down" => {
                if let Some(mut zk) = world.zk.take() {
                    zk.peer.stop();
                }
                tokio::time::sleep(plan.zk_down).await;
                let (dir, port) = (world.zk_dir.clone(), world.zk_port);
                world.zk = Some(tokio::task::block_in_place(|| ZooKeeper::start_on(&dir, port)));
            }
            "Nacos down" => {
                world.nacos.stop();
                tokio::time::sleep(plan.nacos_down).await;
                tokio::task::block_in_place(|| world.nacos.start_again());
            }
            "burst of pod events" => extra_events += burst(&pods, plan.burst, 0xb0_0057, None).await,
            "API Priority and Fairness throttling" => {
                // The leader starts cold (both replicas restart), then a burst, all throttled.
                yaml(&client, NS, APF_THROTTLE).await;
                checker.allow(THROTTLED_SLACK, THROTTLED_SLACK);
                for i in 0..world.replicas.len() {
                    if let Some(mut op) = world.replicas[i].op.take() {
                        op.stop();
                        world.start(i);
                    }
                }
                world.wait_leader().await;
                let (events, behind) = tokio::join!(
                    burst(&pods, plan.throttled_burst, 0xa9f_0429, None),
                    longest_behind(&checker, THROTTLED_WATCH)
                );
                extra_events += events;
                held_up = Some(behind);
                throttled = true;
            }
            "watches resumed after etcd compaction" => {
                // The leader's watches fall behind (its connections held silent, for less than
                // its renew deadline), etcd is compacted past them, and they resume: 410 Gone.
                let leader = world.wait_leader().await;
                world.replicas[leader].proxy.partition(true);
                let until = Instant::now() + Duration::from_millis(1200);
                extra_events += burst(&pods, plan.behind, 0x410_6013, Some(until)).await;
                let revision = world.cp.compact_etcd().await;
                world.replicas[leader].proxy.partition(false);
                eprintln!("etcd compacted at revision {revision}");
                gone = Some(leader);
            }
            "ZooKeeper and Nacos slow" => {
                // A request and its answer take 4 s through them, longer than the write timeout
                // (1 s) within which the fence lets any write complete: nothing is written to them
                // while they are slow, and what they hold trails the rules until then. The
                // slices and the ConfigMap must not.
                checker.allow(Duration::ZERO, plan.slow_centre);
                for p in &world.centre_proxies {
                    p.delay(SLOW_CENTRE);
                }
                held_up = Some(longest_behind(&checker, plan.slow_centre).await);
                for p in &world.centre_proxies {
                    p.delay(Duration::ZERO);
                }
                slowed_centres = true;
            }
            "node drained" => {
                // Half the pods of every Service terminate at once (deleted with a grace period
                // that no kubelet ends here) while their replacements come up, ready.
                for (name, lane, ip) in WEB_REPLACEMENTS {
                    let mut pod = gateway::Backend::new(name, "web", ip);
                    if let Some(lane) = lane {
                        pod = pod.lane(lane);
                    }
                    backends.deploy(&client, NS, &pod).await;
                }
                let drained: Vec<u32> = (0..CHURN_PODS).step_by(2).collect();
                for i in &drained {
                    let (_, app, _) = churn_pod(*i);
                    let (name, ip) = (format!("drained-{i}"), format!("10.30.1.{}", i + 10));
                    extra_events +=
                        u64::from(create_pod(&pods, &name, app, LANES[(*i % 4) as usize], &ip, true).await);
                }
                let terminating = WEB_DRAINED
                    .into_iter()
                    .map(str::to_owned)
                    .chain(drained.iter().map(|i| churn_pod(*i).0));
                for name in terminating {
                    gateway::delete_pod(&client, NS, &name, Some(600)).await;
                }
                // Their endpoints read as the built-in controller writes them.
                for (name, _, ip) in WEB_PODS.into_iter().filter(|(n, ..)| WEB_DRAINED.contains(n)) {
                    cluster::eventually_within(
                        &format!("{name}: serving and terminating"),
                        Duration::from_secs(5),
                        || async { endpoint_conditions(&client, ip).await == Some((false, true, true)) },
                    )
                    .await;
                }
                tokio::time::sleep(plan.drain).await;
                // Their grace period ends: they go (the churn pods come back under their names).
                for name in WEB_DRAINED {
                    gateway::delete_pod(&client, NS, name, Some(0)).await;
                }
                tokio::time::sleep(Duration::from_secs(1)).await;
                for name in WEB_DRAINED {
                    backends.undeploy(&client, NS, name).await;
                }
                for i in drained {
                    let (name, app, ip) = churn_pod(i);
                    gateway::delete_pod(&client, NS, &name, Some(0)).await;
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    extra_events +=
                        u64::from(create_pod(&pods, &name, app, LANES[(i % 4) as usize], &ip, true).await);
                }
            }
            "API server slow" => {
                for r in &world.replicas {
                    r.proxy.delay(SLOW_API);
                }
                held_up = Some(longest_behind(&checker, plan.slow_api).await);
                for r in &world.replicas {
                    r.proxy.delay(Duration::ZERO);
                }
            }
            "user Service recreated headless" => {
                let services: Api<Service> = Api::namespaced(client.clone(), NS);
                let _ = services.delete("pay", &DeleteParams::default()).await;
                yaml(
                    &client,
                    NS,
                    "apiVersion: v1\nkind: Service\nmetadata: {name: pay}\nspec:\n  clusterIP: None\n  selector: {app: pay}\n  ports: [{name: web, port: 80, targetPort: http}]\n",
                )
                .await;
            }
            "znode deleted and another edited by hand" => {
                let zk = world.zk.as_ref().expect("zk");
                let session = zookeeper_client::Client::connect(&zk.address())
                    .await
                    .expect("zk");
                let root = "/dubbo/config/dubbo";
                session
                    .delete(&format!("{root}/pay-service.tag-router"), None)
                    .await
                    .expect("delete znode");
                session
                    .set_data(
                        &format!("{root}/order-service.tag-router"),
                        b"enabled: false\n",
                        None,
                    )
                    .await
                    .expect("edit znode");
            }
            _ => unreachable!(),
        }
        let (recovery, lost) = recover(&checker, REPAIR_PERIOD * 4 + Duration::from_secs(40)).await;
        if throttled || slowed_centres {
            checker.allow(Duration::ZERO, Duration::ZERO);
        }
        if throttled {
            let schemas: Api<FlowSchema> = Api::all(client.clone());
            let levels: Api<PriorityLevelConfiguration> = Api::all(client.clone());
            schemas
                .delete(APF_NAME, &DeleteParams::default())
                .await
                .expect("FlowSchema");
            levels
                .delete(APF_NAME, &DeleteParams::default())
                .await
                .expect("priority level");
        }
        let resumed_gone = gone.map(|i| watches_gone(&world)[i] - gone_before[i]);
        tokio::time::sleep(LOAD_TAIL).await;
        let traffic = match traffic {
            Some(load) => load.stop().await,
            None => load::Report::new(fault_started),
        };
        eprintln!("requests through the gateway: {}", traffic.summary());
        if traffic.failed > 0 {
            eprintln!(
                "  failed: {}; the generator's clock lagged {}",
                traffic.failure_causes(fault_started),
                traffic.lag(fault_started)
            );
        }
        for miss in traffic.misses(fault_started) {
            eprintln!("  {miss}");
        }
        let records = world.cp.audit();
        let mut check = audit::LeaseCheck::new(SYSTEM, LEASE, RENEW_DEADLINE, Duration::from_millis(300));
        check.namespaces = vec![NS.to_owned(), SYSTEM.to_owned()];
        checked_writes += check
            .writes(&records)
            .iter()
            .filter(|w| w.write.received >= began)
            .count();
        let non_leader = check
            .violations(&records)
            .into_iter()
            .filter(|v| v.write.received >= began)
            .inspect(|v| eprintln!("write by a non-leader: {v}"))
            .count();
        let incidents = diff_incidents(&checker.incidents(), &incidents_before);
        let writes = Writes::count(&records, began);
        let early = early_retries(&records, began, THROTTLED_WAIT);
        for e in &early {
            eprintln!("sent again before the Retry-After: {e}");
        }
        if !lost.is_empty() {
            eprintln!("not recovered after {fault}: {lost:#?}");
        }
        outcomes.push(Outcome {
            fault,
            events: churn.applied() - events_before + extra_events,
            lost: lost.len(),
            incidents,
            non_leader_writes: non_leader,
            recovery,
            traffic,
            fault_started,
            writes,
            early_retries: early.len(),
            throttled,
            resumed_gone,
            held_up,
        });
        if fault == "ZooKeeper down" {
            tokio::task::block_in_place(|| {
                consumer.expect(
                    "gray calls still land on the gray provider",
                    Some("gray"),
                    &["p2"],
                )
            });
            tokio::task::block_in_place(|| {
                consumer.expect("untagged calls still never reach it", None, &["p1"])
            });
        }
    }
    drop(churn);
    let (_, diff) = recover(&checker, Duration::from_secs(60)).await;
    tokio::task::block_in_place(|| consumer.expect("gray at the end", Some("gray"), &["p2"]));
    tokio::task::block_in_place(|| consumer.expect("untagged at the end", None, &["p1"]));

    let mut report = String::from(
        "| fault | events applied | lost | lanes emptied | other invariant breaches | writes by a non-leader | failed requests | answered by the wrong tier | time to recover |\n| --- | --- | --- | --- | --- | --- | --- | --- | --- |\n",
    );
    for o in &outcomes {
        let other = o.incidents.total() - o.incidents.emptied;
        report.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} | {} of {} | {} | {:.1} s |\n",
            o.fault,
            o.events,
            o.lost,
            o.incidents.emptied,
            other,
            o.non_leader_writes,
            o.traffic.failed,
            o.traffic.sent,
            o.traffic.wrong_tier,
            o.recovery.as_secs_f64()
        ));
    }
    report.push_str(&format!(
        "\nRequests through Traefik to {WEB_HOST}, from {LOAD_LEAD:?} before each fault until \
         {LOAD_TAIL:?} after it recovered: {}/s, in turn untagged (baseline: web-0, web-1), \
         `x-lane: dev-alice` (its own pod web-alice), untagged, `x-lane: feature-x` (no pod of its \
         own: baseline); each with a {:?} timeout. Failed: no complete answer within it, a \
         connection error or a status other than 2xx. Times are from the start of the fault.\n\n",
        plan.load_rate,
        load::Limits::new(plan.load_rate.max(1), plan.load_bound).timeout
    ));
    for o in &outcomes {
        report.push_str(&format!("- {}: {}\n", o.fault, o.traffic.summary()));
        if let Some((_, why)) = UNAVOIDABLE.iter().find(|(f, _)| *f == o.fault) {
            report.push_str(&format!("  - not counted against laneway: {why}\n"));
        }
        if o.traffic.failed > 0 {
            report.push_str(&format!(
                "  - failed: {}; the generator's own clock lagged {}\n",
                o.traffic.failure_causes(o.fault_started),
                o.traffic.lag(o.fault_started)
            ));
        }
        for miss in o.traffic.misses(o.fault_started) {
            report.push_str(&format!("  - {miss}\n"));
        }
    }
    report.push_str(&format!(
        "\nWrites by the replicas in the shop namespace during each fault (Events aside), per pod \
         event applied; with churn alone, {calm:.2}.\n\n"
    ));
    for o in &outcomes {
        report.push_str(&format!(
            "- {}: {} writes, {:.2} per event",
            o.fault,
            o.writes.succeeded,
            o.writes.per_event(o.events)
        ));
        if o.writes.throttled > 0 {
            report.push_str(&format!(
                "; {} answered 429, {} sent again before the Retry-After",
                o.writes.throttled, o.early_retries
            ));
        }
        if let Some(b) = o.held_up {
            let c = calm_behind;
            let s = |d: Duration| d.as_secs_f64();
            report.push_str(&format!(
                "; the longest one output trailed the churn: a slice {:.2} s (calm {:.2} s), a \
                 ConfigMap rule {:.2} s (calm {:.2} s), a ZooKeeper or Nacos rule {:.2} s (calm {:.2} s)",
                s(b.slices),
                s(c.slices),
                s(b.configmap),
                s(c.configmap),
                s(b.centres),
                s(c.centres)
            ));
        }
        if let Some(gone) = o.resumed_gone {
            report.push_str(&format!(
                "; {gone} watches of the leader resumed to 410 Gone and listed again"
            ));
        }
        report.push('\n');
    }
    eprintln!("{report}");
    let path = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(if long {
        "fault-report.md"
    } else {
        "fault-report-short.md"
    });
    let _ = std::fs::write(&path, &report);
    drop(p1);
    drop(p2);

    assert!(
        diff.is_empty(),
        "the final state differs from a full recomputation: {diff:#?}"
    );
    assert!(
        checked_writes > 0,
        "the audit log showed no write by the replicas"
    );
    eprintln!("{checked_writes} writes by the replicas checked against the Lease");
    for o in &outcomes {
        assert_eq!(o.lost, 0, "{}: outputs lost", o.fault);
        assert_eq!(o.incidents.total(), 0, "{}: {:#?}", o.fault, o.incidents.notes);
        assert_eq!(
            o.non_leader_writes, 0,
            "{}: a replica wrote while not leading",
            o.fault
        );
        assert_eq!(
            o.early_retries, 0,
            "{}: writes sent again before the Retry-After",
            o.fault
        );
        if o.throttled {
            assert!(o.writes.throttled > 0, "{}: no write was answered 429", o.fault);
        }
        assert!(
            o.resumed_gone.is_none_or(|n| n > 0),
            "{}: no watch resumed to 410 Gone",
            o.fault
        );
        if o.fault == "ZooKeeper and Nacos slow" {
            // The slices and the ConfigMap keep up with the churn as in the calm spell.
            let behind = o.held_up.unwrap_or_default();
            let bound = |calm: Duration| calm.max(Duration::from_millis(500)) * 2;
            assert!(
                behind.slices <= bound(calm_behind.slices)
                    && behind.configmap <= bound(calm_behind.configmap),
                "{}: outputs fell behind: {behind:?} (calm: {calm_behind:?})",
                o.fault
            );
        }
        if o.throttled || o.resumed_gone.is_some() {
            // A re-list or a throttled burst costs no more writes per event than the churn
            // alone, with room for the statuses a cold start writes again.
            let bound = (calm * o.events as f64 * 1.5) as usize + WRITES_SLACK;
            assert!(
                o.writes.succeeded <= bound,
                "{}: {} writes for {} events (calm: {calm:.2} per event)",
                o.fault,
                o.writes.succeeded,
                o.events
            );
        }
        let mut missed = o.traffic.failed + o.traffic.wrong_tier;
        if let Some((_, why)) = UNAVOIDABLE.iter().find(|(f, _)| *f == o.fault) {
            if o.traffic.failed > 0 {
                eprintln!(
                    "{}: {} requests failed, not asserted: {why}",
                    o.fault, o.traffic.failed
                );
            }
            missed = o.traffic.wrong_tier;
        }
        assert_eq!(
            missed,
            0,
            "{}: {} of {} requests through the gateway failed and {} reached the wrong tier (Traefik's log: {}); first ones: {:#?}",
            o.fault,
            o.traffic.failed,
            o.traffic.sent,
            o.traffic.wrong_tier,
            traefik.log.display(),
            o.traffic.misses(o.fault_started)
        );
    }
    drop(backends);
}
