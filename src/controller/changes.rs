//! What each watched change means: the index learns it, and the namespaces it touches are
//! marked for resolution.

use std::collections::{BTreeMap, BTreeSet};

use kube::Resource;
use tracing::debug;

use super::publishing::rule_key;
use super::watch::Change;
use super::Controller;
use crate::lanes::Kind;
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
            Change::Broken(kind) => {
                // What this replica knows of the statuses may be out of date: the next plan of
                // each namespace writes them whether or not they look unchanged.
                if matches!(kind, "LaneRoute" | "TagRule") {
                    for space in self.spaces.values_mut() {
                        space.verify_statuses = true;
                        space.dirty.get_or_insert_with(Default::default);
                    }
                }
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
