//! The watches, merged into one stream of changes. Pods are trimmed to `PodInfo` as they
//! arrive, so no full Pod is kept in memory.

use super::lenient::{Lenient, Unreadable};
use super::planner::Live;
use std::collections::BTreeSet;
use std::time::Duration;

use futures::stream::{BoxStream, SelectAll};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Api, Client, Resource};
use tracing::{debug, warn};

use crate::api::{LaneEntry, LaneRoute, TagRule};
use crate::gateway::{Gateway, GatewayClass, HttpRoute};
use crate::kind::{Kind, Typed};
use crate::lanes::{
    owned_by_laneway, slice_owned_by_laneway, Content, ObjectKey, PodInfo, RouteInfo, ServiceInfo,
    SLICE_MANAGED_BY_LABEL, SLICE_MANAGER,
};
use crate::writer::HASH_ANNOTATION;

/// Reconnects a broken watch quickly (100 ms, doubling to at most 1 s, plus up to 25% jitter)
/// and starts over once the watch has gone a whole `max` without failing: a lost connection or
/// a restarted API server costs about a second of staleness, while a watch that keeps failing
/// (a kind not installed, a permission missing) is not retried faster than `max`. The watcher
/// reports success (its `Init` event) before every list, so a reset that soon after a failure
/// is not taken as recovery.
#[derive(Debug)]
struct WatchBackoff {
    next: Duration,
    max: Duration,
    failed_at: Option<std::time::Instant>,
}

impl WatchBackoff {
    const FIRST: Duration = Duration::from_millis(100);

    /// For a watch that may fail for good (a kind that is not installed, or not readable with
    /// laneway's permissions): retried every 30 s at most.
    fn patient() -> Self {
        WatchBackoff {
            next: Self::FIRST,
            max: Duration::from_secs(30),
            failed_at: None,
        }
    }
}

impl Default for WatchBackoff {
    fn default() -> Self {
        WatchBackoff {
            next: Self::FIRST,
            max: Duration::from_secs(1),
            failed_at: None,
        }
    }
}

impl Iterator for WatchBackoff {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        kube::runtime::utils::Backoff::reset(self);
        self.failed_at = Some(std::time::Instant::now());
        let current = self.next;
        self.next = (current * 2).min(self.max);
        Some(super::schedule::with_jitter(current))
    }
}

impl kube::runtime::utils::Backoff for WatchBackoff {
    fn reset(&mut self) {
        if self.failed_at.is_none_or(|t| t.elapsed() > self.max + self.next) {
            self.next = Self::FIRST;
            self.failed_at = None;
        }
    }
}

/// One object's new state (`Some`) or deletion (`None`).
pub enum Change {
    Pod(ObjectKey, Option<PodInfo>),
    /// A Service and, for laneway's own, how it was written and its version.
    Service(ObjectKey, Option<(ServiceInfo, Live)>),
    /// A laneway EndpointSlice (labelled, and owned by a LaneRoute, LaneEntry or Service): how
    /// it was written and its version.
    Slice(ObjectKey, Option<Live>),
    LaneRoute(ObjectKey, Option<LaneRoute>),
    TagRule(ObjectKey, Option<TagRule>),
    LaneEntry(ObjectKey, Option<LaneEntry>),
    /// A LaneRoute, TagRule or LaneEntry that cannot be read (its last readable version, if
    /// any, stays as it was).
    Unreadable(ObjectKey, Box<Unreadable>),
    /// An HTTPRoute (anyone's) and, for laneway's own, how it was applied and its version.
    HttpRoute(ObjectKey, Option<(RouteInfo, Live)>),
    /// A Gateway and its class.
    Gateway(ObjectKey, Option<String>),
    /// A GatewayClass and the features its controller says it supports (`None`: it says
    /// nothing).
    GatewayClass(ObjectKey, Option<Option<Vec<String>>>),
    /// A watch listed everything again; these objects are gone.
    Resynced(Kind, Vec<Change>),
    /// A watch failed (and is being restarted): changes of this kind may have been missed.
    /// `missing`: the API server does not serve the kind at all (its CRD is not installed).
    Broken(Kind, bool),
}

