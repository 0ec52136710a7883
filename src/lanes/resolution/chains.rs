//! The lanes of a namespace: each LaneRoute's lane with its fallback chain expanded, the lanes
//! of each service, the Services LaneEntries send requests to, the guarded Services, and what
//! each route amounts to before any output is made.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::{Resource, ResourceExt};

use crate::api::{LaneEntry, LaneRoute, ServiceLaneStatus};
use crate::lanes::index::{Index, Namespace};
use crate::lanes::labels::GUARD_ANNOTATION;
use crate::lanes::model::Guard;
use crate::lanes::naming;
use crate::lanes::problem::{Kind, ObjectKey, Problem};

/// A lane declared by a LaneRoute, with its fallback chain expanded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LaneDef {
    pub lane: String,
    pub route: ObjectKey,
    pub route_uid: String,
    /// Fallback lanes in the order they are tried (transitively, without repeats).
    pub chain: Vec<String>,
    pub strict: bool,
    /// Services in the lane (names as written or selected; they may not exist).
    pub services: Vec<String>,
}

/// What one LaneRoute amounts to.
#[derive(Clone, Debug, Default)]
pub struct RouteReport {
    pub lane: String,
    pub services: Vec<ServiceLaneStatus>,
    pub expires_at: Option<Timestamp>,
    pub expired: bool,
    /// Another LaneRoute declares the same lane; this one produces nothing.
    pub ignored: bool,
    /// The LaneEntries that let requests into the lane.
    pub entries: Vec<String>,
    /// The route sets `match` or `weight`, which only a LaneEntry gives effect.
    pub has_match_or_weight: bool,
    /// The lane is strict: a service without instances in the lane or its fallbacks answers
    /// 503 by design.
    pub strict: bool,
    /// Renewed whenever the services or entries change: a report with the stamp of one seen
    /// before holds what that one held.
    pub stamp: Stamp,
    /// Renewed with `stamp` whenever anything but the services' endpoint counts changes: a
    /// report with the shape of one seen before differs from it in those counts at most.
    pub shape: Stamp,
}

impl PartialEq for RouteReport {
    fn eq(&self, other: &Self) -> bool {
        let RouteReport {
            lane,
            services,
            expires_at,
            expired,
            ignored,
            entries,
            has_match_or_weight,
            strict,
            stamp: _,
            shape: _,
        } = self;
        *lane == other.lane
            && *services == other.services
            && *expires_at == other.expires_at
            && *expired == other.expired
            && *ignored == other.ignored
            && *entries == other.entries
            && *has_match_or_weight == other.has_match_or_weight
            && *strict == other.strict
    }
}

impl RouteReport {
    /// The report's entry for `service` (its services are sorted by name, see `desired::fill`).
    pub fn entry(&self, service: &str) -> Option<&ServiceLaneStatus> {
        let at = self.services.binary_search_by(|s| s.name.as_str().cmp(service));
        at.ok().map(|i| &self.services[i])
    }

    /// Marks a change of anything in the report.
    pub fn renew(&mut self) {
        self.stamp = Stamp::fresh();
        self.shape = Stamp::fresh();
    }

    /// Marks a change of the services' endpoint counts alone.
    pub fn renew_counts(&mut self) {
        self.stamp = Stamp::fresh();
    }
}

/// Tells one computation of a report from another (not its content: reports compare, and
/// print, alike whatever their stamps).
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Stamp(u64);

impl std::fmt::Debug for Stamp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Stamp")
    }
}

impl Stamp {
    pub fn fresh() -> Stamp {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        Stamp(NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed))
    }
}

impl Default for Stamp {
    fn default() -> Stamp {
        Stamp::fresh()
    }
}

/// The lanes of one namespace.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LanePlan {
    pub lanes: BTreeMap<String, LaneDef>,
    /// Lanes (in name order) that include each service.
    pub by_service: BTreeMap<String, Vec<String>>,
    pub routes: BTreeMap<String, RouteReport>,
    pub problems: Vec<Problem>,
    /// The soonest time a live route expires, so the caller can look again then.
    pub next_expiry: Option<Timestamp>,
    /// Services that LaneEntries send requests to, with the entries: they get a baseline
    /// Service even when no lane includes them.
    pub entry_services: BTreeMap<String, Vec<Owner>>,
    /// Guarded Services: laneway writes their own slices, and each is its own baseline.
    pub guarded: BTreeSet<String>,
    /// Services whose guard annotation cannot be read, and that laneway saw with no selector
    /// before (it started since): their slices stay as they are.
    pub guard_kept: BTreeSet<String>,
}

