//! laneway next to the built-in Kubernetes EndpointSlice controller on one local kube-apiserver:
//! event → slice latency per event type, API writes per event, API requests per second, time
//! to converge from cold and after new LaneRoutes, RSS and CPU, at 1k and 10k pods (50k with
//! `BENCH_50K=1`). Run with `make bench-cluster`; it rewrites its own section of BENCHMARKS.md
//! (between `<!-- bench-cluster:start -->` and `<!-- bench-cluster:end -->`) and the plot
//! BENCHMARKS-cluster.png.
//!
//! A second workload, developer lanes (benches/cluster/dev.rs), counts the API writes one event
//! costs when L lanes span every Service but own pods in only 1-3 of them: the table between
//! `<!-- bench-cluster-dev:start -->` and `<!-- bench-cluster-dev:end -->` in BENCHMARKS.md;
//! its second table, baseline readiness flips at fixed rates, what a baseline pod event costs
//! when events overlap.
//!
//! The headline figures come from one controller at a time (on 2 cores, two controllers, the
//! API server and the driver at once skew each other); both at once is a separate cross-check.
//! Per pod count: on a fresh control plane and workload, laneway alone (cold start, churn), both
//! at once (churn), then laneway alone with new LaneRoutes; on another fresh control plane and
//! the same workload, the built-in controller alone (cold start, churn). Each audit log is split
//! by identity and phase.
//!
//! Settings (environment):
//! - `BENCH_PODS`: pod counts, comma-separated (default `1000,10000`); `BENCH_50K=1` adds 50000
//!   (to both workloads).
//! - `BENCH_RATES`: churn rates in events/s (default `20,200`).
//! - `BENCH_EVENTS`: events per type at the highest rate (default 1000, enough for a p99);
//!   `BENCH_SLOW_EVENTS`: per type at the other rates (default 300: 15 s each at 20/s);
//!   `BENCH_CROSS_EVENTS`: per type in the cross-check, at the highest rate (default 500).
//! - `BENCH_BUILTIN_FLAGS`: flags of the built-in controller (default `--unthrottled`; e.g.
//!   `--qps 20 --burst 30` for kube-controller-manager's client limits); `BENCH_LANEWAY_FLAGS`:
//!   laneway's (default none: as shipped).
//! - `BENCH_HEADLESS=0` leaves out the second cold start of each pod count, laneway with
//!   `--service-cluster-ip=none` on a fresh control plane of its own.
//! - `BENCH_OUT`: where logs, the control planes' data and results.json go (default
//!   `target/bench-cluster`); `BENCH_NO_REPORT=1` leaves BENCHMARKS.md and the plot alone.
//! - `BENCH_ONLY=laneway`: laneway alone, no built-in controller and no report (to try a
//!   change quickly; the phases are printed as they end).
//! - `BENCH_WORKLOADS`: which workloads, comma-separated (default `resolution,dev`):
//!   `resolution` is the one above, `dev` the developer lanes.
//! - `BENCH_DEV_PODS`: untagged pods of the developer-lane workload, comma-separated (default
//!   `1000,10000`, i.e. 100 and 1,000 Services); `BENCH_DEV_LANES`: its numbers of lanes
//!   (default `20,50`); `BENCH_DEV_EVENTS`: events per type (default 30); `BENCH_DEV_ROLLOUTS`:
//!   rolling updates of 10 pods (default 10). `BENCH_DEV_RATES`: rates of its baseline
//!   readiness flips at a fixed rate, events/s, each a phase of its own per controller (default
//!   `0.33,20,200`); `BENCH_DEV_RATE_EVENTS`: flips per rate (default 15 s of them, at least 30,
//!   at most 1000: 30, 300 and 1000; about 4.5 minutes for both controllers at 1k pods, L = 20).
//! - `BENCH_REPEAT`: runs of every pod count (and developer-lane size and L), each on a fresh
//!   control plane (default 1); with more, the report adds the median of the headline ratios
//!   (laneway over built-in: p99 latency and writes per event; developer lanes: writes per
//!   event) and the p99 of every run's events taken together. The other tables show the first
//!   run.
//! - `-- --render FILE`: only render BENCHMARKS.md's sections and the plot from a results.json.

