//! Lane resolution: from the index to the desired Services, EndpointSlices and statuses.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::{Service, ServicePort, ServiceSpec};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use rayon::prelude::*;

use super::entry::EntryReport;
use super::index::{Index, Namespace};
use super::model::{ServiceInfo, MANAGED_BY_LABEL, MANAGED_BY_VALUE};
use super::naming;
use super::plan::{LaneDef, LanePlan, Owner, RouteReport, Stamp};
use super::problem::{Kind, ObjectKey, Problem};
use super::slices::{members, slices, Member};
use crate::api::{ServiceLaneStatus, SubsetSource};
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
                .and_then(|r| {
                    // Sorted by name (see `fill`).
                    let at = r.services.binary_search_by(|s| s.name.as_str().cmp(service));
                    at.ok().map(|i| &r.services[i])
                });
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
            report.stamp = Stamp::fresh();
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
        let mut changed = BTreeSet::new();
        for (name, report) in desired.routes.iter_mut() {
            let before = report.services.len();
            report.services.retain(|s| !services.contains(&s.name));
            if report.services.len() != before {
                changed.insert(name.clone());
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
        let services = services.iter().filter(|s| plan.has_service(s));
        changed.extend(self.fill(desired, namespace, &plan, services));
        if desired.problems != problems_before {
            desired.problems_stamp = Stamp::fresh();
        }
        for name in changed {
            if let Some(report) = desired.routes.get_mut(&name) {
                report.stamp = Stamp::fresh();
            }
        }
        desired.plan = plan;
    }

    /// The lane and baseline Services of one user Service (or a guarded Service's own
    /// slices), their slices and status entries.
    pub fn service_output(&self, namespace: &str, plan: &LanePlan, service: &str) -> ServiceOutput {
        let lanes: Vec<&LaneDef> = plan.lanes_of(service).collect();
        let entries = plan
            .entry_services
            .get(service)
            .map(Vec::as_slice)
            .unwrap_or_default();
        let guarded = plan.guarded.contains(service);
        if lanes.is_empty() && entries.is_empty() && !guarded {
            return ServiceOutput::default();
        }
        let (ns, svc, selector) = match self.usable(namespace, service, &lanes) {
            Ok(usable) => usable,
            Err(out) => return out,
        };
        let mut out = ServiceOutput::default();
        let all_routes: Vec<ObjectKey> = lanes.iter().map(|l| l.route.clone()).collect();
        let mut port_problems = BTreeSet::new();
        let (port_sets, pods) = members(svc, ns.pods_selected(selector));
        let mut emit = |name: &str, role: Role, members: &[&Member], out: &mut ServiceOutput| {
            for m in members {
                for port in &m.unresolved {
                    port_problems.insert(Problem::UnresolvedTargetPort {
                        routes: all_routes.clone(),
                        service: svc.name.clone(),
                        port: port.clone(),
                        pod: m.pod.info.name.clone(),
                    });
                }
            }
            let owner_refs = role.owner_references(svc);
            out.services.extend(role.service(svc, name, &owner_refs));
            out.slices
                .extend(slices(svc, name, members, &port_sets, owner_refs));
        };

        let baseline_name = plan.baseline_of(service);
        let baseline_owners: Vec<Owner> = lanes
            .iter()
            .map(|l| l.owner())
            .chain(entries.iter().cloned())
            .collect();
        let untagged: Vec<&Member> = pods.iter().filter(|m| !m.pod.is_tagged()).collect();
        let baseline_ok = guarded || self.name_free(ns, &baseline_name, &lanes, service, &mut out.problems);
        if guarded {
            emit(&baseline_name, Role::Guard, &untagged, &mut out);
        } else if baseline_ok {
            emit(
                &baseline_name,
                Role::Baseline(&baseline_owners),
                &untagged,
                &mut out,
            );
        }

        let resolved: Vec<Resolved> = lanes.iter().map(|l| resolve_lane(&pods, l)).collect();
        let mut written = BTreeSet::new();
        for (tag, users) in tiers(&pods, &lanes, &resolved) {
            let name = naming::lane_service_name(service, tag);
            if self.name_free(ns, &name, &users, service, &mut out.problems) {
                let owners: Vec<Owner> = users.iter().map(|l| l.owner()).collect();
                let members: Vec<&Member> = pods.iter().filter(|m| m.pod.has_tag(tag)).collect();
                emit(&name, Role::Lane(tag, &owners), &members, &mut out);
                written.insert(tag);
            }
        }
        let baseline = baseline_ok.then_some(baseline_name);
        for (lane, r) in lanes.iter().zip(resolved) {
            let status = lane_status(service, lane, r, &written, baseline.as_ref());
            out.statuses.push((lane.route.name.clone(), status));
        }
        out.problems.extend(port_problems);
        out
    }

    /// The namespace, user Service and pod selector of `service`, or the output of a Service
    /// that cannot take lanes.
    fn usable<'s>(
        &'s self,
        namespace: &str,
        service: &str,
        lanes: &[&LaneDef],
    ) -> Result<(&'s Namespace, &'s ServiceInfo, &'s BTreeMap<String, String>), ServiceOutput> {
        let ns = self.ns(namespace);
        let svc = ns
            .and_then(|n| n.services.get(service))
            .filter(|s| !s.is_managed());
        let (Some(ns), Some(svc)) = (ns, svc) else {
            return Err(unusable(lanes, service, |route, service| {
                Problem::UnknownService { route, service }
            }));
        };
        let Some(selector) = svc.selector.as_ref().filter(|_| !svc.external_name) else {
            let mut out = unusable(lanes, service, |route, service| Problem::ServiceWithoutSelector {
                route,
                service,
            });
            // An unreadable guard is the problem, reported on its own.
            if matches!(svc.guard, super::Guard::Invalid(_)) {
                out.problems.clear();
            }
            return Err(out);
        };
        Ok((ns, svc, selector))
    }

    fn name_free(
        &self,
        ns: &Namespace,
        name: &str,
        lanes: &[&LaneDef],
        service: &str,
        problems: &mut Vec<Problem>,
    ) -> bool {
        match ns.services.get(name) {
            Some(existing) if !existing.is_managed() => {
                for l in lanes {
                    problems.push(Problem::NameTaken {
                        route: l.route.clone(),
                        service: service.to_owned(),
                        name: name.to_owned(),
                    });
                }
                false
            }
            _ => true,
        }
    }
}

