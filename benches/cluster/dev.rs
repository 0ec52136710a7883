//! The developer-lane workload (`BENCH_DEV_*`): what one event costs in API writes when many
//! developer lanes span every Service but own pods in only a few, so that most of a Service's
//! lanes fall back to baseline.
//!
//! Shape ([`Shape::dev`]): S Services of 10 untagged pods (1,000 a namespace at most), L
//! LaneRoutes in each namespace with `serviceSelector: {}`, each with one pod in 1-3 Services. Per
//! size and L: a fresh control plane and workload; the built-in controller alone (cold start,
//! then the events one at a time, then at fixed rates), then laneway alone (the same). The
//! first phases send events one at a time, so that the audit log tells each event's writes
//! apart: the next request is sent once the previous event is seen in the slices and the
//! controller has written nothing for [`QUIET_BETWEEN`] (laneway's LaneRoute status writes left
//! out: they are paced by time, not by events). A phase ends when the controller has written
//! nothing for [`tail_quiet`] and, for laneway, no LaneRoute status turn is still to come:
//! laneway writes a LaneRoute status whose change is endpoint counts alone at most every 10 s
//! (`COUNT_REFRESH` in src/controller/planner/pacing.rs), and the routine status writes of all
//! LaneRoutes share 500 service entries a second (`COUNT_BUDGET`), so one round of L LaneRoutes
//! of S services takes up to L x S / 500 s (100 s at 10k pods, L = 50); those held-back writes
//! belong to the phase.
//!
//! After those, for each controller, baseline readiness flips at fixed rates
//! ([`Bench::at_rate`]): each rate of `BENCH_DEV_RATES` (default `0.33,20,200` events/s) a
//! phase of its own, `BENCH_DEV_RATE_EVENTS` flips per rate (default 15 s of them, at least 30
//! and at most 1000: 30 at 0.33/s, 300 at 20/s, 1000 at 200/s), paced as the resolution
//! workload's churn ([`Bench::churn`]): each event sent on schedule, never two in flight in
//! one Service; Services in rounds, a pod of each taken down, then brought back up by the same
//! round again ([`Order::Pairs`]). A phase is counted until the controller is quiet as above
//! ([`tail_quiet`]), writes split into slices / LaneRoute statuses / other, with p50 and p99
//! latency (request → slices seen). With the defaults they take about 4.5 minutes at 1k
//! pods, L = 20, both controllers together (90 s of flips at 0.33/s each, and laneway's
//! 11.5 s quiet after each phase).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use serde::{Deserialize, Serialize};

use crate::audit::{self, Traffic};
use crate::churn::{send, stride, wants_for, Bench, Order};
use crate::procs::{log_path, Controller, Quiet, Who};
use crate::report::{median, num, pods, Latency, Results, Window};
use crate::world::{Change, EventKind, Shape};
use crate::{bench_of, builtin_wants, cold_start, laneway_wants, load_average, start_world};
use crate::{Bins, Settings};

pub const START: &str = "<!-- bench-cluster-dev:start -->";
pub const END: &str = "<!-- bench-cluster-dev:end -->";

/// The events of the workload, in the order they run.
pub const KINDS: [EventKind; 5] = [
    EventKind::BaselineFlip,
    EventKind::Relabel,
    EventKind::ScaleUp,
    EventKind::ScaleDown,
    EventKind::Rollout,
];

/// Between two events: the controller has written nothing for this long.
pub const QUIET_BETWEEN: Duration = Duration::from_millis(300);

/// Longest wait for [`tail_quiet`]: a minute past one round of the status budget (500 service
/// entries a second), every LaneRoute's status with an entry for every Service of its
/// namespace (100 s at 10k pods, L = 50; 500 s at 50k).
fn tail_limit(shape: &Shape) -> Duration {
    Duration::from_secs(60 + (shape.routes * shape.services_per_route / 500) as u64)
}

/// How long a controller must have written nothing before a phase ends: past laneway's 10 s
/// hold on LaneRoute statuses that change only endpoint counts.
pub fn tail_quiet(who: Who) -> Duration {
    match who {
        Who::Laneway => Duration::from_millis(11_500),
        Who::Builtin => Duration::from_secs(1),
    }
}

