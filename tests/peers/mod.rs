//! Real Dubbo peers for end-to-end tests: a ZooKeeper server, Dubbo providers (one process per
//! pod, bound to the pod's IP) and a long-running Dubbo consumer, all from `tests/dubbo`
//! (`LANEWAY_DUBBO_JAR`, built by `tests/run.sh`, which also runs the tests inside a private
//! network namespace holding the pod IPs 198.18.0.2-9).
#![allow(dead_code)]

pub mod brokers;
mod nacos;
mod spring;
#[allow(unused_imports)]
pub use nacos::{Nacos, NACOS_PASSWORD};
#[allow(unused_imports)]
pub use spring::SpringApps;

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

fn jar() -> String {
    std::env::var("LANEWAY_DUBBO_JAR")
        .expect("LANEWAY_DUBBO_JAR is not set: run the tests with `make test` (tests/run.sh builds the Dubbo harness)")
}

fn log_dir() -> std::path::PathBuf {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("dubbo-logs");
    std::fs::create_dir_all(&dir).expect("log dir");
    dir
}

/// The stdout lines of `child`, as they come.
fn stdout_lines(child: &mut Child) -> mpsc::Receiver<String> {
    let stdout = child.stdout.take().expect("stdout");
    let (tx, lines) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    lines
}

/// The first line starting with `prefix` within `timeout`; an `ERROR` line before it fails.
fn expect_line(lines: &mpsc::Receiver<String>, prefix: &str, timeout: Duration) -> String {
    let deadline = std::time::Instant::now() + timeout;
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        match lines.recv_timeout(left) {
            Ok(line) if line.starts_with(prefix) => return line,
            Ok(line) if line.starts_with("ERROR") => panic!("harness: {line}"),
            Ok(_) => continue,
            Err(_) => panic!("no {prefix:?} line within {timeout:?}"),
        }
    }
}

/// Writes a pod's downward-API labels file as the kubelet does: `key="value"` lines (`app` and,
/// in a lane, `laneway.io/lane`), replaced atomically.
pub fn write_labels(path: &std::path::Path, app: &str, lane: Option<&str>) {
    let mut labels = std::collections::BTreeMap::from([("app".to_owned(), app.to_owned())]);
    if let Some(lane) = lane {
        labels.insert("laneway.io/lane".to_owned(), lane.to_owned());
    }
    write_pod_labels(path, &labels);
}

/// [`write_labels`] of any labels, left alone when they are already there.
pub fn write_pod_labels(path: &std::path::Path, labels: &std::collections::BTreeMap<String, String>) {
    let text: String = labels.iter().map(|(k, v)| format!("{k}={v:?}\n")).collect();
    if std::fs::read_to_string(path).ok().as_deref() == Some(text.as_str()) {
        return;
    }
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).expect("labels file");
    std::fs::rename(&tmp, path).expect("labels file");
}

/// The front-end chain's Services (`gateway-bff`, `order`, `user`) and the TagRules of its Dubbo
/// services (`order-service`, `user-service`) in `c`; in a fresh `dir`, `labels/` for the pods'
/// labels files and a ZooKeeper keeping its data in `zk/`.
pub async fn chain_base(
    c: &crate::cluster::Cluster,
    dir: &std::path::Path,
) -> (std::path::PathBuf, ZooKeeper) {
    let _ = std::fs::remove_dir_all(dir);
    let labels = dir.join("labels");
    std::fs::create_dir_all(&labels).expect("labels dir");
    let zk = ZooKeeper::start(&dir.join("zk"));
    for svc in ["gateway-bff", "order", "user"] {
        c.service(svc).await;
    }
    for (app, service) in [("order", "order-service"), ("user", "user-service")] {
        c.apply_yaml(&format!(
            "apiVersion: laneway.io/v1alpha1\nkind: TagRule\nmetadata: {{name: {app}}}\nspec:\n  selector: {{matchLabels: {{app: {app}}}}}\n  dubbo: {{application: {service}, port: 20880}}\n"
        ))
        .await
        .expect("tag rule");
    }
    (labels, zk)
}

/// The JVMs of the front-end chain's `pods` (name, app, lane, IP), started side by side: a BFF
/// for `gateway-bff`, Dubbo hops for `order` (calling `user`) and `user`.
pub fn chain_jvms(
    pods: &[(&str, &str, Option<&str>, &str)],
    labels: &std::path::Path,
    zk: &str,
) -> Vec<Peer> {
    let started = std::time::Instant::now();
    let jvms = std::thread::scope(|scope| {
        let handles: Vec<_> = pods
            .iter()
            .map(|(name, app, _, ip)| {
                let file = labels.join(name);
                scope.spawn(move || chain_jvm(name, app, ip, zk, &file))
            })
            .collect();
        handles.into_iter().map(|h| h.join().expect("JVM")).collect()
    });
    println!("{} JVMs ready in {:?}", pods.len(), started.elapsed());
    jvms
}

