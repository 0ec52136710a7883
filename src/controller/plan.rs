//! From what a namespace should hold and what it holds to the writes that close the gap, as a
//! [`Plan`] in phases: finalizers on; Services and EndpointSlices; HTTPRoutes; deletions; then
//! its tail: statuses (statuses.rs), finalizers off, Events. Nothing here talks to the API.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::jiff::Timestamp;
use kube::{Resource, ResourceExt};

use super::events::Told;
use super::gateways::Gateways;
use super::publishing::Publishing;
use super::statuses::{entry_statuses, route_statuses, rule_statuses, Skip};
use crate::api::TagRule;
use crate::gateway::HttpRoute;
use crate::lanes::{
    naming, Desired, Index, Kind, ObjectKey, Problem, TagRules, FOR_SERVICE_LABEL, SERVICE_NAME_LABEL,
    TRIGGER_TIME_ANNOTATION,
};
use crate::writer::{Op, Output, OutputKind, Plan, Step, Subject, Target, WriteError, FINALIZER};
use tokio::time::Instant;

/// The outputs that exist in one namespace, with the hash each was applied with.
pub(super) type LiveObjects = BTreeMap<Target, Option<String>>;

/// Everything a namespace's plan is made from.
pub(super) struct Input<'a> {
    pub ns: &'a str,
    pub desired: &'a Desired,
    pub live: &'a LiveObjects,
    pub index: &'a Index,
    pub rules: &'a TagRules,
    pub publishing: &'a Publishing,
    /// The last failed write of each output.
    pub failed: &'a BTreeMap<Target, WriteError>,
    /// LaneRoutes and TagRules of this namespace being deleted, waiting for their finalizer.
    pub deleting: &'a BTreeMap<(Kind, ObjectKey), Option<TagRule>>,
    /// Write statuses even where the object already shows them.
    pub verify_statuses: bool,
    /// Services laneway's routes stopped naming, kept until `hold_until` so that no gateway
    /// is left with a route to a Service that is gone.
    pub released: &'a BTreeSet<String>,
    pub hold_until: Option<Instant>,
    pub instant: Instant,
    pub gateways: &'a Gateways,
    /// When each LaneRoute's status was last written: a change of endpoint counts alone waits
    /// [`COUNT_REFRESH`] after it.
    pub statuses_written: &'a BTreeMap<String, Instant>,
    /// LaneRoutes an earlier plan had no status to write for.
    pub skips: &'a BTreeMap<String, Skip>,
    /// When laneway saw the earliest pod change of each user Service that this plan carries
    /// out, for the slices' trigger-time annotation.
    pub triggers: &'a BTreeMap<String, Timestamp>,
    /// The tail of an earlier plan (statuses, finalizers coming off, Events) is still being
    /// written: this plan has none, and the next one looks again.
    pub tail_busy: bool,
    pub now: Timestamp,
}

fn has_finalizer(finalizers: &[String]) -> bool {
    finalizers.iter().any(|f| f == FINALIZER)
}

/// The LaneRoutes and LaneEntries that own an object, from its owner references.
fn owners<K: Resource>(obj: &K) -> Vec<(&'static str, String)> {
    obj.owner_references()
        .iter()
        .filter_map(|o| match o.kind.as_str() {
            "LaneRoute" => Some(("LaneRoute", o.name.clone())),
            "LaneEntry" => Some(("LaneEntry", o.name.clone())),
            _ => None,
        })
        .collect()
}

/// Problems caused by writes the API server refused (not worth retrying as they are).
pub(super) fn rejected(ns: &str, desired: &Desired, failed: &BTreeMap<Target, WriteError>) -> Vec<Problem> {
    failed
        .iter()
        .filter(|(_, e)| !e.is_transient())
        .filter_map(|(target, e)| {
            let owners = output_owners(desired, target)?;
            Some(Problem::WriteRejected {
                owners: owners
                    .into_iter()
                    .map(|(k, name)| (kind_of(k), ObjectKey::new(ns, &name)))
                    .collect(),
                object: target.to_string(),
                message: e.to_string(),
            })
        })
        .collect()
}

pub(super) fn output_owners(desired: &Desired, target: &Target) -> Option<Vec<(&'static str, String)>> {
    match target.kind {
        OutputKind::Service => desired.services.get(&target.key.name).map(|s| owners(&*s.object)),
        OutputKind::EndpointSlice => desired.slices.get(&target.key.name).map(|s| owners(&*s.object)),
        OutputKind::HttpRoute => desired.http_routes.get(&target.key.name).map(owners),
    }
}

