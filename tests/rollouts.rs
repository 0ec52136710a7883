//! Argo Rollouts drives a lane through the whole chain: the real Argo Rollouts controller (built
//! from its Go module, tests/argo-rollouts) runs laneway's traffic router plugin
//! (integrations/argo-rollouts) for the Rollout `order`, whose canary pods join the lane `gray`
//! through `canaryMetadata`. A request enters at Traefik, `gateway-bff` calls `order` over Dubbo,
//! `order` calls `user`; every pod is its own JVM with laneway's Java libraries (as in
//! tests/chain.rs). A stand-in for the ReplicaSet controller and kubelet, which a bare API server
//! lacks, runs the ReplicaSets' pods as JVMs and keeps their labels files as the kubelet would.
//!
//! The JVMs of `gateway-bff` and `user` start once; the scenarios run one after another as new
//! versions of the one Rollout.

mod cluster;
mod gateway;
mod peers;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cluster::process::{free_port, terminate};
use cluster::*;
use gateway::*;
use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{ApiResource, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt};
use laneway::api::{LaneEntry, LaneRoute};
use peers::{Peer, ZooKeeper};
use serde_json::{json, Value};

const HOST: &str = "shop.example.com";
/// The template annotation that makes the stand-in's pods of a version fail every call.
const BREAK: &str = "laneway.test/break";
/// The pods that are not the Rollout's: (name, app, lane, IP).
const PODS: [(&str, &str, Option<&str>, &str); 4] = [
    ("bff-0", "gateway-bff", None, "198.18.0.10"),
    ("bff-gray", "gateway-bff", Some("gray"), "198.18.0.11"),
    ("user-0", "user", None, "198.18.0.12"),
    ("user-gray", "user", Some("gray"), "198.18.0.13"),
];
/// The Rollout's pods take addresses from here up.
const FIRST_ROLLOUT_IP: u32 = 14;

fn env_path(var: &str) -> PathBuf {
    PathBuf::from(std::env::var(var).unwrap_or_else(|_| {
        panic!("{var} is not set: run the tests with `make test` (tests/in-cluster.sh builds it)")
    }))
}

fn rollouts() -> ApiResource {
    ApiResource {
        group: "argoproj.io".into(),
        version: "v1alpha1".into(),
        api_version: "argoproj.io/v1alpha1".into(),
        kind: "Rollout".into(),
        plural: "rollouts".into(),
    }
}

/// The Argo Rollouts controller of one namespace (namespaced mode), with the plugin declared in
/// its `argo-rollouts-config`.
struct Argo {
    child: Child,
}

impl Argo {
    async fn start(c: &Cluster, dir: &Path) -> Argo {
        let argo = env_path("LANEWAY_ARGO_ROLLOUTS_DIR");
        apply_crds_in(&c.client, &argo.join("crds")).await;
        let plugin = env_path("LANEWAY_ARGO_PLUGIN");
        let config = json!({
            "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "argo-rollouts-config"},
            "data": {"trafficRouterPlugins": format!("- name: laneway/laneroute\n  location: file://{}\n", plugin.display())},
        });
        c.apply_yaml(&config.to_string())
            .await
            .expect("argo-rollouts-config");
        let dir = dir.join("argo");
        std::fs::create_dir_all(&dir).expect("argo dir");
        let log = std::fs::File::create(dir.join("controller.log")).expect("argo log");
        let child = std::process::Command::new(argo.join("bin/rollouts-controller"))
            .args(["--namespaced", "--namespace", &c.ns, "--leader-elect=false"])
            .args(["--metricsport", &free_port().to_string()])
            .args(["--healthzPort", &free_port().to_string()])
            .env("POD_NAMESPACE", &c.ns)
            .current_dir(&dir)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start rollouts-controller");
        Argo { child }
    }
}

impl Drop for Argo {
    fn drop(&mut self) {
        terminate(&mut self.child, Duration::from_secs(5));
    }
}

/// What the stand-in shares with the tasks it spawns.
struct Kubelet {
    c: Cluster,
    zk: String,
    labels: PathBuf,
    next_ip: AtomicU32,
    jvms: Mutex<BTreeMap<String, Peer>>,
    leaving: Mutex<BTreeSet<String>>,
}