#[path = "cluster/audit.rs"]
mod audit;
#[path = "cluster/churn.rs"]
mod churn;
#[path = "../tests/cluster/mod.rs"]
mod cluster;
#[path = "cluster/dev.rs"]
mod dev;
#[path = "../tests/faults/control_plane.rs"]
mod envtest;
#[path = "cluster/observe.rs"]
mod observe;
#[path = "cluster/procs.rs"]
mod procs;
#[path = "cluster/report.rs"]
mod report;
#[path = "cluster/world.rs"]
mod world;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{Namespace, Node, Pod, Service};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Client};
use laneway::api::LaneRoute;
use laneway::lanes::ServiceInfo;
use serde_json::Value;

use churn::{Bench, Order};
use observe::{Key, Observer, Wants};
use procs::{cpu_seconds, log_path, machine_busy_seconds, Controller, Who};
use report::{ColdLoad, ColdResult, ControllerResult, PhaseResult, Results, ScaleResult, Window};
use world::{namespace_name, EventKind, Shape, World, NODES};

/// Requests the driver keeps in flight while it builds the workload.
const SETUP_CONCURRENCY: usize = 32;
/// Longest wait for an event or a convergence; past it, the figure is reported as such.
const EVENT_TIMEOUT: Duration = Duration::from_secs(60);
const CONVERGE_TIMEOUT: Duration = Duration::from_secs(900);
const PLOT: &str = "BENCHMARKS-cluster.png";

struct Settings {
    pods: Vec<usize>,
    rates: Vec<f64>,
    events: usize,
    slow_events: usize,
    cross_events: usize,
    builtin_flags: Vec<String>,
    laneway_flags: Vec<String>,
    /// A second cold start of laneway per pod count, with headless Services.
    headless: bool,
    out: PathBuf,
    report: bool,
    /// laneway alone, without the built-in controller (to try a change quickly).
    laneway_only: bool,
    /// The resolution-shaped workload.
    resolution: bool,
    /// The developer-lane workload, its sizes and numbers of lanes, and events per type.
    dev: bool,
    dev_pods: Vec<usize>,
    dev_lanes: Vec<usize>,
    dev_events: usize,
    dev_rollouts: usize,
    /// Rates of the developer-lane workload's paced baseline readiness flips (events/s), and
    /// flips per rate (`None`: [`Settings::dev_rate_count`]'s default).
    dev_rates: Vec<f64>,
    dev_rate_events: Option<usize>,
    /// Runs of each size.
    repeat: usize,
}

fn env_list<T: std::str::FromStr>(name: &str, default: &str) -> Vec<T> {
    std::env::var(name)
        .unwrap_or_else(|_| default.to_owned())
        .split(',')
        .map(|v| {
            v.trim()
                .parse()
                .unwrap_or_else(|_| panic!("{name}: cannot read {v:?}"))
        })
        .collect()
}

fn flags(name: &str, default: &str) -> Vec<String> {
    std::env::var(name)
        .unwrap_or_else(|_| default.to_owned())
        .split_whitespace()
        .map(str::to_owned)
        .collect()
}

fn env_num(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .map(|v| v.parse().unwrap_or_else(|_| panic!("{name}: cannot read {v:?}")))
        .unwrap_or(default)
}