/// One JVM of the front-end chain: pod `name` of `app` at `ip`, its labels file `labels`.
pub fn chain_jvm(name: &str, app: &str, ip: &str, zk: &str, labels: &std::path::Path) -> Peer {
    match app {
        "gateway-bff" => bff(name, ip, 8080, zk, "order-service", labels),
        "order" => hop("order-service", name, ip, zk, Some("user-service"), labels),
        _ => hop("user-service", name, ip, zk, None, labels),
    }
}

/// A Java process of the harness whose stdout lines arrive on a channel.
pub struct Peer {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: mpsc::Receiver<String>,
}

impl Peer {
    fn start(name: &str, args: &[&str]) -> Peer {
        let log = std::fs::File::create(log_dir().join(format!("{name}.log"))).expect("log");
        let mut child = Command::new("java")
            .args(["-Xms32m", "-Xmx192m", "-XX:TieredStopAtLevel=1", "-jar", &jar()])
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(log)
            .spawn()
            .expect("start java");
        let lines = stdout_lines(&mut child);
        let stdin = child.stdin.take();
        let peer = Peer { child, stdin, lines };
        peer.expect_line("READY", Duration::from_secs(90));
        peer
    }

    fn expect_line(&self, prefix: &str, timeout: Duration) -> String {
        expect_line(&self.lines, prefix, timeout)
    }