/// Runs the pods each ReplicaSet of `order` asks for, as `order` JVMs (its template's labels,
/// owned by it, a labels file kept in step with the pod's labels, a break file from the
/// template's [`BREAK`] annotation), reports the ReplicaSet's status, and scales down gracefully:
/// not ready, then the JVM stopped (it leaves ZooKeeper), then the pod gone.
struct ReplicaSets {
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<()>,
    kubelet: Arc<Kubelet>,
}

impl ReplicaSets {
    fn start(c: &Cluster, zk: &str, labels: &Path) -> ReplicaSets {
        let kubelet = Arc::new(Kubelet {
            c: c.clone(),
            zk: zk.to_owned(),
            labels: labels.to_owned(),
            next_ip: AtomicU32::new(FIRST_ROLLOUT_IP),
            jvms: Mutex::new(BTreeMap::new()),
            leaving: Mutex::new(BTreeSet::new()),
        });
        let stop = Arc::new(AtomicBool::new(false));
        let (k, flag) = (kubelet.clone(), stop.clone());
        let task = tokio::spawn(async move {
            while !flag.load(Ordering::SeqCst) {
                let sets = k.c.api::<ReplicaSet>().list(&ListParams::default()).await;
                let pods = k.c.api::<Pod>().list(&ListParams::default()).await;
                if let (Ok(sets), Ok(pods)) = (sets, pods) {
                    for rs in &sets.items {
                        reconcile(&k, rs, &pods.items).await;
                    }
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        });
        ReplicaSets { stop, task, kubelet }
    }
}

impl Drop for ReplicaSets {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        self.task.abort();
        self.kubelet.jvms.lock().unwrap().clear();
    }
}

fn ready(pod: &Pod) -> bool {
    let conditions = pod.status.as_ref().and_then(|s| s.conditions.clone());
    conditions
        .unwrap_or_default()
        .iter()
        .any(|c| c.type_ == "Ready" && c.status == "True")
}

async fn reconcile(k: &Arc<Kubelet>, rs: &ReplicaSet, pods: &[Pod]) {
    let name = rs.name_any();
    let spec = rs.spec.clone().unwrap_or_default();
    let want = spec.replicas.unwrap_or(1).max(0) as usize;
    let uid = rs.uid().unwrap_or_default();
    let leaving = k.leaving.lock().unwrap().clone();
    let owned: Vec<&Pod> = pods
        .iter()
        .filter(|p| p.owner_references().iter().any(|o| o.uid == uid))
        .filter(|p| !leaving.contains(&p.name_any()))
        .collect();
    for pod in &owned {
        peers::write_pod_labels(&k.labels.join(pod.name_any()), pod.labels());
    }
    let template = spec.template.and_then(|t| t.metadata).unwrap_or_default();
    for _ in owned.len()..want {
        create(k, &name, &uid, &template).await;
    }
    for pod in owned.iter().skip(want) {
        remove(k, pod).await;
    }
    let ready = owned.iter().take(want).filter(|p| ready(p)).count() as i32;
    let status = json!({"status": {"replicas": owned.len().min(want), "readyReplicas": ready,
        "availableReplicas": ready, "fullyLabeledReplicas": ready,
        "observedGeneration": rs.metadata.generation}});
    let _ =
        k.c.api::<ReplicaSet>()
            .patch_status(&name, &PatchParams::default(), &Patch::Merge(&status))
            .await;
}

/// Creates a pod of the ReplicaSet `rs` and starts its JVM in the background; it turns ready
/// once the JVM serves.
async fn create(
    k: &Arc<Kubelet>,
    rs: &str,
    uid: &str,
    template: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
) {
    let n = k.next_ip.fetch_add(1, Ordering::SeqCst);
    let (pod, ip) = (format!("{rs}-{n}"), format!("198.18.0.{n}"));
    let labels = template.labels.clone().unwrap_or_default();
    let body = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": pod, "labels": labels, "ownerReferences": [{
            "apiVersion": "apps/v1", "kind": "ReplicaSet", "name": rs, "uid": uid, "controller": true}]},
        "spec": {"nodeName": "node-1", "containers": [{"name": "app", "image": "example/order:1",
            "ports": [{"name": "dubbo", "containerPort": 20880}]}]},
    });
    let object: Pod = serde_json::from_value(body).expect("pod");
    k.c.api::<Pod>()
        .create(&PostParams::default(), &object)
        .await
        .expect("create pod");
    let file = k.labels.join(&pod);
    peers::write_pod_labels(&file, &labels);
    let broken = template.annotations.as_ref().and_then(|a| a.get(BREAK));
    match broken {
        Some(how) => std::fs::write(peers::break_file(&file), how).expect("break file"),
        None => drop(std::fs::remove_file(peers::break_file(&file))),
    }
    let k = k.clone();
    tokio::spawn(async move {
        let (zk, pod2, ip2) = (k.zk.clone(), pod.clone(), ip.clone());
        let jvm = tokio::task::spawn_blocking(move || peers::chain_jvm(&pod2, "order", &ip2, &zk, &file))
            .await
            .expect("JVM");
        k.jvms.lock().unwrap().insert(pod.clone(), jvm);
        k.c.set_pod_status(&pod, &ip, true).await;
    });
}