/// An object that owns outputs (a LaneRoute or a LaneEntry).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Owner {
    pub kind: Kind,
    pub name: String,
    pub uid: String,
}

impl LaneDef {
    pub(super) fn owner(&self) -> Owner {
        Owner {
            kind: Kind::LaneRoute,
            name: self.route.name.clone(),
            uid: self.route_uid.clone(),
        }
    }
}

impl LanePlan {
    /// Lanes that include `service`, in name order.
    pub fn lanes_of<'a>(&'a self, service: &'a str) -> impl Iterator<Item = &'a LaneDef> + 'a {
        self.by_service
            .get(service)
            .into_iter()
            .flatten()
            .filter_map(|l| self.lanes.get(l))
    }

    /// The Service that serves `service`'s requests in no lane: the Service itself when it is
    /// guarded, else its baseline Service.
    pub fn baseline_of(&self, service: &str) -> String {
        if self.guarded.contains(service) {
            service.to_owned()
        } else {
            naming::baseline_service_name(service)
        }
    }

    /// Services whose outputs laneway computes: those of a lane or an entry, and guarded ones.
    pub fn services(&self) -> BTreeSet<&String> {
        self.by_service
            .keys()
            .chain(self.entry_services.keys())
            .chain(&self.guarded)
            .collect()
    }

    /// `service` is one of [`LanePlan::services`].
    pub fn has_service(&self, service: &str) -> bool {
        self.by_service.contains_key(service)
            || self.entry_services.contains_key(service)
            || self.guarded.contains(service)
    }

    /// Fallback chain of a lane (empty for a lane that no route declares).
    pub fn chain(&self, lane: &str) -> &[String] {
        self.lanes
            .get(lane)
            .map(|l| l.chain.as_slice())
            .unwrap_or_default()
    }
}

/// When a route expires, if it has a ttl and a creation time.
pub fn expiry(route: &LaneRoute) -> Option<Timestamp> {
    let ttl = route.spec.ttl?;
    let created = route.meta().creation_timestamp.as_ref()?.0;
    let ttl = SignedDuration::try_from(std::time::Duration::from(ttl)).ok()?;
    created.checked_add(ttl).ok()
}

fn route_services(
    ns: &Namespace,
    route: &LaneRoute,
    key: &ObjectKey,
    problems: &mut Vec<Problem>,
) -> Vec<String> {
    let spec = &route.spec;
    let field = "spec.serviceSelector";
    ns.listed_or_selected(
        spec.services.as_ref(),
        spec.service_selector.as_ref(),
        (Kind::LaneRoute, key, field),
        problems,
    )
}

/// Expands `lane`'s fallbacks depth first; a lane already on the path is a cycle.
fn expand_chain(
    lane: &str,
    direct: &BTreeMap<String, Vec<String>>,
    path: &mut Vec<String>,
    chain: &mut Vec<String>,
    cycles: &mut BTreeSet<Vec<String>>,
) {
    path.push(lane.to_owned());
    for next in direct.get(lane).into_iter().flatten() {
        if let Some(pos) = path.iter().position(|l| l == next) {
            let mut cycle = path[pos..].to_vec();
            let start = cycle
                .iter()
                .enumerate()
                .min_by_key(|(_, l)| *l)
                .map_or(0, |(i, _)| i);
            cycle.rotate_left(start);
            cycles.insert(cycle);
            continue;
        }
        if chain.contains(next) {
            continue;
        }
        chain.push(next.clone());
        expand_chain(next, direct, path, chain, cycles);
    }
    path.pop();
}

