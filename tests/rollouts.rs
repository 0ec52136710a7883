//! Argo Rollouts drives a lane: the real Argo Rollouts controller (built from its Go module,
//! tests/argo-rollouts) runs laneway's traffic router plugin (integrations/argo-rollouts) for a
//! Rollout whose canary pods join the lane `gray` through `canaryMetadata`; laneway routes the
//! lane at a LaneEntry that Traefik serves. A stand-in for the ReplicaSet controller and kubelet
//! (which a bare API server lacks) brings up the ReplicaSets' pods as small HTTP servers.

mod cluster;
mod gateway;

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::{Child, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cluster::process::{free_port, terminate};
use cluster::*;
use gateway::*;
use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{ApiResource, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt};
use laneway::api::{LaneEntry, LaneRoute};
use serde_json::{json, Value};

/// Traefik, Argo Rollouts, the operator and 1,000-request loads: one scenario at a time.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
const ROUTE_GRACE: &str = "--route-grace=1s";
const HOST: &str = "shop.example.com";

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
    async fn start(c: &Cluster) -> Argo {
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
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("argo-{}", c.ns));
        std::fs::create_dir_all(&dir).expect("argo dir");
        let log = std::fs::File::create(dir.join("controller.log")).expect("argo log");
        let child = std::process::Command::new(argo.join("bin/rollouts-controller"))
            .args([
                "--namespaced",
                "--namespace",
                &c.ns,
                "--leader-elect=false",
                "--loglevel",
                "info",
            ])
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

/// Brings up the pods each ReplicaSet asks for (its template's labels, owned by it, each an
/// HTTP server answering with its name on its own IP) and reports the ReplicaSet's status, as
/// the ReplicaSet controller and kubelets would; scales down gracefully (not ready, then gone).
struct ReplicaSets {
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<()>,
}

impl ReplicaSets {
    fn start(c: &Cluster, backends: Arc<Backends>) -> ReplicaSets {
        let stop = Arc::new(AtomicBool::new(false));
        let (c, flag) = (c.clone(), stop.clone());
        let task = tokio::spawn(async move {
            let mut next_ip = 10;
            let mut leaving = BTreeSet::new();
            while !flag.load(Ordering::SeqCst) {
                let sets = c.api::<ReplicaSet>().list(&ListParams::default()).await;
                for rs in sets.map(|l| l.items).unwrap_or_default() {
                    reconcile(&c, &backends, &rs, &mut next_ip, &mut leaving).await;
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        });
        ReplicaSets { stop, task }
    }
}

impl Drop for ReplicaSets {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        self.task.abort();
    }
}

async fn reconcile(
    c: &Cluster,
    backends: &Arc<Backends>,
    rs: &ReplicaSet,
    next_ip: &mut u32,
    leaving: &mut BTreeSet<String>,
) {
    let name = rs.name_any();
    let spec = rs.spec.clone().unwrap_or_default();
    let want = spec.replicas.unwrap_or(1).max(0) as usize;
    let owned: Vec<Pod> = c
        .api::<Pod>()
        .list(&ListParams::default())
        .await
        .map(|l| l.items)
        .unwrap_or_default()
        .into_iter()
        .filter(|p| {
            p.owner_references()
                .iter()
                .any(|o| o.uid == rs.uid().unwrap_or_default())
        })
        .filter(|p| !leaving.contains(&p.name_any()))
        .collect();
    for _ in owned.len()..want {
        let labels = spec
            .template
            .as_ref()
            .and_then(|t| t.metadata.as_ref())
            .and_then(|m| m.labels.clone());
        let pod = format!("{name}-{}", *next_ip);
        let ip = format!("198.18.0.{}", *next_ip);
        *next_ip += 1;
        let addr = backends.add(&Backend::new(&pod, "", &ip)).await;
        let body = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": pod, "labels": labels.unwrap_or_default(), "ownerReferences": [{
                "apiVersion": "apps/v1", "kind": "ReplicaSet", "name": name,
                "uid": rs.uid(), "controller": true}]},
            "spec": {"nodeName": "node-1", "containers": [{"name": "app", "image": "example/app:1",
                "ports": [{"name": "http", "containerPort": addr.port(), "protocol": "TCP"}]}]},
        });
        let pod_obj: Pod = serde_json::from_value(body).expect("pod");
        c.api::<Pod>()
            .create(&PostParams::default(), &pod_obj)
            .await
            .expect("create pod");
        set_pod_status(&c.client, &c.ns, &pod, &ip, true).await;
    }
    for pod in owned.iter().skip(want) {
        let pod_name = pod.name_any();
        leaving.insert(pod_name.clone());
        let ip = pod
            .status
            .as_ref()
            .and_then(|s| s.pod_ip.clone())
            .unwrap_or_default();
        set_pod_status(&c.client, &c.ns, &pod_name, &ip, false).await;
        let (c, backends) = (c.clone(), backends.clone());
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(3)).await;
            backends.undeploy(&c.client, &c.ns, &pod_name).await;
        });
    }
    let ready = owned.len().min(want) as i32;
    let status = json!({"status": {"replicas": ready, "readyReplicas": ready, "availableReplicas": ready,
        "fullyLabeledReplicas": ready, "observedGeneration": rs.metadata.generation}});
    let _ = c
        .api::<ReplicaSet>()
        .patch_status(&name, &PatchParams::default(), &Patch::Merge(&status))
        .await;
}