/// Forgets failures of outputs that need no write any more: applied since (by this replica or
/// seen applied), or neither wanted nor present.
pub(super) fn prune_failed(failed: &mut BTreeMap<Target, WriteError>, desired: &Desired, live: &LiveObjects) {
    failed.retain(
        |target, _| match (desired_hash(desired, target), live.get(target)) {
            (Some(hash), Some(Some(live))) => hash != *live,
            (Some(_), _) => true,
            (None, present) => present.is_some(),
        },
    );
}

/// Desired content of an output.
fn desired_hash(desired: &Desired, target: &Target) -> Option<String> {
    match target.kind {
        OutputKind::Service => desired.services.get(&target.key.name).map(|s| s.hash.clone()),
        OutputKind::EndpointSlice => desired.slices.get(&target.key.name).map(|s| s.hash.clone()),
        OutputKind::HttpRoute => desired
            .http_routes
            .get(&target.key.name)
            .map(naming::content_hash),
    }
}

/// A plan, and when the namespace should be looked at again even if nothing changes (a
/// Service kept for the gateways to catch up).
pub(super) struct Built {
    pub plan: Plan,
    pub wake_at: Option<Instant>,
    /// LaneRoutes whose status this plan writes.
    pub statuses_written: Vec<String>,
    /// LaneRoutes it had no status to write for (`None`: statuses were not looked at).
    pub skips: Option<BTreeMap<String, Skip>>,
}