/// What an output of a user Service is for, with the owners of what it writes.
#[derive(Clone, Copy)]
enum Role<'a> {
    /// A lane Service and its slices, owned by the lane's LaneRoute.
    Lane(&'a str, &'a [Owner]),
    /// The baseline Service and its slices, owned by every LaneRoute and LaneEntry that uses it.
    Baseline(&'a [Owner]),
    /// A guarded Service's own slices, owned by the Service (as the built-in controller's are).
    Guard,
}

impl Role<'_> {
    /// The owners of what is written: for a guarded Service, the Service itself, as the
    /// built-in controller sets on its slices (without blocking the Service's deletion, which
    /// would take update rights on it).
    fn owner_references(self, svc: &ServiceInfo) -> Vec<OwnerReference> {
        match self {
            Role::Guard => vec![OwnerReference {
                api_version: "v1".to_owned(),
                kind: crate::kind::Kind::Service.name().into_owned(),
                name: svc.name.clone(),
                uid: svc.uid.clone(),
                controller: Some(true),
                block_owner_deletion: None,
            }],
            Role::Baseline(owners) | Role::Lane(_, owners) => owner_references(owners),
        }
    }

    /// The Service laneway writes for the role (none for a guarded Service: it is the user's).
    fn service(self, svc: &ServiceInfo, name: &str, owners: &[OwnerReference]) -> Option<Service> {
        let lane = match self {
            Role::Guard => return None,
            Role::Baseline(_) => None,
            Role::Lane(lane, _) => Some(lane),
        };
        Some(lane_service(svc, name, lane, owners.to_vec()))
    }
}

/// The output of a Service that cannot take lanes: `problem` for each of its lanes, and their
/// status entries without a subset.
fn unusable(
    lanes: &[&LaneDef],
    service: &str,
    problem: impl Fn(ObjectKey, String) -> Problem,
) -> ServiceOutput {
    let mut out = ServiceOutput::default();
    for l in lanes {
        out.problems.push(problem(l.route.clone(), service.to_owned()));
        let status = ServiceLaneStatus {
            name: service.to_owned(),
            ..Default::default()
        };
        out.statuses.push((l.route.name.clone(), status));
    }
    out
}

/// Objects by name, each with its content hash.
fn hashed<T: kube::Resource + serde::Serialize>(objects: Vec<T>) -> Vec<(String, Hashed<T>)> {
    objects
        .into_iter()
        .map(|o| (o.name_any(), Hashed::new(o)))
        .collect()
}

