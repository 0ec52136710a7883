//! What adding or removing each kind of object does to the index.

use std::collections::BTreeSet;

use kube::ResourceExt;

use super::super::model::{PodInfo, RouteInfo, ServiceInfo};
use super::{Affected, CompiledRule, Index, Namespace};
use crate::api::{LaneEntry, LaneRoute, TagRule};

/// A kind of object the index holds, and what adding or removing one touches: the resolver
/// and the controller feed every kind through [`Index::apply`] and [`Index::delete`].
pub trait Indexed: Sized {
    /// What a change of this kind touched.
    type Touched;
    fn apply_to(self, index: &mut Index) -> Self::Touched;
    fn delete_from(index: &mut Index, ns: &str, name: &str) -> Self::Touched;
}

impl Indexed for PodInfo {
    type Touched = Affected;

    fn apply_to(self, index: &mut Index) -> Affected {
        let ns = self.namespace.clone();
        let mut affected = Affected::nothing(&ns);
        match index.ns(&ns).and_then(|n| n.pods.get(&self.name)) {
            Some(old) if old.info == self => return affected,
            Some(old) => index.pod_affects(&ns, &old.info.labels, &mut affected),
            None => {}
        }
        index.pod_affects(&ns, &self.labels, &mut affected);
        index.insert_pod(self);
        affected
    }

    fn delete_from(index: &mut Index, ns: &str, name: &str) -> Affected {
        let mut affected = Affected::nothing(ns);
        let Some(old) = index
            .ns(ns)
            .and_then(|n| n.pods.get(name))
            .map(|e| e.info.clone())
        else {
            return affected;
        };
        index.pod_affects(ns, &old.labels, &mut affected);
        let n = index.ns_mut(ns);
        n.index_labels(&old, false);
        n.pods.remove(name);
        n.note_conflict(name, &[]);
        index.prune(ns);
        affected
    }
}

impl Indexed for ServiceInfo {
    type Touched = Affected;

    /// A user Service may change any output of its namespace. Of laneway's own Services only
    /// the names matter (to detect a user Service taking one) and which lane Services are kept
    /// (the outputs of the user Service they are for).
    fn apply_to(self, index: &mut Index) -> Affected {
        let ns = self.namespace.clone();
        if !self.is_managed() {
            index.ns_mut(&ns).insert_service(self);
            return Affected::namespace(&ns);
        }
        let before = index
            .ns(&ns)
            .and_then(|n| n.services.get(&self.name))
            .and_then(|old| Namespace::kept_tier(old).map(|(s, _)| s.to_owned()));
        let now = Namespace::kept_tier(&self).map(|(s, _)| s.to_owned());
        index.ns_mut(&ns).insert_service(self);
        let mut affected = Affected::nothing(&ns);
        if before != now {
            affected.services.extend(before.into_iter().chain(now));
        }
        affected
    }

    fn delete_from(index: &mut Index, ns: &str, name: &str) -> Affected {
        let old = index.namespaces.get_mut(ns).and_then(|n| n.remove_service(name));
        index.prune(ns);
        let mut affected = Affected::nothing(ns);
        match old {
            Some(old) if old.is_managed() => affected
                .services
                .extend(Namespace::kept_tier(&old).map(|(s, _)| s.to_owned())),
            Some(_) => affected.whole_namespace = true,
            None => {}
        }
        affected
    }
}

impl Indexed for LaneRoute {
    type Touched = Affected;

    fn apply_to(self, index: &mut Index) -> Affected {
        index.store_spec(self, |n| &mut n.routes)
    }

    fn delete_from(index: &mut Index, ns: &str, name: &str) -> Affected {
        index.remove_from(ns, |n| {
            n.routes.remove(name);
        })
    }
}

impl Indexed for LaneEntry {
    type Touched = Affected;

    fn apply_to(self, index: &mut Index) -> Affected {
        index.store_spec(self, |n| &mut n.entries)
    }

    fn delete_from(index: &mut Index, ns: &str, name: &str) -> Affected {
        index.remove_from(ns, |n| {
            n.entries.remove(name);
        })
    }
}

impl Indexed for TagRule {
    type Touched = Affected;

    /// Pods are retagged only when the spec changed (a status write changes nothing routing
    /// uses).
    fn apply_to(self, index: &mut Index) -> Affected {
        let ns = self.namespace().unwrap_or_default();
        let config = index.config.clone();
        let n = index.ns_mut(&ns);
        let name = self.name_any();
        if let Some(existing) = n.rules.get_mut(&name).filter(|r| r.rule.spec == self.spec) {
            existing.rule = self;
            return Affected::nothing(&ns);
        }
        n.rules.insert(name, CompiledRule::new(self));
        n.retag_all(&config);
        Affected::namespace(&ns)
    }

    fn delete_from(index: &mut Index, ns: &str, name: &str) -> Affected {
        let config = index.config.clone();
        index.remove_from(ns, |n| {
            n.rules.remove(name);
            n.retag_all(&config);
        })
    }
}

/// An HTTPRoute touches the namespaces whose entries it may concern: every namespace with a
/// LaneEntry when the route is someone else's (it may conflict with an entry on the same
/// gateway), none when only its status changed.
impl Indexed for RouteInfo {
    type Touched = BTreeSet<String>;

    fn apply_to(self, index: &mut Index) -> BTreeSet<String> {
        let (ns, name, ours) = (self.namespace.clone(), self.name.clone(), self.ours);
        let routes = &mut index.ns_mut(&ns).http_routes;
        let old = routes.insert(name.clone(), self);
        let new = &routes[&name];
        let spec_same = old.as_ref().is_some_and(|o| {
            o.parents == new.parents
                && o.hostnames == new.hostnames
                && o.plain_paths == new.plain_paths
                && o.ours == new.ours
        });
        if spec_same || ours {
            return BTreeSet::new();
        }
        index.entry_namespaces()
    }

    fn delete_from(index: &mut Index, ns: &str, name: &str) -> BTreeSet<String> {
        let old = index
            .namespaces
            .get_mut(ns)
            .and_then(|n| n.http_routes.remove(name));
        index.prune(ns);
        match old {
            Some(o) if !o.ours => index.entry_namespaces(),
            _ => BTreeSet::new(),
        }
    }
}
