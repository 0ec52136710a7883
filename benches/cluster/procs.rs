//! The controllers as real processes, and what /proc says about them (and about the API server
//! and the driver, to tell who the bottleneck was).

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use k8s_openapi::jiff::Timestamp;

use crate::cluster::process::{free_port, metric, terminate};
use crate::world::NS;

/// Which of a controller's writes [`Controller::wait_for`] waits out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Quiet {
    /// laneway's writes but LaneRoute statuses: those a shared budget paces by time, not by
    /// events (a steady trickle while many LaneRoutes' counts are due).
    Outputs,
    /// Every write.
    Writes,
    /// Every write, and for laneway no LaneRoute status turn still to come
    /// (`laneway_lane_route_status_wait_seconds` at 0).
    Settled,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
pub enum Who {
    Laneway,
    Builtin,
}

impl Who {
    pub fn label(self) -> &'static str {
        match self {
            Who::Laneway => "laneway",
            Who::Builtin => "built-in",
        }
    }

    /// The identity (token user) it runs as, which is how the audit log tells them apart.
    pub fn user(self) -> &'static str {
        match self {
            Who::Laneway => "laneway",
            Who::Builtin => "endpointslice-controller",
        }
    }
}

/// Seconds of CPU (user + system) a process has used so far.
pub fn cpu_seconds(pid: u32) -> f64 {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return 0.0;
    };
    // The command name (field 2) may hold spaces: count fields after its closing parenthesis.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| fields.get(i).and_then(|f| f.parse::<u64>().ok()).unwrap_or(0);
    (ticks(11) + ticks(12)) as f64 / clock_ticks()
}

/// CPU seconds the whole machine has been busy (all cores, `/proc/stat`), to tell how much
/// other work shared the machine with a phase.
pub fn machine_busy_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let Some(line) = stat.lines().find(|l| l.starts_with("cpu ")) else {
        return 0.0;
    };
    // user nice system idle iowait irq softirq steal (guest time is inside user).
    let v: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|f| f.parse().ok())
        .collect();
    let busy: u64 = [0, 1, 2, 5, 6, 7].iter().filter_map(|&i| v.get(i)).sum();
    busy as f64 / clock_ticks()
}

fn clock_ticks() -> f64 {
    static TICKS: OnceLock<f64> = OnceLock::new();
    *TICKS.get_or_init(|| {
        Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
            .unwrap_or(100.0)
    })
}

