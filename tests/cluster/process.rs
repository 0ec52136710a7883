//! The processes tests and benchmarks start (the operator, controllers, envtest, Traefik, ...):
//! stopping one as Kubernetes stops a pod, reading its metrics and the end of its log.
#![allow(dead_code)]

use std::path::Path;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

/// SIGTERM (a clean stop: a controller releases what it holds), SIGKILL after `timeout`.
pub fn terminate(child: &mut Child, timeout: Duration) {
    let _ = Command::new("kill")
        .arg("-TERM")
        .arg(child.id().to_string())
        .status();
    wait_or_kill(child, timeout);
}

/// Waits up to `timeout` for `child` to exit, then SIGKILLs it.
pub fn wait_or_kill(child: &mut Child, timeout: Duration) {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// The body of a 200 answer to `GET url` (`http://host:port/path`); `None` for anything else.
pub fn http_get(url: &str) -> Option<String> {
    use std::io::{Read, Write};
    let rest = url.strip_prefix("http://")?;
    let (host, path) = rest.split_once('/').map(|(h, p)| (h, format!("/{p}")))?;
    let mut stream = std::net::TcpStream::connect(host).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(stream, "GET {path} HTTP/1.0\r\nHost: {host}\r\n\r\n").ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    let (head, body) = response.split_once("\r\n\r\n")?;
    head.lines()
        .next()?
        .split(' ')
        .nth(1)
        .is_some_and(|code| code == "200")
        .then(|| body.to_owned())
}

/// The sum of every series of metric `name` whose labels contain `filter`, as the process
/// serving `http://{addr}/metrics` reports them; `None` when it does not answer.
pub fn metric(addr: &str, name: &str, filter: &str) -> Option<f64> {
    let body = http_get(&format!("http://{addr}/metrics"))?;
    Some(
        body.lines()
            .filter(|l| l.starts_with(name) && l.contains(filter))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum(),
    )
}

/// A port on 127.0.0.1 that nothing listened on a moment ago.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port")
}

/// The last `lines` lines of a log file (empty when it cannot be read).
pub fn tail(path: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}