impl Settings {
    fn from_env() -> Settings {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let fifty = std::env::var("BENCH_50K").is_ok_and(|v| v == "1");
        let mut pods: Vec<usize> = env_list("BENCH_PODS", "1000,10000");
        let mut dev_pods: Vec<usize> = env_list("BENCH_DEV_PODS", "1000,10000");
        for sizes in [&mut pods, &mut dev_pods] {
            if fifty && !sizes.contains(&50_000) {
                sizes.push(50_000);
            }
        }
        let mut rates: Vec<f64> = env_list("BENCH_RATES", "20,200");
        rates.sort_by(f64::total_cmp);
        let workloads: Vec<String> = env_list("BENCH_WORKLOADS", "resolution,dev");
        for w in &workloads {
            assert!(
                w == "resolution" || w == "dev",
                "BENCH_WORKLOADS: {w:?} is neither resolution nor dev"
            );
        }
        Settings {
            pods,
            rates,
            events: env_num("BENCH_EVENTS", 1000),
            slow_events: env_num("BENCH_SLOW_EVENTS", 300),
            cross_events: env_num("BENCH_CROSS_EVENTS", 500),
            builtin_flags: flags("BENCH_BUILTIN_FLAGS", "--unthrottled"),
            laneway_flags: flags("BENCH_LANEWAY_FLAGS", ""),
            headless: std::env::var("BENCH_HEADLESS").map_or(true, |v| v != "0"),
            out: std::env::var_os("BENCH_OUT")
                .map(PathBuf::from)
                .unwrap_or_else(|| root.join("target/bench-cluster")),
            report: std::env::var("BENCH_NO_REPORT").is_err(),
            laneway_only: std::env::var("BENCH_ONLY").is_ok_and(|v| v == "laneway"),
            resolution: workloads.iter().any(|w| w == "resolution"),
            dev: workloads.iter().any(|w| w == "dev"),
            dev_pods,
            dev_lanes: env_list("BENCH_DEV_LANES", "20,50"),
            dev_events: env_num("BENCH_DEV_EVENTS", 30),
            dev_rollouts: env_num("BENCH_DEV_ROLLOUTS", 10),
            dev_rates: env_list("BENCH_DEV_RATES", "0.33,20,200"),
            dev_rate_events: std::env::var("BENCH_DEV_RATE_EVENTS")
                .is_ok()
                .then(|| env_num("BENCH_DEV_RATE_EVENTS", 0)),
            repeat: env_num("BENCH_REPEAT", 1).max(1),
        }
    }

    fn count(&self, rate: f64) -> usize {
        if rate >= self.top_rate() {
            self.events
        } else {
            self.slow_events
        }
    }

    /// Baseline readiness flips at `rate` in the developer-lane workload: `BENCH_DEV_RATE_EVENTS`,
    /// or 15 s of them, at least 30 and at most 1000 (30 at 0.33/s, 300 at 20/s, 1000 at
    /// 200/s); rounded up to an even number, so that every pod taken down comes back up.
    fn dev_rate_count(&self, rate: f64) -> usize {
        let n = self
            .dev_rate_events
            .unwrap_or_else(|| (rate * 15.0).round().clamp(30.0, 1000.0) as usize);
        n + n % 2
    }

    fn top_rate(&self) -> f64 {
        self.rates.iter().copied().fold(0.0, f64::max)
    }
}

