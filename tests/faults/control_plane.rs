//! A private `envtest` control plane (etcd + kube-apiserver) with one bearer-token identity per
//! client and an audit log: of every write for the fault tests, of every request of the
//! controllers under test for the cluster benchmark.
//!
//! Needs no module but the crate's `cluster` (tests/cluster), so that benches/cluster.rs can
//! include it with `#[path]` as well.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::time::Duration;

use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::Client;

use crate::cluster::process::{tail, terminate};

/// The replica identities every control plane knows (each in group `system:masters`).
pub const REPLICAS: [&str; 3] = ["laneway-a", "laneway-b", "laneway-c"];
/// The identity a test uses for its own reads and setup, so they stand apart in the audit log.
pub const CHECKER: &str = "checker";
/// The admin user envtest writes its kubeconfig for.
pub const ADMIN: &str = "envtest-admin";
/// The group of identities started outside `system:masters` ([`ControlPlane::start_throttlable`]):
/// bound to `cluster-admin`, and matched by no FlowSchema that exempts them from API Priority
/// and Fairness.
pub const THROTTLABLE_GROUP: &str = "laneway:throttlable";

const READY_TIMEOUT: Duration = Duration::from_secs(120);
const STOP_TIMEOUT: Duration = Duration::from_secs(30);

/// Which requests the audit log records: every write (the lease writes with their body, so that
/// the holder they set is known), once, when the response is complete; no reads.
pub const AUDIT_POLICY: &str = "\
apiVersion: audit.k8s.io/v1
kind: Policy
# One event per request, when its response is complete (Panic is kept: a request whose handler
# panicked gets no ResponseComplete event).
omitStages: [RequestReceived, ResponseStarted]
omitManagedFields: true
rules:
  - level: Request
    verbs: [create, update, patch]
    resources: [{group: coordination.k8s.io, resources: [leases]}]
  - level: Metadata
    verbs: [create, update, patch, delete, deletecollection]
  - level: None
";

/// An audit policy recording every request of `users`, once, when it completes, and nothing
/// else, so that other clients (a benchmark's driver) cost the API server no audit work. A
/// watch is recorded when it ends, with the time it was opened.
pub fn audit_requests_of(users: &[&str]) -> String {
    format!(
        "apiVersion: audit.k8s.io/v1\n\
         kind: Policy\n\
         omitStages: [RequestReceived, ResponseStarted]\n\
         omitManagedFields: true\n\
         rules:\n  \
         - level: Metadata\n    users: [{}]\n  \
         - level: None\n",
        users.join(", ")
    )
}

/// A running (or stopped) `envtest` in its own directory. Dropping it kills the process and,
/// unless the test is failing or `LANEWAY_FAULTS_KEEP` is set, removes the directory (the one
/// given to [`ControlPlane::start_in`] always stays).
pub struct ControlPlane {
    dir: PathBuf,
    keep: bool,
    bin: PathBuf,
    extra_args: Vec<String>,
    tokens: BTreeMap<String, String>,
    child: Option<Child>,
    port: Option<u16>,
    server: String,
    kubeconfig: PathBuf,
    pid: u32,
    /// The embedded etcd's client URL (`http://127.0.0.1:<port>`; empty with another etcd).
    etcd: String,
}

impl ControlPlane {
    /// Starts a control plane in a fresh directory with the default identities
    /// ([`REPLICAS`] and [`CHECKER`]).
    pub async fn start() -> ControlPlane {
        let identities: Vec<&str> = REPLICAS.iter().copied().chain([CHECKER]).collect();
        Self::start_with(&identities, &[]).await
    }

    /// Starts a control plane knowing `identities`, passing `extra_args` to envtest (any
    /// kube-apiserver flag; a flag given here replaces envtest's default).
    pub async fn start_with(identities: &[&str], extra_args: &[&str]) -> ControlPlane {
        Self::launch(fresh_dir(), false, (identities, &[]), AUDIT_POLICY, extra_args).await
    }

