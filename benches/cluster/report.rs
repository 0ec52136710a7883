//! The results (kept as JSON next to the run's logs, for the plot and for later comparison) and
//! the section of BENCHMARKS.md rendered from them.

use std::fmt::Write as _;
use std::path::Path;

use k8s_openapi::jiff::Timestamp;
use serde::{Deserialize, Serialize};

use crate::audit::Traffic;
use crate::dev::DevResult;
use crate::procs::Who;
use crate::world::{EventKind, Shape};

pub const START: &str = "<!-- bench-cluster:start -->";
pub const END: &str = "<!-- bench-cluster:end -->";

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Latency {
    /// Events seen done (the percentiles are over these).
    pub n: usize,
    pub timeouts: usize,
    pub p50_ms: f64,
    pub p90_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
    /// Every event's latency, sorted, to 0.1 ms: for percentiles over several runs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub samples_ms: Vec<f64>,
}

/// Nearest rank of sorted `ms`: the smallest value with at least `p` of them at or below it.
fn percentile(ms: &[f64], p: f64) -> f64 {
    if ms.is_empty() {
        return 0.0;
    }
    let rank = (p * ms.len() as f64).ceil() as usize;
    ms[rank.clamp(1, ms.len()) - 1]
}

impl Latency {
    pub fn of(mut ms: Vec<f64>, timeouts: usize) -> Latency {
        ms.sort_by(f64::total_cmp);
        Latency {
            n: ms.len(),
            timeouts,
            p50_ms: percentile(&ms, 0.50),
            p90_ms: percentile(&ms, 0.90),
            p99_ms: percentile(&ms, 0.99),
            max_ms: ms.last().copied().unwrap_or(0.0),
            samples_ms: ms.iter().map(|x| (x * 10.0).round() / 10.0).collect(),
        }
    }

    /// The p99 of the events of every run together; `None` if a run kept no samples.
    pub fn pooled_p99<'a>(runs: impl IntoIterator<Item = &'a Latency>) -> Option<f64> {
        let mut all = Vec::new();
        for l in runs {
            if l.samples_ms.len() != l.n || l.n == 0 {
                return None;
            }
            all.extend_from_slice(&l.samples_ms);
        }
        all.sort_by(f64::total_cmp);
        (!all.is_empty()).then(|| percentile(&all, 0.99))
    }
}