struct Bins {
    laneway: PathBuf,
    builtin: PathBuf,
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    // `cargo bench` passes `--bench`; only `--render FILE` means something here.
    if let Some(i) = args.iter().position(|a| a == "--render") {
        let file = args.get(i + 1).expect("--render FILE");
        let results: Results =
            serde_json::from_str(&std::fs::read_to_string(file).expect("results")).expect("results JSON");
        publish(&results, Path::new(file));
        return;
    }
    let settings = Settings::from_env();
    std::fs::create_dir_all(&settings.out).expect("output dir");
    let bins = Bins {
        laneway: PathBuf::from(env!("CARGO_BIN_EXE_laneway")),
        builtin: envtest::build_tool("tests/endpointslice/build.sh")
            .unwrap_or_else(|e| panic!("{e}"))
            .join("endpointslice-controller"),
    };
    let mut results = Results {
        date: Timestamp::now().strftime("%Y-%m-%d %H:%M UTC").to_string(),
        laneway_commit: commit(),
        builtin_flags: settings.builtin_flags.clone(),
        scales: Vec::new(),
        repeats: Vec::new(),
        dev: Vec::new(),
    };
    let file = settings.out.join("results.json");
    // Written after every run, so that a long run that fails later keeps what it has.
    let save = |results: &Results| {
        std::fs::write(&file, serde_json::to_string_pretty(results).expect("JSON")).expect("results.json")
    };
    for &pods in settings.pods.iter().filter(|_| settings.resolution) {
        for run in 0..settings.repeat {
            eprintln!(
                "bench: == {pods} pods (run {} of {}) ==",
                run + 1,
                settings.repeat
            );
            let scale = run_scale(&settings, &bins, pods, run).await;
            if run == 0 {
                results.scales.push(scale);
            } else {
                results.repeats.push(scale);
            }
            save(&results);
        }
    }
    for &pods in settings.dev_pods.iter().filter(|_| settings.dev) {
        for &lanes in &settings.dev_lanes {
            for run in 0..settings.repeat {
                eprintln!(
                    "bench: == developer lanes: {pods} pods, {lanes} lanes (run {} of {}) ==",
                    run + 1,
                    settings.repeat
                );
                results
                    .dev
                    .push(dev::run_dev(&settings, &bins, pods, lanes, run).await);
                save(&results);
            }
        }
    }
    eprintln!("bench: results in {}", file.display());
    if settings.laneway_only {
        return;
    }
    if settings.report {
        publish(&results, &file);
    } else {
        if !results.scales.is_empty() {
            print!("{}", report::render(&results, None));
        }
        if !results.dev.is_empty() {
            print!("{}", dev::render(&results));
        }
    }
}

/// Draws the plot and rewrites BENCHMARKS.md's sections (each only when its workload ran).
fn publish(results: &Results, file: &Path) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    if !results.scales.is_empty() {
        let plotted = Command::new(root.join("tests/bench/plot.sh"))
            .arg(file)
            .arg(root.join(PLOT))
            .status()
            .is_ok_and(|s| s.success());
        if !plotted {
            eprintln!("bench: the plot failed (tests/bench/plot.sh); the section goes without it");
        }
        let section = report::render(results, plotted.then_some(PLOT));
        report::write_section(&root.join("BENCHMARKS.md"), &section);
        print!("{section}");
    }
    if !results.dev.is_empty() {
        let section = dev::render(results);
        report::write_marked(&root.join("BENCHMARKS.md"), dev::START, dev::END, &section);
        print!("{section}");
    }
}

/// The commit laneway was built from, marked when the work tree had changes under src/.
fn commit() -> String {
    let git = |args: &[&str]| {
        Command::new("git")
            .args(args)
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .output()
            .ok()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
            .unwrap_or_default()
    };
    let head = git(&["rev-parse", "--short", "HEAD"]);
    if head.is_empty() {
        return "(commit unknown)".to_owned();
    }
    let dirty = !git(&["status", "--porcelain", "--", "src", "Cargo.lock"]).is_empty();
    if dirty {
        format!("{head} with uncommitted changes")
    } else {
        head
    }
}

/// The world of `shape` set up on a fresh control plane in `dir` that audits both controllers.
async fn start_world(dir: &Path, shape: Shape) -> (envtest::ControlPlane, kube::Client, World) {
    let users = [Who::Laneway.user(), Who::Builtin.user()];
    let audit_policy = envtest::audit_requests_of(&users);
    let cp = envtest::ControlPlane::start_in(&dir.join("envtest"), &users, &audit_policy).await;
    let client = driver_client(&cp).await;
    let mut world = World::new(shape);
    setup(&client, &mut world).await;
    (cp, client, world)
}