/// Takes a pod out of service, then stops its JVM and deletes it.
async fn remove(k: &Arc<Kubelet>, pod: &Pod) {
    let name = pod.name_any();
    k.leaving.lock().unwrap().insert(name.clone());
    let ip = pod
        .status
        .as_ref()
        .and_then(|s| s.pod_ip.clone())
        .unwrap_or_default();
    if !ip.is_empty() {
        k.c.set_pod_status(&name, &ip, false).await;
    }
    let k = k.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_secs(3)).await;
        let jvm = k.jvms.lock().unwrap().remove(&name);
        if let Some(mut jvm) = jvm {
            tokio::task::spawn_blocking(move || jvm.stop())
                .await
                .expect("stop JVM");
        }
        k.c.remove_pod(&name).await;
    });
}

/// The chain and its controllers: ZooKeeper, Traefik, the operator, Argo Rollouts, the JVMs of
/// `gateway-bff` and `user`, and the Rollout `order` (two replicas), whose canary joins `gray`.
struct Shop {
    c: Cluster,
    http: Http,
    version: AtomicU32,
    _replica_sets: ReplicaSets,
    _argo: Argo,
    _jvms: Vec<Peer>,
    op: Operator,
    _zk: ZooKeeper,
    _traefik: Traefik,
}

