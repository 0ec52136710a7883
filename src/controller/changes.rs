//! What each watched change means: the index learns it, and the namespaces it touches are
//! marked for resolution.

use std::collections::{BTreeMap, BTreeSet};

use kube::{Resource, ResourceExt};
use tokio::time::Instant;
use tracing::debug;

use super::publishing::rule_key;
use super::watch::Change;
use super::Controller;
use crate::api::TagRule;
use crate::lanes::{Index, Kind, ObjectKey};
use crate::writer::{OutputKind, Target};

impl Controller {
    pub(super) fn set_live(&mut self, target: Target, hash: Option<Option<String>>) -> bool {
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

    pub(super) fn handle(&mut self, change: Change) {
        match change {
            Change::Pod(key, pod) => {
                let affected = match pod {
                    Some(info) => self.index.apply_pod(info),
                    None => self.index.delete_pod(&key.namespace, &key.name),
                };
                if !affected.services.is_empty() {
                    let seen = k8s_openapi::jiff::Timestamp::now();
                    let space = self.space(&key.namespace);
                    space.mark(Some(&affected.services));
                    for s in &affected.services {
                        space.triggers.entry(s.clone()).or_insert(seen);
                    }
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
            Change::Route(key, route) => self.laneway_object(
                Kind::LaneRoute,
                key,
                route,
                |index, r| {
                    let old =
                        index.lane_route(r.meta().namespace.as_deref().unwrap_or_default(), &r.name_any());
                    let same = old.is_some_and(|o| o.meta().finalizers == r.meta().finalizers);
                    (same, index.apply_lane_route(r).whole_namespace)
                },
                |index, k| {
                    index.delete_lane_route(&k.namespace, &k.name);
                },
                |_| None,
            ),
            Change::Rule(key, rule) => self.laneway_object(
                Kind::TagRule,
                key,
                rule,
                |index, r| {
                    let old =
                        index.tag_rule(r.meta().namespace.as_deref().unwrap_or_default(), &r.name_any());
                    let same = old.is_some_and(|o| o.meta().finalizers == r.meta().finalizers);
                    (same, index.apply_tag_rule(r).whole_namespace)
                },
                |index, k| {
                    index.delete_tag_rule(&k.namespace, &k.name);
                },
                |r| Some(r.clone()),
            ),
            Change::Entry(key, entry) => self.laneway_object(
                Kind::LaneEntry,
                key,
                entry,
                |index, e| {
                    let old =
                        index.lane_entry(e.meta().namespace.as_deref().unwrap_or_default(), &e.name_any());
                    let same = old.is_some_and(|o| o.meta().finalizers == e.meta().finalizers);
                    (same, index.apply_lane_entry(e).whole_namespace)
                },
                |index, k| {
                    index.delete_lane_entry(&k.namespace, &k.name);
                },
                |_| None,
            ),
            Change::HttpRoute(key, route) => {
                let target = Target {
                    kind: OutputKind::HttpRoute,
                    key: key.clone(),
                };
                let before = self
                    .index
                    .http_route(&key.namespace, &key.name)
                    .filter(|r| r.ours)
                    .map(|r| r.backends.clone())
                    .unwrap_or_default();
                let now = Instant::now();
                let touched = match route {
                    Some((info, hash)) => {
                        let (ours, settled) = (info.ours, info.settled());
                        let released: Vec<String> = before.difference(&info.backends).cloned().collect();
                        let touched = self.index.apply_http_route(info);
                        if ours {
                            self.set_live(target, Some(hash));
                            let space = self.space(&key.namespace);
                            if !released.is_empty() {
                                space.released.extend(released);
                                space.unsettled.insert(key.name.clone(), now);
                            }
                            if settled && space.unsettled.remove(&key.name).is_some() {
                                space.routes_changed_at = Some(now);
                            }
                        } else {
                            self.set_live(target, None);
                        }
                        touched
                    }
                    None => {
                        self.set_live(target, None);
                        if !before.is_empty() {
                            let space = self.space(&key.namespace);
                            space.released.extend(before);
                            space.unsettled.remove(&key.name);
                            space.routes_changed_at = Some(now);
                        }
                        self.index.delete_http_route(&key.namespace, &key.name)
                    }
                };
                for ns in touched {
                    self.mark(&ns, None);
                }
                // A gateway's verdict on laneway's route shows in its entry's status.
                self.recheck(&key.namespace);
            }
            Change::Gateway(key, class) => {
                self.gateways.classes_of.insert(key, class);
                self.recheck_entries();
            }
            Change::GatewayClass(key, features) => {
                match features {
                    Some(f) => self.gateways.features.insert(key.name, f),
                    None => self.gateways.features.remove(&key.name),
                };
                self.recheck_entries();
            }
            Change::Broken(kind, missing) => {
                if kind == "HTTPRoute" && self.gateways.api != Some(!missing) {
                    self.gateways.api = Some(!missing);
                    self.recheck_entries();
                }
                // What this replica knows of the statuses may be out of date: the next plan of
                // each namespace writes them whether or not they look unchanged.
                if matches!(kind, "LaneRoute" | "TagRule" | "LaneEntry") {
                    for space in self.spaces.values_mut() {
                        space.verify_statuses = true;
                        space.dirty.get_or_insert_with(Default::default);
                    }
                }
            }
            Change::Resynced(kind, gone) => {
                debug!(kind, missing = gone.len(), "watch relisted");
                if kind == "HTTPRoute" && self.gateways.api != Some(true) {
                    self.gateways.api = Some(true);
                    self.recheck_entries();
                }
                for change in gone {
                    self.handle(change);
                }
            }
        }
    }

    /// A LaneRoute, TagRule or LaneEntry changed (`obj`), or went (`None`). One being deleted
    /// leaves the index (its outputs go) and waits, with what `keep` keeps of it, for its
    /// finalizer to come off. A change that touches neither the spec nor the finalizers (a
    /// status write) changes nothing.
    #[allow(clippy::too_many_arguments)]
    fn laneway_object<K: Resource>(
        &mut self,
        kind: Kind,
        key: ObjectKey,
        obj: Option<K>,
        apply: impl FnOnce(&mut Index, K) -> (bool, bool),
        delete: impl FnOnce(&mut Index, &ObjectKey),
        keep: impl FnOnce(&K) -> Option<TagRule>,
    ) {
        let id = (kind, key.clone());
        match obj {
            Some(obj) if obj.meta().deletion_timestamp.is_none() => {
                let (finalizers_same, whole) = apply(&mut self.index, obj);
                if finalizers_same && !whole {
                    return;
                }
            }
            Some(obj) => {
                delete(&mut self.index, &key);
                self.deleting.insert(id, keep(&obj));
            }
            None => {
                delete(&mut self.index, &key);
                self.deleting.remove(&id);
            }
        }
        self.mark(&key.namespace, None);
    }

    /// Entries' statuses tell what the Gateway API and the gateways support: look again.
    fn recheck_entries(&mut self) {
        let namespaces: BTreeSet<String> = self
            .index
            .namespaces()
            .filter(|ns| self.index.lane_entries(ns).next().is_some())
            .map(str::to_owned)
            .collect();
        for ns in namespaces {
            self.recheck(&ns);
        }
    }

    /// A config centre's state of `key` changed: the TagRule publishing it (or being deleted
    /// with it) needs its status or finalizer looked at.
    pub(super) fn rule_changed(&mut self, key: &str) {
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
}
