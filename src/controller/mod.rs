//! The operator's shell. Watches feed the index; a namespace with changes is resolved by the
//! core, compared with what exists, and handed to the [`Writer`] as a plan; the writer's report
//! comes back as a message. The event loop never waits for a write, each namespace has its own
//! backoff, and only the leader plans.

mod changes;
mod events;
mod gateways;
mod health;
mod outputs;
mod plan;
mod publishing;
mod reports;
mod statuses;
mod watch;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use tokio::sync::{mpsc, watch as signal};
use tokio::time::Instant;
use tracing::{debug, warn};

use crate::api::{SubsetSource, TagRule};
use crate::lanes::{Config, Desired, Index, Kind, ObjectKey, TagRules};
use crate::metrics::{Metrics, ResultLabels, SourceLabels};
use crate::publish::PublishError;
use crate::writer::{Report, Target, WriteError, Writer};
use plan::LiveObjects;
use publishing::Publishing;
pub use publishing::{Centres, SKIP_CLEANUP_ANNOTATION};
use watch::Streams;

pub use health::{Health, HEARTBEAT, STALL_AFTER};
/// How the controller runs.
#[derive(Clone, Debug)]
pub struct Settings {
    pub config: Config,
    /// Namespaces to watch; empty for the whole cluster.
    pub namespaces: Vec<String>,
    /// Shortest time between two resolutions of one namespace; the first change after a quiet
    /// period is acted on at once.
    pub debounce: Duration,
    /// How long a Service stays after laneway's routes stopped naming it (and the gateways
    /// reported the change): at least the gateways' reload interval.
    pub route_grace: Duration,
}

/// Longest wait for gateways to report on a changed route before its Services go anyway.
const UNSETTLED_LIMIT: Duration = Duration::from_secs(60);
/// Most watched changes taken in at once before the loop looks at anything else.
const DRAIN: usize = 1000;

/// What needs resolving in one namespace.
#[derive(Clone, Debug, Default)]
struct Dirty {
    /// Recompute everything.
    whole: bool,
    /// Recompute these services only (otherwise only compare again and write what differs).
    services: BTreeSet<String>,
}

/// What the controller keeps of one namespace between plans.
#[derive(Debug, Default)]
struct Space {
    schedule: Schedule,
    /// The last resolution, kept to refresh only what changed.
    desired: Option<Desired>,
    /// The last failed write of each output.
    failed: BTreeMap<Target, WriteError>,
    grace: Grace,
    book: StatusBook,
    told: events::Told,
    /// Events to send with the next plan.
    events: Vec<crate::writer::Op>,
    /// When the earliest pod change not yet written was seen, per user Service.
    triggers: BTreeMap<String, Timestamp>,
    /// The services of its LaneRoutes by the source that serves them, as of `desired`.
    subsets: SubsetCounts,
}

/// Services of LaneRoutes served by their lane, a fallback lane, baseline, and nothing.
#[derive(Clone, Copy, Debug, Default)]
struct SubsetCounts([i64; 4]);