/// One scenario: Traefik, the operator, Argo Rollouts and the pods of the Rollout `bff` (two
/// replicas) behind the Service `gateway-bff`; the LaneRoute `gray` over it, entered at the
/// LaneEntry `shop`.
struct Shop {
    c: Cluster,
    http: Http,
    _replica_sets: ReplicaSets,
    _argo: Argo,
    _op: Operator,
    _traefik: Traefik,
    _serial: tokio::sync::MutexGuard<'static, ()>,
}

impl Shop {
    /// The shop with the Rollout's canary strategy `canary`.
    async fn new(test: &str, canary: Value) -> Shop {
        let serial = SERIAL.lock().await;
        let c = cluster(test).await;
        let traefik = Traefik::start(&c.client, &c.ns).await;
        c.apply_yaml(
            "apiVersion: v1\nkind: Service\nmetadata: {name: gateway-bff}\nspec:\n  selector: {app: gateway-bff}\n  ports: [{name: http, port: 80, targetPort: http}]\n",
        )
        .await
        .expect("service");
        c.apply_route("gray", &["gateway-bff"], &[], false).await;
        let entry = json!({
            "apiVersion": "laneway.io/v1alpha1", "kind": "LaneEntry", "metadata": {"name": "shop"},
            "spec": {"parentRefs": [traefik.parent_ref()], "hostnames": [HOST],
                     "rules": [{"backend": {"service": "gateway-bff", "port": 80}}]},
        });
        c.apply_yaml(&entry.to_string()).await.expect("entry");
        // Every namespace, so that laneway reads the GatewayClass and what it supports.
        let op = c.operator_watching("lease", &[], &[ROUTE_GRACE]).await;
        let argo = Argo::start(&c).await;
        let replica_sets = ReplicaSets::start(&c, Arc::new(Backends::start()));
        let rollout = json!({
            "apiVersion": "argoproj.io/v1alpha1", "kind": "Rollout", "metadata": {"name": "bff"},
            "spec": {
                "replicas": 2,
                "selector": {"matchLabels": {"app": "gateway-bff"}},
                "template": {"metadata": {"labels": {"app": "gateway-bff", "version": "v1"}},
                             "spec": {"containers": [{"name": "app", "image": "example/app:1"}]}},
                "strategy": {"canary": canary},
            },
        });
        c.apply_yaml(&rollout.to_string()).await.expect("rollout");
        let http = traefik.http();
        let s = Shop {
            c,
            http,
            _replica_sets: replica_sets,
            _argo: argo,
            _op: op,
            _traefik: traefik,
            _serial: serial,
        };
        wait_for("the first version Healthy", Some("Healthy".to_owned()), || {
            s.phase()
        })
        .await;
        s.http
            .wait_for("the baseline served", &Request::new(HOST), |r| r.ok())
            .await;
        s
    }

    fn rollout_api(&self) -> Api<DynamicObject> {
        Api::namespaced_with(self.c.client.clone(), &self.c.ns, &rollouts())
    }

    async fn rollout(&self) -> Value {
        let ro = self.rollout_api().get("bff").await.expect("rollout");
        serde_json::to_value(ro).expect("json")
    }

