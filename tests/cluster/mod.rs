//! Harness for tests against a real kube-apiserver (`tests/envtest`, started by `tests/run.sh`):
//! a fresh namespace per test, the operator as a real process, and helpers that do what a
//! user or a kubelet would.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::future::Future;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Namespace, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client, ResourceExt};
use laneway::api::LaneRoute;
use laneway::lanes::naming;
use serde_json::json;

pub const TIMEOUT: Duration = Duration::from_secs(30);

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

/// The operator binary, running against the test control plane until dropped.
pub struct Operator {
    pub child: Child,
    pub metrics: String,
    pub log: std::path::PathBuf,
}

impl Operator {
    /// Scrapes one metric, summing every series whose labels contain `filter`.
    pub async fn metric(&self, name: &str, filter: &str) -> f64 {
        let url = format!("http://{}/metrics", self.metrics);
        let body = tokio::task::spawn_blocking(move || http_get(&url))
            .await
            .expect("join")
            .unwrap_or_default();
        body.lines()
            .filter(|l| l.starts_with(name) && l.contains(filter))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
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
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(self.child.id().to_string())
            .status();
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
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

fn http_get(url: &str) -> Option<String> {
    use std::io::{Read, Write};
    let rest = url.strip_prefix("http://")?;
    let (host, path) = rest.split_once('/').map(|(h, p)| (h, format!("/{p}")))?;
    let mut stream = std::net::TcpStream::connect(host).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(stream, "GET {path} HTTP/1.0\r\nHost: {host}\r\n\r\n").ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    let (head, body) = response.split_once("\r\n\r\n")?;
    let status = head.lines().next()?;
    status
        .split(' ')
        .nth(1)
        .is_some_and(|code| code == "200")
        .then(|| body.to_owned())
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port")
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

    /// Applies a manifest (YAML) into this namespace with server-side apply, as `kubectl apply --server-side`.
    pub async fn apply_yaml(&self, yaml: &str) -> Result<(), kube::Error> {
        let value: serde_json::Value = serde_saphyr::from_str(yaml).expect("test YAML");
        let kind = value["kind"].as_str().expect("kind").to_owned();
        let name = value["metadata"]["name"].as_str().expect("name").to_owned();
        let pp = PatchParams::apply("laneway-tests").force();
        let (group, version) = match value["apiVersion"].as_str().expect("apiVersion").split_once('/') {
            Some((g, v)) => (g.to_owned(), v.to_owned()),
            None => (
                String::new(),
                value["apiVersion"].as_str().unwrap_or_default().to_owned(),
            ),
        };
        let gvk = kube::api::GroupVersionKind::gvk(&group, &version, &kind);
        let (ar, _) = kube::discovery::pinned_kind(&self.client, &gvk).await?;
        let api: Api<kube::api::DynamicObject> = Api::namespaced_with(self.client.clone(), &self.ns, &ar);
        api.patch(&name, &pp, &Patch::Apply(&value)).await.map(|_| ())
    }

    /// Applies a cluster-scoped manifest with server-side apply.
    pub async fn apply_cluster_yaml(&self, yaml: &str) -> Result<(), kube::Error> {
        let value: serde_json::Value = serde_saphyr::from_str(yaml).expect("test YAML");
        let kind = value["kind"].as_str().expect("kind").to_owned();
        let name = value["metadata"]["name"].as_str().expect("name").to_owned();
        let (group, version) = value["apiVersion"]
            .as_str()
            .expect("apiVersion")
            .split_once('/')
            .map(|(g, v)| (g.to_owned(), v.to_owned()))
            .unwrap_or_else(|| {
                (
                    String::new(),
                    value["apiVersion"].as_str().unwrap_or_default().to_owned(),
                )
            });
        let gvk = kube::api::GroupVersionKind::gvk(&group, &version, &kind);
        let (ar, _) = kube::discovery::pinned_kind(&self.client, &gvk).await?;
        let api: Api<kube::api::DynamicObject> = Api::all_with(self.client.clone(), &ar);
        let pp = PatchParams::apply("laneway-tests").force();
        api.patch(&name, &pp, &Patch::Apply(&value)).await.map(|_| ())
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

    pub async fn lane_pods(&self, service: &str, lane: &str) -> Option<Vec<String>> {
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

pub async fn condition(c: &Cluster, route: &str, type_: &str) -> (String, String) {
    let Ok(r) = c.api::<LaneRoute>().get(route).await else {
        return Default::default();
    };
    r.status
        .and_then(|s| s.conditions.into_iter().find(|c| c.type_.as_str() == type_))
        .map(|c| (format!("{:?}", c.status), c.reason))
        .unwrap_or_default()
}

pub fn names(list: &[&str]) -> Option<Vec<String>> {
    let mut v: Vec<String> = list.iter().map(|s| s.to_string()).collect();
    v.sort();
    Some(v)
}

/// Polls `check` until it holds, failing the test after `TIMEOUT`.
pub async fn eventually<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = Instant::now() + TIMEOUT;
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