enum Raw {
    Init,
    Failed(bool),
    Apply(ObjectKey, Change),
    Delete(ObjectKey, Change),
    InitDone,
}

struct StreamState {
    kind: Kind,
    known: BTreeSet<ObjectKey>,
    seen: Option<BTreeSet<ObjectKey>>,
    synced: bool,
    /// May fail for good without holding back writes (the Gateway API may not be installed);
    /// waited for until it lists or fails once, so that what it shows (routes naming Services)
    /// is known before the first write.
    optional: bool,
    /// Its latest attempt failed.
    failed: bool,
    /// What a deletion of an object of this kind is.
    gone: fn(ObjectKey) -> Change,
}

pub struct Streams {
    merged: SelectAll<BoxStream<'static, (usize, Raw)>>,
    states: Vec<StreamState>,
}

fn key_of<K: Resource>(obj: &K) -> ObjectKey {
    ObjectKey::new(
        obj.meta().namespace.as_deref().unwrap_or_default(),
        obj.meta().name.as_deref().unwrap_or_default(),
    )
}

fn applied_hash<K: Resource>(obj: &K) -> Option<String> {
    obj.meta().annotations.as_ref()?.get(HASH_ANNOTATION).cloned()
}

/// A change of one of laneway's kinds (`read`), or what reports an object that cannot be read.
fn laneway_change<K: Typed>(
    obj: Lenient<K>,
    read: fn(ObjectKey, Option<K>) -> Change,
) -> (ObjectKey, Change) {
    let key = key_of(&obj);
    let change = match obj.into_result() {
        Ok(object) => read(key.clone(), Some(object)),
        Err(unreadable) => Change::Unreadable(key.clone(), unreadable),
    };
    (key, change)
}

/// An output as the watch shows it: the hash laneway wrote it with, whether a field laneway
/// sets changed since, and its version.
fn live_of<K: Resource + Content>(obj: &K) -> Live {
    let hash = applied_hash(obj);
    Live {
        drifted: hash.as_ref().is_some_and(|h| *h != obj.content_hash()),
        hash,
        version: obj.meta().resource_version.clone(),
        guarded_by: None,
    }
}

/// A slice with laneway's label as the watch shows it: `None` unless laneway may own it (see
/// [`slice_owned_by_laneway`]). One owned by a Service that laneway did not write is laneway's
/// only while that Service is guarded.
fn live_slice(slice: &EndpointSlice) -> Option<Live> {
    let owners = slice.metadata.owner_references.as_deref();
    if !slice_owned_by_laneway(owners) {
        return None;
    }
    let mut live = live_of(slice);
    if live.hash.is_none() && !owned_by_laneway(owners) {
        live.guarded_by = owners
            .unwrap_or_default()
            .iter()
            .find(|o| Kind::of_api(&o.api_version, &o.kind) == Some(Kind::Service))
            .map(|o| o.name.clone());
    }
    Some(live)
}

/// The error says the API server does not serve the kind (no CRD).
fn not_served(e: &watcher::Error) -> bool {
    match e {
        watcher::Error::InitialListFailed(kube::Error::Api(s))
        | watcher::Error::WatchStartFailed(kube::Error::Api(s)) => s.code == 404,
        _ => false,
    }
}

impl Streams {
    /// Watches over the whole cluster, or over each of `namespaces`.
    pub fn new(client: &Client, namespaces: &[String]) -> Self {
        let mut streams = Streams {
            merged: SelectAll::new(),
            states: Vec::new(),
        };
        if namespaces.is_empty() {
            streams.watch_namespaces(client, None);
        }
        for ns in namespaces {
            streams.watch_namespaces(client, Some(ns));
        }
        // Gateways (in any namespace) and their classes tell which features a parent supports.
        // Watching some namespaces only, laneway does not read them: that stays unknown.
        if namespaces.is_empty() {
            streams.watch_gateways(client);
        }
        streams
    }

