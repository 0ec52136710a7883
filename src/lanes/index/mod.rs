//! In-memory index of everything routing depends on, fed object by object ([`Index::apply`],
//! [`Index::delete`], one [`Indexed`] impl per kind) and read by the resolver. Pure: no client, no clock.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::core::object::HasSpec;
use kube::core::{Selector, SelectorExt};
use kube::ResourceExt;

use super::entries::has_previews;
use super::labels::{FOR_LANE_LABEL, FOR_SERVICE_LABEL, ROLE_LABEL, ROLE_LANE};
use super::model::{Guard, PodInfo, RouteInfo, ServiceInfo};
use super::naming;
use super::problem::{Kind, ObjectKey, Problem};
use crate::api::{LaneEntry, LaneRoute, TagRule};

mod kinds;
mod tags;

pub use kinds::Indexed;
pub use tags::{ClusterIp, Config, TagSource};
pub(crate) use tags::{CompiledRule, PodEntry};

/// Everything of one namespace.
#[derive(Clone, Debug, Default)]
pub(crate) struct Namespace {
    pub pods: BTreeMap<String, PodEntry>,
    /// `key=value` label pair to the pods carrying it, to find a Service's pods quickly.
    by_label: HashMap<(String, String), BTreeSet<String>>,
    pub services: BTreeMap<String, ServiceInfo>,
    /// The first `key=value` pair of each user Service's selector to the Services, to find the
    /// Services selecting a pod without looking at every Service.
    by_selector: HashMap<(String, String), BTreeSet<String>>,
    /// Pods with more than one distinct tag.
    conflicted: BTreeSet<String>,
    /// Per user Service, the lanes whose Service laneway keeps there (see [`ROLE_LANE`]).
    kept: HashMap<String, BTreeSet<String>>,
    pub routes: BTreeMap<String, LaneRoute>,
    pub rules: BTreeMap<String, CompiledRule>,
    pub entries: BTreeMap<String, LaneEntry>,
    /// HTTPRoutes of this namespace, laneway's own and others.
    pub http_routes: BTreeMap<String, RouteInfo>,
    /// Lanes left out of a LaneEntry's routes because the API server refused them: (entry,
    /// lane) to the server's message.
    pub left_out: BTreeMap<(String, String), String>,
}

impl Namespace {
    fn is_empty(&self) -> bool {
        self.pods.is_empty()
            && self.services.is_empty()
            && self.routes.is_empty()
            && self.rules.is_empty()
            && self.entries.is_empty()
            && self.http_routes.is_empty()
    }

    /// The user Services `list` names, or else those `selector` selects; an invalid selector is
    /// a problem of `object` (kind, key, field) and selects nothing.
    pub(crate) fn listed_or_selected(
        &self,
        list: Option<&Vec<String>>,
        selector: Option<&LabelSelector>,
        (kind, key, field): (Kind, &ObjectKey, &str),
        problems: &mut Vec<Problem>,
    ) -> Vec<String> {
        if let Some(list) = list {
            return list.clone();
        }
        let Some(selector) = selector else {
            return Vec::new();
        };
        match Selector::try_from(selector.clone()) {
            Ok(sel) => self
                .services
                .values()
                .filter(|s| !s.is_managed() && sel.matches(&s.labels))
                .map(|s| s.name.clone())
                .collect(),
            Err(e) => {
                problems.push(Problem::InvalidSelector {
                    kind,
                    object: key.clone(),
                    field: field.into(),
                    error: e.to_string(),
                });
                Vec::new()
            }
        }
    }

