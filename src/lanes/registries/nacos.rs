//! Nacos naming marks: for every instance a governed pod registered, the lanes it serves.
//!
//! A Nacos discovery client (Spring Cloud LoadBalancer with laneway's supplier) keeps the
//! instances whose [`LANES_KEY`] holds the request's lane, or [`BASELINE`] when the request has
//! none: the fallback (a lane's chain, then baseline unless the lane is strict) is worked out
//! here, once, for every client. Nacos knows nothing of readiness that Kubernetes knows, so a
//! pod that is not ready serves no lane.

use std::collections::{BTreeMap, BTreeSet};

use super::governed::RuleInputs;
use crate::api::NacosNamingSpec;
use crate::lanes::index::PodEntry;
use crate::lanes::labels::{BASELINE, LANES_KEY};
use crate::lanes::naming;
use crate::lanes::problem::Problem;
use crate::lanes::resolution::LanePlan;

/// A Nacos service laneway marks, and the metadata keys it owns there.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct MarkTarget {
    pub group: String,
    pub service: String,
    /// [`LANES_KEY`] and the TagRule's `laneKey`: the only keys laneway writes or removes.
    pub keys: Vec<String>,
}

impl MarkTarget {
    pub fn new(spec: &NacosNamingSpec) -> Self {
        MarkTarget {
            group: spec.group.clone(),
            service: spec.service.clone(),
            keys: vec![LANES_KEY.to_owned(), spec.lane_key.clone()],
        }
    }

    /// `group@@service`, as Nacos names a grouped service: the key of the marks in status.
    pub fn key(&self) -> String {
        format!("{}@@{}", self.group, self.service)
    }
}

/// An instance, as Nacos knows it: a pod IP, and the port when the TagRule names one.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct InstanceAddr {
    pub ip: String,
    pub port: Option<u16>,
}

impl InstanceAddr {
    /// Whether an instance registered at `ip:port` is this one.
    pub fn matches(&self, ip: &str, port: u16) -> bool {
        self.ip == ip && self.port.is_none_or(|p| p == port)
    }
}

/// Metadata one instance should carry under laneway's keys; `None`: the key must be absent.
pub type Marks = BTreeMap<String, Option<String>>;

/// Everything laneway wants on one Nacos service's instances.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NacosMarks {
    pub target: MarkTarget,
    pub instances: BTreeMap<InstanceAddr, Marks>,
    /// Lowercase hex SHA-256 of the marks, to tell one computation from another in status.
    pub hash: String,
}

impl NacosMarks {
    fn new(target: MarkTarget, instances: BTreeMap<InstanceAddr, Marks>) -> Self {
        let mut lines = vec![target.key()];
        lines.extend(
            instances
                .iter()
                .map(|(a, m)| format!("{}:{:?} {m:?}", a.ip, a.port)),
        );
        let refs: Vec<&str> = lines.iter().map(String::as_str).collect();
        NacosMarks {
            hash: naming::digest(&refs),
            target,
            instances,
        }
    }
}

/// The marks of one TagRule's instances. A pod without the named port is reported and left
/// unmarked.
pub(super) fn nacos_marks(
    rule: &RuleInputs,
    spec: &NacosNamingSpec,
    plan: &LanePlan,
    problems: &mut Vec<Problem>,
) -> NacosMarks {
    let served = served_lanes(rule, plan);
    let mut instances = BTreeMap::new();
    for p in rule.governed {
        let Some(ip) = p.info.ips.first() else { continue };
        let port = match p.info.tcp_port(spec.port, spec.port_name.as_deref()) {
            Ok(port) => port,
            Err(name) => {
                problems.push(Problem::NacosPortMissing {
                    rule: rule.key.clone(),
                    port: name.to_owned(),
                    pod: p.info.name.clone(),
                });
                continue;
            }
        };
        let lanes = served
            .get(p.info.name.as_str())
            .map(|l| join(l.iter().copied()))
            .unwrap_or_default();
        let own = p
            .is_tagged()
            .then(|| join(p.tags.iter().map(|(t, _)| t.as_str())));
        let marks = Marks::from([(LANES_KEY.to_owned(), Some(lanes)), (spec.lane_key.clone(), own)]);
        let addr = InstanceAddr {
            ip: ip.clone(),
            port: port.and_then(|p| u16::try_from(p).ok()),
        };
        instances.insert(addr, marks);
    }
    NacosMarks::new(MarkTarget::new(spec), instances)
}

fn join<'a>(lanes: impl IntoIterator<Item = &'a str>) -> String {
    lanes.into_iter().collect::<Vec<_>>().join(",")
}

/// The lanes each ready governed pod serves, by pod name: its own; every lane with no ready
/// pod whose first fallback with one is its own; and on untagged pods, [`BASELINE`] and every
/// other lane with no ready pod in its chain, unless the lane is strict or the rule forced.
fn served_lanes<'a>(rule: &RuleInputs<'a>, plan: &'a LanePlan) -> BTreeMap<&'a str, BTreeSet<&'a str>> {
    let ready: Vec<&PodEntry> = rule
        .governed
        .iter()
        .copied()
        .filter(|p| p.info.is_ready())
        .collect();
    let ready_tags: BTreeSet<&str> = ready
        .iter()
        .flat_map(|p| p.tags.iter().map(|(t, _)| t.as_str()))
        .collect();
    let force = rule.compiled.rule.spec.force;
    let mut serving: BTreeMap<&str, Option<&str>> = BTreeMap::new();
    for lane in rule.lanes(plan, ready.iter().copied()) {
        if ready_tags.contains(lane) {
            serving.insert(lane, Some(lane));
        } else if let Some(f) = plan.chain(lane).iter().find(|f| ready_tags.contains(f.as_str())) {
            serving.insert(lane, Some(f.as_str()));
        } else if !force && !plan.lanes.get(lane).is_some_and(|l| l.strict) {
            serving.insert(lane, None);
        }
    }
    let mut served: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for p in ready {
        let lanes = served.entry(p.info.name.as_str()).or_default();
        if p.is_tagged() {
            lanes.extend(
                serving
                    .iter()
                    .filter(|(_, by)| by.is_some_and(|t| p.has_tag(t)))
                    .map(|(l, _)| *l),
            );
        } else {
            lanes.insert(BASELINE);
            lanes.extend(serving.iter().filter(|(_, by)| by.is_none()).map(|(l, _)| *l));
        }
    }
    served
}
