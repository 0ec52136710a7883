//! In-memory index of everything routing depends on, fed object by object (`apply_*`,
//! `delete_*`) and read by the resolver. Pure: no client, no clock.

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

    /// Adds or replaces a pod.
    pub fn apply_pod(&mut self, pod: PodInfo) -> Affected {
        let ns = pod.namespace.clone();
        let mut affected = Affected {
            namespace: ns.clone(),
            ..Default::default()
        };
        match self.ns(&ns).and_then(|n| n.pods.get(&pod.name)) {
            Some(old) if old.info == pod => return affected,
            Some(old) => self.pod_affects(&ns, &old.info.labels, &mut affected),
            None => {}
        }
        self.pod_affects(&ns, &pod.labels, &mut affected);
        self.insert_pod(pod);
        affected
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

    /// Removes a pod.
    pub fn delete_pod(&mut self, ns: &str, name: &str) -> Affected {
        let mut affected = Affected {
            namespace: ns.to_owned(),
            ..Default::default()
        };
        let Some(old) = self.ns(ns).and_then(|n| n.pods.get(name)).map(|e| e.info.clone()) else {
            return affected;
        };
        self.pod_affects(ns, &old.labels, &mut affected);
        let n = self.ns_mut(ns);
        n.index_labels(&old, false);
        n.pods.remove(name);
        n.note_conflict(name, &[]);
        self.prune(ns);
        affected
    }

    pub fn apply_service(&mut self, svc: ServiceInfo) -> Affected {
        let ns = svc.namespace.clone();
        if svc.is_managed() {
            // Only their names matter (to detect a user Service taking one of them).
            self.ns_mut(&ns).insert_service(svc);
            return Affected {
                namespace: ns,
                ..Default::default()
            };
        }
        self.ns_mut(&ns).insert_service(svc);
        Affected::namespace(&ns)
    }

    pub fn delete_service(&mut self, ns: &str, name: &str) -> Affected {
        if let Some(n) = self.namespaces.get_mut(ns) {
            n.remove_service(name);
        }
        self.prune(ns);
        Affected::namespace(ns)
    }

    /// Adds or replaces a LaneRoute; only a spec change affects outputs.
    pub fn apply_lane_route(&mut self, route: LaneRoute) -> Affected {
        let ns = route.namespace().unwrap_or_default();
        let old = self.ns_mut(&ns).routes.insert(route.name_any(), route.clone());
        if old.is_some_and(|old| old.spec == route.spec) {
            return Affected {
                namespace: ns,
                ..Default::default()
            };
        }
        Affected::namespace(&ns)
    }

    pub fn delete_lane_route(&mut self, ns: &str, name: &str) -> Affected {
        if let Some(n) = self.namespaces.get_mut(ns) {
            n.routes.remove(name);
        }
        self.prune(ns);
        Affected::namespace(ns)
    }

    /// Adds or replaces a TagRule; pods are retagged only when its spec changed (a status
    /// write changes nothing routing uses).
    pub fn apply_tag_rule(&mut self, rule: TagRule) -> Affected {
        let ns = rule.namespace().unwrap_or_default();
        let config = self.config.clone();
        let n = self.ns_mut(&ns);
        let name = rule.name_any();
        if let Some(existing) = n.rules.get_mut(&name).filter(|r| r.rule.spec == rule.spec) {
            existing.rule = rule;
            return Affected {
                namespace: ns,
                ..Default::default()
            };
        }
        n.rules.insert(name, CompiledRule::new(rule));
        n.retag_all(&config);
        Affected::namespace(&ns)
    }

    pub fn delete_tag_rule(&mut self, ns: &str, name: &str) -> Affected {
        let config = self.config.clone();
        if let Some(n) = self.namespaces.get_mut(ns) {
            n.rules.remove(name);
            n.retag_all(&config);
        }
        self.prune(ns);
        Affected::namespace(ns)
    }

    /// Adds or replaces a LaneEntry; only a spec change affects outputs.
    pub fn apply_lane_entry(&mut self, entry: LaneEntry) -> Affected {
        let ns = entry.namespace().unwrap_or_default();
        let old = self.ns_mut(&ns).entries.insert(entry.name_any(), entry.clone());
        if old.is_some_and(|old| old.spec == entry.spec) {
            return Affected {
                namespace: ns,
                ..Default::default()
            };
        }
        Affected::namespace(&ns)
    }

    pub fn delete_lane_entry(&mut self, ns: &str, name: &str) -> Affected {
        if let Some(n) = self.namespaces.get_mut(ns) {
            n.entries.remove(name);
        }
        self.prune(ns);
        Affected::namespace(ns)
    }

    pub fn lane_entries(&self, ns: &str) -> impl Iterator<Item = &LaneEntry> {
        self.ns(ns).into_iter().flat_map(|n| n.entries.values())
    }

    pub fn lane_entry(&self, ns: &str, name: &str) -> Option<&LaneEntry> {
        self.ns(ns)?.entries.get(name)
    }

    /// Adds or replaces an HTTPRoute. Returns the namespaces whose entries it may concern:
    /// every namespace with a LaneEntry when the route is someone else's (it may conflict with
    /// an entry on the same gateway), none when only its status changed.
    pub fn apply_http_route(&mut self, route: RouteInfo) -> BTreeSet<String> {
        let ns = route.namespace.clone();
        let old = self
            .ns_mut(&ns)
            .http_routes
            .insert(route.name.clone(), route.clone());
        let spec_same = old.as_ref().is_some_and(|o| {
            o.parents == route.parents
                && o.hostnames == route.hostnames
                && o.plain_paths == route.plain_paths
                && o.ours == route.ours
        });
        if spec_same || route.ours {
            return BTreeSet::new();
        }
        self.entry_namespaces()
    }

    pub fn delete_http_route(&mut self, ns: &str, name: &str) -> BTreeSet<String> {
        let old = self
            .namespaces
            .get_mut(ns)
            .and_then(|n| n.http_routes.remove(name));
        self.prune(ns);
        match old {
            Some(o) if !o.ours => self.entry_namespaces(),
            _ => BTreeSet::new(),
        }
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
