//! The invariant checker of the fault suite. It watches the namespace (through its own
//! identity, straight to the API server) and the config centres, recomputes every 20 ms what
//! laneway should have produced from what it sees (with laneway's own core), and counts each
//! episode in which an invariant is broken for longer than its tolerance:
//! - a lane or baseline slice that had ready endpoints emptied while a ready pod of its tier
//!   existed;
//! - a lane slice holding pods of another tier than its status names (an untagged pod is right
//!   only when the source is Baseline);
//! - a tagged pod in a baseline slice;
//! - an untagged pod under a tag of a Dubbo rule, in any centre (in Nacos, whose reads trail
//!   its writes, once that lag has passed too);
//! - a config centre differing from the computed rule for longer than the repair period.
//!
//! Tolerances run only while some replica can write (the Lease is being renewed and the API
//! server serves laneway's kinds): while the API server is down or starting, or between a
//! leader being cut off and another taking over, nothing can be changed, and what is there
//! stays as it was.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::jiff::Timestamp;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Api, Client, ResourceExt};
use laneway::api::{LaneRoute, SubsetSource, TagRule, DEFAULT_LANE_LABEL};
use laneway::lanes::{
    Config, Index, PodInfo, ServiceInfo, SERVICE_NAME_LABEL, SLICE_MANAGED_BY_LABEL, SLICE_MANAGER,
};

/// How long a broken invariant may last before it counts (one reconcile and its propagation).
pub const TOLERANCE: Duration = Duration::from_secs(2);

/// Where the checker reads config-centre contents that tasks of the suite poll.
pub type Centre = Arc<Mutex<Option<BTreeMap<String, String>>>>;

/// Episodes counted so far, per invariant.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Incidents {
    pub emptied: u32,
    pub wrong_tier: u32,
    pub tagged_in_baseline: u32,
    pub untagged_in_dubbo: u32,
    pub centre_drift: u32,
    /// What the last incidents were, for the failure message.
    pub notes: Vec<String>,
}

impl Incidents {
    pub fn total(&self) -> u32 {
        self.emptied + self.wrong_tier + self.tagged_in_baseline + self.untagged_in_dubbo + self.centre_drift
    }
}

/// Tracks possible breaches: for how long each has lasted while some replica could write (the
/// Lease being renewed), and whether it was counted. Time without a writer (the API server
/// down, a leader cut off and not yet replaced) does not count: nothing can change then.
#[derive(Default)]
struct Episodes {
    open: BTreeMap<String, (Duration, bool)>,
}

impl Episodes {
    /// Notes the breaches seen now, `step` after the last look; returns the ones that just
    /// passed `tolerance`.
    fn observe(&mut self, step: Duration, breaches: BTreeSet<String>, tolerance: Duration) -> Vec<String> {
        self.open.retain(|k, _| breaches.contains(k));
        let mut fresh = Vec::new();
        for b in breaches {
            let (lasted, counted) = self.open.entry(b.clone()).or_insert((Duration::ZERO, false));
            *lasted += step;
            if !*counted && *lasted > tolerance {
                *counted = true;
                fresh.push(b);
            }
        }
        fresh
    }
}

/// How far behind the rules a centre read back may be: Nacos answers reads from a cache it
/// refreshes after a write (for up to 2.1 s measured), and the suite polls it every 500 ms.
const READ_LAG: Duration = Duration::from_secs(3);

/// The rules wanted lately, per key (`None`: no rule), on a clock that runs only while some
/// replica can write: a centre read back fits when it holds one of them.
#[derive(Default)]
struct RecentRules {
    clock: Duration,
    current: BTreeMap<String, Option<String>>,
    /// Rules no longer wanted, with the time they stopped being wanted.
    superseded: BTreeMap<String, Vec<(Duration, Option<String>)>>,
}

impl RecentRules {
    fn observe(&mut self, step: Duration, rules: &BTreeMap<String, String>) {
        self.clock += step;
        let keys: BTreeSet<String> = self.current.keys().chain(rules.keys()).cloned().collect();
        for key in keys {
            let now = rules.get(&key).cloned();
            let before = self.current.insert(key.clone(), now.clone()).flatten();
            if before != now {
                self.superseded.entry(key).or_default().push((self.clock, before));
            }
        }
        let horizon = self.clock.saturating_sub(READ_LAG);
        for old in self.superseded.values_mut() {
            old.retain(|(until, _)| *until >= horizon);
        }
    }

