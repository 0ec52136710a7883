//! What each TagRule amounts to: the tags it gives pods, and the Dubbo rule and Nacos marks
//! it publishes.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;

use super::dubbo::{dubbo_tags, DubboRule};
use super::entry::{entry_lanes, EntryRules};
use super::governed::RuleInputs;
use super::messages::{message_owners, MessageOwners};
use super::nacos::{nacos_marks, MarkTarget, NacosMarks};
use crate::api::TagStatus;
use crate::lanes::index::{CompiledRule, Index, Namespace, PodEntry, TagSource};
use crate::lanes::problem::{ObjectKey, Problem};
use crate::lanes::resolution::{lane_plan, LanePlan};

/// How many pod names a tag's status lists.
const STATUS_POD_NAMES: usize = 10;

/// What one TagRule amounts to.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TagRuleReport {
    pub tags: Vec<TagStatus>,
    pub tagged_pods: i32,
    /// The rule to publish, if the TagRule has `dubbo` and owns its application.
    pub dubbo: Option<DubboRule>,
    /// The Nacos instances to mark, if the TagRule has `nacos` and owns its service.
    pub nacos: Option<NacosMarks>,
    /// The entry documents to publish, under the Dubbo application's name and the Nacos
    /// service's, while any lane of theirs draws calls at RPC entries.
    pub entries: Vec<EntryRules>,
    /// Who owns each lane's messages, under the Dubbo application's name and the Nacos
    /// service's, if the TagRule has `messages`.
    pub messages: Vec<MessageOwners>,
}

/// Reports for every TagRule, keyed by namespace/name.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TagRules {
    pub reports: BTreeMap<ObjectKey, TagRuleReport>,
    pub problems: Vec<Problem>,
}

/// Which TagRule publishes each Dubbo application and marks each Nacos service (`group@@service`):
/// the one that claimed it first, by creation time, then namespace/name.
#[derive(Default)]
struct Holders {
    applications: BTreeMap<String, ObjectKey>,
    services: BTreeMap<String, ObjectKey>,
}

impl Holders {
    fn of(index: &Index) -> Self {
        let mut rules: Vec<(Option<Timestamp>, ObjectKey, &CompiledRule)> = index
            .namespaces
            .iter()
            .flat_map(|(namespace, ns)| {
                ns.rules.iter().map(|(name, compiled)| {
                    let created = compiled.rule.creation_timestamp().map(|t| t.0);
                    (created, ObjectKey::new(namespace, name), compiled)
                })
            })
            .collect();
        rules.sort_by(|a, b| (a.0, &a.1).cmp(&(b.0, &b.1)));
        let mut holders = Holders::default();
        for (_, key, compiled) in rules {
            if let Some(dubbo) = &compiled.rule.spec.dubbo {
                holders
                    .applications
                    .entry(dubbo.application.clone())
                    .or_insert_with(|| key.clone());
            }
            if let Some(nacos) = &compiled.rule.spec.nacos {
                let target = MarkTarget::new(nacos).key();
                holders.services.entry(target).or_insert(key);
            }
        }
        holders
    }
}