/// A bench of `world` once the observer has listed it, and how many slices laneway holds in it.
async fn bench_of(client: &kube::Client, world: World, cp: &envtest::ControlPlane) -> (Bench, usize) {
    let observer = Observer::spawn(client.clone());
    while !observer.synced() {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let laneway_slices = world.laneway_slice_count();
    let bench = Bench {
        client: client.clone(),
        world,
        observer,
        apiserver_pid: cp.pid(),
        timeout: EVENT_TIMEOUT,
    };
    (bench, laneway_slices)
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

/// One pod count of the resolution-shaped workload; `run` > 0: a repetition (`BENCH_REPEAT`).
async fn run_scale(settings: &Settings, bins: &Bins, pods: usize, run: usize) -> ScaleResult {
    let started = Instant::now();
    let dir = match run {
        0 => settings.out.join(pods.to_string()),
        _ => settings.out.join(format!("{pods}-r{}", run + 1)),
    };
    let load = load_average();
    let shape = Shape::new(pods);
    let (mut cp, client, world) = start_world(&dir, shape).await;
    let setup_s = started.elapsed().as_secs_f64();
    eprintln!(
        "bench: workload of {} pods, {} services, {} LaneRoutes in {} namespaces in {setup_s:.1} s",
        shape.pods, shape.services, shape.routes, shape.namespaces
    );
    let (mut bench, laneway_slices) = bench_of(&client, world, &cp).await;
    let kubeconfig_builtin = cp.kubeconfig_for(Who::Builtin.user(), cp.server_url());
    let kubeconfig_laneway = cp.kubeconfig_for(Who::Laneway.user(), cp.server_url());
    let laneway_kinds = [
        EventKind::Flip,
        EventKind::Relabel,
        EventKind::ScaleUp,
        EventKind::ScaleDown,
    ];

    // laneway alone, from cold.
    let log = log_path(&dir, Who::Laneway, "run");
    let mut laneway = Controller::laneway(
        &bins.laneway,
        &kubeconfig_laneway,
        &log,
        shape.namespaces,
        &settings.laneway_flags,
    );
    let wants = laneway_wants(bench.world.laneway_cold());
    let mut l = cold_start(&bench, &laneway, wants).await;
    churn_alone(&mut bench, settings, &mut laneway, &log, &laneway_kinds, &mut l).await;

    // Both at once, on the same events (the built-in controller starts cold here).
    let mut both = Vec::new();
    if !settings.laneway_only {
        let log = log_path(&dir, Who::Builtin, "both");
        let mut builtin =
            Controller::builtin(&bins.builtin, &kubeconfig_builtin, &log, &settings.builtin_flags);
        let wants = builtin_wants(&bench.world);
        bench
            .converge("built-in (cross-check)", wants, builtin.spawned, CONVERGE_TIMEOUT)
            .await;
        builtin
            .wait_quiet(Duration::from_secs(1), Duration::from_secs(60))
            .await;
        let rate = settings.top_rate();
        for kind in laneway_kinds {
            builtin.check_alive(&log);
            let phase = bench
                .churn(
                    kind,
                    rate,
                    settings.cross_events,
                    &[&laneway, &builtin],
                    Order::Spread,
                )
                .await;
            print_phase("both", &phase);
            both.push(phase);
        }
        builtin.stop();
    }

    // New LaneRoutes, laneway alone.
    let t0 = Instant::now();
    let wall0 = Timestamp::now();
    let created = create_routes(&client, &bench.world, shape.added_routes()).await;
    let wants = laneway_wants(bench.world.add_routes(created));
    l.new_routes_s = bench
        .converge("laneway new LaneRoutes", wants, t0, CONVERGE_TIMEOUT)
        .await;
    laneway
        .wait_quiet(Duration::from_secs(1), Duration::from_secs(60))
        .await;
    l.new_routes_window = Some(Window {
        from: wall0,
        to: Timestamp::now(),
    });
    laneway.check_alive(&log);
    laneway.stop();
    bench.observer.stop();
    cp.stop().await;

    let log = audit::read(&cp.audit_log_path());
    count_result(&log, &mut l);
    for p in &mut both {
        count_traffic(&log, p);
    }
    // The built-in controller alone, from cold, on a control plane and workload of its own:
    // an API server that has served one controller's run is slower for the next (second runs
    // of the built-in controller on the same one had scale-up p99s 1.3-1.6x the first's).
    let builtin = match settings.laneway_only {
        true => None,
        false => Some(builtin_alone(settings, bins, &dir, shape).await),
    };
    let alone: Vec<ControllerResult> = [l].into_iter().chain(builtin).collect();
    let headless = match settings.headless {
        true => Some(headless_cold(settings, bins, &dir, shape).await),
        false => None,
    };
    let result = ScaleResult {
        shape,
        laneway_slices,
        setup_s,
        total_s: started.elapsed().as_secs_f64(),
        load_average: load,
        alone,
        both,
        headless,
    };
    eprintln!("bench: {pods} pods done in {:.0} s", result.total_s);
    result
}

/// laneway's cold start with headless lane and baseline Services (`--service-cluster-ip=none`),
/// on a fresh control plane and workload of `shape`.
async fn headless_cold(settings: &Settings, bins: &Bins, dir: &Path, shape: Shape) -> ColdResult {
    let dir = dir.join("headless");
    let (mut cp, client, world) = start_world(&dir, shape).await;
    let (bench, _) = bench_of(&client, world, &cp).await;
    let log = log_path(&dir, Who::Laneway, "headless");
    let mut flags = settings.laneway_flags.clone();
    flags.push("--service-cluster-ip=none".to_owned());
    let kubeconfig = cp.kubeconfig_for(Who::Laneway.user(), cp.server_url());
    let mut laneway = Controller::laneway(&bins.laneway, &kubeconfig, &log, shape.namespaces, &flags);
    let c = cold_start(&bench, &laneway, laneway_wants(bench.world.laneway_all())).await;
    let rss_peak_mb = laneway.rss_peak_mb(laneway.spawned, Instant::now());
    laneway.check_alive(&log);
    laneway.stop();
    bench.observer.stop();
    cp.stop().await;
    let audit = audit::read(&cp.audit_log_path());
    let traffic = c
        .cold_window
        .map(|w| audit::traffic(&audit, Who::Laneway.user(), w.from, w.to))
        .unwrap_or_default();
    eprintln!(
        "bench: laneway headless cold: {:?} s, {} writes",
        c.cold_s, traffic.writes
    );
    ColdResult {
        cold_s: c.cold_s,
        traffic,
        cpu_s: c.cold_cpu_s,
        load: c.cold_load,
        rss_peak_mb,
    }
}

/// The built-in controller's cold start and churn alone, on a fresh control plane and workload
/// of `shape`.
async fn builtin_alone(settings: &Settings, bins: &Bins, dir: &Path, shape: Shape) -> ControllerResult {
    let dir = dir.join("builtin");
    let (mut cp, client, world) = start_world(&dir, shape).await;
    let (mut bench, _) = bench_of(&client, world, &cp).await;
    let log = log_path(&dir, Who::Builtin, "alone");
    let kubeconfig = cp.kubeconfig_for(Who::Builtin.user(), cp.server_url());
    let mut builtin = Controller::builtin(&bins.builtin, &kubeconfig, &log, &settings.builtin_flags);
    let mut r = cold_start(&bench, &builtin, builtin_wants(&bench.world)).await;
    let kinds = [EventKind::Flip, EventKind::ScaleUp, EventKind::ScaleDown];
    churn_alone(&mut bench, settings, &mut builtin, &log, &kinds, &mut r).await;
    builtin.stop();
    bench.observer.stop();
    cp.stop().await;
    count_result(&audit::read(&cp.audit_log_path()), &mut r);
    r
}

/// A controller's requests in the windows of its cold start, new LaneRoutes and churn phases.
fn count_result(log: &[audit::Request], c: &mut ControllerResult) {
    let user = c.who.user();
    if let Some(w) = c.cold_window {
        c.cold_traffic = audit::traffic(log, user, w.from, w.to);
    }
    if let Some(w) = c.new_routes_window {
        c.new_routes_traffic = audit::traffic(log, user, w.from, w.to);
    }
    for p in &mut c.phases {
        count_traffic(log, p);
    }
}

/// Every kind of event at every rate with `c` the only controller, into `r`; then `c`'s peak RSS.
async fn churn_alone(
    bench: &mut Bench,
    settings: &Settings,
    c: &mut Controller,
    log: &Path,
    kinds: &[EventKind],
    r: &mut ControllerResult,
) {
    for &rate in &settings.rates {
        for &kind in kinds {
            c.check_alive(log);
            let phase = bench
                .churn(kind, rate, settings.count(rate), &[&*c], Order::Spread)
                .await;
            print_phase(c.who.label(), &phase);
            r.phases.push(phase);
        }
    }
    r.rss_peak_mb = c.rss_peak_mb(c.spawned, Instant::now());
}

/// A client for the admin user (the driver).
async fn driver_client(cp: &envtest::ControlPlane) -> Client {
    let mut config = envtest::config_from(cp.admin_kubeconfig()).await;
    // The driver's churn must not queue behind a slow request for long: a request that takes
    // this long is a failed event.
    config.read_timeout = Some(Duration::from_secs(60));
    Client::try_from(config).expect("client")
}

fn count_traffic(log: &[audit::Request], p: &mut PhaseResult) {
    if let Some(w) = p.window {
        for c in &mut p.per {
            c.traffic = audit::traffic(log, c.who.user(), w.from, w.to);
        }
    }
}

fn print_phase(who: &str, p: &PhaseResult) {
    let lat: Vec<String> = p
        .per
        .iter()
        .map(|c| {
            format!(
                "{} p50 {:.1} ms p99 {:.1} ms max {:.1} ms (n {}, timeouts {})",
                c.who.label(),
                c.latency.p50_ms,
                c.latency.p99_ms,
                c.latency.max_ms,
                c.latency.n,
                c.latency.timeouts
            )
        })
        .collect();
    eprintln!(
        "bench: {who}: {} x{} at {}/s (achieved {:.0}/s, {:.1} s): {}",
        p.kind.label(),
        p.events,
        p.rate,
        p.achieved_rate,
        p.duration_s,
        lat.join("; ")
    );
}

fn laneway_wants(slices: Vec<(String, Option<String>)>) -> Wants {
    slices
        .into_iter()
        .map(|(name, sig)| (Key::Slice(name), sig))
        .collect()
}

fn builtin_wants(world: &World) -> Wants {
    world
        .builtin_all()
        .into_iter()
        .map(|(svc, sig)| (Key::Service(svc), Some(sig)))
        .collect()
}

/// Waits for a controller started cold to show every slice, then to go quiet.
async fn cold_start(bench: &Bench, c: &Controller, wants: Wants) -> ControllerResult {
    let (api0, busy0) = (cpu_seconds(bench.apiserver_pid), machine_busy_seconds());
    let cold_s = bench
        .converge(
            &format!("{} cold", c.who.label()),
            wants,
            c.spawned,
            CONVERGE_TIMEOUT,
        )
        .await;
    let cold_load = ColdLoad {
        apiserver_cpu_s: cpu_seconds(bench.apiserver_pid) - api0,
        machine_busy_s: machine_busy_seconds() - busy0,
    };
    c.wait_quiet(Duration::from_secs(2), Duration::from_secs(120))
        .await;
    ControllerResult {
        who: c.who,
        cold_s,
        cold_traffic: Default::default(),
        cold_cpu_s: c.cpu_seconds(),
        cold_load,
        cold_window: Some(Window {
            from: c.spawned_wall,
            to: Timestamp::now(),
        }),
        new_routes_s: None,
        new_routes_traffic: Default::default(),
        new_routes_window: None,
        rss_converged_mb: c.rss_now_mb(),
        rss_peak_mb: 0.0,
        phases: Vec::new(),
    }
}

/// The namespace, CRDs, Nodes, Services, pods (created, then given a running status) and
/// LaneRoutes; the model learns the Services and LaneRoutes as the API server stored them.
async fn setup(client: &Client, world: &mut World) {
    cluster::apply_crds_in(client, &Path::new(env!("CARGO_MANIFEST_DIR")).join("crds")).await;
    let pp = PostParams::default();
    let namespaces: Api<Namespace> = Api::all(client.clone());
    for k in 0..world.shape.namespaces {
        namespaces
            .create(
                &pp,
                &from_json(serde_json::json!({"metadata": {"name": namespace_name(k)}})),
            )
            .await
            .expect("namespace");
    }
    let nodes: Api<Node> = Api::all(client.clone());
    for n in 0..NODES {
        nodes
            .create(&pp, &from_json(World::node_json(n)))
            .await
            .expect("node");
    }
    let manifests: Vec<(String, Value)> = (0..world.shape.services)
        .map(|s| (namespace_name(world.shape.ns_of(s)), world.service_json(s)))
        .collect();
    let created: Vec<Service> = futures::stream::iter(manifests)
        .map(|(ns, svc)| {
            let services: Api<Service> = Api::namespaced(client.clone(), &ns);
            async move { services.create(&PostParams::default(), &from_json(svc)).await }
        })
        .buffer_unordered(SETUP_CONCURRENCY)
        .try_collect()
        .await
        .expect("services");
    for svc in &created {
        world.add_service(ServiceInfo::from_service(svc).expect("service info"));
    }
    let work: Vec<(String, Value, Value)> = world
        .pod_names()
        .into_iter()
        .map(|n| {
            let (pod, status) = (world.pod_json(&n), world.pod_status_json(&n));
            (n, pod, status)
        })
        .collect();
    futures::stream::iter(work)
        .map(|(name, pod, status)| {
            let ns = pod["metadata"]["namespace"]
                .as_str()
                .expect("namespace")
                .to_owned();
            let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
            async move {
                pods.create(&PostParams::default(), &from_json(pod)).await?;
                pods.patch_status(&name, &PatchParams::default(), &Patch::Merge(&status))
                    .await
            }
        })
        .buffer_unordered(SETUP_CONCURRENCY)
        .try_for_each(|_| async { Ok(()) })
        .await
        .expect("pods");
    let routes = create_routes(client, world, world.shape.initial_routes()).await;
    world.add_routes(routes);
}

async fn create_routes(client: &Client, world: &World, ids: Vec<(usize, usize)>) -> Vec<LaneRoute> {
    let manifests: Vec<(usize, Value)> = ids.into_iter().map(|id| (id.0, world.route_json(id))).collect();
    futures::stream::iter(manifests)
        .map(|(k, m)| {
            let api: Api<LaneRoute> = Api::namespaced(client.clone(), &namespace_name(k));
            async move {
                let route: LaneRoute = from_json(m);
                // The API of a just-established CRD can answer 404 for a moment.
                for _ in 0..100 {
                    match api.create(&PostParams::default(), &route).await {
                        Err(kube::Error::Api(e)) if e.code == 404 => {
                            tokio::time::sleep(Duration::from_millis(100)).await
                        }
                        other => return other.expect("LaneRoute"),
                    }
                }
                panic!("the LaneRoute API never came up");
            }
        })
        .buffer_unordered(SETUP_CONCURRENCY)
        .collect()
        .await
}

fn from_json<T: serde::de::DeserializeOwned>(v: Value) -> T {
    serde_json::from_value(v).expect("manifest")
}
