//! The operator's shell: watches feed the index, dirty namespaces are resolved by the core and
//! the difference is written with server-side apply. Only the leader writes.

mod watch;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::jiff::Timestamp;
use kube::api::{DeleteParams, Patch, PatchParams};
use kube::runtime::events::{Event as KubeEvent, EventType, Recorder, Reporter};
use kube::{Api, Client, Resource, ResourceExt};
use serde_json::json;
use tokio::sync::{mpsc, watch as signal};
use tokio::time::Instant;
use tracing::{debug, info, instrument, warn};

use crate::api::{LaneRoute, Publication, SubsetSource, TagRule};
use crate::lanes::{naming, Config, Desired, Index, Kind, ObjectKey, Problem, TagRules};
use crate::metrics::{Metrics, ResultLabels, SourceLabels};
use crate::publish::{ConfigCentre, ConfigMapCentre, Outcome, RuleSet, Timing, Wanted};
use crate::status;
use watch::{Change, Streams};

/// Field manager of every write.
pub const FIELD_MANAGER: &str = "laneway.io/controller";
/// Finalizer that lets laneway remove what a LaneRoute or TagRule produced.
pub const FINALIZER: &str = "laneway.io/cleanup";
/// Hash of the applied object, so that an unchanged object is never written again.
pub const HASH_ANNOTATION: &str = "laneway.io/applied-hash";

/// What failed, named by step; each maps to the `step` label of the errors metric.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("applying {kind} {key}: {source}")]
    Apply {
        kind: &'static str,
        key: ObjectKey,
        source: kube::Error,
    },
    #[error("deleting {kind} {key}: {source}")]
    Delete {
        kind: &'static str,
        key: ObjectKey,
        source: kube::Error,
    },
    #[error("writing status of {kind} {key}: {source}")]
    Status {
        kind: &'static str,
        key: ObjectKey,
        source: kube::Error,
    },
    #[error("updating finalizers of {kind} {key}: {source}")]
    Finalizer {
        kind: &'static str,
        key: ObjectKey,
        source: kube::Error,
    },
    #[error("reading the rules laneway published: {source}")]
    Publish { source: crate::publish::PublishError },
}

impl Error {
    pub fn step(&self) -> &'static str {
        match self {
            Error::Apply { .. } => "apply",
            Error::Delete { .. } => "delete",
            Error::Status { .. } => "status",
            Error::Finalizer { .. } => "finalizer",
            Error::Publish { .. } => "publish",
        }
    }
}

/// How the controller runs.
#[derive(Clone, Debug)]
pub struct Settings {
    pub config: Config,
    /// Namespaces to watch; empty for the whole cluster.
    pub namespaces: Vec<String>,
    /// How long to gather changes before resolving them.
    pub debounce: Duration,
    /// Name of this replica in Events.
    pub identity: String,
}

/// The config centres Dubbo rules go to.
pub struct Centres {
    /// The in-cluster ConfigMap, always on; it also records which keys laneway owns.
    pub configmap: Arc<ConfigMapCentre>,
    /// Every centre, the ConfigMap included.
    pub all: Vec<Arc<dyn ConfigCentre>>,
    pub timing: Timing,
}

