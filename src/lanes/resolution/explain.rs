//! Why a service's subset for a lane is what it is: the tiers tried, in order.

use k8s_openapi::jiff::Timestamp;

use super::chains::lane_plan;
use crate::api::SubsetSource;
use crate::lanes::index::{Index, PodEntry};

/// One tier of the fallback chain and the pods it holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tier {
    /// The lane, or `None` for baseline.
    pub lane: Option<String>,
    /// Ready pods (name, address).
    pub ready: Vec<(String, String)>,
    /// Pods that are listed but not ready (starting, failing or terminating).
    pub not_ready: Vec<String>,
}

/// The resolution of one service in one lane.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Explanation {
    pub service: String,
    pub lane: String,
    /// The LaneRoute declaring the lane, if any.
    pub route: Option<String>,
    pub strict: bool,
    /// Tiers in the order they are tried; the first with a ready pod is chosen.
    pub tiers: Vec<Tier>,
    pub source: SubsetSource,
    /// Why there is no subset at all (unknown service, no selector).
    pub missing: Option<String>,
}

impl Explanation {
    /// The tier whose pods serve, if any.
    pub fn chosen(&self) -> Option<&Tier> {
        self.tiers.iter().find(|t| !t.ready.is_empty())
    }
}

/// Walks Subset(`service`, `lane`) tier by tier, as resolution does.
pub fn explain(index: &Index, namespace: &str, service: &str, lane: &str, now: Timestamp) -> Explanation {
    let plan = lane_plan(index, namespace, now);
    let def = plan.lanes.get(lane);
    let mut out = Explanation {
        service: service.to_owned(),
        lane: lane.to_owned(),
        route: def.map(|d| d.route.name.clone()),
        strict: def.is_some_and(|d| d.strict),
        tiers: Vec::new(),
        source: SubsetSource::Empty,
        missing: None,
    };
    let ns = index.ns(namespace);
    let svc = ns
        .and_then(|n| n.services.get(service))
        .filter(|s| !s.is_managed());
    let (Some(ns), Some(svc)) = (ns, svc) else {
        out.missing = Some(format!(
            "Service {service:?} does not exist in namespace {namespace:?}"
        ));
        return out;
    };
    let Some(selector) = svc.selector.as_ref().filter(|_| !svc.external_name) else {
        out.missing = Some(format!("Service {service:?} has no pod selector"));
        return out;
    };
    let pods: Vec<_> = ns
        .pods_selected(selector)
        .filter(|p| p.info.is_endpoint())
        .collect();
    let mut order: Vec<Option<String>> = vec![Some(lane.to_owned())];
    order.extend(plan.chain(lane).iter().cloned().map(Some));
    if !out.strict {
        order.push(None);
    }
    for tier in order {
        let members = pods.iter().filter(|p| match &tier {
            Some(t) => p.has_tag(t),
            None => !p.is_tagged(),
        });
        let (ready, not_ready): (Vec<&&PodEntry>, Vec<&&PodEntry>) = members.partition(|p| p.info.is_ready());
        out.tiers.push(Tier {
            lane: tier,
            ready: ready
                .iter()
                .map(|p| {
                    (
                        p.info.name.clone(),
                        p.info.ips.first().cloned().unwrap_or_default(),
                    )
                })
                .collect(),
            not_ready: not_ready.iter().map(|p| p.info.name.clone()).collect(),
        });
    }
    out.source = match out.tiers.iter().position(|t| !t.ready.is_empty()) {
        Some(0) => SubsetSource::Lane,
        Some(i) => match &out.tiers[i].lane {
            Some(l) => SubsetSource::Fallback(l.clone()),
            None => SubsetSource::Baseline,
        },
        None => SubsetSource::Empty,
    };
    out
}
