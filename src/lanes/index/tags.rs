//! Where a pod's tags come from: the lane label and the TagRules of its namespace, their
//! selectors parsed once.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::core::{Selector, SelectorExt};
use kube::ResourceExt;

use super::super::model::PodInfo;
use super::super::problem::{Kind, ObjectKey, Problem};
use crate::api::{TagRule, DEFAULT_LANE_LABEL};

/// Settings of the resolver.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    /// Pod label that carries an instance's static lane.
    pub lane_label: String,
    /// A Nacos server is configured, so TagRules' `nacos` marks can be written.
    pub nacos_marks: bool,
    /// Whether laneway's lane and baseline Services get a cluster IP.
    pub cluster_ip: ClusterIp,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            lane_label: DEFAULT_LANE_LABEL.to_owned(),
            nacos_marks: false,
            cluster_ip: ClusterIp::Allocate,
        }
    }
}

/// Whether laneway's lane and baseline Services get a cluster IP.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ClusterIp {
    /// As a Service normally does (those of a headless user Service stay headless): plain
    /// callers through kube-proxy, and meshes that route by cluster IP, reach them.
    #[default]
    Allocate,
    /// None (`clusterIP: None`): they cost the API server less to create and take no address
    /// of the Service range, but only what reads their EndpointSlices itself (most gateways,
    /// cluster DNS) reaches their pods.
    None,
}

impl std::str::FromStr for ClusterIp {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "allocate" => Ok(ClusterIp::Allocate),
            "none" | "None" => Ok(ClusterIp::None),
            other => Err(format!("{other:?}: expected allocate or none")),
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
    pub(super) fn new(rule: TagRule) -> Self {
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
    pub(super) fn tags_for<'a>(
        &'a self,
        labels: &'a BTreeMap<String, String>,
    ) -> impl Iterator<Item = &'a str> + 'a {
        let governed = self.governs(labels);
        self.tags
            .iter()
            .filter(move |(_, sel)| governed && sel.as_ref().is_some_and(|s| s.matches(labels)))
            .map(|(name, _)| name.as_str())
    }
}
