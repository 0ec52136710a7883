//! A private control plane (`tests/envtest`: etcd + kube-apiserver) for one benchmark run, with
//! one bearer-token identity per controller and an audit log of exactly their requests, so that
//! each controller's API traffic is counted by the API server itself, apart from the driver's.

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::Client;

/// The admin user envtest writes its kubeconfig for (the driver; never audited).
const ADMIN: &str = "envtest-admin";

/// Every request of the audited identities, once, when it completes; nothing else, so that the
/// driver's own setup and churn cost the API server no audit work. A watch is recorded when it
/// ends, with the time it was opened.
fn audit_policy(users: &[&str]) -> String {
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

pub struct ControlPlane {
    child: Option<Child>,
    dir: PathBuf,
    pub pid: u32,
    server: String,
    admin_kubeconfig: PathBuf,
    tokens: Vec<(String, String)>,
}

impl ControlPlane {
    /// Starts envtest in `dir` (emptied first), knowing the `identities` (all in
    /// `system:masters`, like the built-in controllers' own credentials in effect).
    pub async fn start(dir: &Path, identities: &[&str]) -> ControlPlane {
        let _ = std::fs::remove_dir_all(dir);
        std::fs::create_dir_all(dir.join("pki")).expect("control plane dir");
        // envtest takes the admin token from the first line of pki/tokens.csv;
        // kube-apiserver's --token-auth-file reads every line.
        let mut csv = format!("{},{ADMIN},{ADMIN},\"system:masters\"\n", random_hex(24));
        let mut tokens = Vec::new();
        for id in identities {
            let token = random_hex(24);
            csv.push_str(&format!("{token},{id},{id},\"system:masters\"\n"));
            tokens.push((id.to_string(), token));
        }
        write_private(&dir.join("pki/tokens.csv"), &csv);
        std::fs::write(dir.join("audit-policy.yaml"), audit_policy(identities)).expect("audit policy");
        let mut child = Command::new(envtest_bin())
            .arg("--dir")
            .arg(dir)
            .arg("--log-file")
            .arg(dir.join("envtest.log"))
            .arg("--exit-with-parent")
            .arg("--audit-policy-file")
            .arg(dir.join("audit-policy.yaml"))
            .arg("--audit-log-path")
            .arg(dir.join("audit.log"))
            .args(["--audit-log-format", "json", "--audit-log-mode", "blocking"])
            .args(["--audit-log-maxsize", "0"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start envtest");
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
        let line = tokio::task::spawn_blocking(move || rx.recv_timeout(Duration::from_secs(120)))
            .await
            .expect("join")
            .unwrap_or_else(|e| panic!("envtest did not become ready ({e:?}); see {}", dir.display()));
        let field = |key: &str| -> String {
            line.split_whitespace()
                .find_map(|w| w.strip_prefix(key))
                .unwrap_or_else(|| panic!("no {key} in {line:?}"))
                .to_owned()
        };
        ControlPlane {
            pid: field("pid=").parse().expect("pid"),
            server: field("server="),
            admin_kubeconfig: PathBuf::from(field("kubeconfig=")),
            child: Some(child),
            dir: dir.to_owned(),
            tokens,
        }
    }

    pub fn audit_log(&self) -> PathBuf {
        self.dir.join("audit.log")
    }

    /// A kubeconfig for `identity`'s token, trusting the control plane's CA.
    pub fn kubeconfig_for(&self, identity: &str) -> PathBuf {
        let token = &self
            .tokens
            .iter()
            .find(|(id, _)| id == identity)
            .unwrap_or_else(|| panic!("unknown identity {identity}"))
            .1;
        let admin = std::fs::read_to_string(&self.admin_kubeconfig).expect("admin kubeconfig");
        let admin: serde_json::Value = serde_saphyr::from_str(&admin).expect("admin kubeconfig YAML");
        let ca = admin["clusters"][0]["cluster"]["certificate-authority-data"]
            .as_str()
            .expect("certificate-authority-data")
            .to_owned();
        let config = serde_json::json!({
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "envtest", "cluster": {"server": self.server, "certificate-authority-data": ca}}],
            "users": [{"name": identity, "user": {"token": token}}],
            "contexts": [{"name": identity, "context": {"cluster": "envtest", "user": identity}}],
            "current-context": identity,
        });
        let path = self.dir.join(format!("kubeconfig-{identity}"));
        write_private(&path, &serde_saphyr::to_string(&config).expect("kubeconfig YAML"));
        path
    }

    /// A client for the admin user (the driver).
    pub async fn admin_client(&self) -> Client {
        let kc = Kubeconfig::read_from(&self.admin_kubeconfig).expect("read kubeconfig");
        let mut config = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
            .await
            .expect("kubeconfig");
        // The driver's churn must not queue behind a slow request for long: a request that takes
        // this long is a failed event.
        config.read_timeout = Some(Duration::from_secs(60));
        Client::try_from(config).expect("client")
    }

    /// SIGTERM, then SIGKILL after 30 s; the directory stays (its audit log is read after).
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            terminate(&mut child, Duration::from_secs(30));
        }
    }
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        self.stop();
    }
}

/// SIGTERM (a clean stop: controllers release what they hold), SIGKILL after `timeout`.
pub fn terminate(child: &mut Child, timeout: Duration) {
    let _ = Command::new("kill")
        .arg("-TERM")
        .arg(child.id().to_string())
        .status();
    let deadline = std::time::Instant::now() + timeout;
    while std::time::Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// Runs a `tests/*/build.sh` (cached by content hash after the first build) and returns the bin
/// directory it prints.
pub fn build_tool(script: &str) -> PathBuf {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(script);
    let out = Command::new(&path)
        .stderr(Stdio::inherit())
        .output()
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert!(out.status.success(), "{} failed", path.display());
    let stdout = String::from_utf8_lossy(&out.stdout);
    PathBuf::from(stdout.lines().last().unwrap_or_default().trim())
}

fn envtest_bin() -> PathBuf {
    match std::env::var_os("LANEWAY_ENVTEST_BIN") {
        Some(p) if Path::new(&p).is_dir() => Path::new(&p).join("envtest"),
        Some(p) => PathBuf::from(p),
        None => build_tool("tests/envtest/build.sh").join("envtest"),
    }
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
