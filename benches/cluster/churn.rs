//! The driver: injects events at a fixed rate and times each one until every controller that
//! has to act on it has been seen (through the watch) to have done so.
//!
//! Two events in flight never touch the same Service: a controller may fold two changes of one
//! Service into one write, or two flips of one pod into none, and then the earlier event would
//! never be seen on its own. When every Service is busy the driver waits, so the rate it
//! reports is the rate it achieved.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::json;
use tokio::sync::mpsc;

use crate::observe::{Key, Observer, Wants};
use crate::procs::{cpu_seconds, machine_busy_seconds, Controller, Who};
use crate::report::{Latency, PerController, PhaseResult, Window};
use crate::world::{Change, EventKind, Request, World, LANE_LABEL};

pub struct Bench {
    pub client: Client,
    pub world: World,
    pub observer: Arc<Observer>,
    pub apiserver_pid: u32,
    /// An event not seen done after this long counts as timed out.
    pub timeout: Duration,
}

struct Event {
    service: usize,
    t0: Arc<OnceLock<Instant>>,
    waits: Vec<(Who, u64)>,
    done: BTreeMap<Who, Instant>,
    timed_out: Vec<Who>,
    failed: bool,
}

impl Event {
    fn open(&self) -> bool {
        !self.failed && self.waits.len() > self.done.len() + self.timed_out.len()
    }
}

/// The running state of one phase.
struct Flight {
    events: Vec<Event>,
    by_wait: HashMap<u64, usize>,
    open: BTreeSet<usize>,
    busy: Vec<bool>,
    errors: mpsc::UnboundedReceiver<(usize, String)>,
    error_count: usize,
}

/// Which Service each event of a phase goes to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Order {
    /// The next idle Service in a round over all of them.
    Spread,
    /// In pairs ([`paired`]): a round of Services each has a pod flipped, then the same round
    /// again brings them back; an event whose Service is busy waits for it.
    Pairs,
}

