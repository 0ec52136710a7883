//! Gateway API end-to-end support: Traefik (tests/traefik) as the gateway, small HTTP backend
//! "pods" (one Python process, `backends.py`, serving every pod on its own IP:port), their Pod
//! objects with kubelet-like status, and HTTP helpers that send requests through the gateway and
//! tally which pods served each hop.
//!
//! Everything runs inside the tests' private network namespace (tests/in-cluster.sh, addresses
//! [`POD_IPS`] on `lo`): the API server refuses loopback addresses in EndpointSlices, so backends
//! listen on 198.18.0.x. Traefik's `web` entrypoint defaults to 127.0.0.1.
//!
//! ```ignore
//! let traefik = Traefik::start(&client, &ns).await;          // class + Gateway, Programmed
//! let backends = Backends::start();
//! backends.deploy(&client, &ns, &Backend::new("order-1", "order", POD_IPS[0])).await;
//! // ... HTTPRoutes with parentRefs [traefik.parent_ref()], Services, slices (or laneway) ...
//! let http = traefik.http();
//! http.wait_for("order served", &Request::new("order"), |r| r.first_hop() == Some("order-1")).await;
//! let tally = http.load(&Request::new("order").lane("gray"), 1000, 8).await;
//! ```
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kube::api::{ApiResource, DeleteParams, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::{json, Value};

pub use crate::cluster::apply;
use crate::cluster::process::{tail, terminate, wait_or_kill};

/// The pod IPs on `lo` in the tests' network namespace (tests/in-cluster.sh).
pub const POD_IPS: [&str; 8] = [
    "198.18.0.2",
    "198.18.0.3",
    "198.18.0.4",
    "198.18.0.5",
    "198.18.0.6",
    "198.18.0.7",
    "198.18.0.8",
    "198.18.0.9",
];
/// The lane header laneway's routes match by default.
pub const LANE_HEADER: &str = "x-lane";
/// Traefik's Gateway API controller name.
pub const CONTROLLER: &str = "traefik.io/gateway-controller";
/// Label on each fixture's GatewayClass; Traefik's `labelSelector` picks only its own class.
pub const CLASS_LABEL: &str = "laneway.io/test-traefik";
pub const GATEWAY_GROUP: &str = "gateway.networking.k8s.io";
const TIMEOUT: Duration = Duration::from_secs(30);

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// target/tmp/gateway-logs
pub fn log_dir() -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("gateway-logs");
    std::fs::create_dir_all(&dir).expect("log dir");
    dir
}

/// Runs `tests/traefik/build.sh [arg]` (cached: ~10 ms) and returns its last stdout line.
fn build_sh(arg: Option<&str>) -> PathBuf {
    let script = repo().join("tests/traefik/build.sh");
    let out = Command::new(&script)
        .args(arg)
        .stderr(Stdio::inherit())
        .output()
        .expect("run tests/traefik/build.sh");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let last = stdout.lines().last().unwrap_or_default().trim();
    assert!(
        out.status.success() && !last.is_empty(),
        "tests/traefik/build.sh {} failed ({}); it needs the Go module proxy the first time: run it \
         outside the network namespace before the tests",
        arg.unwrap_or_default(),
        out.status
    );
    PathBuf::from(last)
}

/// The Traefik binary: `$LANEWAY_TRAEFIK_BIN` (its bin dir, as tests/in-cluster.sh exports it, or
/// the binary itself), else the one tests/traefik/build.sh built.
pub fn traefik_bin() -> PathBuf {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        let bin = match std::env::var_os("LANEWAY_TRAEFIK_BIN") {
            Some(bin) if !bin.is_empty() => PathBuf::from(bin),
            _ => build_sh(None),
        };
        if bin.is_dir() {
            bin.join("traefik")
        } else {
            bin
        }
    })
    .clone()
}

/// The Gateway API v1.4.1 Standard CRDs: `$LANEWAY_GATEWAY_CRDS`, else
/// `tests/traefik/build.sh --crds`.
pub fn crds_dir() -> PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| match std::env::var_os("LANEWAY_GATEWAY_CRDS") {
        Some(dir) if !dir.is_empty() => PathBuf::from(dir),
        _ => build_sh(Some("--crds")),
    })
    .clone()
}

/// Installs the Gateway API Standard CRDs with server-side apply and waits until they are
/// Established. Once per test process; idempotent across processes.
pub async fn install_crds(client: &Client) {
    static DONE: tokio::sync::OnceCell<()> = tokio::sync::OnceCell::const_new();
    DONE.get_or_init(|| apply_crds(client)).await;
}

/// Installs the Gateway API Standard CRDs with server-side apply and waits until they are
/// Established.
pub async fn apply_crds(client: &Client) {
    crate::cluster::apply_crds_in(client, &crds_dir()).await;
}

