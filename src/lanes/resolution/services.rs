//! The outputs of one user Service: its baseline Service (or a guarded Service's own slices),
//! the Service of each lane tier that has instances there (or had: see [`ROLE_LANE`]),
//! their slices and the lanes' status entries.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::{Service, ServicePort, ServiceSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};

use k8s_openapi::api::discovery::v1::EndpointSlice;

use super::chains::{LaneDef, LanePlan, Owner};
use super::slices::{members, slices, Member};
use crate::api::{ServiceLaneStatus, SubsetSource};
use crate::lanes::index::{ClusterIp, Index, Namespace};
use crate::lanes::labels::{
    FOR_LANE_LABEL, FOR_SERVICE_LABEL, MANAGED_BY_LABEL, MANAGED_BY_VALUE, ROLE_BASELINE, ROLE_LABEL,
    ROLE_LANE,
};
use crate::lanes::model::{Guard, ServiceInfo};
use crate::lanes::naming;
use crate::lanes::problem::{ObjectKey, Problem};

/// The outputs for one user Service.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ServiceOutput {
    pub services: Vec<Service>,
    pub slices: Vec<EndpointSlice>,
    /// Status entry of this service per LaneRoute (by route name).
    pub statuses: Vec<(String, ServiceLaneStatus)>,
    pub problems: Vec<Problem>,
}

/// The lane and baseline Services of one user Service (or a guarded Service's own
/// slices), their slices and status entries.
pub fn service_output(index: &Index, namespace: &str, plan: &LanePlan, service: &str) -> ServiceOutput {
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
    let (ns, svc, selector) = match usable(index, namespace, service, &lanes) {
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
        let headless = svc.headless || index.config.cluster_ip == ClusterIp::None;
        out.services
            .extend(role.service(svc, name, &owner_refs, headless));
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
    let baseline_ok = guarded || name_free(ns, &baseline_name, &lanes, service, &mut out.problems);
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
    for (tag, users) in tiers(&pods, &lanes, &resolved, |tag| ns.keeps(service, tag)) {
        let name = naming::lane_service_name(service, tag);
        if name_free(ns, &name, &users, service, &mut out.problems) {
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
    index: &'s Index,
    namespace: &str,
    service: &str,
    lanes: &[&LaneDef],
) -> Result<(&'s Namespace, &'s ServiceInfo, &'s BTreeMap<String, String>), ServiceOutput> {
    let ns = index.ns(namespace);
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
        if matches!(svc.guard, Guard::Invalid(_)) {
            out.problems.clear();
        }
        return Err(out);
    };
    Ok((ns, svc, selector))
}

fn name_free(
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
    fn service(
        self,
        svc: &ServiceInfo,
        name: &str,
        owners: &[OwnerReference],
        headless: bool,
    ) -> Option<Service> {
        let lane = match self {
            Role::Guard => return None,
            Role::Baseline(_) => None,
            Role::Lane(lane, _) => Some(lane),
        };
        Some(lane_service(svc, name, lane, owners.to_vec(), headless))
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

/// The tiers whose Services a service has, each with the lanes that may use it: each tag that
/// is one of their lanes or fallbacks and has instances of the service or a Service laneway
/// `kept` there (a lane Service stays while its lane includes the service, empty while the lane
/// has no instances of it), and a strict lane without any ready instance in its chain (its
/// empty Service answers 503). A lane without instances of its own is served by reference,
/// never by a copy.
fn tiers<'l>(
    pods: &[Member],
    lanes: &[&'l LaneDef],
    resolved: &[Resolved<'l>],
    kept: impl Fn(&str) -> bool,
) -> BTreeMap<&'l str, Vec<&'l LaneDef>> {
    let mut tiers: BTreeMap<&str, Vec<&LaneDef>> = BTreeMap::new();
    for (lane, r) in lanes.iter().zip(resolved) {
        let own = std::iter::once(&lane.lane).chain(&lane.chain);
        for tag in own.filter(|t| kept(t) || pods.iter().any(|m| m.pod.has_tag(t))) {
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
        endpoints: (r.tier == Some(lane.lane.as_str())).then_some(r.endpoints),
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

fn lane_service(
    svc: &ServiceInfo,
    name: &str,
    lane: Option<&str>,
    owners: Vec<OwnerReference>,
    headless: bool,
) -> Service {
    let mut labels = BTreeMap::from([
        (MANAGED_BY_LABEL.to_owned(), MANAGED_BY_VALUE.to_owned()),
        (FOR_SERVICE_LABEL.to_owned(), svc.name.clone()),
        (
            ROLE_LABEL.to_owned(),
            if lane.is_some() { ROLE_LANE } else { ROLE_BASELINE }.to_owned(),
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
            cluster_ip: headless.then(|| "None".to_owned()),
            ports: Some(ports),
            ip_families: (!svc.ip_families.is_empty()).then(|| svc.ip_families.clone()),
            ip_family_policy: svc.ip_family_policy.clone(),
            ..Default::default()
        }),
        status: None,
    }
}
