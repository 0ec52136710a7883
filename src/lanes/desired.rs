//! Everything laneway wants in a namespace: the outputs resolved for its Services (from
//! `resolution`) and the routes of its LaneEntries (from `entries`), and bringing that up to
//! date after pod events.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use rayon::prelude::*;

use super::entries::{self, EntryReport};
use super::index::Index;
use super::problem::{Kind, Problem};
use super::resolution::{lane_plan, service_output, Hashed, LanePlan, RouteReport, Served, Stamp};
use crate::api::ServiceLaneStatus;
use crate::gateway::HttpRoute;

/// From this many services on, their outputs are computed on every core.
const PARALLEL_SERVICES: usize = 32;

/// Everything laneway wants to exist in one namespace.
#[derive(Clone, Debug, Default)]
pub struct Desired {
    pub services: BTreeMap<String, Hashed<Service>>,
    pub slices: BTreeMap<String, Hashed<EndpointSlice>>,
    pub routes: BTreeMap<String, RouteReport>,
    pub problems: Vec<Problem>,
    /// Renewed whenever `problems` changes.
    pub problems_stamp: Stamp,
    pub next_expiry: Option<Timestamp>,
    /// The HTTPRoutes of the namespace's LaneEntries, by name.
    pub http_routes: BTreeMap<String, HttpRoute>,
    /// What each LaneEntry amounts to.
    pub entries: BTreeMap<String, EntryReport>,
    /// The lanes these outputs were computed from, reused by [`Index::refresh`].
    pub plan: LanePlan,
    /// The names of the Services and slices made for each user Service.
    pub outputs_of: BTreeMap<String, (Vec<String>, Vec<String>)>,
}

/// Equal content, whatever the stamps.
impl PartialEq for Desired {
    fn eq(&self, other: &Self) -> bool {
        let Desired {
            services,
            slices,
            routes,
            problems,
            problems_stamp: _,
            next_expiry,
            http_routes,
            entries,
            plan,
            outputs_of,
        } = self;
        *services == other.services
            && *slices == other.slices
            && *routes == other.routes
            && *problems == other.problems
            && *next_expiry == other.next_expiry
            && *http_routes == other.http_routes
            && *entries == other.entries
            && *plan == other.plan
            && *outputs_of == other.outputs_of
    }
}

impl Desired {
    /// Where a request in `lane` (or in none) goes at `service`: the Service that serves the
    /// first lane of [lane, its fallbacks] that includes the service, else the baseline Service
    /// (a guarded Service is its own); `None` when that Service is not produced (its name is
    /// taken by someone else's Service). `plan` is the one these outputs are computed from.
    pub fn served_by(&self, plan: &LanePlan, service: &str, lane: Option<&str>) -> Option<String> {
        self.served(plan).served_by(service, lane)
    }

    /// The routes LaneEntry `entry` would have with lane `only` alone (`None`: no lane), with
    /// the claims as at `now`, to try on the API server without writing them.
    pub fn probe_routes(
        &self,
        index: &Index,
        (namespace, now): (&str, Timestamp),
        entry: &str,
        only: Option<&str>,
    ) -> Vec<HttpRoute> {
        entries::probe(index, (namespace, now), self.served(&self.plan), entry, only)
    }

    /// The outputs resolved so far, as routes to them read them.
    fn served<'a>(&'a self, plan: &'a LanePlan) -> Served<'a> {
        Served {
            plan,
            services: &self.services,
            routes: &self.routes,
        }
    }
}

/// [`Index::desired`]: everything laneway wants in `namespace` at time `now`.
pub(super) fn desired(index: &Index, namespace: &str, now: Timestamp) -> Desired {
    let plan = lane_plan(index, namespace, now);
    let mut desired = Desired {
        problems: plan.problems.clone(),
        next_expiry: plan.next_expiry,
        routes: plan.routes.clone(),
        ..Default::default()
    };
    if let Some(ns) = index.ns(namespace) {
        desired
            .problems
            .extend(ns.rules.values().flat_map(|r| r.problems.iter().cloned()));
    }
    fill(index, &mut desired, (namespace, now), &plan, plan.services());
    for report in desired.routes.values_mut() {
        report.renew();
    }
    desired.plan = plan;
    desired
}