/// Polls `check` every 50 ms until it holds; panics after `timeout`.
pub async fn poll<F, Fut>(what: &str, timeout: Duration, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + timeout;
    while !check().await {
        assert!(
            Instant::now() < deadline,
            "timed out after {timeout:?} waiting for: {what}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn gateway_resource(kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(GATEWAY_GROUP, "v1", kind), plural)
}

/// One condition as (type, status, reason, message).
pub type Condition = (String, String, String, String);

fn conditions(list: &Value) -> Vec<Condition> {
    let field = |c: &Value, k: &str| c[k].as_str().unwrap_or_default().to_owned();
    list.as_array()
        .map(|l| {
            l.iter()
                .map(|c| {
                    (
                        field(c, "type"),
                        field(c, "status"),
                        field(c, "reason"),
                        field(c, "message"),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

/// The conditions an HTTPRoute's parents report (all parents, in order); empty when none yet.
pub async fn route_conditions(client: &Client, ns: &str, route: &str) -> Vec<Condition> {
    let api: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), ns, &gateway_resource("HTTPRoute", "httproutes"));
    let Ok(route) = api.get(route).await else {
        return Vec::new();
    };
    route.data["status"]["parents"]
        .as_array()
        .map(|parents| {
            parents
                .iter()
                .flat_map(|p| conditions(&p["conditions"]))
                .collect()
        })
        .unwrap_or_default()
}

/// Resident memory of a process in MiB, from /proc (None once it has exited).
pub fn rss_mib(pid: u32) -> Option<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kib: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kib / 1024.0)
}

/// Whether `conds` hold a condition `type_` with status `status`.
pub fn has_condition(conds: &[Condition], type_: &str, status: &str) -> bool {
    conds.iter().any(|c| c.0 == type_ && c.1 == status)
}

// ---------------------------------------------------------------------------------------------
// Traefik

/// How to run Traefik.
#[derive(Clone, Debug)]
pub struct TraefikOptions {
    /// IP of the `web` entrypoint.
    pub addr: IpAddr,
    /// Its port; 0 picks a free one. The Gateway's listener gets the same port.
    pub port: u16,
    /// `providers.providersThrottleDuration`: the first change applies at once, then at most
    /// one new configuration per interval.
    pub throttle: Duration,
    /// Namespaces Traefik watches besides the Gateway's own (routes, Services, slices).
    pub namespaces: Vec<String>,
    /// Watch every namespace instead (then other tests' routes in other namespaces are seen too).
    pub all_namespaces: bool,
    pub gateway_name: String,
    pub listener_name: String,
    /// DEBUG, INFO, WARN or ERROR.
    pub log_level: String,
    /// Writes `<log>.access.log` next to the Traefik log.
    pub access_log: bool,
    /// The cluster Traefik watches; `$KUBECONFIG` (the test process's own) when `None`.
    pub kubeconfig: Option<PathBuf>,
    pub extra_args: Vec<String>,
}

impl Default for TraefikOptions {
    fn default() -> Self {
        TraefikOptions {
            addr: IpAddr::from([127, 0, 0, 1]),
            port: 0,
            throttle: Duration::from_millis(200),
            namespaces: Vec::new(),
            all_namespaces: false,
            gateway_name: "gateway".into(),
            listener_name: "web".into(),
            log_level: "INFO".into(),
            access_log: false,
            kubeconfig: None,
            extra_args: Vec::new(),
        }
    }
}

/// A Traefik process (tests/traefik, v3.6.12) with its own GatewayClass (labelled for it alone:
/// Traefik's `labelSelector` selects GatewayClasses) and one Gateway with an HTTP listener on its
/// `web` entrypoint, allowing routes from all namespaces. Traefik watches only the Gateway's
/// namespace (plus [`TraefikOptions::namespaces`]), so tests running side by side, each with its
/// own Traefik, never see each other's routes. One Traefik per (namespace, gateway name).
///
/// Killed on drop (the GatewayClass and Gateway stay; no other Traefik handles them), and
/// killed when the thread that started it exits (`setpriv --pdeathsig`): start it on the test's
/// own thread or a runtime worker, not inside `spawn_blocking`.
///
/// Timing (2 cores, 200 ms throttle): a change (EndpointSlice or HTTPRoute) made after a quiet
/// second is served 15-250 ms after the API server accepted it (median ~80 ms); changes back to
/// back wait for the throttle (median ~200 ms, up to ~350 ms; ~1 s with a 1 s throttle). Status
/// conditions are written before the data plane changes: poll requests, not status.
pub struct Traefik {
    child: Child,
    client: Client,
    /// The `web` entrypoint, where requests go.
    pub web: SocketAddr,
    pub class_name: String,
    pub gateway_name: String,
    pub gateway_namespace: String,
    pub listener_name: String,
    /// Traefik's log (stdout and stderr).
    pub log: PathBuf,
    pub options: TraefikOptions,
}

fn free_port(ip: IpAddr) -> u16 {
    std::net::TcpListener::bind((ip, 0))
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port")
}

/// `setpriv --pdeathsig KILL` when available, so helpers die with the test process even when it
/// is killed before it can drop them. (The signal comes when the *thread* that spawned the child
/// exits.)
fn command_dying_with_parent(program: &Path) -> Command {
    let setpriv = Path::new("/usr/bin/setpriv");
    if setpriv.exists() {
        let mut cmd = Command::new(setpriv);
        cmd.args(["--pdeathsig", "KILL", "--"]).arg(program);
        cmd
    } else {
        Command::new(program)
    }
}

impl Traefik {
    /// Traefik on 127.0.0.1:<free port>, 200 ms providers throttle, watching `ns`, with a
    /// Gateway `gateway` (listener `web`) in `ns`.
    pub async fn start(client: &Client, ns: &str) -> Traefik {
        Self::start_with(client, ns, TraefikOptions::default()).await
    }

    /// Installs the CRDs (once), creates the GatewayClass and the Gateway in `ns`, starts Traefik
    /// and returns once the Gateway is Programmed and the entrypoint answers.
    pub async fn start_with(client: &Client, ns: &str, options: TraefikOptions) -> Traefik {
        static SEQ: AtomicU64 = AtomicU64::new(0);
        install_crds(client).await;
        let id = format!("{}-{}", std::process::id(), SEQ.fetch_add(1, Ordering::SeqCst));
        let class_name = format!("laneway-test-{id}");
        let port = if options.port == 0 {
            free_port(options.addr)
        } else {
            options.port
        };
        let web = SocketAddr::new(options.addr, port);
        let gateway = json!({
            "apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
            "metadata": {"name": options.gateway_name, "namespace": ns},
            "spec": {"gatewayClassName": class_name, "listeners": [{
                "name": options.listener_name, "protocol": "HTTP", "port": port,
                "allowedRoutes": {"namespaces": {"from": "All"}}}]}
        });
        let class = json!({
            "apiVersion": "gateway.networking.k8s.io/v1", "kind": "GatewayClass",
            "metadata": {"name": class_name, "labels": {CLASS_LABEL: id}},
            "spec": {"controllerName": CONTROLLER}
        });
        apply(client, ns, &class.to_string()).await.expect("GatewayClass");
        apply(client, ns, &gateway.to_string()).await.expect("Gateway");

        let log = log_dir().join(format!("traefik-{ns}-{id}.log"));
        let file = std::fs::File::create(&log).expect("traefik log");
        let kubeconfig = options.kubeconfig.clone().unwrap_or_else(|| {
            std::env::var_os("KUBECONFIG")
                .expect("KUBECONFIG is not set: run under tests/in-cluster.sh")
                .into()
        });
        let kubeconfig = std::fs::canonicalize(&kubeconfig).expect("KUBECONFIG file");
        let mut namespaces = vec![ns.to_owned()];
        namespaces.extend(options.namespaces.iter().filter(|n| *n != ns).cloned());
        let mut args = vec![
            "--global.checkNewVersion=false".to_owned(),
            "--global.sendAnonymousUsage=false".to_owned(),
            format!("--log.level={}", options.log_level),
            "--log.noColor=true".to_owned(),
            format!("--entryPoints.web.address={web}"),
            "--entryPoints.web.transport.lifeCycle.graceTimeOut=1s".to_owned(),
            format!(
                "--providers.providersThrottleDuration={}ms",
                options.throttle.as_millis()
            ),
            "--providers.kubernetesGateway=true".to_owned(),
            format!("--providers.kubernetesGateway.labelSelector={CLASS_LABEL}={id}"),
        ];
        if !options.all_namespaces {
            args.push(format!(
                "--providers.kubernetesGateway.namespaces={}",
                namespaces.join(",")
            ));
        }
        if !options.addr.is_unspecified() {
            args.push(format!(
                "--providers.kubernetesGateway.statusAddress.ip={}",
                options.addr
            ));
        }
        if options.access_log {
            args.push("--accessLog=true".to_owned());
            args.push(format!("--accessLog.filePath={}.access.log", log.display()));
        }
        args.extend(options.extra_args.iter().cloned());
        let child = command_dying_with_parent(&traefik_bin())
            .args(&args)
            .env_remove("KUBERNETES_SERVICE_HOST")
            .env_remove("KUBERNETES_SERVICE_PORT")
            .env("KUBECONFIG", kubeconfig)
            .stdin(Stdio::null())
            .stdout(file.try_clone().expect("log"))
            .stderr(file)
            .spawn()
            .expect("start traefik");
        let mut traefik = Traefik {
            child,
            client: client.clone(),
            web,
            class_name,
            gateway_name: options.gateway_name.clone(),
            gateway_namespace: ns.to_owned(),
            listener_name: options.listener_name.clone(),
            log,
            options,
        };
        traefik.wait_up().await;
        traefik
    }

    async fn wait_up(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(60);
        let http = self.http();
        let probe = Request::new("traefik-probe.invalid");
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!(
                    "traefik exited ({status}); log {}:\n{}",
                    self.log.display(),
                    tail(&self.log, 30)
                );
            }
            let answering = http.get(&probe).await.is_ok();
            if answering && self.gateway_programmed().await {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "traefik not up (answering: {answering}) after 60s; log {}:\n{}",
                self.log.display(),
                tail(&self.log, 30)
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Whether the Gateway reads `Programmed=True`.
    pub async fn gateway_programmed(&self) -> bool {
        has_condition(&self.gateway_conditions().await, "Programmed", "True")
    }

    pub async fn gateway_conditions(&self) -> Vec<Condition> {
        let api: Api<DynamicObject> = Api::namespaced_with(
            self.client.clone(),
            &self.gateway_namespace,
            &gateway_resource("Gateway", "gateways"),
        );
        match api.get(&self.gateway_name).await {
            Ok(gw) => conditions(&gw.data["status"]["conditions"]),
            Err(_) => Vec::new(),
        }
    }

    /// The GatewayClass's `status` (conditions, supportedFeatures) as Traefik wrote it.
    pub async fn class_status(&self) -> Value {
        let api: Api<DynamicObject> = Api::all_with(
            self.client.clone(),
            &gateway_resource("GatewayClass", "gatewayclasses"),
        );
        api.get(&self.class_name)
            .await
            .map(|c| c.data["status"].clone())
            .unwrap_or_default()
    }

    /// The GatewayClass `status.supportedFeatures` names, sorted (empty until Traefik wrote them).
    pub async fn supported_features(&self) -> Vec<String> {
        let status = self.class_status().await;
        let mut names: Vec<String> = status["supportedFeatures"]
            .as_array()
            .map(|list| {
                list.iter()
                    .filter_map(|f| f["name"].as_str().or(f.as_str()).map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default();
        names.sort();
        names
    }

    /// The `web` entrypoint's port (= the listener's port).
    pub fn port(&self) -> u16 {
        self.web.port()
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn rss_mib(&self) -> Option<f64> {
        rss_mib(self.pid())
    }

    /// An HTTPRoute `parentRefs` entry for this Gateway's listener.
    pub fn parent_ref(&self) -> Value {
        json!({"group": GATEWAY_GROUP, "kind": "Gateway", "name": self.gateway_name,
               "namespace": self.gateway_namespace, "sectionName": self.listener_name})
    }

    /// A client for requests through this gateway.
    pub fn http(&self) -> Http {
        Http::new(self.web)
    }

    /// The last `lines` lines of Traefik's log.
    pub fn log_tail(&self, lines: usize) -> String {
        tail(&self.log, lines)
    }

    /// SIGTERM (Traefik drains for up to 1 s) and waits; SIGKILL after 10 s.
    pub fn stop(&mut self) {
        terminate(&mut self.child, Duration::from_secs(10));
    }
}

impl Drop for Traefik {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

// ---------------------------------------------------------------------------------------------
// Backend pods

/// Where a chain backend sends its own request: `GET path` with `Host: host` to the gateway.
#[derive(Clone, Debug, serde::Serialize)]
pub struct NextHop {
    pub gateway: String,
    pub host: String,
    pub path: String,
}

impl NextHop {
    pub fn new(gateway: SocketAddr, host: &str, path: &str) -> NextHop {
        NextHop {
            gateway: gateway.to_string(),
            host: host.to_owned(),
            path: path.to_owned(),
        }
    }
}

/// One backend pod: an HTTP server on `ip:port` (port 0: any free port) and, when deployed, a
/// Pod `name` labelled `app` (+ `laneway.io/lane`, + `labels`) with container port `http`.
#[derive(Clone, Debug)]
pub struct Backend {
    pub name: String,
    pub app: String,
    pub lane: Option<String>,
    pub labels: BTreeMap<String, String>,
    pub ip: String,
    pub port: u16,
    pub next: Option<NextHop>,
    /// Incoming headers copied to the next hop's request (default: [`LANE_HEADER`]).
    pub forward: Vec<String>,
    /// Status of every answer (default 200); a failing next hop's status wins.
    pub status: u16,
    /// Delay before answering.
    pub delay: Duration,
}

impl Backend {
    pub fn new(name: &str, app: &str, ip: &str) -> Backend {
        Backend {
            name: name.to_owned(),
            app: app.to_owned(),
            lane: None,
            labels: BTreeMap::new(),
            ip: ip.to_owned(),
            port: 0,
            next: None,
            forward: vec![LANE_HEADER.to_owned()],
            status: 200,
            delay: Duration::ZERO,
        }
    }

    pub fn lane(mut self, lane: &str) -> Backend {
        self.lane = Some(lane.to_owned());
        self
    }

    pub fn label(mut self, key: &str, value: &str) -> Backend {
        self.labels.insert(key.to_owned(), value.to_owned());
        self
    }

    pub fn port(mut self, port: u16) -> Backend {
        self.port = port;
        self
    }

    /// Chain mode: call `host` + `path` through `gateway` for every request.
    pub fn next(mut self, gateway: SocketAddr, host: &str, path: &str) -> Backend {
        self.next = Some(NextHop::new(gateway, host, path));
        self
    }

    pub fn forward(mut self, headers: &[&str]) -> Backend {
        self.forward = headers.iter().map(|h| h.to_string()).collect();
        self
    }

    pub fn status(mut self, status: u16) -> Backend {
        self.status = status;
        self
    }

    pub fn delay(mut self, delay: Duration) -> Backend {
        self.delay = delay;
        self
    }

    fn spec(&self) -> Value {
        json!({"name": self.name, "ip": self.ip, "port": self.port, "next": self.next,
               "forward": self.forward, "status": self.status,
               "delay_ms": self.delay.as_secs_f64() * 1000.0})
    }
}

/// The Python process (tests/gateway/backends.py) serving every backend pod of a test. Commands
/// go over its stdin; it exits when dropped (stdin closed, then killed).
pub struct Backends {
    child: Mutex<Child>,
    stdin: Mutex<Option<ChildStdin>>,
    replies: tokio::sync::Mutex<tokio::sync::mpsc::UnboundedReceiver<Value>>,
    seq: AtomicU64,
    addrs: Mutex<BTreeMap<String, SocketAddr>>,
    /// Its stderr.
    pub log: PathBuf,
}

impl Backends {
    pub fn start() -> Backends {
        static SEQ: AtomicU64 = AtomicU64::new(0);
        let log = log_dir().join(format!(
            "backends-{}-{}.log",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::SeqCst)
        ));
        let mut child = command_dying_with_parent(Path::new("python3"))
            .arg("-u")
            .arg(repo().join("tests/gateway/backends.py"))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&log).expect("backends log"))
            .spawn()
            .expect("start python3 tests/gateway/backends.py");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let Ok(value) = serde_json::from_str::<Value>(&line) else {
                    continue;
                };
                if tx.send(value).is_err() {
                    break;
                }
            }
        });
        Backends {
            stdin: Mutex::new(child.stdin.take()),
            child: Mutex::new(child),
            replies: tokio::sync::Mutex::new(rx),
            seq: AtomicU64::new(0),
            addrs: Mutex::new(BTreeMap::new()),
            log,
        }
    }

    /// Sends one command and waits for its reply (commands run one at a time).
    async fn command(&self, mut cmd: Value) -> Result<Value, String> {
        let mut replies = self.replies.lock().await;
        let id = self.seq.fetch_add(1, Ordering::SeqCst);
        cmd["id"] = json!(id);
        {
            let mut stdin = self.stdin.lock().unwrap();
            let stdin = stdin.as_mut().expect("backends stopped");
            writeln!(stdin, "{cmd}")
                .and_then(|_| stdin.flush())
                .map_err(|e| format!("backends.py is gone ({e}); its log:\n{}", tail(&self.log, 20)))?;
        }
        let deadline = Instant::now() + TIMEOUT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match tokio::time::timeout(left, replies.recv()).await {
                Ok(Some(reply)) if reply["id"] == json!(id) => {
                    return if reply["ok"] == json!(true) {
                        Ok(reply)
                    } else {
                        Err(reply["error"].as_str().unwrap_or("failed").to_owned())
                    };
                }
                Ok(Some(_)) => continue,
                Ok(None) => return Err(format!("backends.py exited; its log:\n{}", tail(&self.log, 20))),
                Err(_) => return Err(format!("no reply to {cmd} within {TIMEOUT:?}")),
            }
        }
    }

    /// Starts serving `backend`; returns the address it listens on.
    pub async fn add(&self, backend: &Backend) -> SocketAddr {
        let mut cmd = backend.spec();
        cmd["cmd"] = json!("add");
        let reply = self
            .command(cmd)
            .await
            .unwrap_or_else(|e| panic!("add backend {}: {e}", backend.name));
        let port = reply["port"].as_u64().expect("port") as u16;
        let addr = SocketAddr::new(backend.ip.parse().expect("backend IP"), port);
        self.addrs.lock().unwrap().insert(backend.name.clone(), addr);
        addr
    }

    /// Changes a running backend's behaviour (next hop, forwarded headers, status, delay).
    pub async fn update(&self, backend: &Backend) {
        let mut cmd = backend.spec();
        cmd["cmd"] = json!("set");
        self.command(cmd)
            .await
            .unwrap_or_else(|e| panic!("update backend {}: {e}", backend.name));
    }

    /// Stops a backend as a pod shuts down gracefully: stops listening, closes idle keep-alive
    /// connections, lets in-flight requests finish (with `Connection: close`). Returns how many
    /// requests it served.
    pub async fn remove(&self, name: &str) -> u64 {
        self.stop_pod(name, true).await
    }

    /// Stops a backend as a crash would: every connection is reset.
    pub async fn kill(&self, name: &str) -> u64 {
        self.stop_pod(name, false).await
    }

    async fn stop_pod(&self, name: &str, graceful: bool) -> u64 {
        let reply = self
            .command(json!({"cmd": "remove", "name": name, "graceful": graceful}))
            .await
            .unwrap_or_else(|e| panic!("remove backend {name}: {e}"));
        self.addrs.lock().unwrap().remove(name);
        reply["requests"].as_u64().unwrap_or_default()
    }

    /// Requests served so far, per running backend.
    pub async fn requests(&self) -> BTreeMap<String, u64> {
        let reply = self.command(json!({"cmd": "stats"})).await.expect("stats");
        serde_json::from_value(reply["requests"].clone()).expect("stats JSON")
    }

    pub fn pid(&self) -> u32 {
        self.child.lock().unwrap().id()
    }

    pub fn rss_mib(&self) -> Option<f64> {
        rss_mib(self.pid())
    }

    /// The address a running backend listens on.
    pub fn addr(&self, name: &str) -> Option<SocketAddr> {
        self.addrs.lock().unwrap().get(name).copied()
    }

    /// Serves `backend` and creates its Pod, Running and Ready at its IP (as a kubelet would).
    pub async fn deploy(&self, client: &Client, ns: &str, backend: &Backend) -> SocketAddr {
        let addr = self.add(backend).await;
        create_pod(client, ns, backend, addr.port()).await;
        set_pod_status(client, ns, &backend.name, &backend.ip, true).await;
        addr
    }

    /// Deletes the Pod at once and stops the backend gracefully.
    pub async fn undeploy(&self, client: &Client, ns: &str, name: &str) {
        delete_pod(client, ns, name, Some(0)).await;
        self.remove(name).await;
    }

    /// Ends the process (closing stdin; killed if it has not exited within 2 s).
    pub fn stop(&self) {
        self.stdin.lock().unwrap().take();
        wait_or_kill(&mut self.child.lock().unwrap(), Duration::from_secs(2));
    }
}

impl Drop for Backends {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Creates the Pod of `backend` (not yet with a status): labels `app`, `laneway.io/lane` when in
/// a lane, its extra labels; node `node-1`; one container with port `http` = `port`.
pub async fn create_pod(client: &Client, ns: &str, backend: &Backend, port: u16) {
    let mut labels = backend.labels.clone();
    labels.insert("app".into(), backend.app.clone());
    if let Some(lane) = &backend.lane {
        labels.insert("laneway.io/lane".into(), lane.clone());
    }
    let pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": backend.name, "labels": labels},
        "spec": {"nodeName": "node-1", "containers": [{"name": "app", "image": "example/app:1",
            "ports": [{"name": "http", "containerPort": port, "protocol": "TCP"}]}]}
    });
    Api::<Pod>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &serde_json::from_value(pod).expect("pod"))
        .await
        .unwrap_or_else(|e| panic!("create pod {}: {e}", backend.name));
}

/// Reports a pod Running at `ip`, Ready or not, through the status subresource (as a kubelet).
pub async fn set_pod_status(client: &Client, ns: &str, name: &str, ip: &str, ready: bool) {
    let status = json!({"status": {"phase": "Running", "podIP": ip, "podIPs": [{"ip": ip}],
        "conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }}]}});
    Api::<Pod>::namespaced(client.clone(), ns)
        .patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
        .await
        .unwrap_or_else(|e| panic!("status of pod {name}: {e}"));
}

/// Deletes a pod. `Some(0)`: gone at once (the kubelet confirmed); otherwise it stays
/// terminating (deletionTimestamp set), since no kubelet confirms it.
pub async fn delete_pod(client: &Client, ns: &str, name: &str, grace_seconds: Option<i64>) {
    let dp = DeleteParams {
        grace_period_seconds: grace_seconds.map(|g| g as u32),
        ..Default::default()
    };
    let _ = Api::<Pod>::namespaced(client.clone(), ns).delete(name, &dp).await;
}

/// (phase, podIP, Ready) of a pod as the API server holds it.
pub async fn pod_status(client: &Client, ns: &str, name: &str) -> Option<(String, String, bool)> {
    let pod = Api::<Pod>::namespaced(client.clone(), ns).get(name).await.ok()?;
    let status = pod.status?;
    let ready = status
        .conditions
        .unwrap_or_default()
        .iter()
        .any(|c| c.type_ == "Ready" && c.status == "True");
    Some((
        status.phase.unwrap_or_default(),
        status.pod_ip.unwrap_or_default(),
        ready,
    ))
}

// ---------------------------------------------------------------------------------------------
// Requests through the gateway

/// A request through the gateway: `GET path` with `Host: host` and extra headers.
#[derive(Clone, Debug)]
pub struct Request {
    pub host: String,
    pub path: String,
    pub headers: Vec<(String, String)>,
}

impl Request {
    pub fn new(host: &str) -> Request {
        Request {
            host: host.to_owned(),
            path: "/".to_owned(),
            headers: Vec::new(),
        }
    }

    pub fn path(mut self, path: &str) -> Request {
        self.path = path.to_owned();
        self
    }

    pub fn header(mut self, name: &str, value: &str) -> Request {
        self.headers.push((name.to_owned(), value.to_owned()));
        self
    }

    /// With the lane header ([`LANE_HEADER`]).
    pub fn lane(self, lane: &str) -> Request {
        self.header(LANE_HEADER, lane)
    }
}

/// A backend's JSON answer.
#[derive(Clone, Debug, serde::Deserialize)]
pub struct Answer {
    pub pod: String,
    #[serde(default)]
    pub path: String,
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    #[serde(default)]
    pub chain: Vec<String>,
    /// Set when a next hop failed.
    #[serde(default)]
    pub error: Option<String>,
    /// The next hop's answer (its body as a string when it was not JSON, e.g. Traefik's 503).
    #[serde(default)]
    pub downstream: Option<Value>,
}

impl Answer {
    /// This answer and each downstream answer, first hop first: `hops()[i].headers` are the
    /// headers hop `i` received.
    pub fn hops(&self) -> Vec<Answer> {
        let mut hops = vec![self.clone()];
        while let Some(next) = hops
            .last()
            .and_then(|a| a.downstream.clone())
            .and_then(|d| serde_json::from_value::<Answer>(d).ok())
        {
            hops.push(next);
        }
        hops
    }
}

#[derive(Clone, Debug)]
pub struct Response {
    pub status: u16,
    /// The `Set-Cookie` headers of the answer.
    pub set_cookies: Vec<String>,
    pub body: String,
    /// The backend's answer; None when the body is not one (e.g. Traefik's own 404/500/503).
    pub answer: Option<Answer>,
    pub latency: Duration,
}

impl Response {
    /// The pods that served each hop (empty when no backend answered).
    pub fn chain(&self) -> Vec<String> {
        self.answer.as_ref().map(|a| a.chain.clone()).unwrap_or_default()
    }

    pub fn first_hop(&self) -> Option<&str> {
        self.answer.as_ref().map(|a| a.pod.as_str())
    }

    pub fn ok(&self) -> bool {
        (200..300).contains(&self.status)
    }
}

/// Counts of many requests.
#[derive(Clone, Debug, Default)]
pub struct Tally {
    /// Requests per pod that answered the first hop (any status).
    pub by_first_hop: BTreeMap<String, usize>,
    /// Per hop (index 0 = first), requests per pod.
    pub by_hop: Vec<BTreeMap<String, usize>>,
    /// One chain per request in completion order (empty when no backend answered).
    pub chains: Vec<Vec<String>>,
    /// HTTP statuses; requests that got no HTTP answer are counted in `errors`.
    pub statuses: BTreeMap<u16, usize>,
    pub errors: usize,
    /// The first few failures (non-2xx or transport errors), for assertion messages.
    pub samples: Vec<String>,
    pub elapsed: Duration,
}

impl Tally {
    fn record(&mut self, result: &Result<Response, String>) {
        match result {
            Ok(r) => {
                *self.statuses.entry(r.status).or_default() += 1;
                let chain = r.chain();
                for (i, pod) in chain.iter().enumerate() {
                    if self.by_hop.len() <= i {
                        self.by_hop.push(BTreeMap::new());
                    }
                    *self.by_hop[i].entry(pod.clone()).or_default() += 1;
                }
                if let Some(first) = chain.first() {
                    *self.by_first_hop.entry(first.clone()).or_default() += 1;
                }
                if !r.ok() && self.samples.len() < 10 {
                    self.samples
                        .push(format!("{}: {}", r.status, truncate(&r.body, 300)));
                }
                self.chains.push(chain);
            }
            Err(e) => {
                self.errors += 1;
                if self.samples.len() < 10 {
                    self.samples.push(e.clone());
                }
                self.chains.push(Vec::new());
            }
        }
    }

    pub fn total(&self) -> usize {
        self.statuses.values().sum::<usize>() + self.errors
    }

    /// Requests answered 2xx.
    pub fn ok(&self) -> usize {
        self.statuses
            .iter()
            .filter(|(s, _)| (200..300).contains(*s))
            .map(|(_, n)| n)
            .sum()
    }

    /// Requests served first by `pod`.
    pub fn first_hop(&self, pod: &str) -> usize {
        self.by_first_hop.get(pod).copied().unwrap_or_default()
    }

    /// Distinct chains and how often each occurred.
    pub fn chain_counts(&self) -> BTreeMap<Vec<String>, usize> {
        let mut counts = BTreeMap::new();
        for chain in &self.chains {
            *counts.entry(chain.clone()).or_default() += 1;
        }
        counts
    }
}

fn truncate(s: &str, max: usize) -> String {
    match s.char_indices().nth(max) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s.to_owned(),
    }
}

/// An HTTP client for one gateway address (keep-alive connections, no proxy, 10 s timeout).
/// Create one per test: its connections belong to the test's runtime.
#[derive(Clone)]
pub struct Http {
    client: reqwest::Client,
    pub web: SocketAddr,
}

/// One request seen by a [`Watch`].
#[derive(Clone, Debug)]
pub struct Hit {
    /// Since the watch started.
    pub at: Duration,
    /// None: no HTTP answer (see `error`).
    pub status: Option<u16>,
    pub chain: Vec<String>,
    pub latency: Duration,
    pub error: Option<String>,
}

#[derive(Clone, Debug, Default)]
pub struct WatchReport {
    /// Every request, in completion order.
    pub hits: Vec<Hit>,
    pub tally: Tally,
}

impl WatchReport {
    /// Every request that was not answered 2xx, with its time since the watch started.
    pub fn failures(&self) -> Vec<&Hit> {
        self.hits
            .iter()
            .filter(|h| !h.status.is_some_and(|s| (200..300).contains(&s)))
            .collect()
    }

    /// When `pod` first served the first hop at or after `since` (since the watch started).
    pub fn first_served_by(&self, pod: &str, since: Duration) -> Option<Duration> {
        self.hits
            .iter()
            .find(|h| h.at >= since && h.chain.first().map(String::as_str) == Some(pod))
            .map(|h| h.at)
    }

    /// When `pod` last served the first hop.
    pub fn last_served_by(&self, pod: &str) -> Option<Duration> {
        self.hits
            .iter()
            .rev()
            .find(|h| h.chain.first().map(String::as_str) == Some(pod))
            .map(|h| h.at)
    }

    /// How many of the latest requests in a row were not served first by `pod` (in completion
    /// order, across all workers).
    pub fn streak_without(&self, pod: &str) -> usize {
        self.hits
            .iter()
            .rev()
            .take_while(|h| h.chain.first().map(String::as_str) != Some(pod))
            .count()
    }

    /// Whether every request over the last `span`, all of them after `since`, was answered 200
    /// and passes `good`.
    pub fn good_for(&self, span: Duration, since: Duration, good: impl Fn(&Hit) -> bool) -> bool {
        let Some(last) = self.hits.last() else {
            return false;
        };
        last.at >= since + span
            && self
                .hits
                .iter()
                .rev()
                .take_while(|h| h.at + span >= last.at)
                .all(|h| h.status == Some(200) && good(h))
    }

    /// Panics listing the failures, if any.
    pub fn assert_no_failures(&self, what: &str) {
        let failures = self.failures();
        assert!(
            failures.is_empty(),
            "{what}: {} of {} requests failed; first ones: {:#?}",
            failures.len(),
            self.hits.len(),
            &failures[..failures.len().min(10)]
        );
    }
}

/// Requests sent in the background until stopped, each failure recorded with its time.
pub struct Watch {
    stop: Arc<AtomicBool>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    report: Arc<Mutex<WatchReport>>,
    pub started: Instant,
}

impl Watch {
    /// Time since the watch started (to compare with [`Hit::at`]).
    pub fn now(&self) -> Duration {
        self.started.elapsed()
    }

    /// What has been seen so far.
    pub fn snapshot(&self) -> WatchReport {
        self.report.lock().unwrap().clone()
    }

    /// Waits (polling every 20 ms, at most `timeout`) until `check` holds for what has been seen.
    pub async fn wait_until<F>(&self, what: &str, timeout: Duration, check: F) -> WatchReport
    where
        F: Fn(&WatchReport) -> bool,
    {
        let deadline = Instant::now() + timeout;
        loop {
            let report = self.snapshot();
            if check(&report) {
                return report;
            }
            assert!(
                Instant::now() < deadline,
                "timed out after {timeout:?} waiting for: {what}; {} requests, {:?}",
                report.hits.len(),
                report.tally.statuses
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Stops sending, waits for requests in flight, and returns everything seen.
    pub async fn stop(mut self) -> WatchReport {
        self.stop.store(true, Ordering::SeqCst);
        for task in self.tasks.drain(..) {
            let _ = task.await;
        }
        self.report.lock().unwrap().clone()
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

impl Http {
    pub fn new(web: SocketAddr) -> Http {
        let client = reqwest::Client::builder()
            .no_proxy()
            .timeout(Duration::from_secs(10))
            .pool_idle_timeout(Duration::from_secs(30))
            .tcp_nodelay(true)
            .build()
            .expect("HTTP client");
        Http { client, web }
    }

    /// One request. Err: no HTTP answer (connection refused or reset, timeout).
    pub async fn get(&self, req: &Request) -> Result<Response, String> {
        let start = Instant::now();
        let mut builder = self
            .client
            .get(format!("http://{}{}", self.web, req.path))
            .header(reqwest::header::HOST, &req.host);
        for (name, value) in &req.headers {
            builder = builder.header(name, value);
        }
        let response = builder.send().await.map_err(|e| format!("{e:?}"))?;
        let status = response.status().as_u16();
        let set_cookies = response
            .headers()
            .get_all(reqwest::header::SET_COOKIE)
            .iter()
            .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
            .collect();
        let body = response
            .text()
            .await
            .map_err(|e| format!("reading body: {e:?}"))?;
        let answer = serde_json::from_str(&body).ok();
        Ok(Response {
            status,
            set_cookies,
            body,
            answer,
            latency: start.elapsed(),
        })
    }

    /// `n` requests, `concurrency` at a time, tallied.
    pub async fn load(&self, req: &Request, n: usize, concurrency: usize) -> Tally {
        let start = Instant::now();
        let next = AtomicUsize::new(0);
        let workers = (0..concurrency.max(1)).map(|_| async {
            let mut results = Vec::new();
            while next.fetch_add(1, Ordering::SeqCst) < n {
                results.push(self.get(req).await);
            }
            results
        });
        let mut tally = Tally::default();
        for results in futures::future::join_all(workers).await {
            for result in &results {
                tally.record(result);
            }
        }
        tally.elapsed = start.elapsed();
        tally
    }

    /// Sends `req` until `check` accepts an answer (every 5 ms, at most 30 s); returns that
    /// answer and the time it took.
    pub async fn wait_for<F>(&self, what: &str, req: &Request, check: F) -> (Response, Duration)
    where
        F: Fn(&Response) -> bool,
    {
        self.wait_for_within(what, req, TIMEOUT, check).await
    }

    pub async fn wait_for_within<F>(
        &self,
        what: &str,
        req: &Request,
        timeout: Duration,
        check: F,
    ) -> (Response, Duration)
    where
        F: Fn(&Response) -> bool,
    {
        let start = Instant::now();
        loop {
            let last = match self.get(req).await {
                Ok(r) if check(&r) => return (r, start.elapsed()),
                other => other,
            };
            assert!(
                start.elapsed() < timeout,
                "timed out after {timeout:?} waiting for: {what}; last answer: {last:?}"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// Sends `req` in the background with `workers` concurrent senders, each pausing `pause`
    /// between requests (10 ms gives ~80 requests/s per worker through a 3-hop chain), until
    /// [`Watch::stop`]. Needs a Tokio runtime; the test must await (not block) meanwhile.
    pub fn watch(&self, req: &Request, workers: usize, pause: Duration) -> Watch {
        let stop = Arc::new(AtomicBool::new(false));
        let report = Arc::new(Mutex::new(WatchReport::default()));
        let started = Instant::now();
        let tasks = (0..workers.max(1))
            .map(|_| {
                let (http, req, stop, report) = (self.clone(), req.clone(), stop.clone(), report.clone());
                tokio::spawn(async move {
                    while !stop.load(Ordering::SeqCst) {
                        let result = http.get(&req).await;
                        let hit = match &result {
                            Ok(r) => Hit {
                                at: started.elapsed(),
                                status: Some(r.status),
                                chain: r.chain(),
                                latency: r.latency,
                                error: (!r.ok()).then(|| truncate(&r.body, 300)),
                            },
                            Err(e) => Hit {
                                at: started.elapsed(),
                                status: None,
                                chain: Vec::new(),
                                latency: Duration::ZERO,
                                error: Some(e.clone()),
                            },
                        };
                        {
                            let mut report = report.lock().unwrap();
                            report.tally.record(&result);
                            report.hits.push(hit);
                        }
                        tokio::time::sleep(pause).await;
                    }
                })
            })
            .collect();
        Watch {
            stop,
            tasks,
            report,
            started,
        }
    }
}
