//! The HTTPRoutes of LaneEntries: where requests enter lanes, over HTTP.
//!
//! At Service S, a request whose lane header names lane L goes to the lane Service of the first
//! lane in [L, L's fallback chain] that includes S, else to S's baseline Service. A request that
//! names no lane goes to the baseline Service, except for the share each lane with a `weight`
//! takes (at a gateway only: in a mesh a new draw at every hop would split one request's
//! chain); such requests get the lane's header set on the way, so that later hops keep them in
//! the lane. Pure: no client, no clock.

use std::collections::BTreeSet;

use kube::core::{Selector, SelectorExt};
use kube::ResourceExt;

use super::index::{Index, Namespace};
use super::model::ParentKey;
use super::plan::{LanePlan, Owner};
use super::problem::{Kind, ObjectKey, Problem};
use super::resolve::Desired;
use super::routes::EntryContext;
use crate::api::{EntryLaneStatus, EntryMode, LaneEntry, LaneRoute};

/// Label naming the LaneEntry on each of its HTTPRoutes.
pub const ENTRY_LABEL: &str = "laneway.io/entry";

/// What one LaneEntry amounts to.
#[derive(Clone, Debug, PartialEq)]
pub struct EntryReport {
    pub mode: EntryMode,
    pub lanes: Vec<EntryLaneStatus>,
    /// Share of requests in no lane that stay on baseline (at a gateway).
    pub baseline_weight: Option<i32>,
    /// The HTTPRoutes written for the entry, by name.
    pub routes: Vec<String>,
    /// The parents of the edge routes.
    pub parents: Vec<ParentKey>,
}

/// A lane as an entry sees it.
pub(super) struct EntryLane<'a> {
    pub lane: &'a str,
    pub route: &'a LaneRoute,
    /// Header (name, value) pairs that put a request into the lane.
    pub headers: Vec<(String, String)>,
}

/// The Services a mesh entry selects.
pub(super) fn mesh_services(
    ns: &Namespace,
    entry: &LaneEntry,
    key: &ObjectKey,
    problems: &mut Vec<Problem>,
) -> Vec<String> {
    let Some(mesh) = &entry.spec.mesh else {
        return Vec::new();
    };
    let field = "spec.mesh.serviceSelector";
    ns.listed_or_selected(
        mesh.services.as_ref(),
        mesh.service_selector.as_ref(),
        (Kind::LaneEntry, key, field),
        problems,
    )
}

impl Index {
    /// Notes, in `plan`, the Services the namespace's LaneEntries send requests to.
    pub(crate) fn plan_entries(&self, ns: &Namespace, namespace: &str, plan: &mut LanePlan) {
        for (name, entry) in &ns.entries {
            let key = ObjectKey::new(namespace, name);
            let owner = Owner {
                kind: Kind::LaneEntry,
                name: name.clone(),
                uid: entry.uid().unwrap_or_default(),
            };
            let mut services: BTreeSet<String> = entry
                .spec
                .rules
                .iter()
                .flatten()
                .map(|r| r.backend.service.clone())
                .collect();
            services.extend(mesh_services(ns, entry, &key, &mut plan.problems));
            for service in services {
                let owners = plan.entry_services.entry(service).or_default();
                if !owners.contains(&owner) {
                    owners.push(owner.clone());
                }
            }
        }
    }

    /// The lanes `entry` lets requests into (declared, live, selected), with their headers.
    fn entry_lanes<'a>(
        &self,
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

    /// The HTTPRoutes and reports of every LaneEntry of `namespace`, into `desired`; marks the
    /// lanes each entry routes in the LaneRoutes' reports.
    pub(crate) fn entry_outputs(&self, namespace: &str, plan: &LanePlan, desired: &mut Desired) {
        desired.http_routes.clear();
        desired.entries.clear();
        let before: Vec<Vec<String>> = desired
            .routes
            .values_mut()
            .map(|r| std::mem::take(&mut r.entries))
            .collect();
        self.entries_into(namespace, plan, desired);
        for (report, before) in desired.routes.values_mut().zip(before) {
            if report.entries != before {
                report.renew();
            }
        }
    }

    fn entries_into(&self, namespace: &str, plan: &LanePlan, desired: &mut Desired) {
        let Some(ns) = self.ns(namespace) else { return };
        for (name, entry) in &ns.entries {
            let key = ObjectKey::new(namespace, name);
            let mut problems = Vec::new();
            let lanes = self.entry_lanes(ns, plan, entry, &key, &mut problems);
            let cx = EntryContext {
                index: self,
                ns,
                plan,
                desired,
                entry,
                key: &key,
                lanes: &lanes,
            };
            let (routes, report) = match &entry.spec.mesh {
                Some(_) => cx.mesh_routes(&mut problems),
                None => cx.edge_routes(&mut problems),
            };
            for lane in &lanes {
                if let Some(r) = desired.routes.get_mut(&lane.route.name_any()) {
                    r.entries.push(name.clone());
                }
            }
            desired
                .http_routes
                .extend(routes.into_iter().map(|r| (r.name_any(), r)));
            desired.entries.insert(name.clone(), report);
            desired.problems.extend(problems);
        }
    }

    /// Someone else's HTTPRoute on the same parent and hostname with a rule that matches only
    /// on one of the entry's paths ties with the entry's rule for requests in no lane.
    pub(super) fn report_conflicts(
        &self,
        entry: &LaneEntry,
        key: &ObjectKey,
        parents: &[ParentKey],
        problems: &mut Vec<Problem>,
    ) {
        let hostnames = entry.spec.hostnames.clone().unwrap_or_default();
        let paths: BTreeSet<(String, String)> = entry
            .spec
            .rules
            .iter()
            .flatten()
            .flat_map(|r| {
                if r.matches.is_empty() {
                    vec![("PathPrefix".to_owned(), "/".to_owned())]
                } else {
                    r.matches
                        .iter()
                        .map(|m| {
                            m.path
                                .as_ref()
                                .map(|p| (p.type_.clone(), p.value.clone()))
                                .unwrap_or_else(|| ("PathPrefix".to_owned(), "/".to_owned()))
                        })
                        .collect()
                }
            })
            .collect();
        for other in self.all_http_routes().filter(|r| !r.ours) {
            let Some(parent) = other
                .parents
                .iter()
                .find(|p| parents.iter().any(|q| q.overlaps(p)))
            else {
                continue;
            };
            let shares_host = hostnames.is_empty()
                || other.hostnames.is_empty()
                || other.hostnames.iter().any(|h| hostnames.contains(h));
            if !shares_host {
                continue;
            }
            if let Some((kind, value)) = other.plain_paths.iter().find(|p| paths.contains(*p)) {
                problems.push(Problem::RouteConflict {
                    entry: key.clone(),
                    route: ObjectKey::new(&other.namespace, &other.name),
                    parent: parent.display(),
                    path: format!("{kind} {value}"),
                });
            }
        }
    }
}