/// Resident set size in bytes.
pub fn rss_bytes(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

pub struct Controller {
    pub who: Who,
    child: Child,
    pub pid: u32,
    metrics: String,
    pub spawned: Instant,
    /// The same moment by the wall clock, which the audit log uses.
    pub spawned_wall: Timestamp,
    samples: Arc<Mutex<Vec<(Instant, u64)>>>,
    stop_sampling: Arc<AtomicBool>,
}

impl Controller {
    /// laneway with `flags` (none: as shipped): watching the benchmark namespace when there is
    /// one, every namespace when there are several.
    pub fn laneway(
        bin: &Path,
        kubeconfig: &Path,
        log: &Path,
        namespaces: usize,
        flags: &[String],
    ) -> Controller {
        let metrics = format!("127.0.0.1:{}", free_port());
        let file = std::fs::File::create(log).expect("log file");
        let mut command = Command::new(bin);
        if namespaces == 1 {
            command.args(["--namespaces", NS]);
        }
        let child = command
            .args(["--lease-namespace", NS])
            .args(["--metrics-addr", &metrics])
            .args(flags)
            .env("KUBECONFIG", kubeconfig)
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .stdout(file.try_clone().expect("log file"))
            .stderr(file)
            .spawn()
            .unwrap_or_else(|e| panic!("{}: {e}", bin.display()));
        Self::started(Who::Laneway, child, metrics)
    }

    /// The built-in controller with `flags` (e.g. `--unthrottled`).
    pub fn builtin(bin: &Path, kubeconfig: &Path, log: &Path, flags: &[String]) -> Controller {
        let metrics = format!("127.0.0.1:{}", free_port());
        let mut child = Command::new(bin)
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .args(["--metrics-addr", &metrics])
            .args(flags)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(log).expect("log file"))
            .spawn()
            .unwrap_or_else(|e| panic!("{}: {e}", bin.display()));
        // Its only stdout line is "ready"; drained so that it never blocks on a full pipe.
        let stdout = child.stdout.take().expect("stdout");
        std::thread::spawn(move || for _ in BufReader::new(stdout).lines() {});
        Self::started(Who::Builtin, child, metrics)
    }

    fn started(who: Who, child: Child, metrics: String) -> Controller {
        let pid = child.id();
        let samples = Arc::new(Mutex::new(Vec::new()));
        let stop_sampling = Arc::new(AtomicBool::new(false));
        let (s, stop) = (samples.clone(), stop_sampling.clone());
        // RSS every 100 ms: peaks during a burst of writes last about that long.
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                if let Some(rss) = rss_bytes(pid) {
                    s.lock().expect("samples").push((Instant::now(), rss));
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        });
        Controller {
            who,
            child,
            pid,
            metrics,
            spawned: Instant::now(),
            spawned_wall: Timestamp::now(),
            samples,
            stop_sampling,
        }
    }

    pub fn cpu_seconds(&self) -> f64 {
        cpu_seconds(self.pid)
    }

    /// Highest RSS sampled between `from` and `to`, in MB.
    pub fn rss_peak_mb(&self, from: Instant, to: Instant) -> f64 {
        let samples = self.samples.lock().expect("samples");
        let peak = samples
            .iter()
            .filter(|(t, _)| *t >= from && *t <= to)
            .map(|(_, b)| *b)
            .max()
            .unwrap_or(0);
        peak as f64 / 1e6
    }

    /// Latest RSS sample, in MB.
    pub fn rss_now_mb(&self) -> f64 {
        rss_bytes(self.pid).unwrap_or(0) as f64 / 1e6
    }

    /// Fails the benchmark with the log's location when the process has died.
    pub fn check_alive(&mut self, log: &Path) {
        if let Ok(Some(status)) = self.child.try_wait() {
            panic!("{} exited ({status}); see {}", self.who.label(), log.display());
        }
    }

    /// The writes counter this controller keeps itself, used to tell when it has gone quiet
    /// (`None` while writes of `scope` are known to be still to come).
    async fn write_counter(&self, scope: Quiet) -> Option<f64> {
        let addr = self.metrics.clone();
        let who = self.who;
        tokio::task::spawn_blocking(move || match who {
            Who::Laneway => {
                let all = metric(&addr, "laneway_writes_total", "")?;
                match scope {
                    Quiet::Outputs => {
                        let statuses = r#"kind="LaneRoute",op="status""#;
                        Some(all - metric(&addr, "laneway_writes_total", statuses)?)
                    }
                    Quiet::Writes => Some(all),
                    Quiet::Settled => {
                        let wait = "laneway_lane_route_status_wait_seconds";
                        (metric(&addr, wait, "")? == 0.0).then_some(all)
                    }
                }
            }
            Who::Builtin => metric(
                &addr,
                "endpointslice_controller_api_requests_total",
                "client=\"controller\"",
            ),
        })
        .await
        .ok()?
    }

    /// Waits until the controller has written nothing for `quiet` (at most `limit`), so that
    /// the writes a phase caused, statuses and Events included, fall inside its window.
    pub async fn wait_quiet(&self, quiet: Duration, limit: Duration) {
        self.wait_for(Quiet::Writes, quiet, limit).await;
    }

    /// Waits until the controller has written nothing of `scope` for `quiet` (at most
    /// `limit`).
    pub async fn wait_for(&self, scope: Quiet, quiet: Duration, limit: Duration) {
        let deadline = Instant::now() + limit;
        let mut last = self.write_counter(scope).await;
        let mut since = Instant::now();
        while Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(100)).await;
            let now = self.write_counter(scope).await;
            if now != last || now.is_none() {
                last = now;
                since = Instant::now();
            } else if since.elapsed() >= quiet {
                return;
            }
        }
        eprintln!("bench: {} did not go quiet within {limit:?}", self.who.label());
    }

    /// SIGTERM (laneway then releases its Lease), SIGKILL after 15 s. Once only: the process
    /// reaped, its pid may belong to another.
    pub fn stop(&mut self) {
        self.stop_sampling.store(true, Ordering::Relaxed);
        if matches!(self.child.try_wait(), Ok(None)) {
            terminate(&mut self.child, Duration::from_secs(15));
        }
    }
}

impl Drop for Controller {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Where the controllers' logs go.
pub fn log_path(dir: &Path, who: Who, phase: &str) -> PathBuf {
    dir.join(format!("{}-{phase}.log", who.user()))
}