impl SubsetCounts {
    const LABELS: [&'static str; 4] = ["lane", "fallback", "baseline", "empty"];

    fn of(desired: &Desired) -> Self {
        let mut counts = [0; 4];
        for s in desired.routes.values().flat_map(|r| r.services.iter()) {
            counts[match s.source {
                SubsetSource::Lane => 0,
                SubsetSource::Fallback(_) => 1,
                SubsetSource::Baseline => 2,
                SubsetSource::Empty => 3,
            }] += 1;
        }
        SubsetCounts(counts)
    }
}

/// When a namespace is resolved and written next.
#[derive(Debug, Default)]
struct Schedule {
    dirty: Option<Dirty>,
    in_flight: bool,
    /// The tail of a plan (statuses, finalizers off, Events) is being written.
    tail_in_flight: bool,
    /// A plan was made without its tail while one was being written: look again after it.
    tail_skipped: bool,
    failures: u32,
    /// Not resolved again before this (debounce or backoff).
    not_before: Option<Instant>,
    /// Look again then, even if nothing changes.
    wake_at: Option<Instant>,
    /// When the first LaneRoute's ttl passes.
    expiry: Option<Timestamp>,
}

/// Services laneway's routes stopped naming, kept until the gateways have caught up (the
/// route grace).
#[derive(Debug, Default)]
struct Grace {
    released: BTreeSet<String>,
    /// When laneway's routes last changed what they name, as the gateways reported.
    routes_changed_at: Option<Instant>,
    /// Routes whose latest change no gateway has reported on yet, and since when.
    unsettled: BTreeMap<String, Instant>,
}

impl Grace {
    /// Until when Services the routes stopped naming are kept.
    fn hold_until(&self, grace: Duration) -> Option<Instant> {
        let settled = self.routes_changed_at.map(|t| t + grace);
        let waiting = self.unsettled.values().map(|t| *t + UNSETTLED_LIMIT);
        settled.into_iter().chain(waiting).max()
    }
}

/// What the namespace's plans wrote of statuses.
#[derive(Debug, Default)]
struct StatusBook {
    /// Write every status with the next plan, even those that look unchanged (the watch of
    /// statuses broke, so what they look like may be out of date).
    verify: bool,
    /// The plan under way writes every status.
    verifying: bool,
    /// When each LaneRoute's status was last written.
    written: BTreeMap<String, Instant>,
    /// What the last plan's LaneRoute statuses left to the next.
    memo: statuses::RouteMemo,
}

impl Space {
    fn mark(&mut self, services: Option<&BTreeSet<String>>) {
        let dirty = self.schedule.dirty.get_or_insert_with(Dirty::default);
        match services {
            None => dirty.whole = true,
            Some(s) => dirty.services.extend(s.iter().cloned()),
        }
    }

    /// What the namespace should hold: the last resolution with the Services marked
    /// recomputed, or a whole new one.
    fn resolve(&mut self, index: &Index, ns: &str, now: Timestamp) -> Desired {
        let dirty = self.schedule.dirty.take().unwrap_or_default();
        let desired = match (dirty.whole, self.desired.take()) {
            (false, Some(mut cached)) => {
                if !dirty.services.is_empty() {
                    index.refresh(&mut cached, ns, &dirty.services, now);
                }
                cached
            }
            (_, replaced) => {
                let desired = index.desired(ns, now);
                // Freeing a namespace's thousands of outputs takes as long as a good part of
                // computing them: it happens off the controller's path.
                if let (Some(replaced), Ok(runtime)) = (replaced, tokio::runtime::Handle::try_current()) {
                    runtime.spawn_blocking(move || drop(replaced));
                }
                desired
            }
        };
        self.schedule.expiry = desired.next_expiry;
        desired
    }

    /// The Events the next plan sends, unless an earlier plan's tail is still being written:
    /// then that plan has no tail, and the one after it looks again.
    fn events_for_plan(&mut self) -> Vec<crate::writer::Op> {
        if self.schedule.tail_in_flight {
            self.schedule.tail_skipped = true;
            Vec::new()
        } else {
            self.book.verifying = std::mem::take(&mut self.book.verify);
            std::mem::take(&mut self.events)
        }
    }

