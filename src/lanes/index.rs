//! In-memory index of everything routing depends on, fed object by object ([`Index::apply`],
//! [`Index::delete`], one [`Indexed`] impl per kind) and read by the resolver. Pure: no client, no clock.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::core::{Selector, SelectorExt};
use kube::ResourceExt;

use super::model::{PodInfo, RouteInfo, ServiceInfo};
use super::problem::{Kind, ObjectKey, Problem};
use crate::api::{LaneEntry, LaneRoute, TagRule, DEFAULT_LANE_LABEL};

/// Settings of the resolver.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    /// Pod label that carries an instance's static lane.
    pub lane_label: String,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            lane_label: DEFAULT_LANE_LABEL.to_owned(),
        }
    }
}

/// Where a pod's tag comes from.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum TagSource {
    /// The pod's lane label.
    Label,
    /// A TagRule of the pod's namespace.
    Rule(String),
}

/// A pod and the tags (lanes) it carries, sorted and without duplicates.
#[derive(Clone, Debug)]
pub(crate) struct PodEntry {
    pub info: PodInfo,
    pub tags: Vec<(String, TagSource)>,
}

impl PodEntry {
    pub fn is_tagged(&self) -> bool {
        !self.tags.is_empty()
    }
    pub fn has_tag(&self, tag: &str) -> bool {
        self.tags.iter().any(|(t, _)| t == tag)
    }
}

/// A TagRule with its selectors parsed once.
#[derive(Clone, Debug)]
pub(crate) struct CompiledRule {
    pub rule: TagRule,
    pub selector: Option<Selector>,
    pub tags: Vec<(String, Option<Selector>)>,
    pub problems: Vec<Problem>,
}

impl CompiledRule {
    fn new(rule: TagRule) -> Self {
        let key = ObjectKey::new(&rule.namespace().unwrap_or_default(), &rule.name_any());
        let mut problems = Vec::new();
        let mut parse = |field: String, sel: &LabelSelector| match Selector::try_from(sel.clone()) {
            Ok(s) => Some(s),
            Err(e) => {
                problems.push(Problem::InvalidSelector {
                    kind: Kind::TagRule,
                    object: key.clone(),
                    field,
                    error: e.to_string(),
                });
                None
            }
        };
        let selector = parse("spec.selector".into(), &rule.spec.selector);
        let tags = rule
            .spec
            .tags
            .iter()
            .enumerate()
            .map(|(i, t)| {
                (
                    t.name.clone(),
                    parse(format!("spec.tags[{i}].podSelector"), &t.pod_selector),
                )
            })
            .collect();
        CompiledRule {
            rule,
            selector,
            tags,
            problems,
        }
    }

    /// The rule governs the pod (its `selector` matches).
    pub fn governs(&self, labels: &BTreeMap<String, String>) -> bool {
        self.selector.as_ref().is_some_and(|s| s.matches(labels))
    }

    /// The tags this rule gives a pod with `labels`.
    fn tags_for<'a>(&'a self, labels: &'a BTreeMap<String, String>) -> impl Iterator<Item = &'a str> + 'a {
        let governed = self.governs(labels);
        self.tags
            .iter()
            .filter(move |(_, sel)| governed && sel.as_ref().is_some_and(|s| s.matches(labels)))
            .map(|(name, _)| name.as_str())
    }
}

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
    pub routes: BTreeMap<String, LaneRoute>,
    pub rules: BTreeMap<String, CompiledRule>,
    pub entries: BTreeMap<String, LaneEntry>,
    /// HTTPRoutes of this namespace, laneway's own and others.
    pub http_routes: BTreeMap<String, RouteInfo>,
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

    fn insert_service(&mut self, svc: ServiceInfo) {
        self.remove_service(&svc.name.clone());
        if let Some(key) = Self::selector_key(&svc) {
            self.by_selector.entry(key).or_default().insert(svc.name.clone());
        }
        self.services.insert(svc.name.clone(), svc);
    }

    fn remove_service(&mut self, name: &str) {
        let Some(old) = self.services.remove(name) else {
            return;
        };
        if let Some(key) = Self::selector_key(&old) {
            if let Some(set) = self.by_selector.get_mut(&key) {
                set.remove(name);
                if set.is_empty() {
                    self.by_selector.remove(&key);
                }
            }
        }
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

    /// Adds or replaces a pod without working out what it affects.
    pub(super) fn insert_pod(&mut self, pod: PodInfo) {
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
    /// (`same_spec` false) affects outputs.
    fn store_spec<K: ResourceExt + Clone>(
        &mut self,
        obj: K,
        store: fn(&mut Namespace) -> &mut BTreeMap<String, K>,
        same_spec: fn(&K, &K) -> bool,
    ) -> Affected {
        let ns = obj.namespace().unwrap_or_default();
        let old = store(self.ns_mut(&ns)).insert(obj.name_any(), obj.clone());
        if old.is_some_and(|old| same_spec(&old, &obj)) {
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

    fn entry_namespaces(&self) -> BTreeSet<String> {
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

    fn apply_to(self, index: &mut Index) -> Affected {
        let ns = self.namespace.clone();
        // Of laneway's own Services only the names matter (to detect a user Service taking one).
        let managed = self.is_managed();
        index.ns_mut(&ns).insert_service(self);
        if managed {
            Affected::nothing(&ns)
        } else {
            Affected::namespace(&ns)
        }
    }

    fn delete_from(index: &mut Index, ns: &str, name: &str) -> Affected {
        index.remove_from(ns, |n| n.remove_service(name))
    }
}

impl Indexed for LaneRoute {
    type Touched = Affected;

    fn apply_to(self, index: &mut Index) -> Affected {
        index.store_spec(self, |n| &mut n.routes, |a, b| a.spec == b.spec)
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
        index.store_spec(self, |n| &mut n.entries, |a, b| a.spec == b.spec)
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
        let ns = self.namespace.clone();
        let old = index
            .ns_mut(&ns)
            .http_routes
            .insert(self.name.clone(), self.clone());
        let spec_same = old.as_ref().is_some_and(|o| {
            o.parents == self.parents
                && o.hostnames == self.hostnames
                && o.plain_paths == self.plain_paths
                && o.ours == self.ours
        });
        if spec_same || self.ours {
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
