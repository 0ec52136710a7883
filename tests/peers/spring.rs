//! Real Spring Cloud applications (tests/spring: Spring Boot services and a Spring Cloud Gateway
//! with Spring Cloud Alibaba Nacos discovery and laneway-spring-cloud), several in one JVM, each
//! registering a real ephemeral instance with Nacos over gRPC.

use std::io::Write;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use super::Nacos;

/// The harness JVM, stopped when dropped.
pub struct SpringApps {
    child: Child,
    stdin: ChildStdin,
    lines: mpsc::Receiver<String>,
}

impl SpringApps {
    /// Starts `apps` (`--service NAME@IP:PORT[,next=S]`, `--gateway IP:PORT`, `--route P=S`, ...)
    /// registered with `nacos`, and waits until all `count` are ready.
    pub fn start(nacos: &Nacos, password: &str, args: &[&str], count: usize) -> SpringApps {
        let jar = std::env::var("LANEWAY_SPRING_JAR")
            .expect("LANEWAY_SPRING_JAR is not set: run the tests with `make test` (tests/in-cluster.sh builds tests/spring)");
        let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("spring-logs");
        std::fs::create_dir_all(&dir).expect("log dir");
        let log =
            std::fs::File::create(dir.join(format!("harness-{}.log", std::process::id()))).expect("log");
        let address = nacos.url().trim_start_matches("http://").to_owned();
        let mut child = Command::new("java")
            .args([
                "-XX:TieredStopAtLevel=1",
                "-XX:+UseSerialGC",
                "-Xmx256m",
                "-Xss512k",
                "-XX:-UsePerfData",
                "-jar",
                &jar,
                "--nacos",
                &address,
                "--username",
                "nacos",
                "--password",
                password,
            ])
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(log)
            .spawn()
            .expect("start java");
        let stdin = child.stdin.take().expect("stdin");
        let lines = super::stdout_lines(&mut child);
        let apps = SpringApps { child, stdin, lines };
        for _ in 0..count {
            apps.expect("READY ", Duration::from_secs(120));
        }
        apps
    }

    fn expect(&self, prefix: &str, timeout: Duration) -> String {
        super::expect_line(&self.lines, prefix, timeout)
    }

    /// Closes one application (`NAME@IP:PORT`; it deregisters) and starts it again: a pod
    /// restart. `spec` (`NAME@IP:PORT,next=...,lanes=...`) starts it with other options.
    pub fn restart(&mut self, app: &str, spec: Option<&str>) {
        writeln!(self.stdin, "stop {app}").expect("harness stdin");
        self.expect("STOPPED ", Duration::from_secs(30));
        writeln!(self.stdin, "start {}", spec.unwrap_or(app)).expect("harness stdin");
        self.expect("READY ", Duration::from_secs(60));
    }
}

impl SpringApps {
    /// Makes the running service `app` (`NAME@IP:PORT`) call onward the broken way `how`: `plain`
    /// (through a client without laneway's interceptor), `pool` (from a bare thread pool); `None`:
    /// as it should again.
    pub fn break_hop(&mut self, app: &str, how: Option<&str>) {
        let how = how.unwrap_or("-");
        writeln!(self.stdin, "break {app} {how}").expect("harness stdin");
        self.expect("BROKEN ", Duration::from_secs(10));
    }

    /// `n` calls to `service`'s `/hop` through the `@LoadBalanced RestTemplate` of the running
    /// service `app`, from the harness's own thread (a call that passes no gateway); with
    /// `users` > 0, call i carries `x-user-id: i % users + 1`.
    pub fn calls(&mut self, app: &str, service: &str, n: usize, users: usize) -> super::Calls {
        writeln!(self.stdin, "calls {app} {service} {n} {users}").expect("harness stdin");
        let line = self.expect("{\"cmd\":\"calls\"", Duration::from_secs(120));
        serde_json::from_str(&line).expect("calls JSON")
    }
}

impl Drop for SpringApps {
    fn drop(&mut self) {
        let _ = writeln!(self.stdin, "quit");
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while std::time::Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