/// Status and Dubbo rule of every TagRule at time `now`. An application (or Nacos service)
/// claimed by two TagRules goes to the one created first, then the first by namespace/name,
/// whatever the namespaces' names; the other publishes nothing for it.
pub fn tag_rules(index: &Index, now: Timestamp) -> TagRules {
    let mut out = TagRules::default();
    let holders = Holders::of(index);
    for (namespace, ns) in &index.namespaces {
        if ns.rules.is_empty() {
            continue;
        }
        let plan = lane_plan(index, namespace, now);
        for (name, compiled) in &ns.rules {
            let key = ObjectKey::new(namespace, name);
            let governed: Vec<&PodEntry> = ns
                .pods
                .values()
                .filter(|p| p.info.is_endpoint() && compiled.governs(&p.info.labels))
                .collect();
            let mut report = tag_report(name, compiled, &governed);
            let rule = RuleInputs {
                key: &key,
                compiled,
                governed: &governed,
            };
            if let Some(dubbo) = &compiled.rule.spec.dubbo {
                match holders
                    .applications
                    .get(&dubbo.application)
                    .filter(|h| **h != key)
                {
                    Some(first) => out.problems.push(Problem::DuplicateApplication {
                        rule: key.clone(),
                        application: dubbo.application.clone(),
                        declared_by: first.clone(),
                    }),
                    None => {
                        let tags = dubbo_tags(&rule, dubbo, &plan, &mut out.problems);
                        report.dubbo = Some(DubboRule::new(
                            &dubbo.application,
                            compiled.rule.spec.force,
                            &tags,
                        ));
                    }
                }
            }
            if let Some(nacos) = &compiled.rule.spec.nacos {
                let target = MarkTarget::new(nacos).key();
                if !index.config.nacos_marks {
                    out.problems
                        .push(Problem::NacosNotConfigured { rule: key.clone() });
                } else if let Some(first) = holders.services.get(&target).filter(|h| **h != key) {
                    out.problems.push(Problem::DuplicateNacosService {
                        rule: key.clone(),
                        service: target,
                        declared_by: first.clone(),
                    });
                } else {
                    report.nacos = Some(nacos_marks(&rule, nacos, &plan, &mut out.problems));
                }
            }
            report.entries = entry_rules(&report, ns, &governed, &plan);
            if compiled.rule.spec.messages {
                let owners = message_owners(&rule, &plan);
                report.messages = published_names(&report)
                    .into_iter()
                    .map(|name| MessageOwners {
                        name: name.to_owned(),
                        owners: owners.clone(),
                    })
                    .collect();
            }
            out.reports.insert(key, report);
        }
    }
    out.problems.sort();
    out.problems.dedup();
    out
}

/// The entry documents of what a TagRule publishes (its Dubbo application, its Nacos service),
/// none while no lane draws calls to its pods.
fn entry_rules(
    report: &TagRuleReport,
    ns: &Namespace,
    governed: &[&PodEntry],
    plan: &LanePlan,
) -> Vec<EntryRules> {
    let names = published_names(report);
    if names.is_empty() {
        return Vec::new();
    }
    let lanes = entry_lanes(ns, governed, plan);
    if lanes.is_empty() {
        return Vec::new();
    }
    names
        .into_iter()
        .map(|name| EntryRules::new(name, &lanes))
        .collect()
}

/// The names a TagRule's documents go under: its Dubbo application's and its Nacos service's.
fn published_names(report: &TagRuleReport) -> BTreeSet<&str> {
    report
        .dubbo
        .iter()
        .map(|d| d.application.as_str())
        .chain(report.nacos.iter().map(|n| n.target.service.as_str()))
        .collect()
}

/// The pods each of the rule's tags matched, and how many pods the rule tags.
fn tag_report(name: &str, compiled: &CompiledRule, governed: &[&PodEntry]) -> TagRuleReport {
    let source = TagSource::Rule(name.to_owned());
    let from_rule = |p: &PodEntry, tag: &str| p.tags.iter().any(|(t, src)| t == tag && *src == source);
    let mut report = TagRuleReport::default();
    for spec in &compiled.rule.spec.tags {
        let pods: Vec<&str> = governed
            .iter()
            .filter(|p| from_rule(p, &spec.name))
            .map(|p| p.info.name.as_str())
            .collect();
        report.tags.push(TagStatus {
            name: spec.name.clone(),
            pods: pods.len() as i32,
            pod_names: pods
                .iter()
                .take(STATUS_POD_NAMES)
                .map(|s| s.to_string())
                .collect(),
        });
    }
    report.tagged_pods = governed
        .iter()
        .filter(|p| p.tags.iter().any(|(_, src)| *src == source))
        .count() as i32;
    report
}