    /// Pods whose labels contain every pair of `selector` (a Service selector).
    pub fn pods_selected<'a>(
        &'a self,
        selector: &'a BTreeMap<String, String>,
    ) -> impl Iterator<Item = &'a PodEntry> + 'a {
        let smallest = selector
            .iter()
            .map(|(k, v)| self.by_label.get(&(k.clone(), v.clone())))
            .min_by_key(|set| set.map_or(0, |s| s.len()));
        let candidates = match smallest {
            Some(Some(set)) => Some(set),
            _ => None,
        };
        candidates
            .into_iter()
            .flatten()
            .filter_map(|name| self.pods.get(name))
            .filter(move |p| selector.iter().all(|(k, v)| p.info.labels.get(k) == Some(v)))
    }

    fn index_labels(&mut self, pod: &PodInfo, add: bool) {
        for (k, v) in &pod.labels {
            let key = (k.clone(), v.clone());
            if add {
                self.by_label.entry(key).or_default().insert(pod.name.clone());
            } else if let Some(set) = self.by_label.get_mut(&key) {
                set.remove(&pod.name);
                if set.is_empty() {
                    self.by_label.remove(&key);
                }
            }
        }
    }

    fn tags_of(&self, config: &Config, pod: &PodInfo) -> Vec<(String, TagSource)> {
        let mut tags: Vec<(String, TagSource)> = Vec::new();
        if let Some(lane) = pod.labels.get(&config.lane_label).filter(|l| !l.is_empty()) {
            tags.push((lane.clone(), TagSource::Label));
        }
        for (name, rule) in &self.rules {
            for tag in rule.tags_for(&pod.labels) {
                tags.push((tag.to_owned(), TagSource::Rule(name.clone())));
            }
        }
        tags.sort();
        tags.dedup();
        tags
    }

    fn retag_all(&mut self, config: &Config) {
        let names: Vec<String> = self.pods.keys().cloned().collect();
        for name in names {
            let tags = self.tags_of(config, &self.pods[&name].info);
            self.note_conflict(&name, &tags);
            if let Some(entry) = self.pods.get_mut(&name) {
                entry.tags = tags;
            }
        }
    }

    /// Keeps `conflicted` up to date with a pod's new tags (none for a pod that went).
    fn note_conflict(&mut self, pod: &str, tags: &[(String, TagSource)]) {
        if tags.iter().any(|(t, _)| *t != tags[0].0) {
            self.conflicted.insert(pod.to_owned());
        } else {
            self.conflicted.remove(pod);
        }
    }

    /// Services (user Services with a selector) that select a pod with `labels`.
    pub fn services_selecting<'a>(
        &'a self,
        labels: &'a BTreeMap<String, String>,
    ) -> impl Iterator<Item = &'a str> + 'a {
        let mut names: Vec<&str> = labels
            .iter()
            .filter_map(|(k, v)| self.by_selector.get(&(k.clone(), v.clone())))
            .flatten()
            .filter_map(|name| self.services.get(name))
            .filter(move |s| {
                s.selector
                    .as_ref()
                    .is_some_and(|sel| sel.iter().all(|(k, v)| labels.get(k) == Some(v)))
            })
            .map(|s| s.name.as_str())
            .collect();
        names.sort_unstable();
        names.dedup();
        names.into_iter()
    }

    /// The pair a Service is filed under in `by_selector`.
    fn selector_key(svc: &ServiceInfo) -> Option<(String, String)> {
        if svc.is_managed() {
            return None;
        }
        let (k, v) = svc.selector.as_ref()?.iter().next()?;
        Some((k.clone(), v.clone()))
    }

    fn insert_service(&mut self, mut svc: ServiceInfo) {
        // A guard annotation that cannot be read keeps the pods the Service selected before,
        // so that a typo cuts off no caller and no lane.
        if matches!(svc.guard, Guard::Invalid(_)) && svc.selector.is_none() {
            svc.selector = self.services.get(&svc.name).and_then(|old| old.selector.clone());
        }
        self.remove_service(&svc.name.clone());
        if let Some(key) = Self::selector_key(&svc) {
            self.by_selector.entry(key).or_default().insert(svc.name.clone());
        }
        if let Some((service, lane)) = Self::kept_tier(&svc) {
            self.kept
                .entry(service.to_owned())
                .or_default()
                .insert(lane.to_owned());
        }
        self.services.insert(svc.name.clone(), svc);
    }

    fn remove_service(&mut self, name: &str) -> Option<ServiceInfo> {
        let old = self.services.remove(name)?;
        if let Some(key) = Self::selector_key(&old) {
            if let Some(set) = self.by_selector.get_mut(&key) {
                set.remove(name);
                if set.is_empty() {
                    self.by_selector.remove(&key);
                }
            }
        }
        if let Some((service, lane)) = Self::kept_tier(&old) {
            if let Some(lanes) = self.kept.get_mut(service) {
                lanes.remove(lane);
                if lanes.is_empty() {
                    self.kept.remove(service);
                }
            }
        }
        Some(old)
    }

    /// The user Service and lane of one of laneway's lane Services that is kept while its lane
    /// includes the service, named as laneway names it.
    fn kept_tier(svc: &ServiceInfo) -> Option<(&str, &str)> {
        if !svc.is_managed() || svc.labels.get(ROLE_LABEL).map(String::as_str) != Some(ROLE_LANE) {
            return None;
        }
        let service = svc.labels.get(FOR_SERVICE_LABEL)?;
        let lane = svc.labels.get(FOR_LANE_LABEL)?;
        (naming::lane_service_name(service, lane) == svc.name).then_some((service, lane))
    }

    /// Whether laneway keeps `lane`'s Service at `service` (it exists and was written as one
    /// that stays while the lane includes the service).
    pub(crate) fn keeps(&self, service: &str, lane: &str) -> bool {
        self.kept.get(service).is_some_and(|l| l.contains(lane))
    }
}

