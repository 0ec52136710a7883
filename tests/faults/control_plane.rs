//! A private `envtest` control plane (etcd + kube-apiserver) with an audit log of every write
//! and one bearer-token identity per replica.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::Client;

use super::audit;

/// The replica identities every control plane knows (each in group `system:masters`).
pub const REPLICAS: [&str; 3] = ["laneway-a", "laneway-b", "laneway-c"];
/// The identity a test uses for its own reads and setup, so they stand apart in the audit log.
pub const CHECKER: &str = "checker";
/// The admin user envtest writes its kubeconfig for.
pub const ADMIN: &str = "envtest-admin";

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

/// A running (or stopped) `envtest` in its own directory. Dropping it kills the process and,
/// unless the test is failing or `LANEWAY_FAULTS_KEEP` is set, removes the directory.
pub struct ControlPlane {
    dir: PathBuf,
    bin: PathBuf,
    extra_args: Vec<String>,
    tokens: BTreeMap<String, String>,
    child: Option<Child>,
    port: Option<u16>,
    server: String,
    kubeconfig: PathBuf,
    pid: u32,
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
        let dir = fresh_dir();
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
            csv.push_str(&format!("{token},{id},{id},\"system:masters\"\n"));
            tokens.insert(id.to_string(), token);
        }
        write_private(&dir.join("pki").join("tokens.csv"), &csv);
        std::fs::write(dir.join("audit-policy.yaml"), AUDIT_POLICY).expect("audit policy");
        let mut cp = ControlPlane {
            dir,
            bin: envtest_bin(),
            extra_args: extra_args.iter().map(|s| s.to_string()).collect(),
            tokens,
            child: None,
            port: None,
            server: String::new(),
            kubeconfig: PathBuf::new(),
            pid: 0,
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

    /// The API server's address, for a [`super::Proxy`] upstream.
    pub fn addr(&self) -> SocketAddr {
        let host = self.server.trim_start_matches("https://");
        host.parse().unwrap_or_else(|e| panic!("{host}: {e}"))
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

    /// Every complete record of the audit log so far.
    pub fn audit(&self) -> Vec<audit::Record> {
        audit::read(&self.audit_log_path()).expect("audit log")
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
        if std::thread::panicking() || std::env::var_os("LANEWAY_FAULTS_KEEP").is_some() {
            eprintln!("faults: control plane kept in {}", self.dir.display());
        } else {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

pub async fn client_from(kubeconfig: &Path) -> Client {
    let kc = Kubeconfig::read_from(kubeconfig).expect("read kubeconfig");
    let config = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .expect("kubeconfig");
    Client::try_from(config).expect("client")
}

fn terminate(child: &mut Child, timeout: Duration) {
    let _ = Command::new("kill")
        .arg("-TERM")
        .arg(child.id().to_string())
        .status();
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    let _ = child.wait();
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
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/envtest/build.sh");
    let out = Command::new(&script)
        .stderr(Stdio::inherit())
        .output()
        .unwrap_or_else(|e| panic!("no envtest on PATH and {} failed: {e}", script.display()));
    assert!(
        out.status.success(),
        "no envtest on PATH (eval \"$(tests/envtest/start.sh)\" puts it there) and {} failed",
        script.display()
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    PathBuf::from(stdout.lines().last().unwrap_or_default().trim()).join("envtest")
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

fn tail(path: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}