    pub fn stop(&mut self) {
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(self.child.id().to_string())
            .status();
        let _ = self.child.wait();
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A ZooKeeper server on 127.0.0.1 keeping its data in `dir` (so it can be restarted).
pub struct ZooKeeper {
    pub peer: Peer,
    pub port: u16,
    pub dir: std::path::PathBuf,
}

impl ZooKeeper {
    pub fn start(dir: &std::path::Path) -> ZooKeeper {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("port")
            .port();
        Self::start_on(dir, port)
    }

    pub fn start_on(dir: &std::path::Path, port: u16) -> ZooKeeper {
        let peer = Peer::start(
            &format!("zk-{port}"),
            &["zk", "--port", &port.to_string(), "--dir", &dir.to_string_lossy()],
        );
        ZooKeeper {
            peer,
            port,
            dir: dir.to_owned(),
        }
    }

    pub fn address(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// The data of a znode, if it exists.
    pub fn get(&self, path: &str) -> Option<String> {
        let out = Command::new("java")
            .args(["-jar", &jar(), "zkget", "--zk", &self.address(), "--path", path])
            .output()
            .expect("zkget");
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
    }
}

/// One Dubbo provider process: one pod at `ip`, answering `whoami` with `id`.
pub fn provider(app: &str, id: &str, ip: &str, zk: &ZooKeeper) -> Peer {
    provider_with(app, id, ip, zk, None)
}

/// A provider tagged the way Dubbo teams tag instances today: a static tag, fixed at start.
pub fn provider_with_static_tag(app: &str, id: &str, ip: &str, zk: &ZooKeeper, tag: &str) -> Peer {
    provider_with(app, id, ip, zk, Some(tag))
}

fn provider_with(app: &str, id: &str, ip: &str, zk: &ZooKeeper, tag: Option<&str>) -> Peer {
    let zk = zk.address();
    let mut args = vec![
        "provider", "--app", app, "--id", id, "--ip", ip, "--port", "20880", "--zk", &zk,
    ];
    if let Some(tag) = tag {
        args.extend(["--tag", tag]);
    }
    Peer::start(
        &format!("provider-{app}-{id}-{}", tag.unwrap_or("untagged")),
        &args,
    )
}

/// One pod of a Dubbo service in a call chain (`hop` role): exports `Hop` for `app` at `ip` and
/// calls `next`'s Hop for each call; `labels` is its downward-API labels file.
pub fn hop(app: &str, id: &str, ip: &str, zk: &str, next: Option<&str>, labels: &std::path::Path) -> Peer {
    let breaks = break_file(labels);
    let (labels, breaks) = (labels.to_string_lossy(), breaks.to_string_lossy());
    let mut args = vec![
        "hop",
        "--app",
        app,
        "--id",
        id,
        "--ip",
        ip,
        "--port",
        "20880",
        "--zk",
        zk,
        "--labels",
        &labels,
        "--break-file",
        &breaks,
    ];
    if let Some(next) = next {
        args.extend(["--next", next]);
    }
    Peer::start(&format!("hop-{app}-{id}"), &args)
}

/// The file that makes a hop whose labels file is `labels` call onward the way lanes are lost
/// while it holds `plain` (a client without laneway's filter) or `pool` (a bare thread pool), or
/// fail every call while it holds `fail`.
pub fn break_file(labels: &std::path::Path) -> std::path::PathBuf {
    labels.with_extension("break")
}

/// A front end's BFF pod (`bff` role): Jetty with laneway's LaneFilter at `ip:port`, calling
/// `next`'s Hop over Dubbo for every request.
pub fn bff(id: &str, ip: &str, port: u16, zk: &str, next: &str, labels: &std::path::Path) -> Peer {
    let (port, labels) = (port.to_string(), labels.to_string_lossy());
    Peer::start(
        &format!("bff-{id}"),
        &[
            "bff",
            "--id",
            id,
            "--ip",
            ip,
            "--http-port",
            &port,
            "--zk",
            zk,
            "--next",
            next,
            "--labels",
            &labels,
            "--sticky-cookie",
            "true",
        ],
    )
}

/// A long-running Dubbo consumer of `app`.
pub struct Consumer {
    peer: Peer,
}

#[derive(Debug, serde::Deserialize)]
pub struct Await {
    pub ok: bool,
    pub ms: u64,
    pub at: u64,
    pub last: serde_json::Value,
}

impl Consumer {
    pub fn start(app: &str, zk: &ZooKeeper) -> Consumer {
        Consumer {
            peer: Peer::start(
                &format!("consumer-{app}"),
                &["consumer", "--app", app, "--zk", &zk.address()],
            ),
        }
    }

    /// Calls with `tag` (None: untagged) until one batch is answered by exactly `want`
    /// (provider ids, or "error" for failed calls), for at most `timeout`.
    pub fn await_routing(
        &mut self,
        tag: Option<&str>,
        want: &[&str],
        force: bool,
        timeout: Duration,
    ) -> Await {
        let mut want: Vec<&str> = want.to_vec();
        want.sort();
        let cmd = format!(
            "await {} {} {}{}\n",
            tag.unwrap_or("-"),
            want.join(","),
            timeout.as_millis(),
            if force { " force" } else { "" }
        );
        let stdin = self.peer.stdin.as_mut().expect("stdin");
        stdin.write_all(cmd.as_bytes()).expect("consumer command");
        stdin.flush().expect("flush");
        let line = self
            .peer
            .expect_line("{\"cmd\":\"await\"", timeout + Duration::from_secs(30));
        serde_json::from_str(&line).expect("await JSON")
    }

    /// Asserts that calls with `tag` end up answered by exactly `want`.
    pub fn expect(&mut self, what: &str, tag: Option<&str>, want: &[&str]) -> Await {
        let r = self.await_routing(tag, want, false, Duration::from_secs(20));
        assert!(
            r.ok,
            "{what}: calls tagged {tag:?} never went only to {want:?}; last batch {}",
            r.last
        );
        r
    }
}

/// A caller with no gateway in front (`caller` role): calls `next`'s Hop chain from a thread that
/// serves no request, as a scheduled job does.
pub struct Caller {
    peer: Peer,
}

/// What a batch of calls went along: chains ("order-0>user-0") with their counts, overall and
/// per `user_id`.
#[derive(Debug, serde::Deserialize)]
pub struct Calls {
    pub calls: usize,
    pub errors: usize,
    #[serde(alias = "paths")]
    pub chains: std::collections::BTreeMap<String, usize>,
    pub users: std::collections::BTreeMap<String, std::collections::BTreeMap<String, usize>>,
}

impl Caller {
    pub fn start(next: &str, zk: &ZooKeeper) -> Caller {
        Caller {
            peer: Peer::start(
                &format!("caller-{next}"),
                &["caller", "--next", next, "--zk", &zk.address()],
            ),
        }
    }

    fn send(&mut self, cmd: &str, reply: &str, timeout: Duration) -> String {
        let stdin = self.peer.stdin.as_mut().expect("stdin");
        stdin
            .write_all(format!("{cmd}\n").as_bytes())
            .expect("caller command");
        stdin.flush().expect("flush");
        self.peer.expect_line(reply, timeout)
    }

    /// `n` calls tagged `tag` (None: in no lane); with `users` > 0, call i carries the attachment
    /// `user_id` = i % users + 1.
    pub fn calls(&mut self, n: usize, users: usize, tag: Option<&str>) -> Calls {
        let line = self.send(
            &format!("calls {n} {users} {}", tag.unwrap_or("-")),
            "{\"cmd\":\"calls\"",
            Duration::from_secs(120),
        );
        serde_json::from_str(&line).expect("calls JSON")
    }

    /// Calls in no lane until a batch went `all` along `chain` (or none did), for at most
    /// `timeout`; the epoch milliseconds that batch began, if one did.
    pub fn await_chain(&mut self, chain: &str, all: bool, timeout: Duration) -> Option<u64> {
        let cmd = format!(
            "await {chain} {} {}",
            if all { "all" } else { "none" },
            timeout.as_millis()
        );
        let line = self.send(&cmd, "{\"cmd\":\"await\"", timeout + Duration::from_secs(30));
        let v: serde_json::Value = serde_json::from_str(&line).expect("await JSON");
        v["ok"]
            .as_bool()
            .unwrap_or(false)
            .then(|| v["at"].as_u64().expect("at"))
    }
}

/// `crc32(value) % 100` (CRC-32 as `java.util.zip.CRC32` computes it over the UTF-8 bytes):
/// where a sticky draw puts a value.
pub fn sticky_roll(value: &str) -> u32 {
    let mut c = 0xFFFF_FFFFu32;
    for b in value.as_bytes() {
        c ^= u32::from(*b);
        for _ in 0..8 {
            c = if c & 1 != 0 {
                (c >> 1) ^ 0xEDB8_8320
            } else {
                c >> 1
            };
        }
    }
    !c % 100
}