/// What the controller knows of the config centres.
struct Publishing {
    configmap: Arc<ConfigMapCentre>,
    names: Vec<&'static str>,
    wanted: signal::Sender<RuleSet>,
    outcomes: mpsc::UnboundedReceiver<Outcome>,
    /// The latest state of each key in each centre.
    publications: BTreeMap<(String, &'static str), Publication>,
    /// Centres that have removed each key.
    removed: BTreeMap<String, BTreeSet<&'static str>>,
    /// The Dubbo key of each TagRule, kept for TagRules being deleted.
    rule_keys: BTreeMap<ObjectKey, String>,
    /// Keys laneway published before this replica led (read from the ConfigMap).
    owned: Option<BTreeSet<String>>,
}

/// What needs resolving in one namespace.
#[derive(Clone, Debug, Default)]
struct Dirty {
    whole: bool,
    services: BTreeSet<String>,
}

/// The operator's state between events.
pub struct Controller {
    client: Client,
    settings: Settings,
    metrics: Arc<Metrics>,
    recorder: Recorder,
    index: Index,
    /// Managed Services and EndpointSlices that exist, with the hash they were applied with.
    live_services: BTreeMap<ObjectKey, Option<String>>,
    live_slices: BTreeMap<ObjectKey, Option<String>>,
    dirty: BTreeMap<String, Dirty>,
    rules_dirty: bool,
    cache: BTreeMap<String, Desired>,
    /// Deleted objects whose finalizer is removed once their outputs are gone.
    finalizing_routes: BTreeSet<ObjectKey>,
    finalizing_rules: BTreeSet<ObjectKey>,
    /// Problems and subset sources already told in Events.
    told: BTreeSet<(Kind, ObjectKey, String)>,
    sources: BTreeMap<(ObjectKey, String), SubsetSource>,
    expiries: BTreeMap<String, Timestamp>,
    failures: u32,
    publishing: Publishing,
    leading: bool,
}

impl Controller {
    pub fn new(client: Client, settings: Settings, centres: Centres, metrics: Arc<Metrics>) -> Self {
        let (wanted, wanted_rx) = signal::channel(RuleSet::default());
        let (outcomes_tx, outcomes) = mpsc::unbounded_channel();
        let names = centres.all.iter().map(|c| c.name()).collect();
        crate::publish::spawn(
            centres.all,
            wanted_rx,
            outcomes_tx,
            centres.timing,
            metrics.clone(),
        );
        let publishing = Publishing {
            configmap: centres.configmap,
            names,
            wanted,
            outcomes,
            publications: BTreeMap::new(),
            removed: BTreeMap::new(),
            rule_keys: BTreeMap::new(),
            owned: None,
        };
        let reporter = Reporter {
            controller: FIELD_MANAGER.into(),
            instance: Some(settings.identity.clone()),
        };
        Controller {
            recorder: Recorder::new(client.clone(), reporter),
            index: Index::new(settings.config.clone()),
            client,
            settings,
            metrics,
            live_services: BTreeMap::new(),
            live_slices: BTreeMap::new(),
            dirty: BTreeMap::new(),
            rules_dirty: false,
            cache: BTreeMap::new(),
            finalizing_routes: BTreeSet::new(),
            finalizing_rules: BTreeSet::new(),
            told: BTreeSet::new(),
            sources: BTreeMap::new(),
            expiries: BTreeMap::new(),
            failures: 0,
            publishing,
            leading: false,
        }
    }

    /// Watches and writes until `stop` fires. `ready` turns true once every watch has listed
    /// its objects; nothing is written before that, so a cold cache never empties a lane.
    pub async fn run(
        mut self,
        mut leading: signal::Receiver<bool>,
        ready: Arc<AtomicBool>,
        mut stop: signal::Receiver<bool>,
    ) {
        let mut streams = Streams::new(&self.client, &self.settings.namespaces);
        let mut deadline: Option<Instant> = None;
        loop {
            let expiry = self.next_expiry();
            tokio::select! {
                change = streams.next() => {
                    let Some(change) = change else { break };
                    self.handle(change);
                    ready.store(streams.synced(), Ordering::Relaxed);
                }
                _ = leading.changed() => {
                    self.leading = *leading.borrow();
                    self.metrics.leader.set(i64::from(self.leading));
                    if self.leading {
                        self.mark_all();
                    } else {
                        self.publishing.owned = None;
                        self.publishing.wanted.send_modify(|w| w.leading = false);
                    }
                }
                Some(outcome) = self.publishing.outcomes.recv() => self.record(outcome),
                _ = sleep_until(deadline) => {
                    deadline = None;
                    if *leading.borrow() && streams.synced() {
                        self.reconcile_dirty().await;
                    }
                }
                _ = sleep_until(expiry) => {
                    let now = Timestamp::now();
                    let due: Vec<String> = self.expiries.iter().filter(|(_, t)| **t <= now).map(|(ns, _)| ns.clone()).collect();
                    for ns in due {
                        self.expiries.remove(&ns);
                        self.mark(&ns, None);
                    }
                }
                _ = stop.changed() => break,
            }
            // Only the leader resolves; a standby just keeps its index warm.
            if deadline.is_none() && self.leading && (!self.dirty.is_empty() || self.rules_dirty) {
                let backoff = Duration::from_millis(200u64.saturating_mul(1 << self.failures.min(7)));
                let wait = if self.failures == 0 {
                    self.settings.debounce
                } else {
                    backoff
                };
                deadline = Some(Instant::now() + wait);
            }
        }
    }