/// The tiers the lanes of a service are served by, each with the lanes that may use it: each
/// tag that is one of their lanes or fallbacks and has instances of the service, and a strict
/// lane without any ready instance in its chain (its empty Service answers 503). A lane without
/// instances of its own is served by reference, never by a copy.
fn tiers<'l>(
    pods: &[Member],
    lanes: &[&'l LaneDef],
    resolved: &[Resolved<'l>],
) -> BTreeMap<&'l str, Vec<&'l LaneDef>> {
    let mut tiers: BTreeMap<&str, Vec<&LaneDef>> = BTreeMap::new();
    for (lane, r) in lanes.iter().zip(resolved) {
        let own = std::iter::once(&lane.lane).chain(&lane.chain);
        for tag in own.filter(|t| pods.iter().any(|m| m.pod.has_tag(t))) {
            tiers.entry(tag).or_default().push(lane);
        }
        if let Some(tag) = r.tier.filter(|t| *t == lane.lane) {
            tiers.entry(tag).or_default().push(lane);
        }
    }
    for users in tiers.values_mut() {
        users.sort_by(|a, b| a.lane.cmp(&b.lane));
        users.dedup_by(|a, b| a.lane == b.lane);
    }
    tiers
}

/// The status entry of `lane` at `service`, given the tiers whose Services are `written` and
/// the baseline Service, if it is.
fn lane_status(
    service: &str,
    lane: &LaneDef,
    r: Resolved,
    written: &BTreeSet<&str>,
    baseline: Option<&String>,
) -> ServiceLaneStatus {
    let lane_service = |tag: &str| {
        written
            .contains(tag)
            .then(|| naming::lane_service_name(service, tag))
    };
    ServiceLaneStatus {
        name: service.to_owned(),
        lane_service: lane_service(&lane.lane),
        baseline_service: baseline.cloned(),
        served_by: match r.tier {
            Some(tag) => lane_service(tag),
            None => baseline.cloned(),
        },
        endpoints: r.endpoints,
        source: r.source,
    }
}

/// A lane's resolution at one service: where its subset comes from, the tier that serves it
/// (a lane, or `None` for baseline) and its ready endpoints.
struct Resolved<'l> {
    source: SubsetSource,
    tier: Option<&'l str>,
    endpoints: i32,
}

/// Subset(S, L): the first tier with a ready pod (the lane, then each fallback lane, then
/// baseline unless strict). With no ready pod anywhere, the lane's own (not ready) instances
/// if it has any or is strict, else baseline, reported as `Empty`.
fn resolve_lane<'l>(pods: &[Member], lane: &'l LaneDef) -> Resolved<'l> {
    let ready = |tag: Option<&str>| {
        pods.iter()
            .filter(|m| match tag {
                Some(t) => m.pod.has_tag(t),
                None => !m.pod.is_tagged(),
            })
            .filter(|m| m.pod.info.is_ready())
            .count() as i32
    };
    let tried = std::iter::once(&lane.lane).chain(&lane.chain).map(String::as_str);
    for (i, tag) in tried.enumerate() {
        let endpoints = ready(Some(tag));
        if endpoints > 0 {
            let source = match i {
                0 => SubsetSource::Lane,
                _ => SubsetSource::Fallback(tag.to_owned()),
            };
            return Resolved {
                source,
                tier: Some(tag),
                endpoints,
            };
        }
    }
    let endpoints = if lane.strict { 0 } else { ready(None) };
    if endpoints > 0 {
        return Resolved {
            source: SubsetSource::Baseline,
            tier: None,
            endpoints,
        };
    }
    let own = lane.strict || pods.iter().any(|m| m.pod.has_tag(&lane.lane));
    Resolved {
        source: SubsetSource::Empty,
        tier: own.then_some(lane.lane.as_str()),
        endpoints: 0,
    }
}

pub(crate) fn owner_references(owners: &[Owner]) -> Vec<OwnerReference> {
    let controller = owners.len() == 1;
    owners
        .iter()
        .map(|o| OwnerReference {
            api_version: o.kind.api_version().into_owned(),
            kind: o.kind.name().into_owned(),
            name: o.name.clone(),
            uid: o.uid.clone(),
            controller: controller.then_some(true),
            block_owner_deletion: None,
        })
        .collect()
}

fn lane_service(svc: &ServiceInfo, name: &str, lane: Option<&str>, owners: Vec<OwnerReference>) -> Service {
    let mut labels = BTreeMap::from([
        (MANAGED_BY_LABEL.to_owned(), MANAGED_BY_VALUE.to_owned()),
        (FOR_SERVICE_LABEL.to_owned(), svc.name.clone()),
        (
            ROLE_LABEL.to_owned(),
            if lane.is_some() { "lane" } else { "baseline" }.to_owned(),
        ),
    ]);
    if let Some(lane) = lane {
        labels.insert(FOR_LANE_LABEL.to_owned(), lane.to_owned());
    }
    let ports = svc
        .ports
        .iter()
        .map(|p| ServicePort {
            name: p.name.clone(),
            port: p.port,
            protocol: Some(p.protocol.clone().unwrap_or_else(|| "TCP".into())),
            app_protocol: p.app_protocol.clone(),
            ..Default::default()
        })
        .collect();
    Service {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            namespace: Some(svc.namespace.clone()),
            labels: Some(labels),
            owner_references: Some(owners),
            ..Default::default()
        },
        spec: Some(ServiceSpec {
            type_: Some("ClusterIP".into()),
            cluster_ip: svc.headless.then(|| "None".to_owned()),
            ports: Some(ports),
            ip_families: (!svc.ip_families.is_empty()).then(|| svc.ip_families.clone()),
            ip_family_policy: svc.ip_family_policy.clone(),
            ..Default::default()
        }),
        status: None,
    }
}