/// Adds the outputs of `services` and the namespace's tag conflicts to `desired`; returns
/// the LaneRoutes whose reports gained services.
fn fill<'a>(
    index: &Index,
    desired: &mut Desired,
    (namespace, now): (&str, Timestamp),
    plan: &LanePlan,
    services: impl IntoIterator<Item = &'a String>,
) -> BTreeSet<String> {
    let mut grown = BTreeSet::new();
    desired.problems.extend(index.tag_conflicts(namespace));
    let services: Vec<&String> = services.into_iter().collect();
    let output = |service: &&String| {
        let out = service_output(index, namespace, plan, service);
        (
            hashed(out.services),
            hashed(out.slices),
            out.statuses,
            out.problems,
        )
    };
    // Services are independent of each other: many are built and hashed on every core,
    // then gathered in order; a few (a pod event) on this thread, without a hand-off.
    let outputs: Vec<_> = if services.len() < PARALLEL_SERVICES {
        services.iter().map(output).collect()
    } else {
        services.par_iter().with_min_len(8).map(output).collect()
    };
    for (service, (services, slices, statuses, problems)) in services.into_iter().zip(outputs) {
        let names = (
            services.iter().map(|(n, _)| n.clone()).collect(),
            slices.iter().map(|(n, _)| n.clone()).collect(),
        );
        desired.outputs_of.insert(service.clone(), names);
        desired.services.extend(services);
        desired.slices.extend(slices);
        for (route, status) in statuses {
            if let Some(report) = desired.routes.get_mut(&route) {
                report.services.push(status);
                grown.insert(route);
            }
        }
        desired.problems.extend(problems);
    }
    for route in &grown {
        if let Some(report) = desired.routes.get_mut(route) {
            report.services.sort_by(|a, b| a.name.cmp(&b.name));
        }
    }
    // The entries' routes follow every output (which lane Services exist, which strict
    // lanes are empty): always recomputed, they are few.
    desired
        .problems
        .retain(|p| !p.subjects().iter().any(|(k, _)| *k == Kind::LaneEntry));
    entry_outputs(index, (namespace, now), plan, desired);
    desired.problems.sort();
    desired.problems.dedup();
    grown
}

/// The HTTPRoutes and reports of every LaneEntry of `namespace`, into `desired`; marks the
/// lanes each entry routes in the LaneRoutes' reports.
fn entry_outputs(index: &Index, (namespace, now): (&str, Timestamp), plan: &LanePlan, desired: &mut Desired) {
    desired.http_routes.clear();
    desired.entries.clear();
    let before: Vec<Vec<String>> = desired
        .routes
        .values_mut()
        .map(|r| std::mem::take(&mut r.entries))
        .collect();
    let out = entries::outputs(index, namespace, desired.served(plan), now);
    for (route, entry) in out.entered {
        if let Some(r) = desired.routes.get_mut(&route) {
            r.entries.push(entry);
        }
    }
    desired
        .http_routes
        .extend(out.http_routes.into_iter().map(|r| (r.name_any(), r)));
    desired.entries.extend(out.reports);
    desired.problems.extend(out.problems);
    for (report, before) in desired.routes.values_mut().zip(before) {
        if report.entries != before {
            report.renew();
        }
    }
}

/// [`Index::refresh`]: recomputes the outputs of `services` alone, unless a route expired.
pub(super) fn refresh(
    index: &Index,
    desired: &mut Desired,
    namespace: &str,
    services: &BTreeSet<String>,
    now: Timestamp,
) {
    if desired.plan.next_expiry.is_some_and(|t| t <= now) {
        *desired = self::desired(index, namespace, now);
        return;
    }
    let plan = std::mem::take(&mut desired.plan);
    let problems_before = desired.problems.clone();
    for service in services {
        let (names, slices) = desired.outputs_of.remove(service).unwrap_or_default();
        for name in names {
            desired.services.remove(&name);
        }
        for name in slices {
            desired.slices.remove(&name);
        }
    }
    // The entries each LaneRoute had for the services refreshed, in name order.
    let mut before: BTreeMap<String, Vec<ServiceLaneStatus>> = BTreeMap::new();
    for (name, report) in desired.routes.iter_mut() {
        let gone: Vec<_> = report
            .services
            .iter()
            .filter(|s| services.contains(&s.name))
            .cloned()
            .collect();
        if !gone.is_empty() {
            report.services.retain(|s| !services.contains(&s.name));
            before.insert(name.clone(), gone);
        }
    }
    desired.problems.retain(|p| match p {
        Problem::ConflictingTags { .. } => false,
        Problem::UnknownService { service, .. }
        | Problem::ServiceWithoutSelector { service, .. }
        | Problem::NameTaken { service, .. }
        | Problem::UnresolvedTargetPort { service, .. } => !services.contains(service),
        _ => true,
    });
    let refreshed = services.iter().filter(|s| plan.has_service(s));
    let grown = fill(index, desired, (namespace, now), &plan, refreshed);
    if desired.problems != problems_before {
        desired.problems_stamp = Stamp::fresh();
    }
    let changed: BTreeSet<&String> = before.keys().chain(&grown).collect();
    for name in changed {
        let Some(report) = desired.routes.get_mut(name) else {
            continue;
        };
        let gone = before.get(name).map(Vec::as_slice).unwrap_or_default();
        if counts_only(report, services, gone) {
            report.renew_counts();
        } else {
            report.renew();
        }
    }
    desired.plan = plan;
}

/// `report`'s entries for `services` differ from `gone` (its entries for them before, in name
/// order) in their endpoint counts at most.
fn counts_only(report: &RouteReport, services: &BTreeSet<String>, gone: &[ServiceLaneStatus]) -> bool {
    // In name order, as `gone` is.
    let mut fresh = services.iter().filter_map(|s| report.entry(s));
    gone.iter()
        .all(|g| fresh.next().is_some_and(|f| f.same_but_endpoints(g)))
        && fresh.next().is_none()
}

/// Objects by name, each with its content hash.
fn hashed<T: kube::Resource + serde::Serialize>(objects: Vec<T>) -> Vec<(String, Hashed<T>)> {
    objects
        .into_iter()
        .map(|o| (o.name_any(), Hashed::new(o)))
        .collect()
}