impl Shop {
    async fn start() -> Shop {
        let c = cluster("rollouts").await;
        let traefik = Traefik::start(&c.client, &c.ns).await;
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("rollouts-{}", std::process::id()));
        let (labels, zk) = peers::chain_base(&c, &dir).await;
        c.apply_route("gray", &["gateway-bff", "order", "user"], &[], false)
            .await;
        let entry = json!({
            "apiVersion": "laneway.io/v1alpha1", "kind": "LaneEntry", "metadata": {"name": "shop"},
            "spec": {"parentRefs": [traefik.parent_ref()], "hostnames": [HOST],
                     "rules": [{"backend": {"service": "gateway-bff", "port": 80}}]},
        });
        c.apply_yaml(&entry.to_string()).await.expect("entry");
        for (name, app, lane, ip) in PODS {
            c.pod(name, app, lane, ip).await;
            peers::write_labels(&labels.join(name), app, lane);
        }
        // Its own namespace only: TagRules that earlier test binaries left for the same Dubbo
        // applications must not share the centre with it.
        let op = c
            .operator_watching(
                "lease",
                &[&c.ns],
                &["--zookeeper", &zk.address(), "--route-grace=1s"],
            )
            .await;
        let zk_addr = zk.address();
        let jvms = peers::chain_jvms(&PODS, &labels, &zk_addr);
        let argo = Argo::start(&c, &dir).await;
        c.apply_yaml(&analysis_template())
            .await
            .expect("analysis template");
        let replica_sets = ReplicaSets::start(&c, &zk_addr, &labels);
        let http = traefik.http();
        let s = Shop {
            c,
            http,
            version: AtomicU32::new(1),
            _replica_sets: replica_sets,
            _argo: argo,
            _jvms: jvms,
            op,
            _zk: zk,
            _traefik: traefik,
        };
        s.c.apply_yaml(&rollout(example_strategy()).to_string())
            .await
            .expect("rollout");
        wait_for("the first version Healthy", Some("Healthy".to_owned()), || {
            s.phase()
        })
        .await;
        s.http
            .wait_for_within(
                "the baseline chain",
                &Request::new(HOST),
                Duration::from_secs(90),
                |r| r.ok() && r.chain().len() == 3,
            )
            .await;
        s
    }

    fn rollout_api(&self) -> Api<DynamicObject> {
        Api::namespaced_with(self.c.client.clone(), &self.c.ns, &rollouts())
    }

    async fn rollout(&self) -> Value {
        let ro = self.rollout_api().get("order").await.expect("rollout");
        serde_json::to_value(ro).expect("json")
    }

    async fn phase(&self) -> Option<String> {
        self.rollout().await["status"]["phase"]
            .as_str()
            .map(str::to_owned)
    }

    /// Starts the rollout of a new version with the canary strategy `canary`, its pods failing
    /// every call when `broken`.
    async fn new_version(&self, canary: Value, broken: bool) {
        self.settled().await;
        let version = self.version.fetch_add(1, Ordering::SeqCst) + 1;
        let mut canary = canary;
        if canary.get("analysis").is_none() {
            canary["analysis"] = Value::Null;
        }
        let patch = json!({"spec": {
            "strategy": {"canary": canary},
            "template": {"metadata": {"labels": {"version": format!("v{version}")},
                                      "annotations": {BREAK: broken.then_some("fail")}}},
        }});
        let before = self.rollout().await["status"]["currentPodHash"].clone();
        self.rollout_api()
            .patch("order", &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .expect("new version");
        // A new version also clears an earlier abort.
        wait_for("the new version rolling out", true, || async {
            let status = self.rollout().await["status"].clone();
            status["currentPodHash"] != before && status["abort"] != true
        })
        .await;
    }

    /// Waits until the rollout pauses at step `index`; returns the canary's pod name prefix.
    async fn paused_at(&self, index: i64) -> String {
        wait_for_within(
            &format!("the pause at step {index}"),
            (Some(index), true),
            Duration::from_secs(90),
            || async {
                let ro = self.rollout().await;
                let paused = ro["status"]["pauseConditions"]
                    .as_array()
                    .is_some_and(|p| !p.is_empty());
                (ro["status"]["currentStepIndex"].as_i64(), paused)
            },
        )
        .await;
        let hash = self.rollout().await["status"]["currentPodHash"]
            .as_str()
            .expect("hash")
            .to_owned();
        format!("order-{hash}-")
    }

    /// Waits until the controller has stopped writing the rollout (no new resourceVersion for
    /// 1.5 s). Argo Rollouts writes the object it patched back into its informer's cache, so a
    /// change made while it reconciles can be overwritten there and go unseen until a resync.
    async fn settled(&self) {
        let deadline = Instant::now() + TIMEOUT;
        let (mut last, mut since) = (String::new(), Instant::now());
        while since.elapsed() < Duration::from_millis(1500) {
            assert!(Instant::now() < deadline, "the rollout never settled");
            let ro = self.rollout_api().get("order").await.expect("rollout");
            let rv = ro.resource_version().unwrap_or_default();
            if rv != last {
                (last, since) = (rv, Instant::now());
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// `kubectl argo rollouts promote` (`{"status":{"pauseConditions":null}}`), or `abort`.
    async fn status_patch(&self, patch: Value) {
        self.settled().await;
        self.rollout_api()
            .patch_status("order", &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .expect("rollout status");
    }

    async fn promote(&self) {
        self.status_patch(json!({"status": {"pauseConditions": null}}))
            .await;
    }

    async fn abort(&self) {
        self.status_patch(json!({"status": {"abort": true}})).await;
    }

    async fn lane_route(&self) -> LaneRoute {
        self.c.api::<LaneRoute>().get("gray").await.expect("lane route")
    }

    /// Waits until 50 requests in a row sent as `req` take the canary's chain at every hop.
    async fn converged(&self, req: &Request, canary: &str) {
        eventually_within("the canary's whole chain", Duration::from_secs(90), || async {
            let t = self.http.load(req, 50, 4).await;
            let counts = t.chain_counts();
            t.ok() == 50
                && counts
                    .keys()
                    .all(|c| one_tier(c, canary) && c[1].starts_with(canary))
        })
        .await;
    }

    /// `n` requests sent as `req`, all answered: how many went through a pod named with
    /// `canary`; every chain in one tier, the canary's ([`gray_chain`]) or baseline's.
    async fn share(&self, req: &Request, n: usize, canary: &str) -> usize {
        let t = self.http.load(req, n, 8).await;
        assert_eq!(t.ok(), n, "{:?} {:?}", t.statuses, t.samples);
        let counts = t.chain_counts();
        let mixed: Vec<_> = counts.keys().filter(|c| !one_tier(c, canary)).collect();
        assert!(mixed.is_empty(), "chains mixing tiers: {mixed:?}");
        counts
            .iter()
            .filter(|(c, _)| c[1].starts_with(canary))
            .map(|(_, n)| n)
            .sum()
    }
}

/// A chain in the lane at every hop (`bff-gray`, a canary pod, `user-gray`) or at none.
fn one_tier(chain: &[String], canary: &str) -> bool {
    match chain {
        [bff, order, user] if bff == "bff-gray" => order.starts_with(canary) && user == "user-gray",
        [bff, order, user] => bff == "bff-0" && !order.starts_with(canary) && user == "user-0",
        _ => false,
    }
}

/// The canary strategy of examples/argo-rollouts/rollout.yaml.
fn example_strategy() -> Value {
    let file = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/argo-rollouts/rollout.yaml");
    let text = std::fs::read_to_string(file).expect("example");
    let rollout: Value = serde_saphyr::from_str(&text).expect("YAML");
    rollout["spec"]["strategy"]["canary"].clone()
}

/// The example's strategy with other `steps` (and, with `analysis`, the lane's errors analysed
/// in the background from the second step).
fn strategy(steps: Value, analysis: bool) -> Value {
    let mut canary = example_strategy();
    canary["steps"] = steps;
    if analysis {
        canary["analysis"] = json!({"templates": [{"templateName": "lane-errors"}], "startingStep": 1});
    }
    canary
}

fn rollout(canary: Value) -> Value {
    json!({
        "apiVersion": "argoproj.io/v1alpha1", "kind": "Rollout", "metadata": {"name": "order"},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": "order"}},
            "template": {"metadata": {"labels": {"app": "order", "version": "v1"}},
                         "spec": {"containers": [{"name": "order", "image": "example/order:1"}]}},
            "strategy": {"canary": canary},
        },
    })
}

/// examples/argo-rollouts/analysis.yaml, reading `bff-gray`'s counters (laneway's LaneCounters,
/// served by the harness at /laneway/lanes): any failed request in the lane fails the analysis.
fn analysis_template() -> String {
    let file = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/examples/argo-rollouts/analysis.yaml"
    );
    let text = std::fs::read_to_string(file).expect("example");
    let mut template: Value = serde_saphyr::from_str(&text).expect("YAML");
    template["spec"]["metrics"][0]["provider"]["web"]["url"] = json!("http://198.18.0.11:8080/laneway/lanes");
    template.to_string()
}

fn weight_owner(route: &LaneRoute) -> Vec<String> {
    route
        .managed_fields()
        .iter()
        .filter(|m| {
            m.fields_v1
                .as_ref()
                .is_some_and(|f| f.0.to_string().contains("f:weight"))
        })
        .filter_map(|m| m.manager.clone())
        .collect()
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1]
}

#[tokio::test(flavor = "multi_thread")]
async fn argo_rollouts_moves_the_order_service_through_its_lane_at_every_hop() {
    let s = Shop::start().await;
    the_examples_steps_move_the_lane_and_promotion_ends_it(&s).await;
    an_abort_drains_the_canary(&s).await;
    an_analysis_of_the_lanes_errors_aborts_a_failing_canary(&s).await;
    a_step_waits_until_laneway_routes_its_weight(&s).await;
    each_set_weight_step_is_verified_at_the_gateway(&s).await;
}

/// The steps of examples/argo-rollouts: a header route at 0%, 20%, 50%, then promotion; no
/// request fails along the way.
async fn the_examples_steps_move_the_lane_and_promotion_ends_it(s: &Shop) {
    let untagged = Request::new(HOST);
    let watch = s.http.watch(&untagged, 2, Duration::from_millis(20));
    s.new_version(example_strategy(), false).await;

    let canary = s.paused_at(2).await;
    let tagged = untagged.clone().header("x-canary", "yes");
    // The canary pod's Dubbo address reaches its callers' tag rules a moment after it is ready,
    // and the new JVM's own consumer loads user's rules a moment after it starts.
    s.converged(&tagged, &canary).await;
    assert_eq!(
        s.share(&tagged, 200, &canary).await,
        200,
        "x-canary: yes takes the canary's chain"
    );
    assert_eq!(
        s.share(&untagged, 200, &canary).await,
        0,
        "at weight 0 nothing else does"
    );

    for (pause, weight) in [(4, 20), (6, 50)] {
        s.promote().await;
        assert_eq!(s.paused_at(pause).await, canary);
        let route = s.lane_route().await;
        assert_eq!(route.spec.weight, weight);
        assert_eq!(weight_owner(&route), vec!["laneway-argo-rollouts".to_owned()]);
        let n = s.share(&untagged, 1000, &canary).await;
        println!("setWeight {weight}: {n} of 1000 untagged requests along the canary's chain");
        let want = weight as usize * 10;
        assert!((want - 30..=want + 30).contains(&n), "{weight}% ± 3 of 1000: {n}");
    }

    s.promote().await;
    wait_for_within(
        "the new version stable",
        true,
        Duration::from_secs(90),
        || async {
            let ro = s.rollout().await;
            ro["status"]["phase"] == "Healthy" && ro["status"]["stableRS"] == ro["status"]["currentPodHash"]
        },
    )
    .await;
    wait_for("the lane's weight and header given back", (0, true), || async {
        let route = s.lane_route().await;
        (route.spec.weight, route.spec.match_.is_none())
    })
    .await;
    wait_for(
        "order's lane empty: its pods are baseline now",
        Some("Baseline".to_owned()),
        || async {
            let status = s.lane_route().await.status.unwrap_or_default();
            let order = status.services.iter().find(|svc| svc.name == "order");
            order.map(|svc| svc.source.to_string())
        },
    )
    .await;
    let report = watch.stop().await;
    println!("{} requests during the rollout", report.hits.len());
    assert!(report.failures().is_empty(), "failed: {:?}", report.failures());
}

/// An abort at 20%: the canary drains within a bound, no request fails.
async fn an_abort_drains_the_canary(s: &Shop) {
    let untagged = Request::new(HOST);
    s.new_version(strategy(json!([{"setWeight": 20}, {"pause": {}}]), false), false)
        .await;
    let canary = s.paused_at(1).await;
    let watch = s.http.watch(&untagged, 2, Duration::from_millis(20));
    let at = watch.now();
    s.abort().await;
    let on_canary = |h: &Hit| h.chain.get(1).is_some_and(|p| p.starts_with(&canary));
    let report = watch
        .wait_until(
            "100 requests in a row off the canary",
            Duration::from_secs(60),
            |r| {
                r.hits
                    .iter()
                    .rev()
                    .take_while(|h| h.at > at && !on_canary(h))
                    .count()
                    >= 100
            },
        )
        .await;
    let last = report
        .hits
        .iter()
        .filter(|h| on_canary(h))
        .map(|h| h.at)
        .max()
        .unwrap_or(at);
    println!(
        "abort → the last request on the canary after {:?}",
        last.saturating_sub(at)
    );
    wait_for("the lane's weight back to 0", 0, || async {
        s.lane_route().await.spec.weight
    })
    .await;
    let report = watch.stop().await;
    assert!(report.failures().is_empty(), "failed: {:?}", report.failures());
}

/// A version whose pods fail every call, analysed in the background by the lane's failed
/// requests: Argo Rollouts aborts it by itself, and requests stop failing.
async fn an_analysis_of_the_lanes_errors_aborts_a_failing_canary(s: &Shop) {
    let untagged = Request::new(HOST);
    let watch = s.http.watch(&untagged, 2, Duration::from_millis(20));
    s.new_version(strategy(json!([{"setWeight": 20}, {"pause": {}}]), true), true)
        .await;
    wait_for_within(
        "the analysis aborting the rollout",
        true,
        Duration::from_secs(90),
        || async { s.rollout().await["status"]["abort"] == true },
    )
    .await;
    let aborted = watch.now();
    let ro = s.rollout().await;
    let message = ro["status"]["message"].as_str().unwrap_or_default().to_owned();
    assert!(message.contains("lane-errors"), "{message}");
    wait_for("the lane's weight back to 0", 0, || async {
        s.lane_route().await.spec.weight
    })
    .await;
    let report = watch
        .wait_until("100 requests in a row answered", Duration::from_secs(60), |r| {
            r.hits.iter().rev().take_while(|h| h.status == Some(200)).count() >= 100
        })
        .await;
    let failures = report.failures();
    let first = failures
        .first()
        .map(|h| h.at)
        .expect("the canary failed requests");
    let last = failures.last().map(|h| h.at).unwrap_or(first);
    println!(
        "analysis: {} of {} requests failed; aborted {:?} after the first failure, the last failure {:?} after it",
        failures.len(),
        report.hits.len(),
        aborted.saturating_sub(first),
        last.saturating_sub(first),
    );
    watch.stop().await;
}

/// laneway frozen (SIGSTOP) until dropped (SIGCONT).
struct Frozen(u32);

impl Frozen {
    fn new(op: &Operator) -> Frozen {
        let pid = op.child.id();
        signal(pid, "STOP");
        Frozen(pid)
    }
}

impl Drop for Frozen {
    fn drop(&mut self) {
        signal(self.0, "CONT");
    }
}

fn signal(pid: u32, sig: &str) {
    let status = std::process::Command::new("kill")
        .args([&format!("-{sig}"), &pid.to_string()])
        .status();
    assert!(status.is_ok_and(|s| s.success()), "kill -{sig} {pid}");
}

/// While laneway is frozen the plugin sets the weight but cannot verify it (no LaneEntry
/// reports it, no gateway accepted routes with it): the rollout stays at its `setWeight` step,
/// and moves on once laneway runs again.
async fn a_step_waits_until_laneway_routes_its_weight(s: &Shop) {
    let frozen = Frozen::new(&s.op);
    s.new_version(strategy(json!([{"setWeight": 30}, {"pause": {}}]), false), false)
        .await;
    wait_for("the plugin's weight", 30, || async {
        s.lane_route().await.spec.weight
    })
    .await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let status = s.rollout().await["status"].clone();
    assert_eq!(
        (
            status["currentStepIndex"].as_i64(),
            status["pauseConditions"].is_null()
        ),
        (Some(0), true),
        "the rollout moved on with laneway frozen: {status}"
    );
    drop(frozen);
    let started = Instant::now();
    s.paused_at(1).await;
    println!(
        "laneway running again → the step verified after {:?}",
        started.elapsed()
    );
}

/// `LANEWAY_ROLLOUT_STEPS` `setWeight` steps one after another (3 unless set; `make
/// bench-rollouts` runs 21, so 20 are timed): from each promotion until the controller pauses at the next step,
/// which it does once the plugin verified the weight at the gateway.
async fn each_set_weight_step_is_verified_at_the_gateway(s: &Shop) {
    let n: usize = std::env::var("LANEWAY_ROLLOUT_STEPS").map_or(3, |v| v.parse().expect("a number"));
    let weights: Vec<i32> = (0..n).map(|i| [10, 40, 70, 25, 55, 85][i % 6]).collect();
    let mut steps = vec![json!({"setCanaryScale": {"replicas": 1}})];
    steps.extend(
        weights
            .iter()
            .flat_map(|w| [json!({"setWeight": w}), json!({"pause": {}})]),
    );
    s.new_version(strategy(json!(steps), false), false).await;
    s.paused_at(2).await;
    let mut times = Vec::new();
    for (i, weight) in weights.iter().enumerate().skip(1) {
        s.promote().await;
        let started = Instant::now();
        s.paused_at(2 * i as i64 + 2).await;
        times.push(started.elapsed());
        let entry = s.c.api::<LaneEntry>().get("shop").await.expect("entry");
        let lanes = entry.status.unwrap_or_default().lanes;
        assert_eq!(lanes.iter().map(|l| l.weight).collect::<Vec<_>>(), vec![*weight]);
    }
    times.sort();
    println!(
        "setWeight step → paused, verified at the gateway: p50 {:?}, p99 {:?} over {} steps",
        percentile(&times, 0.5),
        percentile(&times, 0.99),
        times.len()
    );
}