    fn next_expiry(&self) -> Option<Instant> {
        let soonest = self.expiries.values().min()?;
        let wait = soonest.duration_since(Timestamp::now());
        let wait = Duration::try_from(wait).unwrap_or(Duration::ZERO);
        Some(Instant::now() + wait + Duration::from_millis(50))
    }

    fn mark(&mut self, ns: &str, services: Option<&BTreeSet<String>>) {
        let dirty = self.dirty.entry(ns.to_owned()).or_default();
        match services {
            None => dirty.whole = true,
            Some(s) => dirty.services.extend(s.iter().cloned()),
        }
        self.rules_dirty = true;
    }

    fn mark_all(&mut self) {
        let namespaces: Vec<String> = self.index.namespaces().map(str::to_owned).collect();
        for ns in namespaces {
            self.mark(&ns, None);
        }
        let managed: BTreeSet<String> = self
            .live_services
            .keys()
            .chain(self.live_slices.keys())
            .map(|k| k.namespace.clone())
            .collect();
        for ns in managed {
            self.mark(&ns, None);
        }
    }

    fn handle(&mut self, change: Change) {
        match change {
            Change::Pod(key, pod) => {
                let affected = match pod {
                    Some(info) => self.index.apply_pod(info),
                    None => self.index.delete_pod(&key.namespace, &key.name),
                };
                if !affected.services.is_empty() {
                    self.mark(&key.namespace, Some(&affected.services));
                }
                if !affected.rules.is_empty() {
                    self.rules_dirty = true;
                }
            }
            Change::Service(key, svc) => match svc {
                Some((info, hash)) => {
                    let managed = info.is_managed();
                    let affected = self.index.apply_service(info);
                    if managed {
                        if self.live_services.insert(key.clone(), hash.clone()) != Some(hash) {
                            self.mark(&key.namespace, None);
                        }
                    } else if affected.whole_namespace {
                        self.mark(&key.namespace, None);
                    }
                }
                None => {
                    self.index.delete_service(&key.namespace, &key.name);
                    self.live_services.remove(&key);
                    self.mark(&key.namespace, None);
                }
            },
            Change::Slice(key, hash) => {
                let changed = match hash {
                    Some(hash) => self.live_slices.insert(key.clone(), hash.clone()) != Some(hash),
                    None => self.live_slices.remove(&key).is_some(),
                };
                if changed {
                    self.mark(&key.namespace, None);
                }
            }
            Change::Route(key, route) => {
                match route {
                    Some(route) if route.meta().deletion_timestamp.is_none() => {
                        let old = self.index.lane_route(&key.namespace, &key.name);
                        let finalizers_same = old.is_some_and(|old| old.finalizers() == route.finalizers());
                        let affected = self.index.apply_lane_route(route);
                        if finalizers_same && !affected.whole_namespace {
                            return;
                        }
                    }
                    Some(_) => {
                        self.index.delete_lane_route(&key.namespace, &key.name);
                        self.finalizing_routes.insert(key.clone());
                    }
                    None => {
                        self.index.delete_lane_route(&key.namespace, &key.name);
                        self.finalizing_routes.remove(&key);
                    }
                }
                self.mark(&key.namespace, None);
            }
            Change::Rule(key, rule) => {
                match rule {
                    Some(rule) if rule.meta().deletion_timestamp.is_none() => {
                        let old = self.index.tag_rule(&key.namespace, &key.name);
                        let finalizers_same = old.is_some_and(|old| old.finalizers() == rule.finalizers());
                        let affected = self.index.apply_tag_rule(rule);
                        if finalizers_same && !affected.whole_namespace {
                            return;
                        }
                    }
                    Some(_) => {
                        self.index.delete_tag_rule(&key.namespace, &key.name);
                        self.finalizing_rules.insert(key.clone());
                    }
                    None => {
                        self.index.delete_tag_rule(&key.namespace, &key.name);
                        self.finalizing_rules.remove(&key);
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

    /// Notes what a config centre did, for TagRule status and finalizers.
    fn record(&mut self, outcome: Outcome) {
        let p = &mut self.publishing;
        let changed = match outcome {
            Outcome::Published {
                centre,
                key,
                hash,
                at,
            } => {
                p.removed.remove(&key);
                let entry = p
                    .publications
                    .entry((key.clone(), centre))
                    .or_insert_with(|| Publication {
                        centre: centre.to_owned(),
                        key: key.clone(),
                        ..Default::default()
                    });
                let fresh =
                    entry.content_hash.as_deref() != Some(hash.as_str()) || entry.last_error.is_some();
                if fresh {
                    entry.content_hash = Some(hash);
                    entry.published_at = Some(at.to_string());
                    entry.last_error = None;
                }
                fresh
            }
            Outcome::Failed { centre, key, error } => {
                let entry = p
                    .publications
                    .entry((key.clone(), centre))
                    .or_insert_with(|| Publication {
                        centre: centre.to_owned(),
                        key,
                        ..Default::default()
                    });
                let fresh = entry.last_error.as_deref() != Some(error.as_str());
                entry.last_error = Some(error);
                fresh
            }
            Outcome::Removed { centre, key } => {
                p.publications.remove(&(key.clone(), centre));
                p.removed.entry(key).or_default().insert(centre);
                let namespaces: BTreeSet<String> = self
                    .finalizing_rules
                    .iter()
                    .map(|k| k.namespace.clone())
                    .collect();
                for ns in namespaces {
                    self.mark(&ns, None);
                }
                true
            }
        };
        if changed {
            self.rules_dirty = true;
        }
    }

    /// Hands the rules every centre should hold to the publishers.
    async fn publish_rules(&mut self, rules: &TagRules) -> Result<(), Error> {
        let p = &mut self.publishing;
        if p.owned.is_none() {
            let keys = p
                .configmap
                .keys()
                .await
                .map_err(|source| Error::Publish { source })?;
            p.owned = Some(keys.into_iter().collect());
        }
        let mut set = RuleSet {
            leading: true,
            owned: p.owned.clone().unwrap_or_default(),
            ..Default::default()
        };
        for (owner, report) in &rules.reports {
            if let Some(rule) = &report.dubbo {
                p.rule_keys.insert(owner.clone(), rule.key.clone());
                set.rules.insert(
                    rule.key.clone(),
                    Wanted {
                        rule: rule.clone(),
                        owner: owner.clone(),
                    },
                );
            }
        }
        p.wanted.send_if_modified(|current| {
            let changed = *current != set;
            *current = set;
            changed
        });
        Ok(())
    }

    /// A TagRule being deleted may go once every centre has removed its rule.
    fn rule_retired(&self, rule: &ObjectKey) -> bool {
        let p = &self.publishing;
        let Some(key) = p.rule_keys.get(rule) else {
            return true;
        };
        let taken_over = p.wanted.borrow().rules.get(key).is_some_and(|w| w.owner != *rule);
        if taken_over {
            return true;
        }
        let removed = p.removed.get(key);
        p.names.iter().all(|c| removed.is_some_and(|r| r.contains(c)))
    }

    async fn reconcile_dirty(&mut self) {
        let now = Timestamp::now();
        let dirty = std::mem::take(&mut self.dirty);
        let rules = self.index.tag_rules(now);
        let mut failed = false;
        for (ns, d) in dirty {
            let started = std::time::Instant::now();
            let result = self.reconcile_namespace(&ns, &d, &rules, now).await;
            self.metrics
                .reconcile_duration
                .observe(started.elapsed().as_secs_f64());
            let label = ResultLabels {
                result: if result.is_ok() { "ok" } else { "error" },
            };
            self.metrics.reconciles.get_or_create(&label).inc();
            if let Err(e) = result {
                warn!(namespace = %ns, error = %e, "reconcile failed; will retry");
                self.metrics.error(e.step());
                self.mark(&ns, None);
                failed = true;
            }
        }
        if let Err(e) = self.publish_rules(&rules).await {
            warn!(error = %e, "config centres not updated; will retry");
            self.metrics.error(e.step());
            self.rules_dirty = true;
            failed = true;
        }
        if self.rules_dirty {
            self.rules_dirty = false;
            if let Err(e) = self.write_rule_statuses(&rules, now).await {
                warn!(error = %e, "TagRule status failed; will retry");
                self.metrics.error(e.step());
                self.rules_dirty = true;
                failed = true;
            }
        }
        self.failures = if failed { self.failures + 1 } else { 0 };
        self.update_subset_gauges();
    }

    #[instrument(skip(self, dirty, rules, now), fields(whole = dirty.whole, services = dirty.services.len()))]
    async fn reconcile_namespace(
        &mut self,
        ns: &str,
        dirty: &Dirty,
        rules: &TagRules,
        now: Timestamp,
    ) -> Result<(), Error> {
        let desired = match (dirty.whole, self.cache.remove(ns)) {
            (false, Some(mut cached)) => {
                self.index.refresh(&mut cached, ns, &dirty.services, now);
                cached
            }
            _ => self.index.desired(ns, now),
        };
        match desired.next_expiry {
            Some(t) => self.expiries.insert(ns.to_owned(), t),
            None => self.expiries.remove(ns),
        };
        // Finalizers go on before any output exists, and come off once the outputs are gone.
        let outcome = self.add_finalizers(ns).await;
        let outcome = match outcome {
            Ok(()) => self.apply_outputs(ns, &desired).await,
            Err(e) => Err(e),
        };
        let outcome = match outcome {
            Ok(()) => self.write_route_statuses(ns, &desired, now).await,
            Err(e) => Err(e),
        };
        let outcome = match outcome {
            Ok(()) => self.remove_finalizers(ns).await,
            Err(e) => Err(e),
        };
        self.tell(ns, &desired, rules).await;
        self.cache.insert(ns.to_owned(), desired);
        outcome
    }

    async fn apply_outputs(&mut self, ns: &str, desired: &Desired) -> Result<(), Error> {
        let services: Api<Service> = Api::namespaced(self.client.clone(), ns);
        let slices: Api<EndpointSlice> = Api::namespaced(self.client.clone(), ns);
        for (name, svc) in &desired.services {
            let key = ObjectKey::new(ns, name);
            apply_if_changed(
                &services,
                &mut self.live_services,
                key,
                svc,
                "Service",
                &self.metrics,
            )
            .await?;
        }
        for (name, slice) in &desired.slices {
            let key = ObjectKey::new(ns, name);
            apply_if_changed(
                &slices,
                &mut self.live_slices,
                key,
                slice,
                "EndpointSlice",
                &self.metrics,
            )
            .await?;
        }
        let stale =
            |live: &BTreeMap<ObjectKey, Option<String>>, wanted: &dyn Fn(&str) -> bool| -> Vec<ObjectKey> {
                live.keys()
                    .filter(|k| k.namespace == ns && !wanted(&k.name))
                    .cloned()
                    .collect()
            };
        for key in stale(&self.live_slices, &|n| desired.slices.contains_key(n)) {
            delete(&slices, &key, "EndpointSlice", &self.metrics).await?;
            self.live_slices.remove(&key);
        }
        for key in stale(&self.live_services, &|n| desired.services.contains_key(n)) {
            delete(&services, &key, "Service", &self.metrics).await?;
            self.live_services.remove(&key);
        }
        Ok(())
    }

    async fn write_route_statuses(
        &mut self,
        ns: &str,
        desired: &Desired,
        now: Timestamp,
    ) -> Result<(), Error> {
        let api: Api<LaneRoute> = Api::namespaced(self.client.clone(), ns);
        for (name, report) in &desired.routes {
            let Some(route) = self.index.lane_route(ns, name) else {
                continue;
            };
            let key = ObjectKey::new(ns, name);
            let problems = problems_of(&desired.problems, Kind::LaneRoute, &key);
            let mut status = status::lane_route_status(route.meta().generation, report, &problems);
            let old = route.status.clone().unwrap_or_default();
            status::carry_transition_times(&old.conditions, &mut status.conditions, &now.to_string());
            if route.status.as_ref() == Some(&status) {
                continue;
            }
            write_status(&api, &key, "LaneRoute", json!(status), &self.metrics).await?;
        }
        Ok(())
    }

    async fn write_rule_statuses(&mut self, rules: &TagRules, now: Timestamp) -> Result<(), Error> {
        for (key, report) in &rules.reports {
            let Some(rule) = self.index.tag_rule(&key.namespace, &key.name) else {
                continue;
            };
            let problems = problems_of(&rules.problems, Kind::TagRule, key);
            let mut status = status::tag_rule_status(rule.meta().generation, report, &problems);
            let old = rule.status.clone().unwrap_or_default();
            if let Some(dubbo) = &report.dubbo {
                status.publications = self
                    .publishing
                    .publications
                    .iter()
                    .filter(|((k, _), _)| *k == dubbo.key)
                    .map(|(_, p)| p.clone())
                    .collect();
            }
            status::carry_transition_times(&old.conditions, &mut status.conditions, &now.to_string());
            if rule.status.as_ref() == Some(&status) {
                continue;
            }
            let api: Api<TagRule> = Api::namespaced(self.client.clone(), &key.namespace);
            write_status(&api, key, "TagRule", json!(status), &self.metrics).await?;
        }
        Ok(())
    }

    async fn add_finalizers(&mut self, ns: &str) -> Result<(), Error> {
        let missing = |f: &[String]| !f.iter().any(|f| f == FINALIZER);
        let routes: Vec<String> = self
            .index
            .lane_routes(ns)
            .filter(|r| missing(r.finalizers()))
            .map(|r| r.name_any())
            .collect();
        let rules: Vec<String> = self
            .index
            .tag_rules_in(ns)
            .filter(|r| missing(r.finalizers()))
            .map(|r| r.name_any())
            .collect();
        for name in routes {
            set_finalizer(
                &Api::<LaneRoute>::namespaced(self.client.clone(), ns),
                ns,
                &name,
                "LaneRoute",
                true,
            )
            .await?;
        }
        for name in rules {
            set_finalizer(
                &Api::<TagRule>::namespaced(self.client.clone(), ns),
                ns,
                &name,
                "TagRule",
                true,
            )
            .await?;
        }
        Ok(())
    }

    /// Lets deleted LaneRoutes and TagRules go once their outputs are gone.
    async fn remove_finalizers(&mut self, ns: &str) -> Result<(), Error> {
        let done: Vec<ObjectKey> = self
            .finalizing_routes
            .iter()
            .filter(|k| k.namespace == ns)
            .cloned()
            .collect();
        for key in done {
            set_finalizer(
                &Api::<LaneRoute>::namespaced(self.client.clone(), ns),
                ns,
                &key.name,
                "LaneRoute",
                false,
            )
            .await?;
            self.finalizing_routes.remove(&key);
        }
        let done: Vec<ObjectKey> = self
            .finalizing_rules
            .iter()
            .filter(|k| k.namespace == ns && self.rule_retired(k))
            .cloned()
            .collect();
        for key in done {
            set_finalizer(
                &Api::<TagRule>::namespaced(self.client.clone(), ns),
                ns,
                &key.name,
                "TagRule",
                false,
            )
            .await?;
            self.finalizing_rules.remove(&key);
        }
        Ok(())
    }

    /// Events for problems that newly appeared and for subsets that changed source.
    async fn tell(&mut self, ns: &str, desired: &Desired, rules: &TagRules) {
        let mut current = BTreeSet::new();
        let problems = desired.problems.iter().chain(
            rules
                .problems
                .iter()
                .filter(|p| p.subjects().iter().any(|(_, k)| k.namespace == ns)),
        );
        let mut events = Vec::new();
        for p in problems {
            for (kind, key) in p.subjects().into_iter().filter(|(_, k)| k.namespace == ns) {
                let told = (kind, key.clone(), p.to_string());
                if !self.told.contains(&told) {
                    events.push((
                        kind,
                        key.clone(),
                        EventType::Warning,
                        p.reason().to_owned(),
                        p.to_string(),
                    ));
                }
                current.insert(told);
            }
        }
        self.told.retain(|(_, k, _)| k.namespace != ns);
        self.told.extend(current);
        for (route, report) in &desired.routes {
            let key = ObjectKey::new(ns, route);
            for s in &report.services {
                let previous = self
                    .sources
                    .insert((key.clone(), s.name.clone()), s.source.clone());
                if previous.as_ref().is_some_and(|p| *p != s.source) {
                    let note = format!(
                        "{} is now served from {} (was {})",
                        s.name,
                        s.source,
                        previous.unwrap_or_default()
                    );
                    events.push((
                        Kind::LaneRoute,
                        key.clone(),
                        EventType::Normal,
                        "SubsetChanged".into(),
                        note,
                    ));
                }
            }
        }
        for (kind, key, type_, reason, note) in events {
            let reference = match kind {
                Kind::LaneRoute => self
                    .index
                    .lane_route(&key.namespace, &key.name)
                    .map(|r| r.object_ref(&())),
                Kind::TagRule => self
                    .index
                    .tag_rule(&key.namespace, &key.name)
                    .map(|r| r.object_ref(&())),
            };
            let Some(reference) = reference else { continue };
            let event = KubeEvent {
                type_,
                reason,
                note: Some(truncate(note, 1000)),
                action: "Resolve".into(),
                secondary: None,
            };
            if let Err(e) = self.recorder.publish(&event, &reference).await {
                debug!(error = %e, "could not publish event");
            }
        }
    }

    fn update_subset_gauges(&self) {
        let mut counts: BTreeMap<&'static str, i64> =
            [("lane", 0), ("fallback", 0), ("baseline", 0), ("empty", 0)]
                .into_iter()
                .collect();
        for desired in self.cache.values() {
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

fn problems_of<'a>(problems: &'a [Problem], kind: Kind, key: &ObjectKey) -> Vec<&'a Problem> {
    problems
        .iter()
        .filter(|p| p.subjects().iter().any(|(k, o)| *k == kind && o == key))
        .collect()
}

fn truncate(mut s: String, max: usize) -> String {
    if s.len() > max {
        let mut end = max;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        s.truncate(end);
    }
    s
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => futures::future::pending().await,
    }
}

/// Server-side applies the status of a laneway object; one deleted meanwhile is no error.
async fn write_status<K>(
    api: &Api<K>,
    key: &ObjectKey,
    kind: &'static str,
    status: serde_json::Value,
    metrics: &Metrics,
) -> Result<(), Error>
where
    K: Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let patch = json!({"apiVersion": "laneway.io/v1alpha1", "kind": kind, "status": status});
    match api
        .patch_status(
            &key.name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&patch),
        )
        .await
    {
        Ok(_) => {
            metrics.write(kind, "status");
            Ok(())
        }
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        Err(source) => Err(Error::Status {
            kind,
            key: key.clone(),
            source,
        }),
    }
}

/// Server-side applies `obj` unless the live object was applied from the same content.
async fn apply_if_changed<K>(
    api: &Api<K>,
    live: &mut BTreeMap<ObjectKey, Option<String>>,
    key: ObjectKey,
    obj: &K,
    kind: &'static str,
    metrics: &Metrics,
) -> Result<(), Error>
where
    K: Resource + Clone + serde::Serialize + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let hash = naming::digest(&[&serde_json::to_string(obj).unwrap_or_default()]);
    if live
        .get(&key)
        .is_some_and(|h| h.as_deref() == Some(hash.as_str()))
    {
        return Ok(());
    }
    let mut obj = obj.clone();
    obj.meta_mut()
        .annotations
        .get_or_insert_with(Default::default)
        .insert(HASH_ANNOTATION.into(), hash.clone());
    api.patch(
        &key.name,
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(&obj),
    )
    .await
    .map_err(|source| Error::Apply {
        kind,
        key: key.clone(),
        source,
    })?;
    debug!(kind, %key, "applied");
    metrics.write(kind, "apply");
    live.insert(key, Some(hash));
    Ok(())
}

async fn delete<K>(api: &Api<K>, key: &ObjectKey, kind: &'static str, metrics: &Metrics) -> Result<(), Error>
where
    K: Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    match api.delete(&key.name, &DeleteParams::default()).await {
        Ok(_) => {
            info!(kind, %key, "deleted");
            metrics.write(kind, "delete");
            Ok(())
        }
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        Err(source) => Err(Error::Delete {
            kind,
            key: key.clone(),
            source,
        }),
    }
}

/// Adds or removes laneway's finalizer with a JSON patch that fails (and is retried) if the
/// list changed since it was read, so other controllers' finalizers are never lost.
async fn set_finalizer<K>(
    api: &Api<K>,
    ns: &str,
    name: &str,
    kind: &'static str,
    present: bool,
) -> Result<(), Error>
where
    K: Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let err = |source| Error::Finalizer {
        kind,
        key: ObjectKey::new(ns, name),
        source,
    };
    let Some(obj) = api.get_opt(name).await.map_err(err)? else {
        return Ok(());
    };
    let current = obj.meta().finalizers.clone().unwrap_or_default();
    let position = current.iter().position(|f| f == FINALIZER);
    let ops = match (present, position) {
        (true, Some(_)) | (false, None) => return Ok(()),
        (true, None) if current.is_empty() => json!([
            {"op": "test", "path": "/metadata/finalizers", "value": null},
            {"op": "add", "path": "/metadata/finalizers", "value": [FINALIZER]},
        ]),
        (true, None) => json!([
            {"op": "test", "path": "/metadata/finalizers", "value": current},
            {"op": "add", "path": "/metadata/finalizers/-", "value": FINALIZER},
        ]),
        (false, Some(i)) => json!([
            {"op": "test", "path": format!("/metadata/finalizers/{i}"), "value": FINALIZER},
            {"op": "remove", "path": format!("/metadata/finalizers/{i}")},
        ]),
    };
    let patch: json_patch::Patch =
        serde_json::from_value(ops).unwrap_or_else(|_| json_patch::Patch(Vec::new()));
    match api
        .patch(name, &PatchParams::default(), &Patch::<()>::Json(patch))
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        Err(source) => Err(err(source)),
    }
}
