//! The watches, merged into one stream of changes. Pods are trimmed to `PodInfo` as they
//! arrive, so no full Pod is kept in memory.

use std::collections::BTreeSet;
use std::time::Duration;

use futures::stream::{BoxStream, SelectAll};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Api, Client, Resource};
use tracing::warn;

use crate::api::{LaneRoute, TagRule};
use crate::lanes::{
    owned_by_lane_route, ObjectKey, PodInfo, ServiceInfo, SLICE_MANAGED_BY_LABEL, SLICE_MANAGER,
};
use crate::writer::HASH_ANNOTATION;

/// Reconnects a broken watch quickly (100 ms, doubling to at most 1 s, plus up to 25% jitter)
/// and starts over after every event received: a lost connection or a restarted API server
/// costs about a second of staleness, while five watches per replica stay light for the server.
#[derive(Debug)]
struct WatchBackoff {
    next: Duration,
}

impl WatchBackoff {
    const FIRST: Duration = Duration::from_millis(100);
    const MAX: Duration = Duration::from_secs(1);
}

impl Default for WatchBackoff {
    fn default() -> Self {
        WatchBackoff { next: Self::FIRST }
    }
}

impl Iterator for WatchBackoff {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        let current = self.next;
        self.next = (current * 2).min(Self::MAX);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        Some(current + current.mul_f64(f64::from(nanos % 1000) / 4000.0))
    }
}

impl kube::runtime::utils::Backoff for WatchBackoff {
    fn reset(&mut self) {
        self.next = Self::FIRST;
    }
}

/// One object's new state (`Some`) or deletion (`None`).
pub enum Change {
    Pod(ObjectKey, Option<PodInfo>),
    /// A Service and, for laneway's own, the hash it was applied with.
    Service(ObjectKey, Option<(ServiceInfo, Option<String>)>),
    /// A laneway EndpointSlice (labelled and owned by a LaneRoute) and the hash it was
    /// applied with.
    Slice(ObjectKey, Option<Option<String>>),
    Route(ObjectKey, Option<LaneRoute>),
    Rule(ObjectKey, Option<TagRule>),
    /// A watch listed everything again; these objects are gone.
    Resynced(&'static str, Vec<ObjectKey>),
    /// A watch failed (and is being restarted): changes of this kind may have been missed.
    Broken(&'static str),
}

enum Raw {
    Init,
    Failed,
    Apply(ObjectKey, Change),
    Delete(ObjectKey, Change),
    InitDone,
}

struct StreamState {
    kind: &'static str,
    known: BTreeSet<ObjectKey>,
    seen: Option<BTreeSet<ObjectKey>>,
    synced: bool,
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

impl Streams {
    /// Watches over the whole cluster, or over each of `namespaces`.
    pub fn new(client: &Client, namespaces: &[String]) -> Self {
        let mut streams = Streams {
            merged: SelectAll::new(),
            states: Vec::new(),
        };
        let scopes: Vec<Option<&str>> = if namespaces.is_empty() {
            vec![None]
        } else {
            namespaces.iter().map(|n| Some(n.as_str())).collect()
        };
        for scope in scopes {
            let slices =
                watcher::Config::default().labels(&format!("{SLICE_MANAGED_BY_LABEL}={SLICE_MANAGER}"));
            streams.add::<Pod>(client, scope, "Pod", watcher::Config::default(), |pod| {
                let key = key_of(&pod);
                let info = PodInfo::from_pod(&pod);
                (key.clone(), Change::Pod(key, info))
            });
            streams.add::<Service>(client, scope, "Service", watcher::Config::default(), |svc| {
                let key = key_of(&svc);
                let hash = applied_hash(&svc);
                (
                    key.clone(),
                    Change::Service(key, ServiceInfo::from_service(&svc).map(|i| (i, hash))),
                )
            });
            streams.add::<EndpointSlice>(client, scope, "EndpointSlice", slices, |slice| {
                let key = key_of(&slice);
                let ours = owned_by_lane_route(slice.metadata.owner_references.as_deref());
                let state = ours.then(|| applied_hash(&slice));
                (key.clone(), Change::Slice(key, state))
            });
            streams.add::<LaneRoute>(client, scope, "LaneRoute", watcher::Config::default(), |r| {
                let key = key_of(&r);
                (key.clone(), Change::Route(key, Some(r)))
            });
            streams.add::<TagRule>(client, scope, "TagRule", watcher::Config::default(), |r| {
                let key = key_of(&r);
                (key.clone(), Change::Rule(key, Some(r)))
            });
        }
        streams
    }

    fn add<K>(
        &mut self,
        client: &Client,
        scope: Option<&str>,
        kind: &'static str,
        config: watcher::Config,
        convert: fn(K) -> (ObjectKey, Change),
    ) where
        K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
            + Clone
            + serde::de::DeserializeOwned
            + std::fmt::Debug
            + Send
            + 'static,
    {
        let api: Api<K> = match scope {
            Some(ns) => Api::namespaced(client.clone(), ns),
            None => Api::all(client.clone()),
        };
        let id = self.states.len();
        self.states.push(StreamState {
            kind,
            known: BTreeSet::new(),
            seen: None,
            synced: false,
        });
        let stream = watcher(api, config)
            .backoff(WatchBackoff::default())
            .filter_map(move |event| {
                let raw = match event {
                    Ok(watcher::Event::Init) => Some(Raw::Init),
                    Ok(watcher::Event::InitDone) => Some(Raw::InitDone),
                    Ok(watcher::Event::Apply(obj) | watcher::Event::InitApply(obj)) => {
                        let (key, change) = convert(obj);
                        Some(Raw::Apply(key, change))
                    }
                    Ok(watcher::Event::Delete(obj)) => {
                        let key = key_of(&obj);
                        let change = match kind {
                            "Pod" => Change::Pod(key.clone(), None),
                            "Service" => Change::Service(key.clone(), None),
                            "EndpointSlice" => Change::Slice(key.clone(), None),
                            "LaneRoute" => Change::Route(key.clone(), None),
                            _ => Change::Rule(key.clone(), None),
                        };
                        Some(Raw::Delete(key, change))
                    }
                    Err(e) => {
                        warn!(kind, error = %e, "watch failed; retrying");
                        Some(Raw::Failed)
                    }
                };
                futures::future::ready(raw.map(|r| (id, r)))
            });
        self.merged.push(stream.boxed());
    }

    /// Every watch has listed its objects at least once.
    pub fn synced(&self) -> bool {
        self.states.iter().all(|s| s.synced)
    }

    /// The next change; `None` when every watch has ended.
    pub async fn next(&mut self) -> Option<Change> {
        loop {
            let (id, raw) = self.merged.next().await?;
            let state = &mut self.states[id];
            match raw {
                Raw::Init => state.seen = Some(BTreeSet::new()),
                Raw::Failed => return Some(Change::Broken(state.kind)),
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
                    return Some(Change::Resynced(state.kind, missing));
                }
            }
        }
    }
}