/// One event's writes (from its request to the next event's request; the last event's run to
/// the end of the phase).
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize)]
pub struct EventWrites {
    pub writes: u64,
    pub slices: u64,
    pub statuses: u64,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct DevPhase {
    pub kind: EventKind,
    pub events: usize,
    pub errors: usize,
    /// From the first request to the controller quiet after the last event.
    pub duration_s: f64,
    /// Events per second the pacing came to (to the last event's quiet, before the tail).
    pub pace: f64,
    /// Request → the last affected slice seen; a rolling update: its first request to its last
    /// step seen.
    pub latency: Latency,
    pub cpu_s: f64,
    pub traffic: Traffic,
    pub per_event: Vec<EventWrites>,
    #[serde(skip)]
    pub window: Option<Window>,
    #[serde(skip)]
    pub starts: Vec<Timestamp>,
    /// The rate of a phase of events at a fixed rate (`BENCH_DEV_RATES`); `None`: one at a
    /// time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate: Option<f64>,
}

impl DevPhase {
    pub fn writes_per_event(&self) -> f64 {
        self.traffic.writes as f64 / self.events.max(1) as f64
    }

    /// Median and largest of one figure over the events.
    fn per_event(&self, f: impl Fn(&EventWrites) -> u64) -> Option<(f64, u64)> {
        let mut v: Vec<u64> = self.per_event.iter().map(f).collect();
        v.sort();
        let n = v.len();
        let max = *v.last()?;
        let median = if n % 2 == 1 {
            v[n / 2] as f64
        } else {
            (v[n / 2 - 1] + v[n / 2]) as f64 / 2.0
        };
        Some((median, max))
    }
}

fn resource_writes(t: &Traffic, resource: &str) -> u64 {
    t.writes_by_resource.get(resource).copied().unwrap_or(0)
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct DevRun {
    pub who: Who,
    pub cold_s: Option<f64>,
    pub cold_traffic: Traffic,
    #[serde(skip)]
    pub cold_window: Option<Window>,
    pub phases: Vec<DevPhase>,
    /// Baseline readiness flips at each rate of `BENCH_DEV_RATES` (none in results of before).
    #[serde(default)]
    pub rates: Vec<DevPhase>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct DevResult {
    pub shape: Shape,
    /// Which repetition of this size and L (0: the first).
    pub run: usize,
    pub laneway_slices: usize,
    pub setup_s: f64,
    pub total_s: f64,
    pub load_average: String,
    pub runs: Vec<DevRun>,
}

impl DevResult {
    pub fn of(&self, who: Who) -> Option<&DevRun> {
        self.runs.iter().find(|r| r.who == who)
    }

    fn phase(&self, who: Who, kind: EventKind) -> Option<&DevPhase> {
        self.of(who)?.phases.iter().find(|p| p.kind == kind)
    }

    /// laneway's writes per event over the built-in controller's (`None` when it wrote none).
    pub fn ratio(&self, kind: EventKind) -> Option<f64> {
        let l = self.phase(Who::Laneway, kind)?.writes_per_event();
        let b = self.phase(Who::Builtin, kind)?.writes_per_event();
        (b > 0.0).then(|| l / b)
    }

    fn at_rate(&self, who: Who, rate: f64) -> Option<&DevPhase> {
        self.of(who)?.rates.iter().find(|p| p.rate == Some(rate))
    }

    /// [`DevResult::ratio`] of the baseline readiness flips at `rate`.
    fn rate_ratio(&self, rate: f64) -> Option<f64> {
        let l = self.at_rate(Who::Laneway, rate)?.writes_per_event();
        let b = self.at_rate(Who::Builtin, rate)?.writes_per_event();
        (b > 0.0).then(|| l / b)
    }
}

enum Outcome {
    Seen(f64),
    /// Nothing for this controller to show.
    Nothing,
    TimedOut,
    Failed(String),
}

impl Bench {
    /// `count` events of `kind`, one at a time, with `c` the only controller.
    pub async fn paced(&mut self, kind: EventKind, count: usize, c: &Controller) -> DevPhase {
        let services = self.world.shape.services;
        let stride = stride(services);
        // A flip takes a pod down, the next one in the same Service brings it back; a relabel
        // moves a pod into a lane, the next one takes it out again.
        let per_service = match kind {
            EventKind::BaselineFlip | EventKind::Flip | EventKind::Relabel => 2,
            _ => 1,
        };
        let cpu0 = c.cpu_seconds();
        let wall0 = Timestamp::now();
        let start = Instant::now();
        let (mut starts, mut ms) = (Vec::new(), Vec::new());
        let (mut timeouts, mut errors, mut skipped, mut cursor) = (0, 0, 0, 0usize);
        while starts.len() < count {
            let s = (cursor / per_service * stride) % services;
            cursor += 1;
            let from = Timestamp::now();
            let outcome = if kind == EventKind::Rollout {
                self.rollout(s, c.who).await
            } else {
                let Some(change) = self.world.change(kind, s) else {
                    skipped += 1;
                    assert!(
                        skipped <= count * 10 + services,
                        "no service fits a {kind:?} event"
                    );
                    continue;
                };
                self.step(change, c.who).await
            };
            starts.push(from);
            match outcome {
                Outcome::Seen(v) => ms.push(v),
                Outcome::Nothing => {}
                Outcome::TimedOut => timeouts += 1,
                Outcome::Failed(e) => {
                    errors += 1;
                    if errors <= 5 {
                        eprintln!("bench: event request failed: {e}");
                    }
                }
            }
            c.wait_for(Quiet::Outputs, QUIET_BETWEEN, Duration::from_secs(30))
                .await;
        }
        let paced_for = start.elapsed();
        let limit = tail_limit(&self.world.shape);
        c.wait_for(Quiet::Settled, tail_quiet(c.who), limit).await;
        let events = starts.len();
        DevPhase {
            kind,
            events,
            errors,
            duration_s: start.elapsed().as_secs_f64(),
            pace: events as f64 / paced_for.as_secs_f64().max(1e-9),
            latency: Latency::of(ms, timeouts),
            cpu_s: c.cpu_seconds() - cpu0,
            traffic: Traffic::default(),
            per_event: Vec::new(),
            window: Some(Window {
                from: wall0,
                to: Timestamp::now(),
            }),
            starts,
            rate: None,
        }
    }

    /// `count` baseline readiness flips at `rate` per second with `c` the only controller, sent
    /// as the resolution workload's churn sends them (on time, never two in flight in one
    /// Service), in pairs ([`Order::Pairs`]: a pod taken down comes back up a round later);
    /// over until `c` is quiet as after the one-at-a-time phases.
    pub async fn at_rate(&mut self, rate: f64, count: usize, c: &Controller) -> DevPhase {
        let cpu0 = c.cpu_seconds();
        let start = Instant::now();
        let p = self
            .churn(EventKind::BaselineFlip, rate, count, &[c], Order::Pairs)
            .await;
        c.wait_for(Quiet::Settled, tail_quiet(c.who), tail_limit(&self.world.shape))
            .await;
        DevPhase {
            kind: p.kind,
            events: p.events,
            errors: p.errors,
            duration_s: start.elapsed().as_secs_f64(),
            pace: p.achieved_rate,
            latency: p.per.into_iter().next().map(|c| c.latency).unwrap_or_default(),
            cpu_s: c.cpu_seconds() - cpu0,
            traffic: Traffic::default(),
            per_event: Vec::new(),
            window: p.window.map(|w| Window {
                from: w.from,
                to: Timestamp::now(),
            }),
            starts: Vec::new(),
            rate: Some(rate),
        }
    }

    /// Every untagged pod of `s` replaced, one after the other: a new one created and ready,
    /// seen; then an old one deleted, seen.
    async fn rollout(&mut self, s: usize, who: Who) -> Outcome {
        let t0 = Instant::now();
        for old in self.world.baseline_pods(s) {
            let create = self.world.rollout_create(s);
            let delete = match self.step(create, who).await {
                Outcome::Seen(_) | Outcome::Nothing => self.world.rollout_delete(s, &old),
                other => return other,
            };
            match self.step(delete, who).await {
                Outcome::Seen(_) | Outcome::Nothing => {}
                other => return other,
            }
        }
        Outcome::Seen(t0.elapsed().as_secs_f64() * 1e3)
    }

    /// Sends one change and waits until `who` is seen to show it.
    async fn step(&self, change: Change, who: Who) -> Outcome {
        let wants = wants_for(&change, who);
        let id = (!wants.is_empty()).then(|| self.observer.expect(wants));
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), &change.ns);
        let t0 = OnceLock::new();
        if let Err(e) = send(&pods, change.request, &t0).await {
            if let Some(id) = id {
                self.observer.cancel(id);
            }
            return Outcome::Failed(e.to_string());
        }
        let Some(id) = id else {
            return Outcome::Nothing;
        };
        let t0 = *t0.get().expect("sent");
        loop {
            if let Some((_, at)) = self.observer.take_finished().into_iter().find(|(f, _)| *f == id) {
                return Outcome::Seen(at.saturating_duration_since(t0).as_secs_f64() * 1e3);
            }
            if t0.elapsed() > self.timeout {
                let left = self.observer.describe(id, 3);
                eprintln!("bench: {} timed out on an event: {left:?}", who.label());
                self.observer.cancel(id);
                return Outcome::TimedOut;
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }
}

/// One size and L: a fresh control plane and workload, the built-in controller alone, then
/// laneway alone; finally the audit log split by phase and event.
pub async fn run_dev(settings: &Settings, bins: &Bins, pods: usize, lanes: usize, run: usize) -> DevResult {
    let started = Instant::now();
    let shape = Shape::dev(pods, lanes);
    let suffix = if run > 0 {
        format!("-r{}", run + 1)
    } else {
        String::new()
    };
    let dir = settings.out.join(format!("dev-{pods}-l{lanes}{suffix}"));
    let load = load_average();
    let (mut cp, client, world) = start_world(&dir, shape).await;
    let setup_s = started.elapsed().as_secs_f64();
    eprintln!(
        "bench: developer lanes: {} untagged pods in {} services, {} lanes with {} pods of their own, in {setup_s:.1} s",
        shape.pods, shape.services, lanes, shape.lane_pods
    );
    let (mut bench, laneway_slices) = bench_of(&client, world, &cp).await;
    let count = |kind| {
        if kind == EventKind::Rollout {
            settings.dev_rollouts
        } else {
            settings.dev_events
        }
    };
    let mut runs = Vec::new();
    for who in [Who::Builtin, Who::Laneway] {
        if who == Who::Builtin && settings.laneway_only {
            continue;
        }
        let log = log_path(&dir, who, "dev");
        let mut c = match who {
            Who::Builtin => Controller::builtin(
                &bins.builtin,
                &cp.kubeconfig_for(who.user(), cp.server_url()),
                &log,
                &settings.builtin_flags,
            ),
            Who::Laneway => Controller::laneway(
                &bins.laneway,
                &cp.kubeconfig_for(who.user(), cp.server_url()),
                &log,
                shape.namespaces,
                &settings.laneway_flags,
            ),
        };
        let wants = match who {
            Who::Builtin => builtin_wants(&bench.world),
            Who::Laneway => laneway_wants(bench.world.laneway_cold()),
        };
        let cold = cold_start(&bench, &c, wants).await;
        // The cold start's status writes more than 10 s behind, like every phase's.
        c.wait_for(Quiet::Settled, tail_quiet(who), tail_limit(&shape))
            .await;
        let mut phases = Vec::new();
        for kind in KINDS {
            c.check_alive(&log);
            let p = bench.paced(kind, count(kind), &c).await;
            print_dev(who, lanes, &p);
            phases.push(p);
        }
        let mut rates = Vec::new();
        for &rate in &settings.dev_rates {
            c.check_alive(&log);
            let p = bench.at_rate(rate, settings.dev_rate_count(rate), &c).await;
            print_dev(who, lanes, &p);
            rates.push(p);
        }
        c.check_alive(&log);
        c.stop();
        runs.push(DevRun {
            who,
            cold_s: cold.cold_s,
            cold_traffic: Traffic::default(),
            cold_window: cold.cold_window,
            phases,
            rates,
        });
    }
    bench.observer.stop();
    cp.stop().await;

    let log = audit::read(&cp.audit_log_path());
    for r in &mut runs {
        count_run(&log, r);
    }
    let result = DevResult {
        shape,
        run,
        laneway_slices,
        setup_s,
        total_s: started.elapsed().as_secs_f64(),
        load_average: load,
        runs,
    };
    eprintln!(
        "bench: developer lanes, {pods} pods, L={lanes} done in {:.0} s",
        result.total_s
    );
    result
}

fn print_dev(who: Who, lanes: usize, p: &DevPhase) {
    let at = p.rate.map_or_else(String::new, |r| format!(" at {r}/s"));
    eprintln!(
        "bench: {} (developer lanes, L={lanes}): {}{at} x{} ({:.1}/s, {:.1} s): p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms (n {}, timeouts {}, errors {})",
        who.label(),
        p.kind.label(),
        p.events,
        p.pace,
        p.duration_s,
        p.latency.p50_ms,
        p.latency.p99_ms,
        p.latency.max_ms,
        p.latency.n,
        p.latency.timeouts,
        p.errors
    );
}

/// A controller's writes in its cold start and each phase, and per event in the phases of
/// events one at a time.
fn count_run(log: &[audit::Request], r: &mut DevRun) {
    let user = r.who.user();
    if let Some(w) = r.cold_window {
        r.cold_traffic = audit::traffic(log, user, w.from, w.to);
    }
    for p in r.phases.iter_mut().chain(&mut r.rates) {
        let Some(w) = p.window else { continue };
        p.traffic = audit::traffic(log, user, w.from, w.to);
        let ends = p.starts.iter().skip(1).copied().chain([w.to]);
        p.per_event = p
            .starts
            .iter()
            .zip(ends)
            .map(|(from, to)| {
                let t = audit::traffic(log, user, *from, to);
                EventWrites {
                    writes: t.writes,
                    slices: resource_writes(&t, "endpointslices"),
                    statuses: resource_writes(&t, "laneroutes/status"),
                }
            })
            .collect();
    }
}

/// Writes per event: slices / LaneRoute statuses / other.
fn split(p: &DevPhase) -> String {
    let (sl, st) = (
        resource_writes(&p.traffic, "endpointslices"),
        resource_writes(&p.traffic, "laneroutes/status"),
    );
    let per = |n: u64| num(n as f64 / p.events.max(1) as f64, 2);
    format!("{} / {} / {}", per(sl), per(st), per(p.traffic.writes - sl - st))
}

/// The median of the runs' ratios, with each run's when there are several.
fn ratio_cell(ratios: Vec<f64>, repeats: usize) -> String {
    match median(ratios.clone()) {
        None => "n/a".to_owned(),
        Some(m) if repeats > 1 => format!(
            "{} ({})",
            num(m, 1),
            ratios.iter().map(|v| num(*v, 1)).collect::<Vec<_>>().join(", ")
        ),
        Some(m) => num(m, 1),
    }
}

/// One latency figure of a phase in ms (`n/a` without a phase or an event seen).
fn ms(p: Option<&DevPhase>, f: impl Fn(&Latency) -> f64) -> String {
    p.filter(|p| p.latency.n > 0).map_or_else(
        || "n/a".to_owned(),
        |p| {
            let v = f(&p.latency);
            num(v, if v >= 100.0 { 0 } else { 1 })
        },
    )
}

/// A rate in events/s, with the rates achieved (laneway / built-in) when one fell short by
/// more than a tenth.
fn rate_cell(rate: f64, l: Option<&DevPhase>, b: Option<&DevPhase>) -> String {
    let short = [l, b].iter().flatten().any(|p| p.pace < rate * 0.9);
    let pace = |p: Option<&DevPhase>| p.map_or_else(|| "n/a".to_owned(), |p| num(p.pace, 1));
    match short {
        true => format!("{rate}/s (achieved {} / {})", pace(l), pace(b)),
        false => format!("{rate}/s"),
    }
}

/// The table of baseline readiness flips at fixed rates (a line saying so when the results
/// have none: results of before `BENCH_DEV_RATES`).
fn render_rates(r: &Results, ratio_head: &str, repeats: usize) -> String {
    let mut o = String::new();
    let first: Vec<&DevResult> = r.dev.iter().filter(|d| d.run == 0).collect();
    let rates = |d: &DevResult| {
        let mut v: Vec<f64> = d
            .runs
            .iter()
            .flat_map(|x| x.rates.iter().filter_map(|p| p.rate))
            .collect();
        v.sort_by(f64::total_cmp);
        v.dedup();
        v
    };
    if first.iter().all(|d| rates(d).is_empty()) {
        let _ = writeln!(
            o,
            "Baseline readiness flips at a fixed rate: not measured in this run.\n"
        );
        return o;
    }
    let _ = writeln!(
        o,
        "Baseline readiness flips at a fixed rate (`BENCH_DEV_RATES`), each rate a phase of its \
         own for each controller, after the events above: sent on schedule as the resolution \
         workload's churn sends them, whether or not the last one has been seen, but never two \
         in flight in one Service; Services are taken in rounds, a baseline pod of each taken \
         down, then the same round again brings them back up. Writes over the phase until the \
         controller is quiet, as above; latency from the request to the slices seen (laneway's \
         baseline slice; all of the Service's built-in slices); the rates achieved, laneway / \
         built-in, in brackets when one fell short by more than a tenth.\n"
    );
    let _ = writeln!(
        o,
        "| pods | lanes | rate | events | laneway writes per event | of which slices / LaneRoute statuses / other | built-in writes per event | {ratio_head} | p50 ms laneway / built-in | p99 ms laneway / built-in |\n\
         | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
    );
    for d in first {
        for rate in rates(d) {
            let (l, b) = (d.at_rate(Who::Laneway, rate), d.at_rate(Who::Builtin, rate));
            let na = || "n/a".to_owned();
            let same = r
                .dev
                .iter()
                .filter(|e| e.shape.pods == d.shape.pods && e.shape.dev_lanes == d.shape.dev_lanes);
            let ratio = ratio_cell(same.filter_map(|e| e.rate_ratio(rate)).collect(), repeats);
            let _ = writeln!(
                o,
                "| {} | {} | {} | {} | {} | {} | {} | {ratio} | {} / {} | {} / {} |",
                pods(d.shape.pods),
                d.shape.dev_lanes,
                rate_cell(rate, l, b),
                l.or(b).map_or_else(na, |p| p.events.to_string()),
                l.map_or_else(na, |p| num(p.writes_per_event(), 2)),
                l.map_or_else(na, split),
                b.map_or_else(na, |p| num(p.writes_per_event(), 2)),
                ms(l, |x| x.p50_ms),
                ms(b, |x| x.p50_ms),
                ms(l, |x| x.p99_ms),
                ms(b, |x| x.p99_ms),
            );
        }
    }
    let _ = writeln!(o);
    o
}

fn event_label(kind: EventKind) -> String {
    match kind {
        EventKind::Rollout => format!("{} (10 pods)", kind.label()),
        _ => kind.label().to_owned(),
    }
}

/// The developer-lane section, markers included.
pub fn render(r: &Results) -> String {
    let mut o = String::new();
    let _ = writeln!(o, "{START}");
    let _ = writeln!(
        o,
        "`benches/cluster.rs`, developer-lane workload: S Services of 10 untagged pods (S = pods \
         / 10), 1,000 per namespace at most (one namespace up to 10k pods, five at 50k), and in \
         each namespace L LaneRoutes with `serviceSelector: {{}}` (every Service of it), no \
         fallback lane, not strict; lane l has one pod in each of 1 + l mod 3 Services and falls \
         back to baseline in the others. laneway (release build, default flags) and the built-in \
         EndpointSlice controller (flags `{}`) one after the other on a fresh local API server per size and L, on events \
         sent one at a time: the next once the last is seen in the slices and the controller has \
         written nothing for {} ms (laneway's LaneRoute status writes left out: they are paced \
         by time, not by events).\n",
        r.builtin_flags.join(" "),
        QUIET_BETWEEN.as_millis()
    );
    let _ = writeln!(
        o,
        "- **Events**: a readiness flip of a baseline pod (down, then up again in the same \
         Service); a relabel (a baseline pod into a lane that has no pod in that Service, then \
         back); a scale up (a new baseline pod, created and then ready); a scale down (a pod \
         deleted, grace period 0); a baseline rolling update: one Service's 10 baseline pods \
         replaced one by one, a new pod created and ready, then an old one deleted, each step \
         seen in the slices before the next (20 pod changes, and its writes are per update).\n\
         - **Writes per event**: the API server's audit log per identity, over the phase until \
         the controller has written nothing for {} s and has no LaneRoute status write waiting \
         for its turn (laneway holds back a LaneRoute status whose change is only endpoint \
         counts for up to 10 s, and paces those writes of all LaneRoutes to 500 service entries \
         a second), divided by the events; Lease \
         renewals left out. Per event: the writes from its request to the next one's, so a \
         held-back status write counts in the event that is running when it goes out.\n\
         - Measured {}; laneway {}.\n",
        num(tail_quiet(Who::Laneway).as_secs_f64(), 1),
        r.date,
        r.laneway_commit
    );
    let repeats = r.dev.iter().map(|d| d.run).max().map_or(1, |m| m + 1);
    let ratio_head = if repeats > 1 {
        format!("laneway ÷ built-in, median of {repeats} runs (each run)")
    } else {
        "laneway ÷ built-in".to_owned()
    };
    let _ = writeln!(
        o,
        "| pods | lanes | event | events | laneway writes per event | of which slices / LaneRoute statuses / other | laneway per event: median (max) | laneway slice writes per event: median (max) | built-in writes per event | {ratio_head} | p50 ms laneway / built-in | events/s laneway / built-in |\n\
         | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
    );
    for d in r.dev.iter().filter(|d| d.run == 0) {
        let same: Vec<&DevResult> = r
            .dev
            .iter()
            .filter(|e| e.shape.pods == d.shape.pods && e.shape.dev_lanes == d.shape.dev_lanes)
            .collect();
        for kind in KINDS {
            let l = d.phase(Who::Laneway, kind);
            let b = d.phase(Who::Builtin, kind);
            if l.is_none() && b.is_none() {
                continue;
            }
            let na = || "n/a".to_owned();
            let events = l.or(b).map_or_else(na, |p| p.events.to_string());
            let pace = |p: Option<&DevPhase>| p.map_or_else(na, |p| num(p.pace, 1));
            let lw = l.map_or_else(na, |p| num(p.writes_per_event(), 2));
            let split = l.map_or_else(na, split);
            let fmt_med = |m: Option<(f64, u64)>| m.map_or_else(na, |(m, x)| format!("{} ({x})", num(m, 1)));
            let per = fmt_med(l.and_then(|p| p.per_event(|e| e.writes)));
            let per_slices = fmt_med(l.and_then(|p| p.per_event(|e| e.slices)));
            let bw = b.map_or_else(na, |p| num(p.writes_per_event(), 2));
            let ratio = ratio_cell(same.iter().filter_map(|e| e.ratio(kind)).collect(), repeats);
            let p50 = |p: Option<&DevPhase>| ms(p, |l| l.p50_ms);
            let _ = writeln!(
                o,
                "| {} | {} | {} | {events} | {lw} | {split} | {per} | {per_slices} | {bw} | {ratio} | {} / {} | {} / {} |",
                pods(d.shape.pods),
                d.shape.dev_lanes,
                event_label(kind),
                p50(l),
                p50(b),
                pace(l),
                pace(b),
            );
        }
    }
    let _ = writeln!(o);
    o.push_str(&render_rates(r, &ratio_head, repeats));
    let mut cold: BTreeMap<(usize, usize), String> = BTreeMap::new();
    for d in r.dev.iter().filter(|d| d.run == 0) {
        let c = |who| {
            let run = d.of(who)?;
            Some(format!(
                "{} {} s, {} writes",
                who.label(),
                run.cold_s.map_or("did not converge".into(), |v| num(v, 1)),
                run.cold_traffic.writes
            ))
        };
        let parts: Vec<String> = [c(Who::Laneway), c(Who::Builtin)].into_iter().flatten().collect();
        cold.insert(
            (d.shape.pods, d.shape.dev_lanes),
            format!(
                "{} pods ({} pods of lanes), L={}: {} laneway slices; cold → converged: {}; whole run {} s",
                pods(d.shape.pods),
                d.shape.lane_pods,
                d.shape.dev_lanes,
                d.laneway_slices,
                parts.join(", "),
                num(d.total_s, 0)
            ),
        );
    }
    for line in cold.values() {
        let _ = writeln!(o, "- {line}");
    }
    let _ = writeln!(o, "{END}");
    o
}