/// What a change touched, so that only that is recomputed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Affected {
    pub namespace: String,
    /// Services whose subsets may have changed.
    pub services: BTreeSet<String>,
    /// TagRules (by name) whose Dubbo rule or status may have changed.
    pub rules: BTreeSet<String>,
    /// The change may touch any output of the namespace.
    pub whole_namespace: bool,
}

impl Affected {
    /// The change touched no output of `ns`.
    fn nothing(ns: &str) -> Self {
        Affected {
            namespace: ns.to_owned(),
            ..Default::default()
        }
    }

    fn namespace(ns: &str) -> Self {
        Affected {
            namespace: ns.to_owned(),
            whole_namespace: true,
            ..Default::default()
        }
    }
}

/// The resolver's view of the cluster.
#[derive(Clone, Debug, Default)]
pub struct Index {
    pub(crate) config: Config,
    pub(crate) namespaces: BTreeMap<String, Namespace>,
}

impl Index {
    pub fn new(config: Config) -> Self {
        Index {
            config,
            namespaces: BTreeMap::new(),
        }
    }

    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Namespaces that hold anything.
    pub fn namespaces(&self) -> impl Iterator<Item = &str> {
        self.namespaces.keys().map(String::as_str)
    }

    /// The LaneRoutes of a namespace, by name.
    pub fn lane_routes(&self, ns: &str) -> impl Iterator<Item = &LaneRoute> {
        self.ns(ns).into_iter().flat_map(|n| n.routes.values())
    }

    pub fn lane_route(&self, ns: &str, name: &str) -> Option<&LaneRoute> {
        self.ns(ns)?.routes.get(name)
    }

    /// The TagRules of a namespace, by name.
    pub fn tag_rules_in(&self, ns: &str) -> impl Iterator<Item = &TagRule> {
        self.ns(ns)
            .into_iter()
            .flat_map(|n| n.rules.values().map(|r| &r.rule))
    }

    pub fn tag_rule(&self, ns: &str, name: &str) -> Option<&TagRule> {
        self.ns(ns)?.rules.get(name).map(|r| &r.rule)
    }

    /// A Service of the namespace, laneway's or a user's.
    pub fn service(&self, ns: &str, name: &str) -> Option<&ServiceInfo> {
        self.ns(ns)?.services.get(name)
    }

    /// Leaves `lanes` ((entry, lane) to the API server's message) out of the routes of the
    /// namespace's LaneEntries, and no other; whether that changes what is left out.
    pub fn leave_out(&mut self, ns: &str, lanes: BTreeMap<(String, String), String>) -> bool {
        let left_out = &mut self.ns_mut(ns).left_out;
        let changed = *left_out != lanes;
        *left_out = lanes;
        self.prune(ns);
        changed
    }

    /// The lanes left out of the namespace's entry routes ([`Index::leave_out`]).
    pub fn left_out(&self, ns: &str) -> BTreeMap<(String, String), String> {
        self.ns(ns).map(|n| n.left_out.clone()).unwrap_or_default()
    }

    pub(crate) fn ns(&self, ns: &str) -> Option<&Namespace> {
        self.namespaces.get(ns)
    }

    fn ns_mut(&mut self, ns: &str) -> &mut Namespace {
        self.namespaces.entry(ns.to_owned()).or_default()
    }

    /// Forgets a namespace that holds nothing any more (a deleted namespace).
    fn prune(&mut self, ns: &str) {
        if self.namespaces.get(ns).is_some_and(Namespace::is_empty) {
            self.namespaces.remove(ns);
        }
    }

    fn pod_affects(&self, ns: &str, labels: &BTreeMap<String, String>, affected: &mut Affected) {
        if let Some(n) = self.ns(ns) {
            affected
                .services
                .extend(n.services_selecting(labels).map(str::to_owned));
            affected.rules.extend(
                n.rules
                    .iter()
                    .filter(|(_, r)| r.governs(labels))
                    .map(|(name, _)| name.clone()),
            );
        }
    }

    /// Adds or replaces an object of any kind the index holds.
    pub fn apply<K: Indexed>(&mut self, obj: K) -> K::Touched {
        obj.apply_to(self)
    }

    /// Removes the object of kind `K` named `name` in `ns`.
    pub fn delete<K: Indexed>(&mut self, ns: &str, name: &str) -> K::Touched {
        K::delete_from(self, ns, name)
    }