    fn fits(&self, key: &str, content: Option<&String>) -> bool {
        self.current.get(key).is_some_and(|c| c.as_ref() == content)
            || self
                .superseded
                .get(key)
                .is_some_and(|old| old.iter().any(|(_, c)| c.as_ref() == content))
    }
}

/// LaneRoutes, listed every 100 ms rather than watched: a watch of a custom resource opened
/// while the API server is starting can stay open and silent, and the statuses are what the
/// checker judges slices against. `serving` tells whether the last list worked (the API server
/// does not serve laneway's kinds for a few seconds after it starts).
type Routes = Arc<Mutex<Vec<LaneRoute>>>;

fn list_routes(
    client: Client,
    ns: String,
) -> (
    Routes,
    Arc<std::sync::atomic::AtomicBool>,
    tokio::task::JoinHandle<()>,
) {
    let routes: Routes = Arc::default();
    let serving = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (out, flag) = (routes.clone(), serving.clone());
    let task = tokio::spawn(async move {
        let api: Api<LaneRoute> = Api::namespaced(client, &ns);
        loop {
            match tokio::time::timeout(Duration::from_millis(500), api.list(&Default::default())).await {
                Ok(Ok(list)) => {
                    *out.lock().expect("routes") = list.items;
                    flag.store(true, std::sync::atomic::Ordering::Relaxed);
                }
                _ => flag.store(false, std::sync::atomic::Ordering::Relaxed),
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });
    (routes, serving, task)
}

struct Stores {
    pods: Store<Pod>,
    services: Store<Service>,
    slices: Store<EndpointSlice>,
    routes: Routes,
    rules: Store<TagRule>,
    configmaps: Store<ConfigMap>,
    leases: Store<Lease>,
    /// When one of these watches last failed (epoch ms).
    broken: Arc<std::sync::atomic::AtomicU64>,
}

/// The checker's watches come back within 200 ms of the API server: a lagging view of its own
/// must never pass for laneway's lag.
const QUICK: Duration = Duration::from_millis(200);

struct Quick(Duration);

impl Iterator for Quick {
    type Item = Duration;
    fn next(&mut self) -> Option<Duration> {
        Some(self.0)
    }
}

impl kube::runtime::utils::Backoff for Quick {
    fn reset(&mut self) {}
}

/// Milliseconds since the Unix epoch.
fn epoch_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Watches into a store; `broken` is stamped (epoch ms) whenever the watch fails.
fn watch<K>(api: Api<K>, config: watcher::Config, broken: &Arc<std::sync::atomic::AtomicU64>) -> Store<K>
where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
{
    let (reader, writer) = reflector::store();
    let stream = reflector::reflector(writer, watcher(api, config).backoff(Quick(QUICK)));
    let broken = broken.clone();
    tokio::spawn(stream.for_each(move |event| {
        if event.is_err() {
            broken.store(epoch_ms(), std::sync::atomic::Ordering::Relaxed);
        }
        futures::future::ready(())
    }));
    reader
}

/// The checker, running until dropped.
pub struct Checker {
    ns: String,
    serving: Arc<std::sync::atomic::AtomicBool>,
    probe: Option<tokio::task::JoinHandle<()>>,
    stores: Arc<Stores>,
    centres: Vec<(&'static str, Centre)>,
    configmap: String,
    incidents: Arc<Mutex<Incidents>>,
    /// Milliseconds added to the tolerance of the slices' clocks and of the ZooKeeper and
    /// Nacos rules' clocks (see [`Checker::allow`]).
    slack_ms: Arc<[std::sync::atomic::AtomicU64; 2]>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Checker {
    fn drop(&mut self) {
        self.task.abort();
        if let Some(probe) = &self.probe {
            probe.abort();
        }
    }
}

/// What laneway should have produced, and what there is.
struct View {
    /// Desired slices by name: (service name, endpoints as (pod, ready)).
    desired: BTreeMap<String, (String, BTreeSet<(String, bool)>)>,
    /// Actual laneway slices by name, same shape.
    actual: BTreeMap<String, (String, BTreeSet<(String, bool)>)>,
    /// Dubbo rule content per key.
    rules: BTreeMap<String, String>,
    /// Pod name by IP, and each pod's lane (None: baseline).
    by_ip: BTreeMap<String, String>,
    lanes: BTreeMap<String, Option<String>>,
    /// Ready pods per tier (lane, or None for baseline), per user Service.
    ready_tiers: BTreeSet<(String, Option<String>)>,
    /// Per lane Service (a lane's own, or the one that serves a lane by reference): its user
    /// Service and the lane whose pods it holds.
    lane_services: BTreeMap<String, (String, String)>,
    /// Baseline Service names, with their user Service.
    baselines: BTreeMap<String, String>,
}

fn endpoints(slice: &EndpointSlice) -> BTreeSet<(String, bool)> {
    slice
        .endpoints
        .iter()
        .filter_map(|e| {
            let pod = e.target_ref.as_ref()?.name.clone()?;
            let ready = e.conditions.as_ref().and_then(|c| c.ready).unwrap_or(false);
            Some((pod, ready))
        })
        .collect()
}

impl Checker {
    /// Starts watching `ns` (and the ConfigMap `configmap` in `system_ns`); `centres` are
    /// contents polled by the suite (name, key -> content; `None` while unreadable).
    pub fn start(
        client: Client,
        ns: &str,
        system_ns: &str,
        configmap: &str,
        centres: Vec<(&'static str, Centre)>,
    ) -> Checker {
        let managed = watcher::Config::default().labels(&format!("{SLICE_MANAGED_BY_LABEL}={SLICE_MANAGER}"));
        let (routes, serving, probe) = list_routes(client.clone(), ns.to_owned());
        let broken = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let stores = Arc::new(Stores {
            pods: watch(
                Api::namespaced(client.clone(), ns),
                watcher::Config::default(),
                &broken,
            ),
            services: watch(
                Api::namespaced(client.clone(), ns),
                watcher::Config::default(),
                &broken,
            ),
            slices: watch(Api::namespaced(client.clone(), ns), managed, &broken),
            routes,
            rules: watch(
                Api::namespaced(client.clone(), ns),
                watcher::Config::default(),
                &broken,
            ),
            configmaps: watch(
                Api::namespaced(client.clone(), system_ns),
                watcher::Config::default().fields(&format!("metadata.name={configmap}")),
                &broken,
            ),
            leases: watch(
                Api::namespaced(client, system_ns),
                watcher::Config::default(),
                &broken,
            ),
            broken,
        });
        let incidents = Arc::new(Mutex::new(Incidents::default()));
        let mut checker = Checker {
            ns: ns.to_owned(),
            serving,
            probe: Some(probe),
            stores,
            centres,
            configmap: configmap.to_owned(),
            incidents,
            slack_ms: Default::default(),
            task: tokio::spawn(async {}),
        };
        checker.task = checker.spawn_loop();
        checker
    }

    /// Incidents counted so far.
    /// Lets the slices trail the pods, and the rules of the centres other than the ConfigMap
    /// trail the rules, by that much more than their tolerance (zero: back to the tolerance
    /// alone). While the API server sheds laneway's writes, each waits the `Retry-After` the
    /// server gave before it is sent again; a slow centre takes as long as it takes.
    pub fn allow(&self, slices: Duration, centres: Duration) {
        for (slack, ms) in [slices, centres].into_iter().zip(self.slack_ms.iter()) {
            ms.store(slack.as_millis() as u64, std::sync::atomic::Ordering::Relaxed);
        }
    }

    pub fn incidents(&self) -> Incidents {
        self.incidents.lock().expect("incidents").clone()
    }

    /// The outputs and rules that differ from a full recomputation now (empty: converged).
    pub fn differences(&self) -> Vec<String> {
        let Some(view) = self.view() else {
            return vec!["nothing observed yet".into()];
        };
        let mut out = Vec::new();
        for (name, want) in &view.desired {
            match view.actual.get(name) {
                Some(have) if have == want => {}
                Some(have) => out.push(format!("slice {name}: has {:?}, wants {:?}", have.1, want.1)),
                None => out.push(format!("slice {name} missing")),
            }
        }
        for name in view.actual.keys().filter(|n| !view.desired.contains_key(*n)) {
            out.push(format!("slice {name} should not exist"));
        }
        for (centre, contents) in self.centre_contents() {
            let Some(contents) = contents else {
                out.push(format!("{centre} unreadable"));
                continue;
            };
            for (key, want) in &view.rules {
                if contents.get(key) != Some(want) {
                    out.push(format!("{centre} {key} differs"));
                }
            }
        }
        out
    }

    fn centre_contents(&self) -> Vec<(&'static str, Option<BTreeMap<String, String>>)> {
        let configmap = self
            .stores
            .configmaps
            .state()
            .into_iter()
            .find(|c| c.name_any() == self.configmap)
            .map(|c| c.data.clone().unwrap_or_default().into_iter().collect());
        let mut out = vec![("configmap", Some(configmap.unwrap_or_default()))];
        for (name, centre) in &self.centres {
            out.push((name, centre.lock().expect("centre").clone()));
        }
        out
    }

    fn view(&self) -> Option<View> {
        let s = &self.stores;
        let pods = s.pods.state();
        let services = s.services.state();
        let routes = s.routes.lock().expect("routes").clone();
        let rules = s.rules.state();
        if services.is_empty() {
            return None;
        }
        let index = Index::from_objects(
            Config::default(),
            pods.iter().filter_map(|p| PodInfo::from_pod(p)),
            services.iter().filter_map(|s| ServiceInfo::from_service(s)),
            routes
                .iter()
                .filter(|r| r.metadata.deletion_timestamp.is_none())
                .cloned(),
            rules
                .iter()
                .filter(|r| r.metadata.deletion_timestamp.is_none())
                .map(|r| (**r).clone()),
        );
        let now = Timestamp::now();
        let desired = index.desired(&self.ns, now);
        let slice_view = |slice: &EndpointSlice| {
            let service = slice
                .labels()
                .get(SERVICE_NAME_LABEL)
                .cloned()
                .unwrap_or_default();
            (service, endpoints(slice))
        };
        let mut view = View {
            desired: desired
                .slices
                .iter()
                .map(|(n, s)| (n.clone(), slice_view(s)))
                .collect(),
            actual: s
                .slices
                .state()
                .iter()
                .map(|s| (s.name_any(), slice_view(s)))
                .collect(),
            rules: index
                .tag_rules(now)
                .reports
                .values()
                .filter_map(|r| r.dubbo.as_ref().map(|d| (d.key.clone(), d.content.clone())))
                .collect(),
            by_ip: BTreeMap::new(),
            lanes: BTreeMap::new(),
            ready_tiers: BTreeSet::new(),
            lane_services: BTreeMap::new(),
            baselines: BTreeMap::new(),
        };
        for pod in &pods {
            let Some(info) = PodInfo::from_pod(pod) else {
                continue;
            };
            let lane = info
                .labels
                .get(DEFAULT_LANE_LABEL)
                .cloned()
                .filter(|l| !l.is_empty());
            for ip in &info.ips {
                view.by_ip.insert(ip.clone(), info.name.clone());
            }
            if info.is_ready() {
                for svc in services.iter().filter_map(|s| ServiceInfo::from_service(s)) {
                    if svc
                        .selector
                        .as_ref()
                        .is_some_and(|sel| sel.iter().all(|(k, v)| info.labels.get(k) == Some(v)))
                    {
                        view.ready_tiers.insert((svc.name.clone(), lane.clone()));
                    }
                }
            }
            view.lanes.insert(info.name.clone(), lane);
        }
        for route in &routes {
            let Some(status) = &route.status else { continue };
            let lane = status.lane.clone().unwrap_or_default();
            for svc in &status.services {
                if let Some(own) = &svc.lane_service {
                    view.lane_services
                        .insert(own.clone(), (svc.name.clone(), lane.clone()));
                }
                let tier = match &svc.source {
                    SubsetSource::Fallback(f) => Some(f.clone()),
                    _ => None,
                };
                if let (Some(served_by), Some(tier)) = (&svc.served_by, tier) {
                    view.lane_services
                        .insert(served_by.clone(), (svc.name.clone(), tier));
                }
                if let Some(baseline) = &svc.baseline_service {
                    view.baselines.insert(baseline.clone(), svc.name.clone());
                }
            }
        }
        Some(view)
    }

    fn spawn_loop(&self) -> tokio::task::JoinHandle<()> {
        let me = Checker {
            ns: self.ns.clone(),
            serving: self.serving.clone(),
            probe: None,
            stores: self.stores.clone(),
            centres: self.centres.clone(),
            configmap: self.configmap.clone(),
            incidents: self.incidents.clone(),
            slack_ms: self.slack_ms.clone(),
            task: tokio::spawn(async {}),
        };
        tokio::spawn(async move {
            let mut emptied = Episodes::default();
            let mut wrong_tier = Episodes::default();
            let mut tagged = Episodes::default();
            let mut untagged = Episodes::default();
            let mut untagged_cached = Episodes::default();
            let mut untagged_zookeeper = Episodes::default();
            let mut drift = Episodes::default();
            let mut drift_elsewhere = Episodes::default();
            let mut recent = RecentRules::default();
            let mut ready_before: BTreeMap<String, usize> = BTreeMap::new();
            let mut emptied_wrongly: BTreeSet<String> = BTreeSet::new();
            let mut renewals: Option<String> = None;
            let mut renewed_at = Instant::now();
            let mut last = Instant::now();
            let mut ticker = tokio::time::interval(Duration::from_millis(20));
            loop {
                ticker.tick().await;
                let Some(view) = me.view() else { continue };
                let now = Instant::now();
                // Some replica can write while the Lease keeps being renewed (every 500 ms).
                let record = me
                    .stores
                    .leases
                    .state()
                    .iter()
                    .filter_map(|l| {
                        l.spec
                            .as_ref()?
                            .renew_time
                            .as_ref()
                            .map(|t| format!("{}{}", l.name_any(), t.0))
                    })
                    .max();
                if record != renewals {
                    renewals = record;
                    renewed_at = now;
                }
                // ... and the checker's own view is current (none of its watches failed lately).
                let current = epoch_ms()
                    .saturating_sub(me.stores.broken.load(std::sync::atomic::Ordering::Relaxed))
                    > 1500;
                let writer = now.duration_since(renewed_at) < Duration::from_secs(1)
                    && me.serving.load(std::sync::atomic::Ordering::Relaxed)
                    && current;
                let step = if writer {
                    now.duration_since(last)
                } else {
                    Duration::ZERO
                };
                last = now;

                // Emptied: a Service's slices lost their last ready endpoint while a ready pod of
                // the tier it serves existed; the episode lasts until they have one again (or
                // the tier has none).
                let mut ready_by_service: BTreeMap<String, usize> = BTreeMap::new();
                for (service, eps) in view.actual.values() {
                    *ready_by_service.entry(service.clone()).or_default() +=
                        eps.iter().filter(|(_, r)| *r).count();
                }
                let tier_ready = |service: &str| {
                    if let Some((user, lane)) = view.lane_services.get(service) {
                        view.ready_tiers.contains(&(user.clone(), Some(lane.clone())))
                    } else if let Some(user) = view.baselines.get(service) {
                        view.ready_tiers.contains(&(user.clone(), None))
                    } else {
                        false
                    }
                };
                for (service, count) in &ready_by_service {
                    let before = ready_before.insert(service.clone(), *count).unwrap_or(0);
                    if *count > 0 || !tier_ready(service) {
                        emptied_wrongly.remove(service);
                    } else if before > 0 {
                        emptied_wrongly.insert(service.clone());
                    }
                }
                let breaches = emptied_wrongly.clone();
                let [slack, centre_slack] = [0, 1].map(|i| {
                    Duration::from_millis(me.slack_ms[i].load(std::sync::atomic::Ordering::Relaxed))
                });
                let fresh_empty = emptied.observe(step, breaches, TOLERANCE + slack);

                // Pods of the wrong tier in a lane slice; tagged pods in a baseline slice.
                let mut wrong = BTreeSet::new();
                let mut in_baseline = BTreeSet::new();
                for (service, eps) in view.actual.values() {
                    for (pod, _) in eps {
                        let Some(pod_lane) = view.lanes.get(pod) else {
                            continue;
                        };
                        if let Some((_, lane)) = view.lane_services.get(service) {
                            if pod_lane.as_deref() != Some(lane.as_str()) {
                                wrong.insert(format!("{pod} ({pod_lane:?}) in {service} (lane {lane})"));
                            }
                        }
                        if view.baselines.contains_key(service) && pod_lane.is_some() {
                            in_baseline.insert(format!("{pod} ({pod_lane:?}) in {service}"));
                        }
                    }
                }
                let fresh_wrong = wrong_tier.observe(step, wrong, TOLERANCE + slack);
                let fresh_tagged = tagged.observe(step, in_baseline, TOLERANCE + slack);

                // Dubbo rules: no untagged pod under a tag; every centre equal to the computed rule.
                let mut untagged_now = BTreeSet::new();
                let mut untagged_cached_now = BTreeSet::new();
                let mut untagged_zookeeper_now = BTreeSet::new();
                let mut differs = BTreeSet::new();
                let mut differs_elsewhere = BTreeSet::new();
                recent.observe(step, &view.rules);
                for (centre, contents) in me.centre_contents() {
                    let Some(contents) = contents else { continue };
                    for (key, content) in &contents {
                        for ip in tagged_ips(content) {
                            if let Some(pod) = view.by_ip.get(&ip) {
                                if view.lanes.get(pod).is_some_and(Option::is_none) {
                                    let breach = format!("{centre} {key}: {pod}");
                                    match centre {
                                        "nacos" => untagged_cached_now.insert(breach),
                                        "configmap" => untagged_now.insert(breach),
                                        _ => untagged_zookeeper_now.insert(breach),
                                    };
                                }
                            }
                        }
                    }
                    for key in view.rules.keys() {
                        if !recent.fits(key, contents.get(key)) {
                            let differs = if centre == "configmap" {
                                &mut differs
                            } else {
                                &mut differs_elsewhere
                            };
                            differs.insert(format!("{centre} {key}"));
                        }
                    }
                }
                // The ConfigMap is written through the API server as the slices are; ZooKeeper and
                // Nacos are not.
                let mut fresh_untagged = untagged.observe(step, untagged_now, TOLERANCE + slack);
                fresh_untagged.extend(untagged_zookeeper.observe(
                    step,
                    untagged_zookeeper_now,
                    TOLERANCE + centre_slack,
                ));
                fresh_untagged.extend(untagged_cached.observe(
                    step,
                    untagged_cached_now,
                    TOLERANCE + READ_LAG + centre_slack,
                ));
                let mut fresh_drift = drift.observe(step, differs, REPAIR_PERIOD + TOLERANCE + slack);
                fresh_drift.extend(drift_elsewhere.observe(
                    step,
                    differs_elsewhere,
                    REPAIR_PERIOD + TOLERANCE + centre_slack,
                ));

                if fresh_empty.len()
                    + fresh_wrong.len()
                    + fresh_tagged.len()
                    + fresh_untagged.len()
                    + fresh_drift.len()
                    > 0
                {
                    let mut i = me.incidents.lock().expect("incidents");
                    i.emptied += fresh_empty.len() as u32;
                    i.wrong_tier += fresh_wrong.len() as u32;
                    i.tagged_in_baseline += fresh_tagged.len() as u32;
                    i.untagged_in_dubbo += fresh_untagged.len() as u32;
                    i.centre_drift += fresh_drift.len() as u32;
                    for (what, list) in [
                        ("emptied", fresh_empty),
                        ("wrong tier", fresh_wrong),
                        ("tagged in baseline", fresh_tagged),
                        ("untagged under a Dubbo tag", fresh_untagged),
                        ("centre differs", fresh_drift),
                    ] {
                        for item in list {
                            let versions: Vec<String> = me
                                .stores
                                .routes
                                .lock()
                                .expect("routes")
                                .iter()
                                .map(|r| {
                                    format!("{}@{}", r.name_any(), r.resource_version().unwrap_or_default())
                                })
                                .collect();
                            eprintln!(
                                "checker {}: {what}: {item} (routes {versions:?})",
                                Timestamp::now()
                            );
                            i.notes.push(format!("{what}: {item}"));
                        }
                    }
                }
            }
        })
    }
}

/// How often laneway reads every centre back in the suite (`--centre-resync`).
pub const REPAIR_PERIOD: Duration = Duration::from_secs(5);

/// The IPs listed under any tag of a Dubbo rule document.
fn tagged_ips(content: &str) -> Vec<String> {
    let Ok(doc) = serde_saphyr::from_str::<serde_json::Value>(content) else {
        return Vec::new();
    };
    doc["tags"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|t| t["addresses"].as_array().cloned().unwrap_or_default())
        .filter_map(|a| {
            a.as_str()
                .map(|a| a.rsplit_once(':').map_or(a, |(ip, _)| ip).to_owned())
        })
        .collect()
}

#[test]
fn a_centre_may_lag_behind_the_rules_but_not_stay_behind() {
    let step = Duration::from_millis(500);
    let rules = |r: &str| BTreeMap::from([("k".to_owned(), r.to_owned())]);
    let mut recent = RecentRules::default();
    recent.observe(step, &rules("a"));
    recent.observe(step, &rules("b"));
    let a = Some("a".to_owned());
    assert!(recent.fits("k", a.as_ref()), "a read just behind the change");
    assert!(!recent.fits("k", Some(&"x".to_owned())), "content never wanted");
    for _ in 0..7 {
        recent.observe(step, &rules("b"));
    }
    assert!(
        !recent.fits("k", a.as_ref()),
        "still the old rule {READ_LAG:?} after the change"
    );
    assert!(recent.fits("k", Some(&"b".to_owned())));
}