    /// As [`ControlPlane::start_with`], but the identities in `throttlable` are in
    /// [`THROTTLABLE_GROUP`], bound to `cluster-admin`, instead of `system:masters` (whose
    /// requests API Priority and Fairness always exempts).
    pub async fn start_throttlable(
        identities: &[&str],
        throttlable: &[&str],
        extra_args: &[&str],
    ) -> ControlPlane {
        let cp = Self::launch(
            fresh_dir(),
            false,
            (identities, throttlable),
            AUDIT_POLICY,
            extra_args,
        )
        .await;
        let binding = serde_json::json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": {"name": "laneway-throttlable"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": THROTTLABLE_GROUP}],
        });
        let binding = serde_json::from_value(binding).expect("binding");
        kube::Api::<k8s_openapi::api::rbac::v1::ClusterRoleBinding>::all(cp.admin_client().await)
            .create(&Default::default(), &binding)
            .await
            .expect("bind the throttlable identities to cluster-admin");
        cp
    }

    /// Starts a control plane in `dir` (emptied first, kept after), knowing `identities`, its
    /// audit log recording what `audit_policy` says.
    pub async fn start_in(dir: &Path, identities: &[&str], audit_policy: &str) -> ControlPlane {
        let _ = std::fs::remove_dir_all(dir);
        Self::launch(dir.to_owned(), true, (identities, &[]), audit_policy, &[]).await
    }

    async fn launch(
        dir: PathBuf,
        keep: bool,
        (identities, throttlable): (&[&str], &[&str]),
        audit_policy: &str,
        extra_args: &[&str],
    ) -> ControlPlane {
        std::fs::create_dir_all(dir.join("pki")).expect("control plane dir");
        let mut tokens = BTreeMap::new();
        // envtest takes the admin token from the first line of pki/tokens.csv (and creates the
        // file only when it is missing); kube-apiserver's --token-auth-file reads every line.
        let mut csv = format!("{},{ADMIN},{ADMIN},\"system:masters\"\n", random_hex(24));
        for id in identities {
            assert!(
                !id.contains([',', '"', '\n']) && *id != ADMIN,
                "bad identity {id:?}"
            );
            let token = random_hex(24);
            let group = if throttlable.contains(id) {
                THROTTLABLE_GROUP
            } else {
                "system:masters"
            };
            csv.push_str(&format!("{token},{id},{id},\"{group}\"\n"));
            tokens.insert(id.to_string(), token);
        }
        write_private(&dir.join("pki").join("tokens.csv"), &csv);
        std::fs::write(dir.join("audit-policy.yaml"), audit_policy).expect("audit policy");
        let mut cp = ControlPlane {
            dir,
            keep,
            bin: envtest_bin(),
            extra_args: extra_args.iter().map(|s| s.to_string()).collect(),
            tokens,
            child: None,
            port: None,
            server: String::new(),
            kubeconfig: PathBuf::new(),
            pid: 0,
            etcd: String::new(),
        };
        cp.start_again().await;
        cp
    }

    /// Starts envtest again on the same directory (same etcd data, certificates, tokens and
    /// secure port). Does nothing when it is running.
    pub async fn start_again(&mut self) {
        if self.child.is_some() {
            return;
        }
        let mut cmd = Command::new(&self.bin);
        cmd.arg("--dir")
            .arg(&self.dir)
            .arg("--log-file")
            .arg(self.dir.join("envtest.log"))
            .arg("--exit-with-parent")
            .arg("--audit-policy-file")
            .arg(self.dir.join("audit-policy.yaml"))
            .arg("--audit-log-path")
            .arg(self.audit_log_path())
            .args(["--audit-log-format", "json", "--audit-log-mode", "blocking"])
            // No rotation: maxsize 0 never rotates (and maxbackup/maxage are then moot).
            .args(["--audit-log-maxsize", "0"]);
        if let Some(port) = self.port {
            cmd.arg("--secure-port").arg(port.to_string());
        }
        cmd.args(&self.extra_args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        let mut child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("starting {}: {e}", self.bin.display()));
        let stdout = child.stdout.take().expect("stdout");
        let (tx, rx) = mpsc::channel::<String>();
        // Drains stdout for the life of the process; the ready line goes to the channel.
        std::thread::spawn(move || {
            let mut tx = Some(tx);
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if line.starts_with("envtest ready:") {
                    if let Some(tx) = tx.take() {
                        let _ = tx.send(line);
                    }
                }
            }
        });
        let log = self.dir.join("envtest.log");
        let line = tokio::task::spawn_blocking(move || rx.recv_timeout(READY_TIMEOUT))
            .await
            .expect("join");
        let line = match line {
            Ok(line) => line,
            Err(e) => {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "envtest did not become ready ({e:?}); end of {}:\n{}",
                    log.display(),
                    tail(&log, 40)
                );
            }
        };
        let field = |key: &str| -> String {
            line.split_whitespace()
                .find_map(|w| w.strip_prefix(key))
                .unwrap_or_else(|| panic!("no {key} in {line:?}"))
                .to_owned()
        };
        self.server = field("server=");
        self.kubeconfig = PathBuf::from(field("kubeconfig="));
        self.pid = field("pid=").parse().expect("pid");
        // Only an embedded etcd is named.
        self.etcd = line
            .split_whitespace()
            .find_map(|w| w.strip_prefix("etcd="))
            .unwrap_or_default()
            .to_owned();
        let port: u16 = self
            .server
            .rsplit(':')
            .next()
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("no port in {}", self.server));
        if let Some(old) = self.port {
            assert_eq!(old, port, "the secure port changed across a restart");
        }
        self.port = Some(port);
        self.child = Some(child);
    }

    /// SIGTERM, then waits for envtest to stop (SIGKILL after 30s). The data stays.
    pub async fn stop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        tokio::task::spawn_blocking(move || terminate(&mut child, STOP_TIMEOUT))
            .await
            .expect("join");
    }

    /// Stops and starts again on the same directory and port.
    pub async fn restart(&mut self) {
        self.stop().await;
        self.start_again().await;
    }

    /// SIGKILL: a crash of the whole control plane.
    pub async fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// `https://127.0.0.1:<port>`, stable across restarts.
    pub fn server_url(&self) -> &str {
        &self.server
    }

    /// The API server's address, for a proxy's upstream.
    pub fn addr(&self) -> SocketAddr {
        let host = self.server.trim_start_matches("https://");
        host.parse().unwrap_or_else(|e| panic!("{host}: {e}"))
    }

    /// Compacts the embedded etcd at its current revision, through its JSON gateway: a watch
    /// that resumes from an older resource version is answered `410 Gone` (where etcd serves
    /// it, rather than the API server's watch cache). Returns the revision.
    pub async fn compact_etcd(&self) -> i64 {
        let http = reqwest::Client::new();
        let post = |path: &str, body: serde_json::Value| {
            http.post(format!("{}/v3/kv/{path}", self.etcd))
                .json(&body)
                .send()
        };
        let range: serde_json::Value = post("range", serde_json::json!({"key": "AA==", "limit": 1}))
            .await
            .and_then(reqwest::Response::error_for_status)
            .expect("etcd range")
            .json()
            .await
            .expect("etcd range answer");
        let revision: i64 = range["header"]["revision"]
            .as_str()
            .and_then(|r| r.parse().ok())
            .expect("etcd revision");
        post(
            "compaction",
            serde_json::json!({"revision": revision, "physical": true}),
        )
        .await
        .and_then(reqwest::Response::error_for_status)
        .expect("etcd compaction");
        revision
    }

    /// envtest's pid (as it reported it); 0 before the first start.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// The admin kubeconfig envtest wrote (user `envtest-admin`).
    pub fn admin_kubeconfig(&self) -> &Path {
        &self.kubeconfig
    }

    pub fn audit_log_path(&self) -> PathBuf {
        self.dir.join("audit.log")
    }

    pub fn envtest_log_path(&self) -> PathBuf {
        self.dir.join("envtest.log")
    }

    pub fn identities(&self) -> impl Iterator<Item = &str> {
        self.tokens.keys().map(String::as_str)
    }

    pub fn token(&self, identity: &str) -> &str {
        self.tokens
            .get(identity)
            .unwrap_or_else(|| panic!("unknown identity {identity}"))
    }

    /// Writes a kubeconfig for `identity`'s token pointing at `server_url` (for example a
    /// proxy's `https://127.0.0.1:<port>`; the serving certificate is valid for 127.0.0.1),
    /// trusting the control plane's CA. Returns its path.
    pub fn kubeconfig_for(&self, identity: &str, server_url: &str) -> PathBuf {
        let token = self.token(identity);
        let admin = std::fs::read_to_string(&self.kubeconfig).expect("admin kubeconfig");
        let admin: serde_json::Value = serde_saphyr::from_str(&admin).expect("admin kubeconfig YAML");
        let ca = admin["clusters"][0]["cluster"]["certificate-authority-data"]
            .as_str()
            .expect("certificate-authority-data in the admin kubeconfig")
            .to_owned();
        let config = serde_json::json!({
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "envtest", "cluster": {"server": server_url, "certificate-authority-data": ca}}],
            "users": [{"name": identity, "user": {"token": token}}],
            "contexts": [{"name": identity, "context": {"cluster": "envtest", "user": identity, "namespace": "default"}}],
            "current-context": identity,
        });
        let tag: String = server_url
            .trim_start_matches("https://")
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
            .collect();
        let path = self.dir.join(format!("kubeconfig-{identity}-{tag}"));
        write_private(&path, &serde_saphyr::to_string(&config).expect("kubeconfig YAML"));
        path
    }

    /// A client for `identity`, straight to the API server.
    pub async fn client_for(&self, identity: &str) -> Client {
        self.client_via(identity, &self.server.clone()).await
    }

    /// A client for `identity` through `server_url` (a proxy).
    pub async fn client_via(&self, identity: &str, server_url: &str) -> Client {
        client_from(&self.kubeconfig_for(identity, server_url)).await
    }

    /// A client for the admin user, straight to the API server.
    pub async fn admin_client(&self) -> Client {
        client_from(&self.kubeconfig).await
    }
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            terminate(&mut child, Duration::from_secs(5));
        }
        if self.keep {
            return;
        }
        if std::thread::panicking() || std::env::var_os("LANEWAY_FAULTS_KEEP").is_some() {
            eprintln!("faults: control plane kept in {}", self.dir.display());
        } else {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

pub async fn client_from(kubeconfig: &Path) -> Client {
    Client::try_from(config_from(kubeconfig).await).expect("client")
}

pub async fn config_from(kubeconfig: &Path) -> kube::Config {
    let kc = Kubeconfig::read_from(kubeconfig).expect("read kubeconfig");
    kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .expect("kubeconfig")
}

/// Runs a `tests/*/build.sh` (cached by content hash after the first build) and returns the bin
/// directory it prints, or why it could not.
pub fn build_tool(script: &str) -> Result<PathBuf, String> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(script);
    let out = Command::new(&path)
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| format!("{}: {e}", path.display()))?;
    if !out.status.success() {
        return Err(format!("{} failed", path.display()));
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    Ok(PathBuf::from(stdout.lines().last().unwrap_or_default().trim()))
}