    /// An index holding every object given, in any order.
    pub fn from_objects(
        config: Config,
        pods: impl IntoIterator<Item = PodInfo>,
        services: impl IntoIterator<Item = ServiceInfo>,
        routes: impl IntoIterator<Item = LaneRoute>,
        rules: impl IntoIterator<Item = TagRule>,
    ) -> Index {
        let mut index = Index::new(config);
        for rule in rules {
            index.apply(rule);
        }
        for svc in services {
            index.apply(svc);
        }
        for route in routes {
            index.apply(route);
        }
        for pod in pods {
            index.insert_pod(pod);
        }
        index
    }

    /// Adds or replaces a pod without working out what it affects.
    fn insert_pod(&mut self, pod: PodInfo) {
        let Index { config, namespaces } = self;
        let n = match namespaces.get_mut(&pod.namespace) {
            Some(n) => n,
            None => namespaces.entry(pod.namespace.clone()).or_default(),
        };
        if let Some(old) = n.pods.remove(&pod.name) {
            n.index_labels(&old.info, false);
        }
        n.index_labels(&pod, true);
        let tags = n.tags_of(config, &pod);
        n.note_conflict(&pod.name, &tags);
        n.pods.insert(pod.name.clone(), PodEntry { info: pod, tags });
    }

    /// Changes namespace `ns` with `change` (if it exists) and forgets it if that left it
    /// empty; the change may touch any output of the namespace.
    fn remove_from(&mut self, ns: &str, change: impl FnOnce(&mut Namespace)) -> Affected {
        if let Some(n) = self.namespaces.get_mut(ns) {
            change(n);
        }
        self.prune(ns);
        Affected::namespace(ns)
    }

    /// Stores a LaneRoute or LaneEntry in the map `store` picks; only a change of its spec
    /// affects outputs.
    fn store_spec<K>(&mut self, obj: K, store: fn(&mut Namespace) -> &mut BTreeMap<String, K>) -> Affected
    where
        K: ResourceExt + HasSpec,
        K::Spec: PartialEq,
    {
        let ns = obj.namespace().unwrap_or_default();
        let name = obj.name_any();
        let map = store(self.ns_mut(&ns));
        let old = map.insert(name.clone(), obj);
        if old.is_some_and(|old| old.spec() == map[&name].spec()) {
            return Affected::nothing(&ns);
        }
        Affected::namespace(&ns)
    }

    pub fn lane_entries(&self, ns: &str) -> impl Iterator<Item = &LaneEntry> {
        self.ns(ns).into_iter().flat_map(|n| n.entries.values())
    }

    pub fn lane_entry(&self, ns: &str, name: &str) -> Option<&LaneEntry> {
        self.ns(ns)?.entries.get(name)
    }

    pub fn http_route(&self, ns: &str, name: &str) -> Option<&RouteInfo> {
        self.ns(ns)?.http_routes.get(name)
    }

    /// Every HTTPRoute of every namespace.
    pub(crate) fn all_http_routes(&self) -> impl Iterator<Item = &RouteInfo> {
        self.namespaces.values().flat_map(|n| n.http_routes.values())
    }

    /// Namespaces with a LaneEntry that gives lanes preview hostnames.
    pub fn previewing_namespaces(&self) -> BTreeSet<String> {
        self.namespaces
            .iter()
            .filter(|(_, n)| n.entries.values().any(has_previews))
            .map(|(ns, _)| ns.clone())
            .collect()
    }

    /// Namespaces with a LaneEntry.
    pub fn entry_namespaces(&self) -> BTreeSet<String> {
        self.namespaces
            .iter()
            .filter(|(_, n)| !n.entries.is_empty())
            .map(|(ns, _)| ns.clone())
            .collect()
    }

    /// Pods given more than one lane, per namespace.
    pub(crate) fn tag_conflicts(&self, ns: &str) -> Vec<Problem> {
        let Some(n) = self.ns(ns) else {
            return Vec::new();
        };
        n.conflicted
            .iter()
            .filter_map(|name| n.pods.get(name))
            .map(|p| {
                let rules: BTreeSet<ObjectKey> = p
                    .tags
                    .iter()
                    .filter_map(|(_, src)| match src {
                        TagSource::Rule(r) => Some(ObjectKey::new(ns, r)),
                        TagSource::Label => None,
                    })
                    .collect();
                Problem::ConflictingTags {
                    pod: p.info.name.clone(),
                    namespace: ns.to_owned(),
                    tags: p
                        .tags
                        .iter()
                        .map(|(t, src)| {
                            let from = match src {
                                TagSource::Label => "label".to_owned(),
                                TagSource::Rule(r) => format!("TagRule {r}"),
                            };
                            (t.clone(), from)
                        })
                        .collect(),
                    rules: rules.into_iter().collect(),
                }
            })
            .collect()
    }
}
