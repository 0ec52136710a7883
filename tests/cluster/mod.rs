//! Harness for tests against a real kube-apiserver (`tests/envtest`, started by `tests/run.sh`):
//! a fresh namespace per test, the operator as a real process, and helpers that do what a
//! user or a kubelet would.
#![allow(dead_code)]

pub mod process;

use std::collections::BTreeMap;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams, PostParams};
use kube::discovery::Scope;
use kube::{Api, Client, ResourceExt};
use laneway::api::{Condition, LaneRoute};
use laneway::lanes::naming;
use serde_json::{json, Value};

use process::{free_port, http_get, terminate};

pub const TIMEOUT: Duration = Duration::from_secs(30);
/// The field manager of everything the tests apply.
const FIELD_MANAGER: &str = "laneway-tests";
/// The ConfigMap laneway publishes Dubbo rules to.
pub const DUBBO_RULES: &str = "laneway-dubbo-rules";

/// A namespaced Kubernetes kind that the harness reads and writes.
pub trait Namespaced:
    kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
    + Clone
    + serde::de::DeserializeOwned
    + std::fmt::Debug
{
}

impl<K> Namespaced for K where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
{
}

#[derive(Clone)]
pub struct Cluster {
    pub client: Client,
    pub ns: String,
}

/// Fails loudly when no control plane is configured: these tests never skip.
pub async fn cluster(test: &str) -> Cluster {
    assert!(
        std::env::var_os("KUBECONFIG").is_some(),
        "KUBECONFIG is not set: run the tests with `make test` (tests/run.sh starts a local control plane)"
    );
    let client = Client::try_default().await.expect("client from KUBECONFIG");
    let suffix: String = naming::digest(&[test, &format!("{:?}", Instant::now())])[..6].to_owned();
    let ns = format!("{}-{suffix}", test.replace('_', "-"));
    let ns = ns.trim_start_matches('-').chars().take(63).collect::<String>();
    let api: Api<Namespace> = Api::all(client.clone());
    api.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": ns}})).expect("namespace"),
    )
    .await
    .expect("create namespace");
    Cluster { client, ns }
}

/// A fresh namespace holding [`shop`], and the operator watching it (Lease `lease`).
pub async fn shop_and_operator(test: &str) -> (Cluster, Operator) {
    let c = cluster(test).await;
    shop(&c).await;
    let op = c.operator("lease").await;
    (c, op)
}

/// The operator binary, running against the test control plane until dropped.
pub struct Operator {
    pub child: Child,
    pub metrics: String,
    pub log: std::path::PathBuf,
}

impl Operator {
    /// Scrapes one metric, summing every series whose labels contain `filter`.
    pub async fn metric(&self, name: &str, filter: &str) -> f64 {
        let (addr, name, filter) = (self.metrics.clone(), name.to_owned(), filter.to_owned());
        tokio::task::spawn_blocking(move || process::metric(&addr, &name, &filter))
            .await
            .expect("join")
            .unwrap_or_default()
    }

    pub async fn writes(&self) -> f64 {
        self.metric("laneway_writes_total", "").await
    }

    pub async fn ready(&self) -> bool {
        let url = format!("http://{}/readyz", self.metrics);
        tokio::task::spawn_blocking(move || http_get(&url))
            .await
            .expect("join")
            .is_some_and(|b| b.trim() == "ok")
    }

    /// SIGTERM, as Kubernetes stops a pod; waits for the process to exit.
    pub fn stop(&mut self) {
        terminate(&mut self.child, Duration::from_secs(10));
    }