    /// Keeps what a plan rests on for the next one; the plan to write.
    fn record(&mut self, built: plan::Built) -> crate::writer::Plan {
        if let Some(memo) = built.memo {
            self.book.memo = memo;
        }
        self.schedule.wake_at = built.wake_at;
        let instant = Instant::now();
        self.book
            .written
            .retain(|name, t| instant < *t + statuses::count_refresh(name));
        for name in built.statuses_written {
            self.book.written.insert(name, instant);
        }
        built.plan
    }
}

/// The operator's state between events.
pub struct Controller {
    client: Client,
    settings: Settings,
    metrics: Arc<Metrics>,
    writer: Writer,
    index: Index,
    /// Outputs that exist, per namespace, with the hash they were applied with.
    live: BTreeMap<String, LiveObjects>,
    spaces: BTreeMap<String, Space>,
    /// The routine LaneRoute status writes of every namespace share it.
    count_budget: statuses::CountBudget,
    /// LaneRoutes and TagRules being deleted, until their finalizer comes off (with the
    /// TagRule, whose spec names the Dubbo rule to remove).
    deleting: BTreeMap<(Kind, ObjectKey), Option<TagRule>>,
    rules: TagRules,
    rules_dirty: bool,
    publishing: Publishing,
    gateways: gateways::Gateways,
    leading: bool,
    reports: mpsc::UnboundedSender<(Report, Duration)>,
    report_rx: Option<mpsc::UnboundedReceiver<(Report, Duration)>>,
    owned_tx: mpsc::UnboundedSender<Result<BTreeSet<String>, PublishError>>,
    owned_rx: Option<mpsc::UnboundedReceiver<Result<BTreeSet<String>, PublishError>>>,
    health: Arc<Health>,
}

impl Controller {
    /// Counts in `writer`'s metrics; publishes to `centres` through `writer`'s fence.
    pub fn new(
        client: Client,
        settings: Settings,
        centres: Centres,
        writer: Writer,
        health: Arc<Health>,
    ) -> Self {
        let metrics = writer.metrics().clone();
        let publishing = Publishing::start(centres, writer.fence(), &metrics);
        let (reports, report_rx) = mpsc::unbounded_channel();
        let (owned_tx, owned_rx) = mpsc::unbounded_channel();
        Controller {
            index: Index::new(settings.config.clone()),
            client,
            settings,
            metrics,
            writer,
            live: BTreeMap::new(),
            spaces: BTreeMap::new(),
            count_budget: statuses::CountBudget::default(),
            deleting: BTreeMap::new(),
            rules: TagRules::default(),
            rules_dirty: false,
            gateways: gateways::Gateways::default(),
            publishing,
            leading: false,
            reports,
            report_rx: Some(report_rx),
            owned_tx,
            owned_rx: Some(owned_rx),
            health,
        }
    }

    /// Watches and writes until `stop` fires. `ready` turns true once every watch has listed
    /// its objects; nothing is written before that, so a cold cache never empties a lane.
    pub async fn run(mut self, ready: Arc<AtomicBool>, mut stop: signal::Receiver<bool>) {
        let mut streams = Streams::new(&self.client, &self.settings.namespaces);
        let mut leading = self.writer.fence().subscribe();
        // Leadership may have been won before this subscription.
        if *leading.borrow_and_update() {
            self.leading = true;
            self.mark_all();
        }
        let mut reports = self.report_rx.take().expect("run once");
        let mut owned = self.owned_rx.take().expect("run once");
        let mut heartbeat = tokio::time::interval(HEARTBEAT);
        loop {
            self.health.beat();
            let synced = streams.synced();
            if self.leading && synced && self.publishing.owned.is_none() {
                self.read_owned();
            }
            let due = if self.leading && synced {
                self.next_due()
            } else {
                None
            };
            let expiry = self.next_expiry();
            tokio::select! {
                change = streams.next() => {
                    let Some(change) = change else { break };
                    self.handle(change);
                    // What already arrived with it (a pod's deletion is two events) goes into
                    // the same plan.
                    for _ in 0..DRAIN {
                        let Some(Some(change)) = streams.next().now_or_never() else { break };
                        self.handle(change);
                    }
                    ready.store(streams.synced(), Ordering::Relaxed);
                }
                _ = leading.changed() => {
                    self.leading = *leading.borrow_and_update();
                    if self.leading {
                        self.mark_all();
                    } else {
                        self.publishing.stand_down();
                    }
                }
                Some((report, took)) = reports.recv() => self.reported(report, took),
                Some(outcome) = self.publishing.outcomes.recv() => {
                    if let Some(key) = self.publishing.record(outcome) {
                        self.rule_changed(&key);
                    }
                }
                Some(result) = owned.recv() => {
                    self.publishing.reading_owned = false;
                    match result {
                        Ok(keys) if self.leading => {
                            self.publishing.owned = Some(keys);
                            self.rules_dirty = true;
                        }
                        Ok(_) => {}
                        Err(e) => {
                            self.publishing.read_not_before = Some(Instant::now() + Duration::from_secs(1));
                            warn!(error = %e, "could not read the rules laneway published; will retry");
                            self.metrics.error("publish");
                        }
                    }
                }
                _ = sleep_until(due) => self.start_due(),
                _ = sleep_until(expiry) => self.expire(),
                _ = heartbeat.tick() => {}
                _ = stop.changed() => break,
            }
        }
    }

