//! The operator's shell. Watches feed the index; a namespace with changes is resolved by the
//! core, compared with what exists, and handed to the [`Writer`] as a plan; the writer's report
//! comes back as a message. The event loop never waits for a write, each namespace has its own
//! backoff, and only the leader plans.

mod events;
mod plan;
mod publishing;
mod watch;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use kube::runtime::events::EventType;
use kube::{Client, Resource};
use tokio::sync::{mpsc, watch as signal};
use tokio::time::Instant;
use tracing::{debug, warn};

use crate::api::{SubsetSource, TagRule};
use crate::lanes::{Config, Desired, Index, Kind, ObjectKey, TagRules};
use crate::metrics::{Metrics, ResultLabels, SourceLabels};
use crate::publish::{ConfigCentre, ConfigMapCentre, RuleSet, Timing};
use crate::writer::{Done, Report, Subject, Target, WriteError, Writer};
use plan::LiveObjects;
pub use publishing::SKIP_CLEANUP_ANNOTATION;
use publishing::{rule_key, Publishing};
use watch::{Change, Streams};

/// How often the event loop proves it is alive, and how long without that before `/healthz`
/// fails.
pub const HEARTBEAT: Duration = Duration::from_secs(2);
pub const STALL_AFTER: Duration = Duration::from_secs(20);

/// How the controller runs.
#[derive(Clone, Debug)]
pub struct Settings {
    pub config: Config,
    /// Namespaces to watch; empty for the whole cluster.
    pub namespaces: Vec<String>,
    /// Shortest time between two resolutions of one namespace; the first change after a quiet
    /// period is acted on at once.
    pub debounce: Duration,
}

/// The config centres Dubbo rules go to.
pub struct Centres {
    /// The in-cluster ConfigMap, always on; it also records which keys laneway owns.
    pub configmap: Arc<ConfigMapCentre>,
    /// Every centre, the ConfigMap included.
    pub all: Vec<Arc<dyn ConfigCentre>>,
    pub timing: Timing,
}

/// Liveness of the event loop, for `/healthz`.
#[derive(Debug)]
pub struct Health {
    started: std::time::Instant,
    beat_ms: AtomicU64,
}

impl Default for Health {
    fn default() -> Self {
        Health {
            started: std::time::Instant::now(),
            beat_ms: AtomicU64::new(0),
        }
    }
}

impl Health {
    fn beat(&self) {
        let ms = self.started.elapsed().as_millis() as u64;
        self.beat_ms.store(ms, Ordering::Relaxed);
    }

    /// The loop has made progress within [`STALL_AFTER`].
    pub fn alive(&self) -> bool {
        let last = Duration::from_millis(self.beat_ms.load(Ordering::Relaxed));
        self.started.elapsed().saturating_sub(last) < STALL_AFTER
    }
}

/// What needs resolving in one namespace.
#[derive(Clone, Debug, Default)]
struct Dirty {
    /// Recompute everything.
    whole: bool,
    /// Recompute these services only (otherwise only compare again and write what differs).
    services: BTreeSet<String>,
}

/// The scheduling state of one namespace.
#[derive(Debug, Default)]
struct Space {
    dirty: Option<Dirty>,
    /// The last resolution, kept to refresh only what changed.
    desired: Option<Desired>,
    in_flight: bool,
    failures: u32,
    /// Not resolved again before this (debounce or backoff).
    not_before: Option<Instant>,
    expiry: Option<Timestamp>,
    /// The last failed write of each output.
    failed: BTreeMap<Target, WriteError>,
    told: events::Told,
    /// Events to send with the next plan.
    events: Vec<crate::writer::Op>,
}