    /// SIGKILL: a crash, with no chance to release the Lease.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Operator {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Applies one or more YAML documents with server-side apply (forced, manager `laneway-tests`),
/// as `kubectl apply --server-side`: namespaced kinds go to `ns`, cluster-scoped ones are applied
/// as they are.
pub async fn apply(client: &Client, ns: &str, yaml: &str) -> Result<(), kube::Error> {
    let docs: Vec<Value> = serde_saphyr::from_multiple(yaml).expect("test YAML");
    for value in docs {
        let api_version = value["apiVersion"].as_str().expect("apiVersion");
        let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
        let kind = value["kind"].as_str().expect("kind");
        let name = value["metadata"]["name"].as_str().expect("name");
        let gvk = GroupVersionKind::gvk(group, version, kind);
        let (ar, caps) = kube::discovery::pinned_kind(client, &gvk).await?;
        let api: Api<DynamicObject> = match caps.scope {
            Scope::Namespaced => Api::namespaced_with(client.clone(), ns, &ar),
            Scope::Cluster => Api::all_with(client.clone(), &ar),
        };
        let pp = PatchParams::apply(FIELD_MANAGER).force();
        api.patch(name, &pp, &Patch::Apply(&value)).await?;
    }
    Ok(())
}

/// Applies every CRD in the `*.yaml` files of `dir` with server-side apply and waits until each
/// is Established.
pub async fn apply_crds_in(client: &Client, dir: &Path) {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let pp = PatchParams::apply(FIELD_MANAGER).force();
    let mut names = Vec::new();
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("CRD dir {}: {e}", dir.display()))
        .filter_map(|e| Some(e.ok()?.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    for file in files {
        let text = std::fs::read_to_string(&file).expect("CRD file");
        let docs: Vec<Value> = serde_saphyr::from_multiple(&text).expect("CRD YAML");
        for value in docs {
            let name = value["metadata"]["name"].as_str().expect("CRD name").to_owned();
            api.patch(&name, &pp, &Patch::Apply(&value))
                .await
                .unwrap_or_else(|e| panic!("apply CRD {name}: {e}"));
            names.push(name);
        }
    }
    for name in names {
        let established = || async {
            api.get(&name)
                .await
                .ok()
                .and_then(|crd| crd.status)
                .is_some_and(|s| {
                    s.conditions
                        .unwrap_or_default()
                        .iter()
                        .any(|c| c.type_ == "Established" && c.status == "True")
                })
        };
        eventually_within(
            &format!("CRD {name} Established"),
            Duration::from_secs(60),
            established,
        )
        .await;
    }
}

impl Cluster {
    /// Starts the operator watching only this test's namespace, with its own Lease.
    pub async fn operator(&self, lease: &str) -> Operator {
        self.operator_with(lease, &[]).await
    }

    pub async fn operator_with(&self, lease: &str, extra: &[&str]) -> Operator {
        self.operator_watching(lease, &[&self.ns], extra).await
    }

    /// Starts the operator watching `namespaces` (every namespace when empty), with its Lease in
    /// this test's namespace.
    pub async fn operator_watching(&self, lease: &str, namespaces: &[&str], extra: &[&str]) -> Operator {
        let mut op = self.spawn_operator(lease, namespaces, extra);
        let deadline = Instant::now() + TIMEOUT;
        while !op.ready().await {
            if let Ok(Some(status)) = op.child.try_wait() {
                let log = std::fs::read_to_string(&op.log).unwrap_or_default();
                panic!("the operator exited ({status}):\n{log}");
            }
            assert!(Instant::now() < deadline, "timed out waiting for: operator ready");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        op
    }

    /// Starts the operator without waiting for it to become ready.
    pub fn spawn_operator(&self, lease: &str, namespaces: &[&str], extra: &[&str]) -> Operator {
        self.spawn_operator_on(None, lease, namespaces, extra)
    }

    /// Starts the operator against the control plane of `kubeconfig` (`$KUBECONFIG` when none).
    pub fn spawn_operator_on(
        &self,
        kubeconfig: Option<&std::path::Path>,
        lease: &str,
        namespaces: &[&str],
        extra: &[&str],
    ) -> Operator {
        let metrics = format!("127.0.0.1:{}", free_port());
        let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("operator-logs");
        std::fs::create_dir_all(&dir).expect("log dir");
        let log = dir.join(format!(
            "{}-{lease}-{}.log",
            self.ns,
            metrics.replace([':', '.'], "-")
        ));
        let file = std::fs::File::create(&log).expect("log file");
        let stdout = file.try_clone().expect("log file");
        let watch: Vec<String> = if namespaces.is_empty() {
            Vec::new()
        } else {
            vec!["--namespaces".into(), namespaces.join(",")]
        };
        let mut command = Command::new(env!("CARGO_BIN_EXE_laneway"));
        if let Some(kubeconfig) = kubeconfig {
            command.env("KUBECONFIG", kubeconfig);
        }
        let child = command
            .args(&watch)
            .args(["--lease-namespace", &self.ns, "--lease-name", lease])
            .args([
                "--metrics-addr",
                &metrics,
                "--lease-duration",
                "4s",
                "--lease-renew-deadline",
                "2500ms",
                "--lease-retry",
                "500ms",
                "--write-timeout",
                "1s",
            ])
            .args(extra)
            .env("RUST_LOG", "info,laneway=debug")
            .stdout(stdout)
            .stderr(file)
            .spawn()
            .expect("start laneway");
        Operator { child, metrics, log }
    }

    pub fn api<K>(&self) -> Api<K>
    where
        K: Namespaced,
    {
        Api::namespaced(self.client.clone(), &self.ns)
    }

    /// Applies a manifest (YAML) with server-side apply, as `kubectl apply --server-side`:
    /// namespaced kinds into this namespace.
    pub async fn apply_yaml(&self, yaml: &str) -> Result<(), kube::Error> {
        apply(&self.client, &self.ns, yaml).await
    }

    /// Has the API server refuse, in this namespace, what a ValidatingAdmissionPolicy `name`
    /// (with its binding) refuses: writes that match `rule` (one of its `resourceRules`, a YAML
    /// flow mapping) and fail `validation` (a YAML flow mapping: `expression` and `message` or
    /// `messageExpression`). [`Cluster::drop_policy`] takes it away.
    pub async fn refuse_by_policy(&self, name: &str, rule: &str, validation: &str) {
        let policy = format!(
            "apiVersion: admissionregistration.k8s.io/v1\nkind: ValidatingAdmissionPolicy\nmetadata: {{name: {name}}}\nspec:\n  failurePolicy: Fail\n  matchConstraints:\n    resourceRules: [{rule}]\n  validations: [{validation}]\n"
        );
        let binding = format!(
            "apiVersion: admissionregistration.k8s.io/v1\nkind: ValidatingAdmissionPolicyBinding\nmetadata: {{name: {name}}}\nspec:\n  policyName: {name}\n  validationActions: [Deny]\n  matchResources:\n    namespaceSelector: {{matchLabels: {{kubernetes.io/metadata.name: {}}}}}\n",
            self.ns
        );
        self.apply_yaml(&policy).await.expect("policy");
        self.apply_yaml(&binding).await.expect("binding");
    }

    /// Deletes the policy [`Cluster::refuse_by_policy`] made, and its binding.
    pub async fn drop_policy(&self, name: &str) {
        for kind in ["ValidatingAdmissionPolicyBinding", "ValidatingAdmissionPolicy"] {
            self.delete_cluster("admissionregistration.k8s.io", "v1", kind, name)
                .await
                .expect("delete policy");
        }
    }

    /// Applies the LaneRoute [`route`]`(name, services, fallback, strict)`; the API server must
    /// accept it.
    pub async fn apply_route(&self, name: &str, services: &[&str], fallback: &[&str], strict: bool) {
        self.apply_yaml(&route(name, services, fallback, strict))
            .await
            .unwrap_or_else(|e| panic!("LaneRoute {name}: {e}"));
    }

    /// Deletes a cluster-scoped object.
    pub async fn delete_cluster(
        &self,
        group: &str,
        version: &str,
        kind: &str,
        name: &str,
    ) -> Result<(), kube::Error> {
        let gvk = kube::api::GroupVersionKind::gvk(group, version, kind);
        let (ar, _) = kube::discovery::pinned_kind(&self.client, &gvk).await?;
        let api: Api<kube::api::DynamicObject> = Api::all_with(self.client.clone(), &ar);
        api.delete(name, &DeleteParams::default()).await.map(|_| ())
    }

    pub async fn delete<K>(&self, name: &str)
    where
        K: Namespaced,
    {
        let _ = self.api::<K>().delete(name, &DeleteParams::default()).await;
    }

    /// A Service `name` selecting `app=<name>`, port 80 to the named container port `http`.
    pub async fn service(&self, name: &str) {
        self.apply_yaml(&format!(
            "apiVersion: v1\nkind: Service\nmetadata: {{name: {name}, labels: {{tier: backend}}}}\nspec:\n  selector: {{app: {name}}}\n  ports: [{{name: web, port: 80, targetPort: http}}]\n"
        ))
        .await
        .expect("service");
    }

    /// A pod of `app`, optionally in `lane`, running and ready at `ip` (as a kubelet would report).
    pub async fn pod(&self, name: &str, app: &str, lane: Option<&str>, ip: &str) {
        self.pod_with_labels(name, app, lane, ip, &[]).await
    }

    pub async fn pod_with_labels(
        &self,
        name: &str,
        app: &str,
        lane: Option<&str>,
        ip: &str,
        extra: &[(&str, &str)],
    ) {
        let mut labels: BTreeMap<String, String> = BTreeMap::from([("app".into(), app.into())]);
        if let Some(lane) = lane {
            labels.insert("laneway.io/lane".into(), lane.into());
        }
        labels.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        let pod = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "labels": labels},
            "spec": {"nodeName": "node-1", "containers": [{"name": "app", "image": "example/app:1",
                "ports": [{"name": "http", "containerPort": 8080}, {"name": "dubbo", "containerPort": 20880}]}]}
        });
        self.api::<Pod>()
            .create(&PostParams::default(), &serde_json::from_value(pod).expect("pod"))
            .await
            .expect("create pod");
        self.set_pod_status(name, ip, true).await;
    }