impl Bench {
    /// `count` events of `kind` at `rate` per second, timed for each of `controllers`, the
    /// Services picked in `order`.
    pub async fn churn(
        &mut self,
        kind: EventKind,
        rate: f64,
        count: usize,
        controllers: &[&Controller],
        order: Order,
    ) -> PhaseResult {
        let services = self.world.shape.services;
        let stride = stride(services);
        let (err_tx, errors) = mpsc::unbounded_channel();
        let mut f = Flight {
            events: Vec::with_capacity(count),
            by_wait: HashMap::new(),
            open: BTreeSet::new(),
            busy: vec![false; services],
            errors,
            error_count: 0,
        };
        let cpu0: Vec<f64> = controllers.iter().map(|c| c.cpu_seconds()).collect();
        let (api0, self0) = (cpu_seconds(self.apiserver_pid), cpu_seconds(std::process::id()));
        let busy0 = machine_busy_seconds();
        let wall0 = Timestamp::now();
        let start = Instant::now();
        let interval = Duration::from_secs_f64(1.0 / rate);
        let mut next_at = start;
        let mut cursor = 0usize;
        let mut skipped = 0usize;
        let mut last_issue = start;
        while f.events.len() < count {
            tokio::time::sleep_until(next_at.into()).await;
            let s = loop {
                self.collect(&mut f);
                if let Some(s) = next_service(order, &f.busy, &mut cursor, stride, count) {
                    break s;
                }
                tokio::time::sleep(Duration::from_millis(1)).await;
            };
            let Some(change) = self.world.change(kind, s) else {
                skipped += 1;
                assert!(
                    skipped <= count * 10 + services,
                    "no service fits a {kind:?} event"
                );
                continue;
            };
            let idx = f.events.len();
            let mut waits = Vec::new();
            for c in controllers {
                let wants = wants_for(&change, c.who);
                if !wants.is_empty() {
                    let id = self.observer.expect(wants);
                    f.by_wait.insert(id, idx);
                    waits.push((c.who, id));
                }
            }
            let t0 = Arc::new(OnceLock::new());
            f.busy[s] = !waits.is_empty();
            if !waits.is_empty() {
                f.open.insert(idx);
            }
            f.events.push(Event {
                service: s,
                t0: t0.clone(),
                waits,
                done: BTreeMap::new(),
                timed_out: Vec::new(),
                failed: false,
            });
            let (pods, tx): (Api<Pod>, _) =
                (Api::namespaced(self.client.clone(), &change.ns), err_tx.clone());
            tokio::spawn(async move {
                if let Err(e) = send(&pods, change.request, &t0).await {
                    let _ = tx.send((idx, e.to_string()));
                }
            });
            last_issue = Instant::now();
            // Never catch up in a burst after a stall: the rate is what the controllers allow.
            next_at = (next_at + interval).max(Instant::now() - interval);
        }
        let issued_for = last_issue.duration_since(start);
        while !f.open.is_empty() {
            tokio::time::sleep(Duration::from_millis(2)).await;
            self.collect(&mut f);
        }
        for c in controllers {
            c.wait_quiet(Duration::from_secs(1), Duration::from_secs(30))
                .await;
        }
        let end = Instant::now();
        let wall1 = Timestamp::now();
        let per: Vec<PerController> = controllers
            .iter()
            .zip(cpu0)
            .map(|(c, cpu0)| {
                let mut ms: Vec<f64> = Vec::new();
                let mut timeouts = 0;
                for e in &f.events {
                    let Some(t0) = e.t0.get() else { continue };
                    if let Some(done) = e.done.get(&c.who) {
                        ms.push(done.saturating_duration_since(*t0).as_secs_f64() * 1e3);
                    }
                    timeouts += e.timed_out.iter().filter(|w| **w == c.who).count();
                }
                PerController {
                    who: c.who,
                    latency: Latency::of(ms, timeouts),
                    cpu_s: c.cpu_seconds() - cpu0,
                    rss_peak_mb: c.rss_peak_mb(start, end),
                    traffic: Default::default(),
                }
            })
            .collect();
        let events = f.events.len();
        let apiserver_cpu_s = cpu_seconds(self.apiserver_pid) - api0;
        let driver_cpu_s = cpu_seconds(std::process::id()) - self0;
        let ours: f64 =
            per.iter().map(|p: &PerController| p.cpu_s).sum::<f64>() + apiserver_cpu_s + driver_cpu_s;
        PhaseResult {
            kind,
            rate,
            events,
            achieved_rate: if events > 1 {
                (events - 1) as f64 / issued_for.as_secs_f64().max(1e-9)
            } else {
                0.0
            },
            errors: f.error_count,
            duration_s: end.duration_since(start).as_secs_f64(),
            apiserver_cpu_s,
            driver_cpu_s,
            other_cpu_s: (machine_busy_seconds() - busy0 - ours).max(0.0),
            per,
            window: Some(Window {
                from: wall0,
                to: wall1,
            }),
        }
    }

    /// Takes in finished waits, failed requests and timeouts; frees their services.
    fn collect(&self, f: &mut Flight) {
        for (id, at) in self.observer.take_finished() {
            let Some(idx) = f.by_wait.remove(&id) else {
                continue;
            };
            let e = &mut f.events[idx];
            if let Some((who, _)) = e.waits.iter().find(|(_, w)| *w == id) {
                e.done.insert(*who, at);
            }
        }
        while let Ok((idx, error)) = f.errors.try_recv() {
            f.error_count += 1;
            if f.error_count <= 5 {
                eprintln!("bench: event request failed: {error}");
            }
            let e = &mut f.events[idx];
            e.failed = true;
            for (_, id) in &e.waits {
                self.observer.cancel(*id);
            }
        }
        let mut closed = Vec::new();
        for &idx in &f.open {
            let e = &mut f.events[idx];
            let late = e.t0.get().is_some_and(|t0| t0.elapsed() > self.timeout);
            if late && e.open() {
                for (who, id) in &e.waits {
                    if !e.done.contains_key(who) {
                        let left = self.observer.describe(*id, 3);
                        eprintln!("bench: {} timed out on an event: {left:?}", who.label());
                        self.observer.cancel(*id);
                        e.timed_out.push(*who);
                    }
                }
            }
            if !e.open() {
                closed.push(idx);
            }
        }
        for idx in closed {
            f.open.remove(&idx);
            f.busy[f.events[idx].service] = false;
        }
    }