    async fn phase(&self) -> Option<String> {
        self.rollout().await["status"]["phase"]
            .as_str()
            .map(str::to_owned)
    }

    /// Starts the rollout of a second version.
    async fn new_version(&self) {
        let patch = json!({"spec": {"template": {"metadata": {"labels": {"version": "v2"}}}}});
        self.rollout_api()
            .patch("bff", &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .expect("new version");
    }

    /// Waits until the rollout pauses at step `index`; returns the canary's pod name prefix.
    async fn paused_at(&self, index: i64) -> String {
        wait_for(
            &format!("the pause at step {index}"),
            (Some(index), true),
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
        format!("bff-{hash}-")
    }

    /// Waits until the controller has stopped writing the rollout (no new resourceVersion for
    /// 1.5 s). Argo Rollouts writes the object it patched back into its informer's cache, so a
    /// change made while it reconciles can be overwritten there and go unseen until a resync.
    async fn settled(&self) {
        let deadline = Instant::now() + TIMEOUT;
        let (mut last, mut since) = (String::new(), Instant::now());
        while since.elapsed() < Duration::from_millis(1500) {
            assert!(Instant::now() < deadline, "the rollout never settled");
            let ro = self.rollout_api().get("bff").await.expect("rollout");
            let rv = ro.resource_version().unwrap_or_default();
            if rv != last {
                (last, since) = (rv, Instant::now());
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// `kubectl argo rollouts promote`: ends the current pause.
    async fn promote(&self) {
        self.settled().await;
        let patch = json!({"status": {"pauseConditions": null}});
        self.rollout_api()
            .patch_status("bff", &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .expect("promote");
    }

    /// `kubectl argo rollouts abort`.
    async fn abort(&self) {
        self.settled().await;
        let patch = json!({"status": {"abort": true}});
        self.rollout_api()
            .patch_status("bff", &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .expect("abort");
    }

    async fn lane_route(&self) -> LaneRoute {
        self.c.api::<LaneRoute>().get("gray").await.expect("lane route")
    }

    /// Requests of `n` sent as `req` whose first hop was a pod named with `prefix`.
    async fn share(&self, req: &Request, n: usize, prefix: &str) -> usize {
        let t = self.http.load(req, n, 8).await;
        assert_eq!(t.ok(), n, "{:?}", t.statuses);
        t.by_first_hop
            .iter()
            .filter(|(pod, _)| pod.starts_with(prefix))
            .map(|(_, n)| n)
            .sum()
    }
}

/// The canary strategy of examples/argo-rollouts/rollout.yaml.
fn example_strategy() -> Value {
    let file = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/argo-rollouts/rollout.yaml");
    let rollout: Value =
        serde_saphyr::from_str(&std::fs::read_to_string(file).expect("example")).expect("YAML");
    rollout["spec"]["strategy"]["canary"].clone()
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

#[tokio::test(flavor = "multi_thread")]
async fn a_rollout_steps_the_lane_verifies_each_weight_at_the_gateway_and_promotes_without_a_failed_request()
{
    // The example's steps: header route, pause, 20%, pause, 50%, pause.
    let s = Shop::new("rollouts-steps", example_strategy()).await;
    let untagged = Request::new(HOST);
    let watch = s.http.watch(&untagged, 2, Duration::from_millis(20));
    s.new_version().await;

    let canary = s.paused_at(2).await;
    let tagged = untagged.clone().header("x-canary", "yes");
    assert_eq!(
        s.share(&tagged, 200, &canary).await,
        200,
        "x-canary: yes reaches the canary"
    );
    assert_eq!(
        s.share(&untagged, 200, &canary).await,
        0,
        "at weight 0 nothing else does"
    );

    let mut figures = Vec::new();
    for (step, pause, weight) in [(3, 4, 20), (5, 6, 50)] {
        s.promote().await;
        let started = Instant::now();
        assert_eq!(s.paused_at(pause).await, canary);
        figures.push(started.elapsed());
        let route = s.lane_route().await;
        assert_eq!(route.spec.weight, weight, "step {step}");
        assert_eq!(weight_owner(&route), vec!["laneway-argo-rollouts".to_owned()]);
        let n = s.share(&untagged, 1000, &canary).await;
        println!("setWeight {weight}: {n} of 1000 untagged requests on the canary");
        let want = weight as usize * 10;
        assert!((want - 30..=want + 30).contains(&n), "{weight}% ± 3 of 1000: {n}");
    }
    println!("setWeight step → paused with the weight verified: {figures:?}");

    s.promote().await;
    wait_for("the new version stable", true, || async {
        let ro = s.rollout().await;
        ro["status"]["phase"] == "Healthy" && ro["status"]["stableRS"] == ro["status"]["currentPodHash"]
    })
    .await;
    wait_for("the lane's weight and header given back", (0, true), || async {
        let route = s.lane_route().await;
        (route.spec.weight, route.spec.match_.is_none())
    })
    .await;
    wait_for(
        "the lane empty: its pods are baseline now",
        Some("Baseline".to_owned()),
        || async {
            let status = s.lane_route().await.status.unwrap_or_default();
            status.services.first().map(|svc| svc.source.to_string())
        },
    )
    .await;
    let report = watch.stop().await;
    println!("{} requests during the rollout", report.hits.len());
    assert!(report.failures().is_empty(), "failed: {:?}", report.failures());
    assert!(report.tally.by_first_hop.keys().any(|p| p.starts_with(&canary)));
}

#[tokio::test(flavor = "multi_thread")]
async fn an_aborted_rollout_drains_the_canary_without_a_failed_request() {
    let mut canary = example_strategy();
    canary["steps"] = json!([{"setWeight": 20}, {"pause": {}}]);
    let s = Shop::new("rollouts-abort", canary).await;
    let untagged = Request::new(HOST);
    let watch = s.http.watch(&untagged, 2, Duration::from_millis(20));
    s.new_version().await;
    let canary = s.paused_at(1).await;
    let at = watch.now();
    s.abort().await;
    let report = watch
        .wait_until(
            "no request on the canary for 100 in a row",
            Duration::from_secs(60),
            |r| {
                r.hits
                    .iter()
                    .rev()
                    .take_while(|h| h.at > at && !h.chain.first().is_some_and(|p| p.starts_with(&canary)))
                    .count()
                    >= 100
            },
        )
        .await;
    let last = report
        .hits
        .iter()
        .filter(|h| h.chain.first().is_some_and(|p| p.starts_with(&canary)))
        .map(|h| h.at)
        .max()
        .unwrap_or(at);
    println!(
        "abort → last request on the canary after {:?}",
        last.saturating_sub(at)
    );
    wait_for("the lane's weight back to 0", 0, || async {
        s.lane_route().await.spec.weight
    })
    .await;
    let report = watch.stop().await;
    assert!(report.failures().is_empty(), "failed: {:?}", report.failures());
}

/// `setWeight` steps one after the other (`LANEWAY_ROLLOUT_STEPS`, 3 unless set; `make
/// bench-rollouts` runs 20): each promotion until the controller pauses at the next step, which it
/// does once the plugin verified the weight at the gateway.
#[tokio::test(flavor = "multi_thread")]
async fn each_set_weight_step_is_verified_at_the_gateway_before_the_rollout_moves_on() {
    let n: usize = std::env::var("LANEWAY_ROLLOUT_STEPS").map_or(3, |v| v.parse().expect("a number"));
    let weights: Vec<i32> = (0..n).map(|i| [10, 40, 70, 25, 55, 85][i % 6]).collect();
    let mut canary = example_strategy();
    canary["steps"] = weights
        .iter()
        .flat_map(|w| [json!({"setWeight": w}), json!({"pause": {}})])
        .collect();
    let s = Shop::new("rollouts-bench", canary).await;
    s.new_version().await;
    s.paused_at(1).await;
    let mut times = Vec::new();
    for (i, weight) in weights.iter().enumerate().skip(1) {
        s.promote().await;
        let started = Instant::now();
        s.paused_at(2 * i as i64 + 1).await;
        times.push(started.elapsed());
        let entry = s.c.api::<LaneEntry>().get("shop").await.expect("entry");
        let lanes = entry.status.unwrap_or_default().lanes;
        assert_eq!(lanes.iter().map(|l| l.weight).collect::<Vec<_>>(), vec![*weight]);
    }
    times.sort();
    let at = |p: f64| times[((times.len() - 1) as f64 * p).round() as usize];
    println!(
        "setWeight step → paused, verified at the gateway: p50 {:?}, p99 {:?} over {} steps",
        at(0.5),
        at(0.99),
        times.len()
    );
}
