//! Lane resolution: from the index to everything laneway wants in a namespace (each user
//! Service's outputs come from service_output.rs), and bringing that up to date after pod events.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use rayon::prelude::*;

use super::entry::EntryReport;
use super::index::Index;
use super::naming;
use super::plan::{LanePlan, RouteReport, Stamp};
use super::problem::{Kind, Problem};
use crate::api::ServiceLaneStatus;
use crate::gateway::HttpRoute;

/// Label the built-in controllers and kube-proxy use to find a Service's slices.
pub const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";
/// When the change that a slice's last write carried out happened (set by the shell as it
/// writes, outside the content hash), for kube-proxy's network programming latency.
pub const TRIGGER_TIME_ANNOTATION: &str = "endpoints.kubernetes.io/last-change-trigger-time";
/// Label that tells the built-in EndpointSlice controller the slice is not its own (a label
/// value, so it cannot contain a slash).
pub const SLICE_MANAGED_BY_LABEL: &str = "endpointslice.kubernetes.io/managed-by";
pub const SLICE_MANAGER: &str = "controller.laneway.io";
/// Labels on lane and baseline Services.
pub const FOR_SERVICE_LABEL: &str = "laneway.io/service";
pub const ROLE_LABEL: &str = "laneway.io/role";
pub const FOR_LANE_LABEL: &str = "laneway.io/for-lane";
/// On a lane's Service: `lane`, it stays as long as its lane includes the service (without
/// endpoints while the lane has no pods there), so that the lane's pods coming back need no new
/// Service. Lane Services without it (written by versions that copied baseline) go when their
/// lane has no pods of the service.
pub const LIFETIME_LABEL: &str = "laneway.io/lifetime";
pub const LIFETIME_LANE: &str = "lane";
/// Most endpoints per slice, as the built-in controller uses by default.
pub const MAX_ENDPOINTS_PER_SLICE: usize = 100;

/// From this many services on, their outputs are computed on every core.
const PARALLEL_SERVICES: usize = 32;

/// The outputs for one user Service.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ServiceOutput {
    pub services: Vec<Service>,
    pub slices: Vec<EndpointSlice>,
    /// Status entry of this service per LaneRoute (by route name).
    pub statuses: Vec<(String, ServiceLaneStatus)>,
    pub problems: Vec<Problem>,
}

/// An output with the hash of its content, taken once when it is computed: comparing what
/// exists with what should costs no serialization for outputs that did not change.
#[derive(Clone, Debug, PartialEq)]
pub struct Hashed<T> {
    /// Shared with the writes under way, so that a plan holds no copy of what it applies.
    pub object: std::sync::Arc<T>,
    pub hash: String,
}

impl<T: serde::Serialize> Hashed<T> {
    pub fn new(object: T) -> Self {
        let hash = naming::content_hash(&object);
        Hashed {
            object: std::sync::Arc::new(object),
            hash,
        }
    }
}

impl<T> std::ops::Deref for Hashed<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.object
    }
}

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
        let tried = lane
            .into_iter()
            .flat_map(|l| std::iter::once(l).chain(plan.chain(l).iter().map(String::as_str)));
        for l in tried {
            let status = plan
                .lanes
                .get(l)
                .and_then(|d| self.routes.get(&d.route.name))
                .and_then(|r| r.entry(service));
            if let Some(by) = status.and_then(|s| s.served_by.clone()) {
                return Some(by);
            }
        }
        let baseline = plan.baseline_of(service);
        (plan.guarded.contains(service) || self.services.contains_key(&baseline)).then_some(baseline)
    }
}

impl Index {
    /// Everything laneway wants in `namespace` at time `now`.
    pub fn desired(&self, namespace: &str, now: Timestamp) -> Desired {
        let plan = self.plan(namespace, now);
        let mut desired = Desired {
            problems: plan.problems.clone(),
            next_expiry: plan.next_expiry,
            routes: plan.routes.clone(),
            ..Default::default()
        };
        if let Some(ns) = self.ns(namespace) {
            desired
                .problems
                .extend(ns.rules.values().flat_map(|r| r.problems.iter().cloned()));
        }
        self.fill(&mut desired, namespace, &plan, plan.services());
        for report in desired.routes.values_mut() {
            report.renew();
        }
        desired.plan = plan;
        desired
    }

    /// Adds the outputs of `services` and the namespace's tag conflicts to `desired`; returns
    /// the LaneRoutes whose reports gained services.
    fn fill<'a>(
        &self,
        desired: &mut Desired,
        namespace: &str,
        plan: &LanePlan,
        services: impl IntoIterator<Item = &'a String>,
    ) -> BTreeSet<String> {
        let mut grown = BTreeSet::new();
        desired.problems.extend(self.tag_conflicts(namespace));
        let services: Vec<&String> = services.into_iter().collect();
        let output = |service: &&String| {
            let out = self.service_output(namespace, plan, service);
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
        self.entry_outputs(namespace, plan, desired);
        desired.problems.sort();
        desired.problems.dedup();
        grown
    }

    /// Brings `desired` (an earlier result of [`Index::desired`] for `namespace`) up to date
    /// after changes that touched only `services` (pods, not LaneRoutes, LaneEntries or
    /// Services), recomputing nothing else. The result is what `desired` would return now.
    pub fn refresh(
        &self,
        desired: &mut Desired,
        namespace: &str,
        services: &BTreeSet<String>,
        now: Timestamp,
    ) {
        if desired.plan.next_expiry.is_some_and(|t| t <= now) {
            *desired = self.desired(namespace, now);
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
        let grown = self.fill(desired, namespace, &plan, refreshed);
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