/// A span of wall-clock time, to count the audit log's requests in.
#[derive(Clone, Copy, Debug)]
pub struct Window {
    pub from: Timestamp,
    pub to: Timestamp,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct PerController {
    pub who: Who,
    pub latency: Latency,
    pub cpu_s: f64,
    pub rss_peak_mb: f64,
    pub traffic: Traffic,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct PhaseResult {
    pub kind: EventKind,
    pub rate: f64,
    pub events: usize,
    pub achieved_rate: f64,
    pub errors: usize,
    /// From the first event to the controllers gone quiet after the last.
    pub duration_s: f64,
    pub apiserver_cpu_s: f64,
    pub driver_cpu_s: f64,
    /// CPU the rest of the machine used meanwhile (other builds and tests: noise).
    pub other_cpu_s: f64,
    pub per: Vec<PerController>,
    #[serde(skip)]
    pub window: Option<Window>,
}

impl PhaseResult {
    pub fn of(&self, who: Who) -> Option<&PerController> {
        self.per.iter().find(|p| p.who == who)
    }

    pub fn writes_per_event(&self, who: Who) -> Option<f64> {
        let p = self.of(who)?;
        Some(p.traffic.writes as f64 / self.events.max(1) as f64)
    }

    pub fn requests_per_second(&self, who: Who) -> Option<f64> {
        let p = self.of(who)?;
        Some(p.traffic.requests as f64 / self.duration_s.max(1e-9))
    }

    pub fn cpu_per_1k(&self, who: Who) -> Option<f64> {
        Some(self.of(who)?.cpu_s * 1000.0 / self.events.max(1) as f64)
    }
}

/// One controller on its own.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ControllerResult {
    pub who: Who,
    /// From the process start to every slice seen as it should be.
    pub cold_s: Option<f64>,
    pub cold_traffic: Traffic,
    /// CPU from the process start until it was quiet after converging.
    pub cold_cpu_s: f64,
    #[serde(default)]
    pub cold_load: ColdLoad,
    #[serde(skip)]
    pub cold_window: Option<Window>,
    /// From the first of the new LaneRoutes' requests to every slice they change seen right.
    pub new_routes_s: Option<f64>,
    pub new_routes_traffic: Traffic,
    #[serde(skip)]
    pub new_routes_window: Option<Window>,
    /// RSS once converged from cold, and the highest seen while it ran alone (before new routes).
    pub rss_converged_mb: f64,
    pub rss_peak_mb: f64,
    pub phases: Vec<PhaseResult>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ScaleResult {
    pub shape: Shape,
    pub laneway_slices: usize,
    pub setup_s: f64,
    pub total_s: f64,
    pub load_average: String,
    pub alone: Vec<ControllerResult>,
    /// Both controllers at once, timed on the same events.
    pub both: Vec<PhaseResult>,
    /// laneway's cold start with headless Services (`--service-cluster-ip=none`).
    #[serde(default)]
    pub headless: Option<ColdResult>,
}

/// What the machine spent from a controller's start until it converged.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize)]
pub struct ColdLoad {
    /// The API server's CPU (etcd included).
    pub apiserver_cpu_s: f64,
    /// Every process on the machine, all cores.
    pub machine_busy_s: f64,
}

impl ColdLoad {
    /// "API server CPU s / cores busy", over `cold_s`.
    pub fn cell(&self, cold_s: Option<f64>) -> String {
        match cold_s {
            Some(t) if t > 0.0 => format!(
                "{} / {}",
                num(self.apiserver_cpu_s, 1),
                num(self.machine_busy_s / t, 2)
            ),
            _ => "n/a".to_owned(),
        }
    }
}

/// A cold start alone: from the process start to every slice seen as it should be.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ColdResult {
    pub cold_s: Option<f64>,
    pub traffic: Traffic,
    pub cpu_s: f64,
    #[serde(default)]
    pub load: ColdLoad,
    pub rss_peak_mb: f64,
}

impl ScaleResult {
    pub fn alone(&self, who: Who) -> Option<&ControllerResult> {
        self.alone.iter().find(|c| c.who == who)
    }
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Results {
    pub date: String,
    pub laneway_commit: String,
    pub builtin_flags: Vec<String>,
    /// The resolution-shaped workload, the first run of each pod count (the tables and the plot).
    pub scales: Vec<ScaleResult>,
    /// Further runs of the same pod counts (`BENCH_REPEAT`), for the median of the ratios.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub repeats: Vec<ScaleResult>,
    /// The developer-lane workload, every run.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dev: Vec<DevResult>,
}

fn ms(v: f64) -> String {
    if v >= 100.0 {
        format!("{v:.0}")
    } else if v >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

pub(crate) fn num(v: f64, digits: usize) -> String {
    format!("{v:.digits$}")
}

pub(crate) fn pods(n: usize) -> String {
    if n >= 1000 && n % 1000 == 0 {
        format!("{}k", n / 1000)
    } else {
        n.to_string()
    }
}

/// The pod count of a run, with its namespaces when there are several.
fn scale(shape: &Shape) -> String {
    match shape.namespaces {
        1 => pods(shape.pods),
        n => format!("{} ({n} namespaces)", pods(shape.pods)),
    }
}

/// "a / b" for laneway and the built-in controller, "n/a" where one has nothing to do.
fn pair(l: Option<String>, b: Option<String>) -> String {
    let na = || "n/a".to_owned();
    format!("{} / {}", l.unwrap_or_else(na), b.unwrap_or_else(na))
}

fn lat(p: Option<&PhaseResult>, who: Who, f: impl Fn(&Latency) -> f64) -> Option<String> {
    let l = &p?.of(who)?.latency;
    if l.n == 0 {
        return None;
    }
    let timeouts = if l.timeouts > 0 {
        format!(" ({} timed out)", l.timeouts)
    } else {
        String::new()
    };
    Some(format!("{}{timeouts}", ms(f(l))))
}

const KINDS: [EventKind; 4] = [
    EventKind::Flip,
    EventKind::Relabel,
    EventKind::ScaleUp,
    EventKind::ScaleDown,
];

fn phase(c: Option<&ControllerResult>, kind: EventKind, rate: f64) -> Option<&PhaseResult> {
    c?.phases.iter().find(|p| p.kind == kind && p.rate == rate)
}

/// "300 events per type at 20/s, 1000 at 200/s", from the runs themselves.
fn sample_sizes(r: &Results) -> String {
    let mut by_rate: Vec<(f64, usize)> = Vec::new();
    for p in r
        .scales
        .iter()
        .flat_map(|s| s.alone.iter().flat_map(|c| c.phases.iter()))
    {
        match by_rate.iter_mut().find(|(rate, _)| *rate == p.rate) {
            Some((_, n)) => *n = (*n).max(p.events),
            None => by_rate.push((p.rate, p.events)),
        }
    }
    by_rate.sort_by(|a, b| a.0.total_cmp(&b.0));
    let parts: Vec<String> = by_rate
        .iter()
        .enumerate()
        .map(|(i, (rate, n))| {
            let what = if i == 0 { " events per type" } else { "" };
            format!("{n}{what} at {rate:.0}/s")
        })
        .collect();
    parts.join(", ")
}

/// The section, markers included.
pub fn render(r: &Results, plot: Option<&str>) -> String {
    let mut o = String::new();
    let _ = writeln!(o, "{START}");
    let _ = writeln!(
        o,
        "## laneway next to the built-in EndpointSlice controller — `make bench-cluster`\n"
    );
    let _ = writeln!(
        o,
        "`benches/cluster.rs` runs laneway (release build, default flags) and the built-in \
         EndpointSlice controller (`tests/endpointslice`: 5 workers, batch period 0, flags `{}`) \
         each alone on a fresh local kube-apiserver + etcd (`tests/envtest`) and workload of \
         its own, then both at once on laneway's as a cross-check. Workload as in the \
         resolution benchmark, scaled with the pod count: N pods on 10 Nodes, N/10 Services \
         of 10 pods (2 of them in a lane), N/200 LaneRoutes of 100 services with a fallback \
         lane (every tenth strict); one namespace up to 10k pods; above that 500 pods per \
         namespace, each with 2 LaneRoutes of its own over all of its 50 Services, and laneway \
         watching all namespaces. \
         The driver plays the kubelet: pod status through the status subresource, Ready \
         `lastTransitionTime` strictly increasing per pod.\n",
        r.builtin_flags.join(" ")
    );
    let _ = writeln!(
        o,
        "- **Events**: a readiness flip (the Ready condition of a pod both controllers publish \
         turns False, or back to True); a relabel (an untagged pod gets a lane label, or loses \
         it: nothing for the built-in controller to do, n/a); a scale-up (a pod created, then \
         given a running, ready status); a scale-down (a pod deleted with grace period 0: the \
         API server marks it terminating and removes it at once, two pod events). Events are \
         spread over the Services.\n\
         - **Latency**: from the driver's request to the watch event that showed the *last* \
         affected slice in its new state. Which slices must change, and to what, comes from \
         laneway's own core (`lanes::Index`) for laneway and from the Service's pods for the \
         built-in controller (every slice of the Service). Two events in flight never touch \
         one Service (a controller may fold them into one write); when every Service is busy \
         the driver waits, and the rate it achieved is shown when it fell short (at 1k pods \
         there are only 100 Services). Percentiles are over {}.\n\
         - **Writes per event** and **API requests/s**: the API server's audit log, per \
         identity (each controller has its own token; the driver is not audited), over the \
         phase from its first event until the controller has been quiet for 1 s; Lease \
         renewals are left out of writes (they are in requests). laneway's writes include \
         LaneRoute statuses and Events.\n\
         - **CPU**: utime + stime of the controller process over the phase (`/proc`); **RSS**: \
         VmRSS sampled every 100 ms.\n\
         - The built-in controller runs without a client rate limit, as laneway does by default: \
         with kube-controller-manager's 20 requests/s (`BENCH_BUILTIN_FLAGS=\"--qps 20 --burst \
         30\"`) the 200 events/s figures would measure its rate limiter. Its scale-down tail near \
         1 s is its own retry: the deletion arrives before its write of the terminating state \
         is back in its informer (\"EndpointSlice informer cache is out of date\"), and it \
         retries after 1 s.\n\
         - Measured {}; laneway {}. The machine is shared: the CPU other work used during each \
         phase is in the last table.\n",
        sample_sizes(r),
        r.date,
        r.laneway_commit
    );
    let _ = writeln!(o, "### Event → slice latency, one controller at a time\n");
    let _ = writeln!(
        o,
        "Each cell is laneway / built-in.\n\n\
         | pods | event | rate /s | p50 ms | p99 ms | max ms | events timed | writes per event | API requests/s | CPU s per 1k events |\n\
         | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
    );
    for s in &r.scales {
        let l = s.alone(Who::Laneway);
        let b = s.alone(Who::Builtin);
        let mut rates: Vec<f64> = l
            .iter()
            .chain(b.iter())
            .flat_map(|c| c.phases.iter().map(|p| p.rate))
            .collect();
        rates.sort_by(f64::total_cmp);
        rates.dedup();
        for rate in &rates {
            for kind in KINDS {
                let (pl, pb) = (phase(l, kind, *rate), phase(b, kind, *rate));
                if pl.is_none() && pb.is_none() {
                    continue;
                }
                let short =
                    |p: Option<&PhaseResult>| p.map(|p| p.achieved_rate < 0.95 * p.rate).unwrap_or(false);
                let rate_cell = if short(pl) || short(pb) {
                    let achieved = |p: Option<&PhaseResult>| p.map(|p| format!("{:.0}", p.achieved_rate));
                    format!("{rate:.0} (achieved {})", pair(achieved(pl), achieved(pb)))
                } else {
                    format!("{rate:.0}")
                };
                let n =
                    |p: Option<&PhaseResult>, who| p.and_then(|p| p.of(who)).map(|c| c.latency.n.to_string());
                let _ = writeln!(
                    o,
                    "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                    scale(&s.shape),
                    kind.label(),
                    rate_cell,
                    pair(
                        lat(pl, Who::Laneway, |l| l.p50_ms),
                        lat(pb, Who::Builtin, |l| l.p50_ms)
                    ),
                    pair(
                        lat(pl, Who::Laneway, |l| l.p99_ms),
                        lat(pb, Who::Builtin, |l| l.p99_ms)
                    ),
                    pair(
                        lat(pl, Who::Laneway, |l| l.max_ms),
                        lat(pb, Who::Builtin, |l| l.max_ms)
                    ),
                    pair(n(pl, Who::Laneway), n(pb, Who::Builtin)),
                    pair(
                        pl.and_then(|p| p.writes_per_event(Who::Laneway))
                            .map(|v| num(v, 2)),
                        pb.and_then(|p| p.writes_per_event(Who::Builtin))
                            .map(|v| num(v, 2))
                    ),
                    pair(
                        pl.and_then(|p| p.requests_per_second(Who::Laneway))
                            .map(|v| num(v, 0)),
                        pb.and_then(|p| p.requests_per_second(Who::Builtin))
                            .map(|v| num(v, 0))
                    ),
                    pair(
                        pl.and_then(|p| p.cpu_per_1k(Who::Laneway)).map(|v| num(v, 2)),
                        pb.and_then(|p| p.cpu_per_1k(Who::Builtin)).map(|v| num(v, 2))
                    ),
                );
            }
        }
    }

    let _ = writeln!(o, "\n### Convergence and footprint\n");
    let _ = writeln!(
        o,
        "Cold: from the process start (nothing of its own in the cluster yet) to every slice \
         seen as it should be; laneway with headless lane and baseline Services \
         (`--service-cluster-ip=none`) on a fresh control plane and workload of its own. New \
         LaneRoutes: from the first create request to every slice they add or change seen right \
         (50 at 10k pods and above, 5 at 1k; the built-in controller has no LaneRoutes), next to \
         the time the same writes take at kube-controller-manager's client limit of 20 \
         requests/s. API server CPU and cores busy (of the machine's, every process) from the \
         start to converged. RSS: once converged, and the highest while it ran alone.\n\n\
         | pods | controller | slices | cold → converged s | writes to converge | CPU s to converge | API server CPU s / cores busy to converge | new LaneRoutes → converged s (the same writes at 20/s) | RSS converged MB | RSS peak MB | RSS peak per 1k pods MB |\n\
         | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
    );
    for s in &r.scales {
        for c in &s.alone {
            let slices = match c.who {
                Who::Laneway => s.laneway_slices,
                Who::Builtin => s.shape.services,
            };
            let new_routes = match (c.who, c.new_routes_s) {
                (Who::Builtin, _) => "n/a".to_owned(),
                (_, Some(v)) => format!(
                    "{} ({} writes; {} at 20/s)",
                    num(v, 2),
                    c.new_routes_traffic.writes,
                    num(c.new_routes_traffic.writes as f64 / 20.0, 1)
                ),
                (_, None) => "did not converge".to_owned(),
            };
            let _ = writeln!(
                o,
                "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                scale(&s.shape),
                c.who.label(),
                slices,
                c.cold_s.map_or("did not converge".to_owned(), |v| num(v, 2)),
                c.cold_traffic.writes,
                num(c.cold_cpu_s, 1),
                c.cold_load.cell(c.cold_s),
                new_routes,
                num(c.rss_converged_mb, 0),
                num(c.rss_peak_mb, 0),
                num(c.rss_peak_mb * 1000.0 / s.shape.pods as f64, 1),
            );
        }
        if let Some(h) = &s.headless {
            let _ = writeln!(
                o,
                "| {} | laneway, headless Services | {} | {} | {} | {} | {} | n/a | n/a | {} | {} |",
                scale(&s.shape),
                s.laneway_slices,
                h.cold_s.map_or("did not converge".to_owned(), |v| num(v, 2)),
                h.traffic.writes,
                num(h.cpu_s, 1),
                h.load.cell(h.cold_s),
                num(h.rss_peak_mb, 0),
                num(h.rss_peak_mb * 1000.0 / s.shape.pods as f64, 1),
            );
        }
    }

    // At 1k pods the fixed cost of the process dominates; the slope between one run and the
    // next is what each further 1k pods costs, and where it changes, growth stops being linear.
    let mut sizes: Vec<&ScaleResult> = r.scales.iter().collect();
    sizes.sort_by_key(|s| s.shape.pods);
    let steps: Vec<String> = sizes
        .windows(2)
        .filter(|w| w[1].shape.pods > w[0].shape.pods)
        .map(|w| {
            let (small, large) = (w[0], w[1]);
            let k = (large.shape.pods - small.shape.pods) as f64 / 1000.0;
            let slope = |who| {
                let (a, b) = (small.alone(who)?, large.alone(who)?);
                Some(format!("{} MB", num((b.rss_peak_mb - a.rss_peak_mb) / k, 1)))
            };
            format!(
                "{} → {} pods: laneway {}, built-in {}",
                pods(small.shape.pods),
                pods(large.shape.pods),
                slope(Who::Laneway).unwrap_or_else(|| "n/a".into()),
                slope(Who::Builtin).unwrap_or_else(|| "n/a".into()),
            )
        })
        .collect();
    if !steps.is_empty() {
        let _ = writeln!(o, "\nPeak RSS added per further 1k pods, {}.", steps.join("; "));
    }

    if r.scales.iter().any(|s| !s.both.is_empty()) {
        let _ = writeln!(o, "\n### Cross-check: both controllers at once\n");
        let _ = writeln!(
            o,
            "The same events timed for both controllers while both run (they share the 2 cores \
             with the API server and the driver, so both are slower than alone).\n\n\
             | pods | event | rate /s | p50 ms | p99 ms | max ms | writes per event | CPU s per 1k events |\n\
             | --- | --- | --- | --- | --- | --- | --- | --- |"
        );
        for s in &r.scales {
            for p in &s.both {
                let rate = if p.achieved_rate < 0.95 * p.rate {
                    format!("{:.0} (achieved {:.0})", p.rate, p.achieved_rate)
                } else {
                    format!("{:.0}", p.rate)
                };
                let _ = writeln!(
                    o,
                    "| {} | {} | {} | {} | {} | {} | {} | {} |",
                    scale(&s.shape),
                    p.kind.label(),
                    rate,
                    pair(
                        lat(Some(p), Who::Laneway, |l| l.p50_ms),
                        lat(Some(p), Who::Builtin, |l| l.p50_ms)
                    ),
                    pair(
                        lat(Some(p), Who::Laneway, |l| l.p99_ms),
                        lat(Some(p), Who::Builtin, |l| l.p99_ms)
                    ),
                    pair(
                        lat(Some(p), Who::Laneway, |l| l.max_ms),
                        lat(Some(p), Who::Builtin, |l| l.max_ms)
                    ),
                    pair(
                        p.writes_per_event(Who::Laneway).map(|v| num(v, 2)),
                        (p.kind != EventKind::Relabel)
                            .then(|| p.writes_per_event(Who::Builtin).map(|v| num(v, 2)))
                            .flatten()
                    ),
                    pair(
                        p.cpu_per_1k(Who::Laneway).map(|v| num(v, 2)),
                        p.cpu_per_1k(Who::Builtin).map(|v| num(v, 2))
                    ),
                );
            }
        }
    }

    if !r.repeats.is_empty() {
        render_repeats(r, &mut o);
    }

    let _ = writeln!(o, "\n### Who was busy\n");
    let _ = writeln!(
        o,
        "CPU seconds per 1k events at the highest rate, one controller at a time: the controller, \
         the API server (etcd included), the benchmark driver, and everything else on the machine \
         (other builds and tests: noise in every figure above when it is large).\n\n\
         | pods | event | laneway run: laneway / API server / driver / others | built-in run: built-in / API server / driver / others | setup s | whole run s | load average at start |\n\
         | --- | --- | --- | --- | --- | --- | --- |"
    );
    for s in &r.scales {
        let top = |c: Option<&ControllerResult>, kind| {
            let c = c?;
            let rate = c.phases.iter().map(|p| p.rate).fold(0.0, f64::max);
            let p = c.phases.iter().find(|p| p.kind == kind && p.rate == rate)?;
            let k = 1000.0 / p.events.max(1) as f64;
            Some(format!(
                "{} / {} / {} / {}",
                num(p.per.first()?.cpu_s * k, 2),
                num(p.apiserver_cpu_s * k, 2),
                num(p.driver_cpu_s * k, 2),
                num(p.other_cpu_s * k, 2)
            ))
        };
        for (i, kind) in KINDS.iter().enumerate() {
            let (setup, total, load) = if i == 0 {
                (num(s.setup_s, 0), num(s.total_s, 0), s.load_average.clone())
            } else {
                Default::default()
            };
            let _ = writeln!(
                o,
                "| {} | {} | {} | {} | {setup} | {total} | {load} |",
                scale(&s.shape),
                kind.label(),
                top(s.alone(Who::Laneway), *kind).unwrap_or_else(|| "n/a".into()),
                top(s.alone(Who::Builtin), *kind).unwrap_or_else(|| "n/a".into()),
            );
        }
    }
    if let Some(plot) = plot {
        let _ = writeln!(
            o,
            "\n![p99 latency and RSS against pods, laneway and the built-in controller]({plot})"
        );
    }
    let _ = writeln!(o, "{END}");
    o
}

pub(crate) fn median(mut v: Vec<f64>) -> Option<f64> {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => Some(v[n / 2]),
        _ => Some((v[n / 2 - 1] + v[n / 2]) / 2.0),
    }
}

/// The headline ratios of every run of each pod count (`BENCH_REPEAT`), and their median:
/// p99 latency and writes per event, laneway over the built-in controller, one at a time.
fn render_repeats(r: &Results, o: &mut String) {
    let runs = |pods: usize| -> Vec<&ScaleResult> {
        r.scales
            .iter()
            .chain(&r.repeats)
            .filter(|s| s.shape.pods == pods)
            .collect()
    };
    let n = r
        .scales
        .iter()
        .map(|s| runs(s.shape.pods).len())
        .max()
        .unwrap_or(1);
    let _ = writeln!(o, "\n### Repeated runs\n");
    let _ = writeln!(
        o,
        "laneway ÷ built-in, one controller at a time, each pod count run {n} times on a fresh \
         control plane (`BENCH_REPEAT`): the median of the runs, and each run's ratio; and the \
         p99 of every run's events taken together, per controller. The tables above are the \
         first run.\n\n\
         | pods | event | rate /s | p99 ratio, median (each run) | p99 of all runs' events, ms (ratio) | writes per event ratio, median (each run) |\n\
         | --- | --- | --- | --- | --- | --- |"
    );
    for s in &r.scales {
        let all = runs(s.shape.pods);
        let mut rates: Vec<f64> = s
            .alone
            .iter()
            .flat_map(|c| c.phases.iter().map(|p| p.rate))
            .collect();
        rates.sort_by(f64::total_cmp);
        rates.dedup();
        for rate in rates {
            for kind in KINDS {
                let ratio = |f: &dyn Fn(&PhaseResult, Who) -> Option<f64>| -> Option<String> {
                    let v: Vec<f64> = all
                        .iter()
                        .filter_map(|s| {
                            let l = f(phase(s.alone(Who::Laneway), kind, rate)?, Who::Laneway)?;
                            let b = f(phase(s.alone(Who::Builtin), kind, rate)?, Who::Builtin)?;
                            (b > 0.0).then(|| l / b)
                        })
                        .collect();
                    let m = median(v.clone())?;
                    let each: Vec<String> = v.iter().map(|x| num(*x, 2)).collect();
                    Some(format!("{} ({})", num(m, 2), each.join(", ")))
                };
                let p99 = ratio(&|p, who| {
                    let l = &p.of(who)?.latency;
                    (l.n > 0).then_some(l.p99_ms)
                });
                let pooled_of = |who: Who| {
                    let runs = all.iter().map(|s| {
                        let p = phase(s.alone(who), kind, rate)?;
                        Some(&p.of(who)?.latency)
                    });
                    Latency::pooled_p99(runs.collect::<Option<Vec<_>>>()?)
                };
                let pooled = match (pooled_of(Who::Laneway), pooled_of(Who::Builtin)) {
                    (Some(l), Some(b)) if b > 0.0 => {
                        format!("{} / {} ({})", num(l, 1), num(b, 1), num(l / b, 2))
                    }
                    _ => "n/a".to_owned(),
                };
                let writes = ratio(&|p, who| p.writes_per_event(who));
                if p99.is_none() && writes.is_none() {
                    continue;
                }
                let na = || "n/a".to_owned();
                let _ = writeln!(
                    o,
                    "| {} | {} | {rate:.0} | {} | {pooled} | {} |",
                    scale(&s.shape),
                    kind.label(),
                    p99.unwrap_or_else(na),
                    writes.unwrap_or_else(na)
                );
            }
        }
    }
    let _ = writeln!(
        o,
        "\nCold start → converged and peak RSS, laneway ÷ built-in, median (each run):\n\n\
         | pods | cold start | cold start, headless Services | RSS peak |\n\
         | --- | --- | --- | --- |"
    );
    for s in &r.scales {
        let all = runs(s.shape.pods);
        let ratio = |f: &dyn Fn(&ScaleResult) -> Option<(f64, f64)>| -> String {
            let v: Vec<f64> = all
                .iter()
                .filter_map(|s| f(s))
                .filter(|(_, b)| *b > 0.0)
                .map(|(l, b)| l / b)
                .collect();
            let each: Vec<String> = v.iter().map(|x| num(*x, 2)).collect();
            median(v).map_or("n/a".to_owned(), |m| {
                format!("{} ({})", num(m, 2), each.join(", "))
            })
        };
        let cold = ratio(&|s| Some((s.alone(Who::Laneway)?.cold_s?, s.alone(Who::Builtin)?.cold_s?)));
        let headless = ratio(&|s| Some((s.headless.as_ref()?.cold_s?, s.alone(Who::Builtin)?.cold_s?)));
        let rss = ratio(&|s| {
            Some((
                s.alone(Who::Laneway)?.rss_peak_mb,
                s.alone(Who::Builtin)?.rss_peak_mb,
            ))
        });
        let _ = writeln!(o, "| {} | {cold} | {headless} | {rss} |", scale(&s.shape));
    }
}

/// Replaces the section between the markers in `path`, or appends it when there is none.
pub fn write_section(path: &Path, section: &str) {
    write_marked(path, START, END, section)
}

/// Replaces what lies between `start` and `end` in `path` (markers included) by `section`, or
/// appends it when there are no such markers.
pub fn write_marked(path: &Path, start: &str, end: &str, section: &str) {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let updated = match (text.find(start), text.find(end)) {
        (Some(a), Some(b)) if a < b => {
            format!("{}{}{}", &text[..a], section.trim_end(), &text[b + end.len()..])
        }
        _ => {
            let sep = if text.ends_with("\n\n") || text.is_empty() {
                ""
            } else if text.ends_with('\n') {
                "\n"
            } else {
                "\n\n"
            };
            format!("{text}{sep}{section}")
        }
    };
    let tmp = path.with_extension("md.tmp");
    std::fs::write(&tmp, updated).expect("write BENCHMARKS.md");
    std::fs::rename(&tmp, path).expect("replace BENCHMARKS.md");
}
