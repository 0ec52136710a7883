//! What each watched change means: the index learns it, and the namespaces it touches are
//! marked for resolution.

use std::collections::{BTreeMap, BTreeSet};

use kube::Resource;
use tokio::time::Instant;
use tracing::{debug, warn};

use super::events::Notice;
use super::lenient::Unreadable;
use super::planner::Live;
use super::publishing::output_keys;
use super::watch::Change;
use super::Controller;
use crate::api::{LaneEntry, LaneRoute, Reason, TagRule};
use crate::kind::Typed;
use crate::lanes::naming::content_hash;
use crate::lanes::{Affected, Index, Indexed, Kind, ObjectKey, PodInfo, RouteInfo, ServiceInfo};
use crate::writer::{OutputKind, OwnKind, Target};

impl Controller {
    /// Records an output as it exists now (`None`: gone); whether its content changed (written
    /// with another hash, or changed by hand).
    pub(super) fn set_live(&mut self, target: Target, live: Option<Live>) -> bool {
        let ns = target.key.namespace.clone();
        let changed = match live {
            Some(live) => {
                let content = (live.hash.clone(), live.drifted);
                let objects = self.live.entry(ns.clone()).or_default();
                objects
                    .insert(target, live)
                    .is_none_or(|before| (before.hash, before.drifted) != content)
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

    /// Teaches the index one watched change and marks what it touches.
    pub(super) fn handle(&mut self, change: Change) {
        match change {
            Change::Pod(key, pod) => self.pod_changed(&key, pod),
            Change::Service(key, svc) => self.service_changed(key, svc),
            Change::Slice(key, hash) => {
                let target = Target {
                    kind: OutputKind::EndpointSlice,
                    key: key.clone(),
                };
                if self.set_live(target, hash) {
                    self.recheck(&key.namespace);
                }
            }
            Change::LaneRoute(key, route) => self.laneway_object(key, route, |_| None),
            Change::TagRule(key, rule) => self.laneway_object(key, rule, |r| Some(r.clone())),
            Change::LaneEntry(key, entry) => self.laneway_object(key, entry, |_| None),
            Change::Unreadable(key, unreadable) => self.unreadable(&key, *unreadable),
            Change::HttpRoute(key, route) => self.http_route_changed(key, route),
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
            Change::Broken(kind, missing) => self.watch_broken(kind, missing),
            Change::Resynced(kind, gone) => {
                debug!(%kind, missing = gone.len(), "watch relisted");
                if kind == Kind::HttpRoute && self.gateways.api != Some(true) {
                    self.gateways.api = Some(true);
                    self.recheck_entries();
                }
                for change in gone {
                    self.handle(change);
                }
            }
        }
    }

    /// A pod changed: the Services selecting it are recomputed, and the time of the change is
    /// kept for their slices' trigger-time annotation.
    fn pod_changed(&mut self, key: &ObjectKey, pod: Option<PodInfo>) {
        let affected = match pod {
            Some(info) => self.index.apply(info),
            None => self.index.delete::<PodInfo>(&key.namespace, &key.name),
        };
        if !affected.services.is_empty() {
            let seen = k8s_openapi::jiff::Timestamp::now();
            let space = self.space(&key.namespace);
            space.schedule.changed(Some(&affected.services));
            for s in &affected.services {
                space.triggers.entry(s.clone()).or_insert(seen);
            }
        }
        if !affected.rules.is_empty() {
            self.rules_dirty = true;
        }
    }

    /// One of laneway's Services is compared again (and the user Service a kept lane Service
    /// is for recomputed when one comes or goes); a user Service recomputes the namespace.
    fn service_changed(&mut self, key: ObjectKey, svc: Option<(ServiceInfo, Live)>) {
        let target = Target {
            kind: OutputKind::Service,
            key: key.clone(),
        };
        let (affected, live) = match svc {
            None => (self.index.delete::<ServiceInfo>(&key.namespace, &key.name), None),
            Some((info, live)) => {
                // A user Service may have replaced (or taken the name of) one of ours.
                let live = info.is_managed().then_some(live);
                (self.index.apply(info), live)
            }
        };
        let live_changed = self.set_live(target, live);
        if affected.whole_namespace {
            self.mark(&key.namespace, None);
        } else if !affected.services.is_empty() {
            self.space(&key.namespace)
                .schedule
                .changed(Some(&affected.services));
        } else if live_changed {
            self.recheck(&key.namespace);
        }
    }

    /// An HTTPRoute changed. For laneway's own, the Services it stopped naming are released
    /// (kept for the route grace), and a route the gateways have all seen settles.
    fn http_route_changed(&mut self, key: ObjectKey, route: Option<(RouteInfo, Live)>) {
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
            Some((info, live)) => {
                let (ours, settled) = (info.ours, info.settled());
                let released: Vec<String> = before.difference(&info.backends).cloned().collect();
                let touched = self.index.apply(info);
                if ours {
                    self.set_live(target, Some(live));
                    let grace = &mut self.space(&key.namespace).grace;
                    if !released.is_empty() {
                        grace.released.extend(released);
                        grace.unsettled.insert(key.name.clone(), now);
                    }
                    if settled && grace.unsettled.remove(&key.name).is_some() {
                        grace.routes_changed_at = Some(now);
                    }
                } else {
                    self.set_live(target, None);
                }
                touched
            }
            None => {
                self.set_live(target, None);
                if !before.is_empty() {
                    let grace = &mut self.space(&key.namespace).grace;
                    grace.released.extend(before);
                    grace.unsettled.remove(&key.name);
                    grace.routes_changed_at = Some(now);
                }
                self.index.delete::<RouteInfo>(&key.namespace, &key.name)
            }
        };
        for ns in touched {
            self.mark(&ns, None);
        }
        // A gateway's verdict on laneway's route shows in its entry's status.
        self.recheck(&key.namespace);
    }

    /// A watch failed: for HTTPRoutes, whether the Gateway API is served at all; for
    /// laneway's kinds, the statuses this replica knows may be out of date, so the next plan of
    /// each namespace writes them whether or not they look unchanged.
    fn watch_broken(&mut self, kind: Kind, missing: bool) {
        if kind == Kind::HttpRoute && self.gateways.api != Some(!missing) {
            self.gateways.api = Some(!missing);
            self.recheck_entries();
        }
        if matches!(kind, Kind::LaneRoute | Kind::TagRule | Kind::LaneEntry) {
            for space in self.spaces.values_mut() {
                space.schedule.verify_statuses();
            }
        }
    }

    /// A LaneRoute, TagRule or LaneEntry changed (`obj`), or went (`None`). One being deleted
    /// leaves the index (its outputs go) and waits, with what `keep` keeps of it, for its
    /// finalizer to come off. A change that touches neither the spec nor the finalizers (a
    /// status write) changes nothing; one of the finalizers alone changes no output, only what
    /// the next plan writes.
    fn laneway_object<K: Stored>(&mut self, key: ObjectKey, obj: Option<K>, keep: fn(&K) -> Option<TagRule>) {
        let id = (K::OWN, key.clone());
        if let Some(space) = self.spaces.get_mut(&key.namespace) {
            space.unreadable.remove(&(K::KIND, key.name.clone()));
        }
        match obj {
            Some(obj) if obj.meta().deletion_timestamp.is_none() => {
                let old = K::stored(&self.index, &key);
                let finalizers_same = old.is_some_and(|o| o.meta().finalizers == obj.meta().finalizers);
                let status = obj.status_hash();
                let status_changed = old.is_some_and(|o| o.status_hash() != status);
                let sent = self
                    .spaces
                    .get(&key.namespace)
                    .and_then(|s| s.sent_statuses.get(&(K::OWN, key.name.clone())));
                let edited = status_changed && sent != status.as_ref();
                if self.index.apply(obj).whole_namespace {
                    self.mark_claimants::<K>(&key.namespace);
                } else if !finalizers_same || edited {
                    self.recheck(&key.namespace);
                }
                return;
            }
            Some(obj) => {
                self.index.delete::<K>(&key.namespace, &key.name);
                self.deleting.insert(id, keep(&obj));
            }
            None => {
                self.index.delete::<K>(&key.namespace, &key.name);
                self.deleting.remove(&id);
            }
        }
        self.mark_claimants::<K>(&key.namespace);
    }

    /// Marks `ns`, where an object of kind `K` changed, and the namespaces whose entries'
    /// claims on the gateways the change may move.
    fn mark_claimants<K: Stored>(&mut self, ns: &str) {
        self.mark(ns, None);
        for other in K::claimants(&self.index, ns) {
            self.mark(&other, None);
        }
    }

    /// One of laneway's objects cannot be read: a Warning Event on it, once per error. What the
    /// index holds of it (its last readable version, if any) stays; every other object of its
    /// kind is read and resolved as usual.
    fn unreadable(&mut self, key: &ObjectKey, unreadable: Unreadable) {
        let Unreadable {
            kind,
            reference,
            error,
        } = unreadable;
        let version = reference.resource_version.clone();
        match kind {
            Kind::LaneRoute => self.keep_unreadable::<LaneRoute>(key, version),
            Kind::TagRule => self.keep_unreadable::<TagRule>(key, version),
            Kind::LaneEntry => self.keep_unreadable::<LaneEntry>(key, version),
            _ => {}
        }
        let space = self.space(&key.namespace);
        let id = (kind, key.name.clone());
        if space.unreadable.get(&id) == Some(&error) {
            return;
        }
        warn!(%kind, object = %key, %error, "cannot read the object; it is left as it was");
        let note = format!(
            "{kind} {key} cannot be read, so laneway leaves it as it was (every other {kind} is resolved as usual): {error}"
        );
        space
            .events
            .push(Notice::warning(Reason::Unreadable, note).on(reference));
        space.unreadable.insert(id, error);
        space.schedule.recheck();
    }

    /// What the index holds of an object that can no longer be read: its last readable
    /// version, at the `version` the API server holds now and without the status it showed, so
    /// that the next plan writes its status (of that readable version) over whatever the object
    /// shows.
    fn keep_unreadable<K: Stored + Clone>(&mut self, key: &ObjectKey, version: Option<String>) {
        let Some(mut kept) = K::stored(&self.index, key).cloned() else {
            return;
        };
        kept.meta_mut().resource_version = version;
        kept.clear_status();
        if self.index.apply(kept).whole_namespace {
            self.mark(&key.namespace, None);
        }
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
            .filter(|(_, r)| {
                r.dubbo.as_ref().is_some_and(|d| d.key == key)
                    || r.entries.iter().any(|e| e.key == key)
                    || r.nacos.as_ref().is_some_and(|n| n.target.key() == key)
            })
            .map(|(k, _)| k.namespace.clone())
            .collect();
        namespaces.extend(
            self.deleting
                .iter()
                .filter(|(_, rule)| rule.as_ref().is_some_and(|r| output_keys(r).any(|k| k == key)))
                .map(|((_, k), _)| k.namespace.clone()),
        );
        for ns in namespaces {
            self.recheck(&ns);
        }
        self.rules_dirty = true;
    }
}

/// laneway's own kinds, as the index holds them.
trait Stored: Typed + Resource + Indexed<Touched = Affected> {
    const OWN: OwnKind;
    fn stored<'a>(index: &'a Index, key: &ObjectKey) -> Option<&'a Self>;
    /// Other namespaces whose entries may gain or lose a claim when one of these changes in
    /// `ns`.
    fn claimants(_index: &Index, _ns: &str) -> BTreeSet<String> {
        BTreeSet::new()
    }
    /// The hash of the status the object shows, if any.
    fn status_hash(&self) -> Option<String>;
    fn clear_status(&mut self);
}

impl Stored for LaneRoute {
    const OWN: OwnKind = OwnKind::LaneRoute;
    fn status_hash(&self) -> Option<String> {
        self.status.as_ref().map(content_hash)
    }
    fn clear_status(&mut self) {
        self.status = None;
    }
    fn stored<'a>(index: &'a Index, key: &ObjectKey) -> Option<&'a Self> {
        index.lane_route(&key.namespace, &key.name)
    }
    /// A lane gives preview hostnames to the entries of its namespace that have templates.
    fn claimants(index: &Index, ns: &str) -> BTreeSet<String> {
        match index.previewing_namespaces().contains(ns) {
            true => index.previewing_namespaces(),
            false => BTreeSet::new(),
        }
    }
}

impl Stored for TagRule {
    const OWN: OwnKind = OwnKind::TagRule;
    fn status_hash(&self) -> Option<String> {
        self.status.as_ref().map(content_hash)
    }
    fn clear_status(&mut self) {
        self.status = None;
    }
    fn stored<'a>(index: &'a Index, key: &ObjectKey) -> Option<&'a Self> {
        index.tag_rule(&key.namespace, &key.name)
    }
}

impl Stored for LaneEntry {
    const OWN: OwnKind = OwnKind::LaneEntry;
    fn status_hash(&self) -> Option<String> {
        self.status.as_ref().map(content_hash)
    }
    fn clear_status(&mut self) {
        self.status = None;
    }
    fn stored<'a>(index: &'a Index, key: &ObjectKey) -> Option<&'a Self> {
        index.lane_entry(&key.namespace, &key.name)
    }
    fn claimants(index: &Index, _ns: &str) -> BTreeSet<String> {
        index.entry_namespaces()
    }
}

#[cfg(test)]
#[path = "changes_tests.rs"]
mod tests;
