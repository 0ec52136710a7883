//! The HTTPRoutes of LaneEntries: where requests enter lanes, over HTTP.
//!
//! At Service S, a request whose lane header names lane L goes to the lane Service of the first
//! lane in [L, L's fallback chain] that includes S, else to S's baseline Service. A request that
//! names no lane goes to the baseline Service, except for the share each lane with a `weight`
//! takes (at a gateway only: in a mesh a new draw at every hop would split one request's
//! chain); such requests get the lane's header set on the way, so that later hops keep them in
//! the lane. Pure: no client, no clock.

use kube::core::{Selector, SelectorExt};
use kube::ResourceExt;

use k8s_openapi::jiff::Timestamp;

use super::claims::Claims;
use super::context::{EntryContext, EntryLane, EntryReport};
use crate::api::LaneEntry;
use crate::gateway::HttpRoute;
use crate::lanes::index::{Index, Namespace};
use crate::lanes::problem::{Kind, ObjectKey, Problem};
use crate::lanes::resolution::{LanePlan, Served};

/// What the LaneEntries of a namespace amount to, each in name order.
#[derive(Default)]
pub struct EntryOutputs {
    pub http_routes: Vec<HttpRoute>,
    /// Each entry's report, by entry name.
    pub reports: Vec<(String, EntryReport)>,
    /// (LaneRoute, LaneEntry) for each lane an entry lets requests into.
    pub entered: Vec<(String, String)>,
    pub problems: Vec<Problem>,
}

/// The lanes `entry` lets requests into (declared, live, selected), with their headers.
pub(super) fn entry_lanes<'a>(
    ns: &'a Namespace,
    plan: &'a LanePlan,
    entry: &LaneEntry,
    key: &ObjectKey,
    problems: &mut Vec<Problem>,
) -> Vec<EntryLane<'a>> {
    let selector = match entry.spec.lane_selector.clone().map(Selector::try_from) {
        None => None,
        Some(Ok(sel)) => Some(sel),
        Some(Err(e)) => {
            problems.push(Problem::InvalidSelector {
                kind: Kind::LaneEntry,
                object: key.clone(),
                field: "spec.laneSelector".into(),
                error: e.to_string(),
            });
            return Vec::new();
        }
    };
    let header = entry.header();
    let mut lanes: Vec<EntryLane> = Vec::new();
    for def in plan.lanes.values() {
        let Some(route) = ns.routes.get(&def.route.name) else {
            continue;
        };
        if selector.as_ref().is_some_and(|s| !s.matches(route.labels())) {
            continue;
        }
        let mut headers: Vec<(String, String)> = match &route.spec.match_ {
            Some(m) if !m.headers.is_empty() => m
                .headers
                .iter()
                .map(|h| (h.name.to_ascii_lowercase(), h.value.clone()))
                .collect(),
            _ => vec![(header.to_ascii_lowercase(), def.lane.clone())],
        };
        headers.sort();
        headers.dedup();
        if let Some(other) = lanes.iter().find(|l| l.headers == headers) {
            problems.push(Problem::DuplicateLaneMatch {
                entry: key.clone(),
                lane: other.lane.to_owned(),
                other: def.lane.clone(),
                headers: headers
                    .iter()
                    .map(|(n, v)| format!("{n}: {v}"))
                    .collect::<Vec<_>>()
                    .join(", "),
            });
            continue;
        }
        lanes.push(EntryLane {
            lane: &def.lane,
            route,
            headers,
        });
    }
    lanes
}

/// The HTTPRoutes and reports of every LaneEntry of `namespace`, routing to the Services
/// `served` holds; the lanes of other namespaces' entries are taken as at `now`.
pub fn outputs(index: &Index, namespace: &str, served: Served, now: Timestamp) -> EntryOutputs {
    let mut out = EntryOutputs::default();
    let Some(ns) = index.ns(namespace) else { return out };
    let claims = Claims::of(index, namespace, served.plan, now);
    for (name, entry) in &ns.entries {
        let key = ObjectKey::new(namespace, name);
        let mut problems = Vec::new();
        let lanes = entry_lanes(ns, served.plan, entry, &key, &mut problems);
        let cx = EntryContext {
            ns,
            served,
            entry,
            key: &key,
            lanes: &lanes,
            claims: &claims,
        };
        let (routes, report) = match &entry.spec.mesh {
            Some(_) => cx.mesh_routes(&mut problems),
            None => cx.edge_routes(&mut problems),
        };
        for lane in &lanes {
            out.entered.push((lane.route.name_any(), name.clone()));
        }
        out.http_routes.extend(routes);
        out.reports.push((name.clone(), report));
        out.problems.extend(problems);
    }
    out
}