/// The lanes of `namespace` at time `now` (expired routes drop out).
pub fn lane_plan(index: &Index, namespace: &str, now: Timestamp) -> LanePlan {
    let mut plan = LanePlan::default();
    let Some(ns) = index.ns(namespace) else {
        return plan;
    };
    let mut direct: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut pending: Vec<LaneDef> = Vec::new();
    for (name, route) in &ns.routes {
        let key = ObjectKey::new(namespace, name);
        let lane = route.lane().to_owned();
        let expires_at = expiry(route);
        let expired = expires_at.is_some_and(|t| t <= now);
        let mut report = RouteReport {
            lane: lane.clone(),
            expires_at,
            expired,
            has_match_or_weight: route.spec.match_.is_some() || route.spec.weight > 0,
            strict: route.spec.strict,
            ..Default::default()
        };
        if expired {
            plan.routes.insert(name.clone(), report);
            continue;
        }
        if let Some(t) = expires_at {
            plan.next_expiry = Some(plan.next_expiry.map_or(t, |n: Timestamp| n.min(t)));
        }
        if let Some(first) = pending.iter().find(|d| d.lane == lane) {
            plan.problems.push(Problem::DuplicateLane {
                route: key,
                lane,
                declared_by: first.route.name.clone(),
            });
            report.ignored = true;
            plan.routes.insert(name.clone(), report);
            continue;
        }
        let services = route_services(ns, route, &key, &mut plan.problems);
        direct.insert(lane.clone(), route.spec.fallback.clone());
        pending.push(LaneDef {
            lane,
            route: key,
            route_uid: route.uid().unwrap_or_default(),
            chain: Vec::new(),
            strict: route.spec.strict,
            services,
        });
        plan.routes.insert(name.clone(), report);
    }
    let mut cycles = BTreeSet::new();
    for mut def in pending {
        let mut chain = Vec::new();
        expand_chain(&def.lane, &direct, &mut Vec::new(), &mut chain, &mut cycles);
        chain.retain(|l| *l != def.lane);
        def.chain = chain;
        for service in &def.services {
            plan.by_service
                .entry(service.clone())
                .or_default()
                .push(def.lane.clone());
        }
        plan.lanes.insert(def.lane.clone(), def);
    }
    for lanes in plan.by_service.values_mut() {
        lanes.sort();
        lanes.dedup();
    }
    for lanes in cycles {
        let problem = cycle_problem(&plan, lanes);
        plan.problems.push(problem);
    }
    plan_entries(ns, namespace, &mut plan);
    plan_guards(ns, namespace, &mut plan);
    plan
}

/// Notes, in `plan`, the Services the namespace's LaneEntries send requests to.
fn plan_entries(ns: &Namespace, namespace: &str, plan: &mut LanePlan) {
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

/// The Services a mesh entry selects.
pub(crate) fn mesh_services(
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

/// A fallback cycle through `lanes`, shown closed (back to its first lane).
fn cycle_problem(plan: &LanePlan, mut lanes: Vec<String>) -> Problem {
    let routes = lanes
        .iter()
        .filter_map(|l| plan.lanes.get(l))
        .map(|d| d.route.clone())
        .collect();
    lanes.push(lanes[0].clone());
    Problem::FallbackCycle { routes, lanes }
}

/// The guarded Services of a namespace, and a problem for each guard annotation that
/// guards nothing.
fn plan_guards(ns: &Namespace, namespace: &str, plan: &mut LanePlan) {
    for svc in ns.services.values().filter(|s| !s.is_managed()) {
        let error = match &svc.guard {
            Guard::None => continue,
            Guard::Guarded => {
                plan.guarded.insert(svc.name.clone());
                continue;
            }
            Guard::WithSelector => format!(
                "{}: the Service also has spec.selector, so the built-in controller writes its slices with every pod, tagged ones included; remove spec.selector to guard it",
                GUARD_ANNOTATION
            ),
            Guard::Invalid(error) => match &svc.selector {
                Some(selector) => {
                    plan.guarded.insert(svc.name.clone());
                    let pairs: Vec<String> = selector.iter().map(|(k, v)| format!("{k}={v}")).collect();
                    format!("{error}; laneway keeps selecting {}", pairs.join(","))
                }
                None => {
                    plan.guard_kept.insert(svc.name.clone());
                    format!("{error}; the Service's slices are left as they are")
                }
            },
        };
        plan.problems.push(Problem::InvalidGuard {
            service: ObjectKey::new(namespace, &svc.name),
            routes: plan.lanes_of(&svc.name).map(|l| l.route.clone()).collect(),
            beside_selector: svc.guard == Guard::WithSelector,
            error,
        });
    }
}