    /// The watches of namespaced kinds over namespace `scope` (every namespace: `None`). One
    /// registration per kind, each with how an object of it becomes a change: a table, read
    /// down, rather than steps, hence its length.
    fn watch_namespaces(&mut self, client: &Client, scope: Option<&str>) {
        let cfg = watcher::Config::default;
        let api = |c: &Client| -> (Client, Option<String>) { (c.clone(), scope.map(str::to_owned)) };
        let slices = cfg().labels(&format!("{SLICE_MANAGED_BY_LABEL}={SLICE_MANAGER}"));
        self.add::<Pod>(
            namespaced(api(client)),
            cfg(),
            false,
            |pod| {
                let key = key_of(&pod);
                let info = PodInfo::from_pod(&pod);
                (key.clone(), Change::Pod(key, info))
            },
            |k| Change::Pod(k, None),
        );
        self.add::<Service>(
            namespaced(api(client)),
            cfg(),
            false,
            |svc| {
                let key = key_of(&svc);
                let info = ServiceInfo::from_service(&svc).map(|i| (i, live_of(&svc)));
                (key.clone(), Change::Service(key, info))
            },
            |k| Change::Service(k, None),
        );
        self.add::<EndpointSlice>(
            namespaced(api(client)),
            slices,
            false,
            |slice| {
                let key = key_of(&slice);
                (key.clone(), Change::Slice(key, live_slice(&slice)))
            },
            |k| Change::Slice(k, None),
        );
        self.add::<Lenient<LaneRoute>>(
            namespaced(api(client)),
            cfg(),
            false,
            |r| laneway_change(r, Change::LaneRoute),
            |k| Change::LaneRoute(k, None),
        );
        self.add::<Lenient<TagRule>>(
            namespaced(api(client)),
            cfg(),
            false,
            |r| laneway_change(r, Change::TagRule),
            |k| Change::TagRule(k, None),
        );
        self.add::<Lenient<LaneEntry>>(
            namespaced(api(client)),
            cfg(),
            false,
            |e| laneway_change(e, Change::LaneEntry),
            |k| Change::LaneEntry(k, None),
        );
        // The Gateway API is optional: without its CRDs, entries say so, and nothing waits.
        self.add::<HttpRoute>(
            namespaced(api(client)),
            cfg(),
            true,
            |r| {
                let key = key_of(&r);
                let change = RouteInfo::from_route(&r).map(|i| (i, live_of(&r)));
                (key.clone(), Change::HttpRoute(key, change))
            },
            |k| Change::HttpRoute(k, None),
        );
    }

    /// The cluster-wide watches of Gateways and GatewayClasses.
    fn watch_gateways(&mut self, client: &Client) {
        let cfg = watcher::Config::default;
        self.add::<Gateway>(
            Api::all(client.clone()),
            cfg(),
            true,
            |g| {
                let key = key_of(&g);
                let class = g.spec.gateway_class_name.clone();
                (key.clone(), Change::Gateway(key, Some(class)))
            },
            |k| Change::Gateway(k, None),
        );
        self.add::<GatewayClass>(
            Api::all(client.clone()),
            cfg(),
            true,
            |c| {
                let key = key_of(&c);
                let features = c
                    .status
                    .as_ref()
                    .and_then(|s| s.supported_features.as_ref())
                    .map(|f| f.iter().map(|f| f.name.clone()).collect());
                (key.clone(), Change::GatewayClass(key, Some(features)))
            },
            |k| Change::GatewayClass(k, None),
        );
    }