    /// Time from `t0` until everything in `wants` has been seen, or `None` after `limit`.
    pub async fn converge(&self, what: &str, wants: Wants, t0: Instant, limit: Duration) -> Option<f64> {
        let keys = wants.len();
        let id = self.observer.expect(wants);
        loop {
            if let Some((_, at)) = self.observer.take_finished().into_iter().find(|(f, _)| *f == id) {
                let s = at.saturating_duration_since(t0).as_secs_f64();
                eprintln!("bench: {what}: {keys} keys converged in {s:.2} s");
                return Some(s);
            }
            if t0.elapsed() > limit {
                eprintln!(
                    "bench: {what}: not converged after {limit:?}, {} of {keys} keys left, e.g. {:?}",
                    self.observer.remaining(id),
                    self.observer.describe(id, 3)
                );
                self.observer.cancel(id);
                return None;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

/// What `who` must show for `change`.
pub fn wants_for(change: &Change, who: Who) -> Wants {
    match who {
        Who::Laneway => change
            .laneway
            .iter()
            .map(|(name, sig)| (Key::Slice(name.clone()), sig.clone()))
            .collect(),
        Who::Builtin => change
            .builtin
            .iter()
            .map(|(svc, sig)| (Key::Service(svc.clone()), Some(sig.clone())))
            .collect(),
    }
}

/// Sends the request(s) of one change; `t0` is stamped just before the first goes out.
pub async fn send(pods: &Api<Pod>, request: Request, t0: &OnceLock<Instant>) -> Result<(), kube::Error> {
    let pp = PatchParams::default();
    let _ = t0.set(Instant::now());
    match request {
        Request::Status { pod, body } => {
            let patch = Patch::Merge(&body);
            again(None, || pods.patch_status(&pod, &pp, &patch)).await
        }
        Request::Label { pod, lane } => {
            let patch = json!({"metadata": {"labels": {LANE_LABEL: lane}}});
            let patch = Patch::Merge(&patch);
            again(None, || pods.patch(&pod, &pp, &patch)).await
        }
        Request::Create { pod, name, status } => {
            let pod: Pod = serde_json::from_value(pod).expect("pod");
            let post = PostParams::default();
            again(Some(409), || pods.create(&post, &pod)).await?;
            let status = Patch::Merge(&status);
            again(None, || pods.patch_status(&name, &pp, &status)).await
        }
        Request::Delete { pod } => {
            let dp = DeleteParams {
                grace_period_seconds: Some(0),
                ..Default::default()
            };
            again(Some(404), || pods.delete(&pod, &dp)).await
        }
    }
}

/// One request, sent a second time when the connection failed under it (a pooled connection
/// the API server closed): the model already counts the change, so it must land. On the second
/// try, `landed` (the answer when the first try landed after all: 409 to a create, 404 to a
/// delete) counts as done.
async fn again<T, F, Fut>(landed: Option<u16>, mut request: F) -> Result<(), kube::Error>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, kube::Error>>,
{
    match request().await {
        Err(kube::Error::Service(_) | kube::Error::HyperError(_)) => match request().await {
            Err(kube::Error::Api(e)) if Some(e.code) == landed => Ok(()),
            other => other.map(drop),
        },
        other => other.map(drop),
    }
}

/// A step through the services that visits each once per round and spreads consecutive events
/// far apart (a prime that does not divide the count, or 1).
pub fn stride(services: usize) -> usize {
    [7919, 104_729, 1]
        .into_iter()
        .find(|p| services % p != 0 || *p == 1)
        .unwrap_or(1)
}

fn next_idle(busy: &[bool], cursor: &mut usize, stride: usize) -> Option<usize> {
    let n = busy.len();
    for _ in 0..n {
        let s = (*cursor * stride) % n;
        *cursor += 1;
        if !busy[s] {
            return Some(s);
        }
    }
    None
}

fn next_service(
    order: Order,
    busy: &[bool],
    cursor: &mut usize,
    stride: usize,
    count: usize,
) -> Option<usize> {
    match order {
        Order::Spread => next_idle(busy, cursor, stride),
        Order::Pairs => {
            let s = paired(*cursor, count, busy.len(), stride);
            (!busy[s]).then(|| {
                *cursor += 1;
                s
            })
        }
    }
}

/// The Service of event `k` of `count` in pairs: rounds of up to one event per Service (in the
/// order of [`stride`]), each round sent twice over, so that a readiness flip that takes a pod
/// down is followed, one round later, by the one that brings it back up.
pub fn paired(k: usize, count: usize, services: usize, stride: usize) -> usize {
    let pairs = count.div_ceil(2).max(1);
    let round = services.min(pairs).max(1);
    let (b, r) = (k / (2 * round), k % (2 * round));
    let size = round.min(pairs.saturating_sub(b * round)).max(1);
    ((b * round + r % size) * stride) % services
}