impl Space {
    fn mark(&mut self, services: Option<&BTreeSet<String>>) {
        let dirty = self.dirty.get_or_insert_with(Dirty::default);
        match services {
            None => dirty.whole = true,
            Some(s) => dirty.services.extend(s.iter().cloned()),
        }
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
    /// LaneRoutes and TagRules being deleted, until their finalizer comes off (with the
    /// TagRule, whose spec names the Dubbo rule to remove).
    deleting: BTreeMap<(Kind, ObjectKey), Option<TagRule>>,
    rules: TagRules,
    rules_dirty: bool,
    publishing: Publishing,
    leading: bool,
    reports: mpsc::UnboundedSender<(Report, Duration)>,
    report_rx: Option<mpsc::UnboundedReceiver<(Report, Duration)>>,
    owned_tx: mpsc::UnboundedSender<Result<BTreeSet<String>, String>>,
    owned_rx: Option<mpsc::UnboundedReceiver<Result<BTreeSet<String>, String>>>,
    health: Arc<Health>,
}

impl Controller {
    pub fn new(
        client: Client,
        settings: Settings,
        centres: Centres,
        writer: Writer,
        metrics: Arc<Metrics>,
        health: Arc<Health>,
    ) -> Self {
        let (wanted, wanted_rx) = signal::channel(RuleSet::default());
        let (outcomes_tx, outcomes) = mpsc::unbounded_channel();
        let names = centres.all.iter().map(|c| c.name()).collect();
        crate::publish::spawn(
            centres.all,
            wanted_rx,
            outcomes_tx,
            centres.timing,
            writer.fence().clone(),
            metrics.clone(),
        );
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
            deleting: BTreeMap::new(),
            rules: TagRules::default(),
            rules_dirty: false,
            publishing: Publishing::new(centres.configmap, names, wanted, outcomes),
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
                            warn!(error = %e, "could not read the rules laneway published; will retry");
                            self.metrics.error("publish");
                        }
                    }
                }
                _ = sleep_until(due) => self.start_due(),
                _ = sleep_until(expiry) => self.expire(),
                _ = heartbeat.tick() => {
                    if self.leading && synced && self.publishing.owned.is_none() {
                        self.read_owned();
                    }
                }
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
            .filter(|s| s.dirty.is_some() && !s.in_flight)
            .map(|s| s.not_before.unwrap_or(now).max(now));
        let rules = (self.rules_dirty && self.publishing.owned.is_some()).then_some(now);
        spaces.chain(rules).min()
    }

    fn next_expiry(&self) -> Option<Instant> {
        let soonest = self.spaces.values().filter_map(|s| s.expiry).min()?;
        let wait = Duration::try_from(soonest.duration_since(Timestamp::now())).unwrap_or(Duration::ZERO);
        Some(Instant::now() + wait + Duration::from_millis(50))
    }

    fn expire(&mut self) {
        let now = Timestamp::now();
        for space in self.spaces.values_mut() {
            if space.expiry.is_some_and(|t| t <= now) {
                space.expiry = None;
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
        self.space(ns).dirty.get_or_insert_with(Dirty::default);
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
        if self.publishing.reading_owned {
            return;
        }
        self.publishing.reading_owned = true;
        let configmap = self.publishing.configmap.clone();
        let tx = self.owned_tx.clone();
        tokio::spawn(async move {
            let keys = configmap
                .keys()
                .await
                .map(|k| k.into_iter().collect())
                .map_err(|e| e.to_string());
            let _ = tx.send(keys);
        });
    }

    fn set_live(&mut self, target: Target, hash: Option<Option<String>>) -> bool {
        let ns = target.key.namespace.clone();
        let changed = match hash {
            Some(hash) => {
                let objects = self.live.entry(ns.clone()).or_default();
                objects.insert(target, hash.clone()) != Some(hash)
            }
            None => {
                let removed = self
                    .live
                    .get_mut(&ns)
                    .is_some_and(|o| o.remove(&target).is_some());
                if self.live.get(&ns).is_some_and(BTreeMap::is_empty) {
                    self.live.remove(&ns);
                }
                removed
            }
        };
        changed
    }

    fn handle(&mut self, change: Change) {
        use crate::writer::OutputKind;
        match change {
            Change::Pod(key, pod) => {
                let affected = match pod {
                    Some(info) => self.index.apply_pod(info),
                    None => self.index.delete_pod(&key.namespace, &key.name),
                };
                if !affected.services.is_empty() {
                    self.space(&key.namespace).mark(Some(&affected.services));
                }
                if !affected.rules.is_empty() {
                    self.rules_dirty = true;
                }
            }
            Change::Service(key, svc) => match svc {
                Some((info, hash)) => {
                    let managed = info.is_managed();
                    let affected = self.index.apply_service(info);
                    let target = Target {
                        kind: OutputKind::Service,
                        key: key.clone(),
                    };
                    if managed {
                        if self.set_live(target, Some(hash)) {
                            self.recheck(&key.namespace);
                        }
                    } else {
                        // A user Service may have replaced (or taken the name of) one of ours.
                        self.set_live(target, None);
                        if affected.whole_namespace {
                            self.mark(&key.namespace, None);
                        }
                    }
                }
                None => {
                    self.index.delete_service(&key.namespace, &key.name);
                    let target = Target {
                        kind: OutputKind::Service,
                        key: key.clone(),
                    };
                    self.set_live(target, None);
                    self.mark(&key.namespace, None);
                }
            },
            Change::Slice(key, hash) => {
                let target = Target {
                    kind: OutputKind::EndpointSlice,
                    key: key.clone(),
                };
                if self.set_live(target, hash) {
                    self.recheck(&key.namespace);
                }
            }
            Change::Route(key, route) => {
                let id = (Kind::LaneRoute, key.clone());
                match route {
                    Some(route) if route.meta().deletion_timestamp.is_none() => {
                        let old = self.index.lane_route(&key.namespace, &key.name);
                        let finalizers_same =
                            old.is_some_and(|old| old.meta().finalizers == route.meta().finalizers);
                        let affected = self.index.apply_lane_route(route);
                        if finalizers_same && !affected.whole_namespace {
                            return;
                        }
                    }
                    Some(_) => {
                        self.index.delete_lane_route(&key.namespace, &key.name);
                        self.deleting.insert(id, None);
                    }
                    None => {
                        self.index.delete_lane_route(&key.namespace, &key.name);
                        self.deleting.remove(&id);
                    }
                }
                self.mark(&key.namespace, None);
            }
            Change::Rule(key, rule) => {
                let id = (Kind::TagRule, key.clone());
                match rule {
                    Some(rule) if rule.meta().deletion_timestamp.is_none() => {
                        let old = self.index.tag_rule(&key.namespace, &key.name);
                        let finalizers_same =
                            old.is_some_and(|old| old.meta().finalizers == rule.meta().finalizers);
                        let affected = self.index.apply_tag_rule(rule);
                        if finalizers_same && !affected.whole_namespace {
                            return;
                        }
                    }
                    Some(rule) => {
                        self.index.delete_tag_rule(&key.namespace, &key.name);
                        self.deleting.insert(id, Some(rule));
                    }
                    None => {
                        self.index.delete_tag_rule(&key.namespace, &key.name);
                        self.deleting.remove(&id);
                    }
                }
                self.mark(&key.namespace, None);
            }
            Change::Resynced(kind, missing) => {
                debug!(kind, missing = missing.len(), "watch relisted");
                for key in missing {
                    self.handle(match kind {
                        "Pod" => Change::Pod(key, None),
                        "Service" => Change::Service(key, None),
                        "EndpointSlice" => Change::Slice(key, None),
                        "LaneRoute" => Change::Route(key, None),
                        _ => Change::Rule(key, None),
                    });
                }
            }
        }
    }

    /// A config centre's state of `key` changed: the TagRule publishing it (or being deleted
    /// with it) needs its status or finalizer looked at.
    fn rule_changed(&mut self, key: &str) {
        let mut namespaces: BTreeSet<String> = self
            .rules
            .reports
            .iter()
            .filter(|(_, r)| r.dubbo.as_ref().is_some_and(|d| d.key == key))
            .map(|(k, _)| k.namespace.clone())
            .collect();
        namespaces.extend(
            self.deleting
                .iter()
                .filter(|(_, rule)| rule.as_ref().and_then(rule_key).as_deref() == Some(key))
                .map(|((_, k), _)| k.namespace.clone()),
        );
        for ns in namespaces {
            self.recheck(&ns);
        }
        self.rules_dirty = true;
    }

    /// Resolves every namespace that is due and hands its plan to the writer.
    fn start_due(&mut self) {
        let now = Timestamp::now();
        if self.rules_dirty && self.publishing.owned.is_some() {
            self.rules_dirty = false;
            self.rules = self.index.tag_rules(now);
            let deleting: BTreeSet<String> = self.deleting.values().flatten().filter_map(rule_key).collect();
            self.publishing.publish(&self.rules, &deleting);
            let namespaces: BTreeSet<String> =
                self.rules.reports.keys().map(|k| k.namespace.clone()).collect();
            for ns in namespaces {
                self.recheck(&ns);
            }
        }
        let instant = Instant::now();
        let due: Vec<String> = self
            .spaces
            .iter()
            .filter(|(_, s)| s.dirty.is_some() && !s.in_flight && s.not_before.is_none_or(|t| t <= instant))
            .map(|(ns, _)| ns.clone())
            .collect();
        for ns in due {
            self.start(&ns, now);
        }
        self.update_subset_gauges();
        self.metrics.namespaces.set(self.spaces.len() as i64);
    }

    fn start(&mut self, ns: &str, now: Timestamp) {
        let Some(space) = self.spaces.get_mut(ns) else {
            return;
        };
        let dirty = space.dirty.take().unwrap_or_default();
        let desired = match (dirty.whole, space.desired.take()) {
            (false, Some(mut cached)) => {
                if !dirty.services.is_empty() {
                    self.index.refresh(&mut cached, ns, &dirty.services, now);
                }
                cached
            }
            _ => self.index.desired(ns, now),
        };
        space.expiry = desired.next_expiry;
        let empty = LiveObjects::new();
        let input = plan::Input {
            ns,
            desired: &desired,
            live: self.live.get(ns).unwrap_or(&empty),
            index: &self.index,
            rules: &self.rules,
            publishing: &self.publishing,
            failed: &space.failed,
            deleting: &self.deleting,
            now,
        };
        let events = std::mem::take(&mut space.events);
        let plan = plan::build(&input, &mut space.told, events);
        space.desired = Some(desired);
        if plan.is_empty() {
            let ok = ResultLabels { result: "ok" };
            self.metrics.reconciles.get_or_create(&ok).inc();
            self.forget_if_gone(ns);
            return;
        }
        debug!(namespace = ns, writes = plan.len(), "writing");
        space.in_flight = true;
        space.not_before = Some(Instant::now() + self.settings.debounce);
        let writer = self.writer.clone();
        let reports = self.reports.clone();
        tokio::spawn(async move {
            let started = Instant::now();
            let report = writer.execute(plan).await;
            let _ = reports.send((report, started.elapsed()));
        });
    }

    /// Takes in what a plan did.
    fn reported(&mut self, report: Report, took: Duration) {
        self.metrics.reconcile_duration.observe(took.as_secs_f64());
        let ns = report.namespace.clone();
        let mut failed = false;
        let mut lost_lease = false;
        let mut recovered = false;
        let mut recreated = Vec::new();
        for (subject, result) in report.results {
            match (&subject, result) {
                (Subject::Output(target), Ok(done)) => {
                    let hash = match done {
                        Done::Applied(hash) => Some(Some(hash)),
                        Done::Recreated { hash, reason } => {
                            recreated.push((target.clone(), reason));
                            Some(Some(hash))
                        }
                        Done::Deleted => None,
                        Done::Written => continue,
                    };
                    self.set_live(target.clone(), hash);
                    if self.space(&ns).failed.remove(target).is_some() {
                        // The status written with this plan still showed the failure.
                        recovered = true;
                    }
                }
                (Subject::Finalizer(kind, key), Ok(_)) => {
                    // A finalizer that came off ends the object's deletion.
                    if self.deleting.contains_key(&(*kind, key.clone())) {
                        self.deleting.remove(&(*kind, key.clone()));
                    }
                }
                (_, Ok(_)) => {}
                (_, Err(WriteError::NotLeader)) => lost_lease = true,
                (subject, Err(e)) => {
                    failed = true;
                    let step = match subject {
                        Subject::Output(_) => "apply",
                        Subject::Status(..) => "status",
                        Subject::Finalizer(..) => "finalizer",
                        Subject::Event => "event",
                    };
                    self.metrics.error(step);
                    if !matches!(e, WriteError::Skipped(_)) {
                        warn!(namespace = %ns, subject = ?subject, error = %e, "write failed; will retry");
                    }
                    if let Subject::Output(target) = subject {
                        self.space(&ns).failed.insert(target.clone(), e);
                    }
                }
            }
        }
        let label = ResultLabels {
            result: if failed { "error" } else { "ok" },
        };
        self.metrics.reconciles.get_or_create(&label).inc();
        for (target, reason) in recreated {
            self.tell_recreated(&ns, &target, &reason);
        }
        let space = self.space(&ns);
        space.in_flight = false;
        if lost_lease {
            return;
        }
        if failed {
            space.failures += 1;
            let backoff = backoff(space.failures);
            space.not_before = Some(Instant::now() + backoff);
            space.dirty.get_or_insert_with(Dirty::default);
        } else {
            space.failures = 0;
            if recovered {
                space.dirty.get_or_insert_with(Dirty::default);
            } else if space.dirty.is_none() {
                self.forget_if_gone(&ns);
            }
        }
    }

    /// A Warning Event on the LaneRoutes owning an output that had to be recreated.
    fn tell_recreated(&mut self, ns: &str, target: &Target, reason: &str) {
        let owners: Vec<String> = self
            .spaces
            .get(ns)
            .and_then(|s| s.desired.as_ref())
            .and_then(|d| match target.kind {
                crate::writer::OutputKind::Service => d.services.get(&target.key.name).map(owner_names),
                crate::writer::OutputKind::EndpointSlice => d.slices.get(&target.key.name).map(owner_names),
            })
            .unwrap_or_default();
        let note = format!(
            "{target} was deleted and created again because a field that cannot change changed: {reason}"
        );
        let events: Vec<_> = owners
            .iter()
            .filter_map(|o| {
                events::event(
                    &self.index,
                    Kind::LaneRoute,
                    &ObjectKey::new(ns, o),
                    EventType::Warning,
                    "Recreated",
                    note.clone(),
                )
            })
            .collect();
        let space = self.space(ns);
        space.events.extend(events);
        space.dirty.get_or_insert_with(Dirty::default);
    }

    /// Drops everything kept for a namespace that holds nothing any more (deleted).
    fn forget_if_gone(&mut self, ns: &str) {
        let gone = self.index.namespaces().all(|n| n != ns)
            && !self.live.contains_key(ns)
            && !self.deleting.keys().any(|(_, k)| k.namespace == ns);
        if gone
            && self
                .spaces
                .get(ns)
                .is_some_and(|s| !s.in_flight && s.dirty.is_none())
        {
            self.spaces.remove(ns);
        }
    }

    fn update_subset_gauges(&self) {
        let mut counts: BTreeMap<&'static str, i64> =
            [("lane", 0), ("fallback", 0), ("baseline", 0), ("empty", 0)]
                .into_iter()
                .collect();
        for desired in self.spaces.values().filter_map(|s| s.desired.as_ref()) {
            for s in desired.routes.values().flat_map(|r| r.services.iter()) {
                let source = match s.source {
                    SubsetSource::Lane => "lane",
                    SubsetSource::Fallback(_) => "fallback",
                    SubsetSource::Baseline => "baseline",
                    SubsetSource::Empty => "empty",
                };
                *counts.entry(source).or_default() += 1;
            }
        }
        for (source, n) in counts {
            self.metrics
                .subsets
                .get_or_create(&SourceLabels { source })
                .set(n);
        }
    }
}

fn owner_names<K: Resource>(obj: &K) -> Vec<String> {
    obj.meta()
        .owner_references
        .iter()
        .flatten()
        .filter(|o| o.kind == "LaneRoute")
        .map(|o| o.name.clone())
        .collect()
}

/// Exponential backoff from 200 ms to 30 s, with up to 25% random jitter so that namespaces
/// failing together do not retry together.
fn backoff(failures: u32) -> Duration {
    let base =
        Duration::from_millis(200u64.saturating_mul(1 << failures.min(8))).min(Duration::from_secs(30));
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    base + base.mul_f64(f64::from(nanos % 1000) / 4000.0)
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}