    /// The soonest time a dirty, idle namespace may be resolved.
    fn next_due(&self) -> Option<Instant> {
        let now = Instant::now();
        let spaces = self
            .spaces
            .values()
            .filter(|s| s.schedule.dirty.is_some() && !s.schedule.in_flight)
            .map(|s| s.schedule.not_before.unwrap_or(now).max(now));
        let wakes = self
            .spaces
            .values()
            .filter(|s| !s.schedule.in_flight)
            .filter_map(|s| s.schedule.wake_at);
        let rules = (self.rules_dirty && self.publishing.owned.is_some()).then_some(now);
        spaces.chain(wakes).chain(rules).min()
    }

    fn next_expiry(&self) -> Option<Instant> {
        let soonest = self.spaces.values().filter_map(|s| s.schedule.expiry).min()?;
        let wait = Duration::try_from(soonest.duration_since(Timestamp::now())).unwrap_or(Duration::ZERO);
        Some(Instant::now() + wait + Duration::from_millis(50))
    }

    fn expire(&mut self) {
        let now = Timestamp::now();
        for space in self.spaces.values_mut() {
            if space.schedule.expiry.is_some_and(|t| t <= now) {
                space.schedule.expiry = None;
                space.mark(None);
            }
        }
    }

    fn space(&mut self, ns: &str) -> &mut Space {
        self.spaces.entry(ns.to_owned()).or_default()
    }

    fn mark(&mut self, ns: &str, services: Option<&BTreeSet<String>>) {
        self.space(ns).mark(services);
        self.rules_dirty = true;
    }

    /// Compare again without recomputing (statuses, retries).
    fn recheck(&mut self, ns: &str) {
        self.space(ns).schedule.dirty.get_or_insert_with(Dirty::default);
    }

    fn mark_all(&mut self) {
        let namespaces: BTreeSet<String> = self
            .index
            .namespaces()
            .map(str::to_owned)
            .chain(self.live.keys().cloned())
            .chain(self.deleting.keys().map(|(_, k)| k.namespace.clone()))
            .collect();
        for ns in namespaces {
            self.mark(&ns, None);
        }
        self.rules_dirty = true;
    }

    fn read_owned(&mut self) {
        let p = &self.publishing;
        if p.reading_owned || p.read_not_before.is_some_and(|t| Instant::now() < t) {
            return;
        }
        self.publishing.reading_owned = true;
        let configmap = self.publishing.configmap.clone();
        let tx = self.owned_tx.clone();
        tokio::spawn(async move {
            let keys = configmap.keys().await.map(|k| k.into_iter().collect());
            let _ = tx.send(keys);
        });
    }

    /// Resolves every namespace that is due and hands its plan to the writer.
    fn start_due(&mut self) {
        let now = Timestamp::now();
        if self.rules_dirty && self.publishing.owned.is_some() {
            self.rules_dirty = false;
            self.rules = self.index.tag_rules(now);
            self.publishing
                .publish(&self.rules, self.deleting.values().flatten());
            let namespaces: BTreeSet<String> =
                self.rules.reports.keys().map(|k| k.namespace.clone()).collect();
            for ns in namespaces {
                self.recheck(&ns);
            }
        }
        let instant = Instant::now();
        for space in self.spaces.values_mut() {
            if space.schedule.wake_at.is_some_and(|t| t <= instant) {
                space.schedule.wake_at = None;
                space.schedule.dirty.get_or_insert_with(Dirty::default);
            }
        }
        let due: Vec<String> = self
            .spaces
            .iter()
            .filter(|(_, s)| {
                s.schedule.dirty.is_some()
                    && !s.schedule.in_flight
                    && s.schedule.not_before.is_none_or(|t| t <= instant)
            })
            .map(|(ns, _)| ns.clone())
            .collect();
        for ns in due {
            self.start(&ns, now);
        }
        self.update_subset_gauges();
        self.metrics.namespaces.set(self.spaces.len() as i64);
    }