/// The plan for one namespace, and the Events it tells (recorded in `told`). Phases:
/// finalizers on; Services and EndpointSlices; HTTPRoutes (each after the Services and slices
/// it names); HTTPRoutes nobody wants; Services and slices nobody wants (a Service a route
/// named stays until the gateways have seen the route without it, plus the route grace);
/// then the tail, which may still be written while the namespace's next plan starts: statuses;
/// finalizers off; Events.
pub(super) fn build(input: &Input, told: &mut Told, mut events: Vec<Op>) -> Built {
    let Input {
        ns,
        desired,
        live,
        index,
        ..
    } = *input;
    let mut plan = Plan::new(ns);
    let mut wake_at = None;

    // 1. Finalizers go on before any output exists.
    let mut finalizers = Vec::new();
    let missing = |f: &[String]| !has_finalizer(f);
    for route in index.lane_routes(ns).filter(|r| missing(r.finalizers())) {
        finalizers.push((Kind::LaneRoute, route.name_any()));
    }
    for rule in index.tag_rules_in(ns).filter(|r| missing(r.finalizers())) {
        finalizers.push((Kind::TagRule, rule.name_any()));
    }
    for entry in index.lane_entries(ns).filter(|e| missing(e.finalizers())) {
        finalizers.push((Kind::LaneEntry, entry.name_any()));
    }
    let adding: BTreeSet<(&'static str, String)> = finalizers
        .iter()
        .filter(|(k, _)| *k != Kind::TagRule)
        .map(|(k, name)| {
            (
                if *k == Kind::LaneRoute {
                    "LaneRoute"
                } else {
                    "LaneEntry"
                },
                name.clone(),
            )
        })
        .collect();
    plan.phase(
        finalizers
            .into_iter()
            .map(|(kind, name)| {
                Step::from(Op::Finalizer {
                    kind,
                    key: ObjectKey::new(ns, &name),
                    present: true,
                })
            })
            .collect(),
    );

    // 2. Outputs whose content differs from what was applied, each after its owners'
    // finalizers; 3. the HTTPRoutes, each after what it names.
    let mut touched: BTreeMap<(&'static str, String), Vec<Subject>> = BTreeMap::new();
    let mut step =
        |hash: &str, output: Output, owners: Vec<(&'static str, String)>, mut needs: Vec<Subject>| {
            let target = output.target();
            needs.extend(
                owners
                    .iter()
                    .filter(|o| adding.contains(*o))
                    .map(|(kind, name)| Subject::Finalizer(kind_of(kind), ObjectKey::new(ns, name))),
            );
            // A status waits for writes of its object's outputs that have not failed before (a
            // known failure is already in the status).
            if !input.failed.contains_key(&target) {
                for o in owners {
                    touched
                        .entry(o)
                        .or_default()
                        .push(Subject::Output(target.clone()));
                }
            }
            Step {
                op: Op::Apply {
                    output,
                    hash: hash.to_owned(),
                },
                needs,
            }
        };
    let service_hashes = desired.services.iter().map(|(n, s)| (n, s.hash.as_str()));
    let (changed_services, mut unwanted) = compare(service_hashes, live, OutputKind::Service);
    let slice_hashes = desired.slices.iter().map(|(n, s)| (n, s.hash.as_str()));
    let (changed_slices, gone) = compare(slice_hashes, live, OutputKind::EndpointSlice);
    unwanted.extend(gone);
    let route_hashes: Vec<(&String, String)> = desired
        .http_routes
        .iter()
        .map(|(n, r)| (n, naming::content_hash(r)))
        .collect();
    let (changed_routes, gone) = compare(
        route_hashes.iter().map(|(n, h)| (*n, h.as_str())),
        live,
        OutputKind::HttpRoute,
    );
    unwanted.extend(gone);

    let mut applies = Vec::new();
    for name in changed_services {
        let svc = &desired.services[name];
        applies.push(step(
            &svc.hash,
            Output::Service(svc.object.clone()),
            owners(&*svc.object),
            Vec::new(),
        ));
    }
    for name in changed_slices {
        let slice = &desired.slices[name];
        let trigger = slice
            .labels()
            .get(SERVICE_NAME_LABEL)
            .and_then(|s| desired.services.get(s))
            .and_then(|s| s.labels().get(FOR_SERVICE_LABEL))
            .and_then(|s| input.triggers.get(s));
        let mut object = slice.object.clone();
        if let Some(t) = trigger {
            std::sync::Arc::make_mut(&mut object)
                .annotations_mut()
                .insert(TRIGGER_TIME_ANNOTATION.to_owned(), t.to_string());
        }
        applies.push(step(
            &slice.hash,
            Output::Slice(object),
            owners(&*slice.object),
            Vec::new(),
        ));
    }
    // What each Service being written needs before a route may name it: itself and its slices.
    let mut written: BTreeMap<String, Vec<Subject>> = BTreeMap::new();
    for a in &applies {
        if let Subject::Output(t) = a.op.subject() {
            let service = match t.kind {
                OutputKind::EndpointSlice => desired
                    .slices
                    .get(&t.key.name)
                    .and_then(|s| s.labels().get(SERVICE_NAME_LABEL).cloned()),
                _ => Some(t.key.name.clone()),
            };
            if let Some(service) = service {
                written.entry(service).or_default().push(Subject::Output(t));
            }
        }
    }
    // HTTPRoutes only once the API server is known to serve them.
    let routes_served = input.gateways.api == Some(true);
    let mut routes = Vec::new();
    for name in changed_routes.into_iter().filter(|_| routes_served) {
        let route = &desired.http_routes[name];
        let needs = route_backends(route)
            .iter()
            .flat_map(|b| written.get(b).cloned().unwrap_or_default())
            .collect();
        let hash = &route_hashes.iter().find(|(n, _)| *n == name).expect("hashed").1;
        routes.push(step(
            hash,
            Output::Route(std::sync::Arc::new(route.clone())),
            owners(route),
            needs,
        ));
    }
    let mut all_outputs: Vec<Subject> = applies
        .iter()
        .chain(routes.iter())
        .map(|s| s.op.subject())
        .collect();
    plan.phase(applies);
    plan.phase(routes);

    // 4. HTTPRoutes nobody wants, then 5. Services and slices nobody wants.
    let route_deletes: Vec<Step> = unwanted
        .iter()
        .filter(|t| t.kind == OutputKind::HttpRoute && routes_served)
        .map(|t| Step::from(Op::Delete((*t).clone())))
        .collect();
    // Services that a route of laneway's names now (as written), or named until lately.
    let named: BTreeSet<&String> = live
        .keys()
        .filter(|t| t.kind == OutputKind::HttpRoute)
        .filter_map(|t| index.http_route(ns, &t.key.name))
        .flat_map(|r| r.backends.iter())
        .collect();
    let mut kept = false;
    let mut deletes = Vec::new();
    for t in unwanted.iter().filter(|t| t.kind != OutputKind::HttpRoute) {
        let service = match t.kind {
            OutputKind::Service => Some(&t.key.name),
            _ => None,
        };
        if service.is_some_and(|s| named.contains(s)) {
            kept = true;
            continue;
        }
        if let (Some(s), Some(at)) = (service, input.hold_until) {
            if input.instant < at && input.released.contains(s) {
                kept = true;
                wake_at = Some(at);
                continue;
            }
        }
        deletes.push(Step::from(Op::Delete((*t).clone())));
    }
    all_outputs.extend(route_deletes.iter().chain(deletes.iter()).map(|s| s.op.subject()));
    plan.phase(route_deletes);
    plan.phase(deletes);

    if input.tail_busy {
        plan.tail = None;
        return Built {
            plan,
            wake_at,
            statuses_written: Vec::new(),
            skips: None,
        };
    }

    // The tail. 6. Statuses that differ from what the objects show; a status waits for its
    // outputs, so it never claims what failed.
    let (mut statuses, counts_due, skips) = route_statuses(input, &touched);
    let statuses_written = statuses
        .iter()
        .filter_map(|s| match &s.op {
            Op::Status { key, .. } => Some(key.name.clone()),
            _ => None,
        })
        .collect();
    wake_at = wake_at.into_iter().chain(counts_due).min();
    statuses.extend(rule_statuses(input));
    statuses.extend(entry_statuses(input, &touched));
    plan.tail_phase(statuses);

    // 7. Finalizers come off once what the object produced is gone.
    let mut releases = Vec::new();
    for ((kind, key), rule) in input.deleting.iter().filter(|((_, k), _)| k.namespace == ns) {
        let release = match (kind, rule) {
            // Outputs kept for the gateways to catch up are still the object's.
            (Kind::LaneRoute | Kind::LaneEntry, _) => (!kept).then(|| all_outputs.clone()),
            (Kind::TagRule, Some(rule)) => input
                .publishing
                .may_release(rule, key, input.rules)
                .then(Vec::new),
            (Kind::TagRule, None) => Some(Vec::new()),
        };
        if let Some(needs) = release {
            releases.push(Step {
                op: Op::Finalizer {
                    kind: *kind,
                    key: key.clone(),
                    present: false,
                },
                needs,
            });
        }
    }
    plan.tail_phase(releases);

    // 8. Events last: they never hold anything up.
    let rule_problems = input
        .rules
        .problems
        .iter()
        .filter(|p| p.subjects().iter().any(|(_, k)| k.namespace == ns));
    let write_problems = rejected(ns, desired, input.failed);
    let problems = desired
        .problems
        .iter()
        .chain(rule_problems)
        .chain(write_problems.iter());
    events.extend(told.tell(index, ns, desired, problems));
    plan.tail_phase(events.into_iter().map(Step::from).collect());
    Built {
        plan,
        wake_at,
        statuses_written,
        skips: Some(skips),
    }
}

/// Walks the wanted outputs of one kind (name and content hash, in name order) beside those
/// that exist (`live` is in kind, then name order): the names to apply (missing or applied
/// with another hash) and the existing ones nobody wants.
fn compare<'a>(
    wanted: impl Iterator<Item = (&'a String, &'a str)>,
    live: &'a LiveObjects,
    kind: OutputKind,
) -> (Vec<&'a String>, Vec<&'a Target>) {
    let mut changed = Vec::new();
    let mut unwanted = Vec::new();
    let mut existing = live.iter().filter(|(t, _)| t.kind == kind).peekable();
    for (name, hash) in wanted {
        while let Some((t, _)) = existing.next_if(|(t, _)| t.key.name < *name) {
            unwanted.push(t);
        }
        match existing.next_if(|(t, _)| t.key.name == *name) {
            Some((_, applied)) if applied.as_deref() == Some(hash) => {}
            _ => changed.push(name),
        }
    }
    unwanted.extend(existing.map(|(t, _)| t));
    (changed, unwanted)
}

pub(super) fn kind_of(kind: &str) -> Kind {
    match kind {
        "LaneEntry" => Kind::LaneEntry,
        _ => Kind::LaneRoute,
    }
}

/// The Services an HTTPRoute sends requests to.
fn route_backends(route: &HttpRoute) -> BTreeSet<String> {
    route
        .spec
        .rules
        .iter()
        .flatten()
        .flat_map(|r| r.backend_refs.iter().flatten())
        .map(|b| b.name.clone())
        .collect()
}