    fn add<K>(
        &mut self,
        api: Api<K>,
        config: watcher::Config,
        optional: bool,
        convert: fn(K) -> (ObjectKey, Change),
        gone: fn(ObjectKey) -> Change,
    ) where
        K: Typed + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
    {
        let kind = K::KIND;
        let id = self.states.len();
        self.states.push(StreamState {
            kind,
            known: BTreeSet::new(),
            seen: None,
            synced: false,
            optional,
            failed: false,
            gone,
        });
        let backoff = if optional {
            WatchBackoff::patient()
        } else {
            WatchBackoff::default()
        };
        let stream = watcher(api, config).backoff(backoff).filter_map(move |event| {
            let raw = match event {
                Ok(watcher::Event::Init) => Some(Raw::Init),
                Ok(watcher::Event::InitDone) => Some(Raw::InitDone),
                Ok(watcher::Event::Apply(obj) | watcher::Event::InitApply(obj)) => {
                    let (key, change) = convert(obj);
                    Some(Raw::Apply(key, change))
                }
                Ok(watcher::Event::Delete(obj)) => {
                    let key = key_of(&obj);
                    Some(Raw::Delete(key.clone(), gone(key)))
                }
                Err(e) => {
                    let missing = not_served(&e);
                    if optional {
                        debug!(%kind, error = %e, "optional watch failed; retrying");
                    } else {
                        warn!(%kind, error = %e, "watch failed; retrying");
                    }
                    Some(Raw::Failed(missing))
                }
            };
            futures::future::ready(raw.map(|r| (id, r)))
        });
        self.merged.push(stream.boxed());
    }

    /// Every watch has listed its objects at least once, or is optional and failed.
    pub fn synced(&self) -> bool {
        self.states.iter().all(|s| s.synced || (s.optional && s.failed))
    }

    /// The next change; `None` when every watch has ended.
    pub async fn next(&mut self) -> Option<Change> {
        loop {
            let (id, raw) = self.merged.next().await?;
            let state = &mut self.states[id];
            match raw {
                Raw::Init => state.seen = Some(BTreeSet::new()),
                Raw::Failed(missing) => {
                    state.failed = true;
                    return Some(Change::Broken(state.kind, missing));
                }
                Raw::Apply(key, change) => {
                    if let Some(seen) = state.seen.as_mut() {
                        seen.insert(key.clone());
                    }
                    state.known.insert(key);
                    return Some(change);
                }
                Raw::Delete(key, change) => {
                    state.known.remove(&key);
                    return Some(change);
                }
                Raw::InitDone => {
                    let seen = state.seen.take().unwrap_or_default();
                    let missing: Vec<ObjectKey> = state.known.difference(&seen).cloned().collect();
                    state.known = seen;
                    state.synced = true;
                    state.failed = false;
                    let gone = missing.into_iter().map(state.gone).collect();
                    return Some(Change::Resynced(state.kind, gone));
                }
            }
        }
    }
}

/// A namespaced API over the given namespace, or the whole cluster.
fn namespaced<K>((client, scope): (Client, Option<String>)) -> Api<K>
where
    K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>,
{
    match scope {
        Some(ns) => Api::namespaced(client, &ns),
        None => Api::all(client),
    }
}

#[cfg(test)]
mod tests {
    use super::WatchBackoff;
    use kube::runtime::utils::Backoff;
    use std::time::Duration;

    fn quick() -> WatchBackoff {
        WatchBackoff {
            next: WatchBackoff::FIRST,
            max: Duration::from_millis(400),
            failed_at: None,
        }
    }

    #[test]
    fn a_watch_that_keeps_failing_backs_off_although_each_retry_starts_with_success() {
        let mut b = quick();
        let mut delays = Vec::new();
        for _ in 0..4 {
            delays.push(b.next().expect("delay"));
            // The watcher's Init event before the next list.
            b.reset();
        }
        assert!(delays[0] < Duration::from_millis(130), "{delays:?}");
        assert!(delays[3] >= Duration::from_millis(400), "{delays:?}");
    }

    #[test]
    fn a_watch_that_worked_for_a_while_reconnects_quickly_again() {
        let mut b = quick();
        for _ in 0..4 {
            b.next();
        }
        std::thread::sleep(Duration::from_millis(900));
        assert!(b.next().expect("delay") < Duration::from_millis(130));
    }
}