    /// Resolves the namespace (again, or only the Services marked), plans what differs and
    /// hands the plan to the writer.
    fn start(&mut self, ns: &str, now: Timestamp) {
        let Some(space) = self.spaces.get_mut(ns) else {
            return;
        };
        let desired = space.resolve(&self.index, ns, now);
        let empty = LiveObjects::new();
        let live = self.live.get(ns).unwrap_or(&empty);
        plan::prune_failed(&mut space.failed, &desired, live);
        let triggers = std::mem::take(&mut space.triggers);
        // Read before the Events are taken, which also hands `verify` over to `verifying`.
        let (verify, tail_busy) = (space.book.verify, space.schedule.tail_in_flight);
        let events = space.events_for_plan();
        let hold_until = space.grace.hold_until(self.settings.route_grace);
        if hold_until.is_none_or(|t| t <= Instant::now()) {
            // Held long enough: what was released is free to change or go.
            space.grace.released.clear();
        }
        let input = plan::Input {
            ns,
            desired: &desired,
            live,
            index: &self.index,
            rules: &self.rules,
            publishing: &self.publishing,
            gateways: &self.gateways,
            failed: &space.failed,
            deleting: &self.deleting,
            triggers: &triggers,
            grace: plan::RouteGrace {
                released: &space.grace.released,
                hold_until,
            },
            book: plan::StatusBook {
                verify,
                written: &space.book.written,
                memo: &space.book.memo,
                budget: self.count_budget,
            },
            tail_busy,
            clock: plan::Clock {
                instant: Instant::now(),
                now,
            },
        };
        let built = plan::build(&input, &mut space.told, events);
        if let Some(budget) = built.budget {
            self.count_budget = budget;
            self.metrics
                .status_budget_paid_until(budget.paid_until().map(Instant::into_std));
        }
        space.subsets = SubsetCounts::of(&desired);
        space.desired = Some(desired);
        let plan = space.record(built);
        if plan.is_empty() {
            let ok = ResultLabels { result: "ok" };
            self.metrics.reconciles.get_or_create(&ok).inc();
            self.forget_if_gone(ns);
            return;
        }
        debug!(namespace = ns, writes = plan.len(), "writing");
        space.schedule.in_flight = true;
        space.schedule.tail_in_flight |= plan.tail.is_some();
        space.schedule.not_before = Some(Instant::now() + self.settings.debounce);
        let writer = self.writer.clone();
        let reports = self.reports.clone();
        tokio::spawn(async move {
            let started = Instant::now();
            writer
                .execute(plan, |report| {
                    let _ = reports.send((report, started.elapsed()));
                })
                .await;
        });
    }

    /// Drops everything kept for a namespace that holds nothing any more (deleted).
    fn forget_if_gone(&mut self, ns: &str) {
        let gone = self.index.namespaces().all(|n| n != ns)
            && !self.live.contains_key(ns)
            && !self.deleting.keys().any(|(_, k)| k.namespace == ns);
        if gone
            && self.spaces.get(ns).is_some_and(|s| {
                !s.schedule.in_flight && !s.schedule.tail_in_flight && s.schedule.dirty.is_none()
            })
        {
            self.spaces.remove(ns);
        }
    }

    /// `laneway_subsets`: the namespaces' counts summed, each brought up to date by its plans,
    /// so that an event does not walk every LaneRoute's services in every namespace.
    fn update_subset_gauges(&self) {
        let mut total = [0; 4];
        for space in self.spaces.values() {
            for (t, n) in total.iter_mut().zip(space.subsets.0) {
                *t += n;
            }
        }
        for (source, n) in SubsetCounts::LABELS.into_iter().zip(total) {
            self.metrics
                .subsets
                .get_or_create(&SourceLabels { source })
                .set(n);
        }
    }
}

/// Exponential backoff from 100 ms to 30 s, with jitter so that namespaces failing together do
/// not retry together.
fn backoff(failures: u32) -> Duration {
    let doublings = failures.saturating_sub(1).min(9);
    with_jitter(Duration::from_millis(100u64 << doublings).min(Duration::from_secs(30)))
}

/// `base` plus up to 25% of it, drawn from the clock's nanoseconds: enough to spread retries
/// that started together, without a random number generator in the dependencies.
fn with_jitter(base: Duration) -> Duration {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    base + base.mul_f64(f64::from(nanos % 1000) / 4000.0)
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        // Due already: at once, not at the timer's next millisecond.
        Some(d) if d <= Instant::now() => {}
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}