    pub async fn set_pod_status(&self, name: &str, ip: &str, ready: bool) {
        let status = json!({"status": {"phase": "Running", "podIP": ip, "podIPs": [{"ip": ip}],
            "conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }}]}});
        self.api::<Pod>()
            .patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
            .await
            .expect("pod status");
    }

    /// Deletes a pod at once, as the kubelet confirms when its containers have stopped.
    pub async fn remove_pod(&self, name: &str) {
        let dp = DeleteParams {
            grace_period_seconds: Some(0),
            ..Default::default()
        };
        self.api::<Pod>().delete(name, &dp).await.expect("delete pod");
    }

    pub async fn label_pod(&self, name: &str, key: &str, value: Option<&str>) {
        let patch = json!({"metadata": {"labels": {key: value}}});
        self.api::<Pod>()
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .expect("label pod");
    }

    /// Pod names in the EndpointSlices of Service `service`, sorted; `None` when it has no slice.
    pub async fn slice_pods(&self, service: &str) -> Option<Vec<String>> {
        let lp = ListParams::default().labels(&format!("kubernetes.io/service-name={service}"));
        let slices = self.api::<EndpointSlice>().list(&lp).await.expect("list slices");
        if slices.items.is_empty() {
            return None;
        }
        let mut pods: Vec<String> = slices
            .items
            .iter()
            .flat_map(|s| s.endpoints.iter())
            .filter_map(|e| e.target_ref.as_ref()?.name.clone())
            .collect();
        pods.sort();
        Some(pods)
    }

    /// The `endpoints.kubernetes.io/last-change-trigger-time` of each slice of a Service.
    pub async fn trigger_times(&self, service: &str) -> Vec<Option<String>> {
        let lp = ListParams::default().labels(&format!("kubernetes.io/service-name={service}"));
        let slices = self.api::<EndpointSlice>().list(&lp).await.expect("list slices");
        slices
            .items
            .iter()
            .map(|s| {
                s.annotations()
                    .get("endpoints.kubernetes.io/last-change-trigger-time")
                    .cloned()
            })
            .collect()
    }

    /// The pods that serve `lane` at `service`: those of the Service that the lane's LaneRoute
    /// says serves it (`servedBy`); `None` while no LaneRoute names one.
    pub async fn lane_pods(&self, service: &str, lane: &str) -> Option<Vec<String>> {
        let routes = self
            .api::<LaneRoute>()
            .list(&ListParams::default())
            .await
            .expect("list LaneRoutes");
        let served_by = routes
            .items
            .iter()
            .filter(|r| r.lane() == lane)
            .filter_map(|r| r.status.as_ref())
            .flat_map(|s| s.services.iter())
            .find(|s| s.name == service)
            .and_then(|s| s.served_by.clone())?;
        self.slice_pods(&served_by).await
    }

    /// The pods in the lane's own Service at `service` (`None` while it has none).
    pub async fn own_lane_pods(&self, service: &str, lane: &str) -> Option<Vec<String>> {
        self.slice_pods(&naming::lane_service_name(service, lane)).await
    }

    pub async fn baseline_pods(&self, service: &str) -> Option<Vec<String>> {
        self.slice_pods(&naming::baseline_service_name(service)).await
    }

    pub async fn services(&self) -> Vec<String> {
        let mut names: Vec<String> = self
            .api::<Service>()
            .list(&ListParams::default())
            .await
            .expect("list")
            .items
            .iter()
            .map(|s| s.name_any())
            .collect();
        names.sort();
        names
    }

    /// The Dubbo rules laneway published to its ConfigMap, by key (none when it has none).
    pub async fn dubbo_rules(&self) -> BTreeMap<String, String> {
        let cm = self.api::<ConfigMap>().get_opt(DUBBO_RULES).await.ok().flatten();
        cm.and_then(|cm| cm.data).unwrap_or_default()
    }

    /// The Dubbo rule `key` (`<application>.tag-router`) in laneway's ConfigMap.
    pub async fn dubbo_rule(&self, key: &str) -> Option<String> {
        self.dubbo_rules().await.remove(key)
    }

    /// Moves `pod` into `lane` and back out, `changes` times in all, one change every `every`,
    /// in a task of its own.
    pub fn flip_lane(
        &self,
        pod: &str,
        lane: &str,
        changes: usize,
        every: Duration,
    ) -> tokio::task::JoinHandle<()> {
        let (c, pod, lane) = (self.clone(), pod.to_owned(), lane.to_owned());
        tokio::spawn(async move {
            for i in 0..changes {
                let lane = (i % 2 == 0).then_some(lane.as_str());
                c.label_pod(&pod, "laneway.io/lane", lane).await;
                tokio::time::sleep(every).await;
            }
        })
    }

    /// Messages of the Events about an object.
    pub async fn events_for(&self, name: &str) -> Vec<String> {
        let api: Api<k8s_openapi::api::events::v1::Event> = self.api();
        api.list(&ListParams::default())
            .await
            .expect("events")
            .items
            .into_iter()
            .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name))
            .map(|e| format!("{}: {}", e.reason.unwrap_or_default(), e.note.unwrap_or_default()))
            .collect()
    }
}

/// A LaneRoute manifest.
pub fn route(name: &str, services: &[&str], fallback: &[&str], strict: bool) -> String {
    format!(
        "apiVersion: laneway.io/v1alpha1\nkind: LaneRoute\nmetadata: {{name: {name}}}\nspec:\n  services: [{}]\n  fallback: [{}]\n  strict: {strict}\n",
        services.join(", "),
        fallback.join(", ")
    )
}

/// The LaneRoute `gray` over order and user with `weight`, and `rpc` (its `rpcEntry`, as
/// indented YAML lines) in its spec.
pub fn gray_route(weight: i32, rpc: &str) -> String {
    format!(
        "{}  weight: {weight}\n{rpc}",
        route("gray", &["order", "user"], &[], false)
    )
}

/// The shop: order (2 baseline, 1 gray, 1 dev-alice), user (1 baseline, 1 feature-x), pay
/// (1 baseline).
pub async fn shop(c: &Cluster) {
    for s in ["order", "user", "pay"] {
        c.service(s).await;
    }
    c.pod("order-1", "order", None, "10.1.0.1").await;
    c.pod("order-2", "order", None, "10.1.0.2").await;
    c.pod("order-gray", "order", Some("gray"), "10.1.0.3").await;
    c.pod("order-alice", "order", Some("dev-alice"), "10.1.0.4").await;
    c.pod("user-1", "user", None, "10.1.1.1").await;
    c.pod("user-featx", "user", Some("feature-x"), "10.1.1.2").await;
    c.pod("pay-1", "pay", None, "10.1.2.1").await;
}

pub async fn source(c: &Cluster, route: &str, service: &str) -> String {
    let Ok(r) = c.api::<LaneRoute>().get(route).await else {
        return String::new();
    };
    r.status
        .and_then(|s| s.services.into_iter().find(|s| s.name == service))
        .map(|s| s.source.to_string())
        .unwrap_or_default()
}

/// The status conditions of LaneRoute `route` (none while it or its status is missing).
pub async fn route_status_conditions(c: &Cluster, route: &str) -> Vec<Condition> {
    let route = c.api::<LaneRoute>().get(route).await.ok();
    route
        .and_then(|r| r.status)
        .map(|s| s.conditions)
        .unwrap_or_default()
}

/// (status, reason) of LaneRoute `route`'s condition `type_`; empty while there is none.
pub async fn condition(c: &Cluster, route: &str, type_: &str) -> (String, String) {
    status_and_reason(route_status_conditions(c, route).await, type_)
}

/// (status, reason) of the condition `type_` among `conditions`; empty when there is none.
pub fn status_and_reason(conditions: Vec<Condition>, type_: &str) -> (String, String) {
    conditions
        .into_iter()
        .find(|c| c.type_.as_str() == type_)
        .map(|c| (format!("{:?}", c.status), c.reason))
        .unwrap_or_default()
}

pub fn names(list: &[&str]) -> Option<Vec<String>> {
    let mut v: Vec<String> = list.iter().map(|s| s.to_string()).collect();
    v.sort();
    Some(v)
}

/// Polls `check` until it holds, failing the test after `TIMEOUT`.
pub async fn eventually<F, Fut>(what: &str, check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    eventually_within(what, TIMEOUT, check).await
}

/// [`eventually`] with its own time limit.
pub async fn eventually_within<F, Fut>(what: &str, limit: Duration, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if check().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("timed out waiting for: {what}");
}

/// Polls until `get` returns `want`, failing with the last value seen.
pub async fn wait_for<T, F, Fut>(what: &str, want: T, get: F)
where
    T: PartialEq + std::fmt::Debug,
    F: FnMut() -> Fut,
    Fut: Future<Output = T>,
{
    wait_for_within(what, want, TIMEOUT, get).await
}

/// [`wait_for`] with its own time limit.
pub async fn wait_for_within<T, F, Fut>(what: &str, want: T, limit: Duration, mut get: F)
where
    T: PartialEq + std::fmt::Debug,
    F: FnMut() -> Fut,
    Fut: Future<Output = T>,
{
    let deadline = Instant::now() + limit;
    let mut last = get().await;
    while last != want && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
        last = get().await;
    }
    assert_eq!(last, want, "{what}");
}

/// Runs `kubectl laneway probe ARGS` with its state (the saved last probes) under `state`,
/// printing what it printed; returns whether it exited 0, and its output.
pub fn probe(args: &[&str], state: &Path) -> (bool, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_kubectl-laneway"))
        .arg("probe")
        .args(args)
        .env("XDG_STATE_HOME", state)
        .output()
        .expect("kubectl-laneway");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    println!("$ kubectl laneway probe {}\n{text}{stderr}", args.join(" "));
    (out.status.success(), text)
}

/// The hop rows of a probe's output (after its first line and the table's header), split into
/// columns.
pub fn probe_rows(text: &str) -> Vec<Vec<&str>> {
    text.lines()
        .skip(2)
        .take_while(|l| l.starts_with(|c: char| c.is_ascii_digit()))
        .map(|l| l.split_whitespace().collect())
        .collect()
}