/// `$LANEWAY_ENVTEST_BIN` (the binary or its directory), else `envtest` on `PATH`, else what
/// `tests/envtest/build.sh` builds (cached after the first time).
fn envtest_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("LANEWAY_ENVTEST_BIN") {
        let p = PathBuf::from(p);
        return if p.is_dir() { p.join("envtest") } else { p };
    }
    if let Some(path) = std::env::var_os("PATH") {
        for dir in std::env::split_paths(&path) {
            let candidate = dir.join("envtest");
            if candidate.is_file() {
                return candidate;
            }
        }
    }
    build_tool("tests/envtest/build.sh")
        .unwrap_or_else(|e| {
            panic!("no envtest on PATH (eval \"$(tests/envtest/start.sh)\" puts it there) and {e}")
        })
        .join("envtest")
}

fn fresh_dir() -> PathBuf {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let base = Path::new(env!("CARGO_TARGET_TMPDIR")).join("faults");
    base.join(format!("cp-{}-{n}-{}", std::process::id(), &random_hex(3)))
}

fn random_hex(bytes: usize) -> String {
    let mut buf = vec![0u8; bytes];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut buf))
        .expect("/dev/urandom");
    buf.iter().map(|b| format!("{b:02x}")).collect()
}

fn write_private(path: &Path, content: &str) {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    f.write_all(content.as_bytes()).expect("write");
}
