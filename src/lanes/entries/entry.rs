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
/// `served` holds; the lanes of other namespaces' entries are taken as at `now`; a lane the API
/// server refused in an entry's routes is left out of them ([`Index::leave_out`]) and reported.
pub fn outputs(index: &Index, namespace: &str, served: Served, now: Timestamp) -> EntryOutputs {
    let mut out = EntryOutputs::default();
    let Some(ns) = index.ns(namespace).filter(|ns| !ns.entries.is_empty()) else {
        return out;
    };
    let claims = Claims::of(index, namespace, served.plan, now);
    for (name, entry) in &ns.entries {
        let key = ObjectKey::new(namespace, name);
        let mut problems = Vec::new();
        let mut refused = Vec::new();
        let left_out = |l: &EntryLane| match ns.left_out.get(&(name.clone(), l.lane.to_owned())) {
            Some(message) => {
                refused.push(Problem::LaneRefused {
                    entry: key.clone(),
                    route: ObjectKey::new(namespace, &l.route.name_any()),
                    lane: l.lane.to_owned(),
                    message: message.clone(),
                });
                false
            }
            None => true,
        };
        let (routes, report, entered) =
            routes_with((&claims, ns, served), entry, &key, left_out, &mut problems);
        problems.extend(refused);
        out.entered
            .extend(entered.into_iter().map(|route| (route, name.clone())));
        out.http_routes.extend(routes);
        out.reports.push((name.clone(), report));
        out.problems.extend(problems);
    }
    out
}

/// The routes LaneEntry `name` of `namespace` would have with lane `only` alone (`None`: with
/// no lane), left out or not, with the claims as at `now`: what a dry run tries to find the
/// lanes the API server refuses.
pub fn probe(
    index: &Index,
    (namespace, now): (&str, Timestamp),
    served: Served,
    name: &str,
    only: Option<&str>,
) -> Vec<HttpRoute> {
    let Some((ns, entry)) = index
        .ns(namespace)
        .and_then(|ns| Some((ns, ns.entries.get(name)?)))
    else {
        return Vec::new();
    };
    let key = ObjectKey::new(namespace, name);
    let alone = |l: &EntryLane| Some(l.lane) == only;
    let claims = Claims::of(index, namespace, served.plan, now);
    routes_with((&claims, ns, served), entry, &key, alone, &mut Vec::new()).0
}

/// The routes and report of `entry` with those of the lanes it lets in that `keep` keeps, and
/// the LaneRoutes of the lanes kept.
fn routes_with(
    (claims, ns, served): (&Claims, &Namespace, Served),
    entry: &LaneEntry,
    key: &ObjectKey,
    keep: impl FnMut(&EntryLane) -> bool,
    problems: &mut Vec<Problem>,
) -> (Vec<HttpRoute>, EntryReport, Vec<String>) {
    let mut lanes = entry_lanes(ns, served.plan, entry, key, problems);
    lanes.retain(keep);
    let cx = EntryContext {
        ns,
        served,
        entry,
        key,
        lanes: &lanes,
        claims,
    };
    let (routes, report) = cx.routes(problems);
    (routes, report, lanes.iter().map(|l| l.route.name_any()).collect())
}
