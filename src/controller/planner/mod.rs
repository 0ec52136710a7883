//! From what a namespace should hold and what it holds to the writes that close the gap, as a
//! [`Plan`] in phases: finalizers on; Services and EndpointSlices; HTTPRoutes; deletions; then
//! its tail: statuses (status_writes.rs), finalizers off, Events. Nothing here talks to the API.

mod input;
mod outputs;
mod pacing;
mod status_writes;

use std::collections::{BTreeMap, BTreeSet};

use kube::ResourceExt;

use super::events::Told;
use crate::gateway::HttpRoute;
use crate::lanes::{
    naming, Guard, Index, ObjectKey, FOR_SERVICE_LABEL, SERVICE_NAME_LABEL, TRIGGER_TIME_ANNOTATION,
};
use crate::writer::{
    Known, Op, Output, OutputKind, OwnKind, Plan, Step, Subject, Target, WriteError, FINALIZER,
};
use status_writes::{entry_statuses, route_statuses, rule_statuses, Entries, Touched};
use tokio::time::Instant;

pub(super) use input::{Clock, Outside, RouteGrace, Snapshot};
use outputs::owners;
pub(super) use outputs::{desired_hash, output_owners, prune_failed, rejected, Compared, Live, LiveObjects};
pub use pacing::COUNT_BUDGET;
pub(super) use pacing::{count_refresh, CountBudget};
pub(super) use status_writes::{RouteMemo, StatusBook, StatusContext};

/// Everything a namespace's plan is made from.
pub(crate) struct Input<'a> {
    pub space: Snapshot<'a>,
    pub outside: Outside<'a>,
    pub statuses: StatusContext<'a>,
    pub grace: RouteGrace<'a>,
    /// The tail of an earlier plan (statuses, finalizers coming off, Events) is still being
    /// written: this plan has none, and the next one looks again.
    pub tail_busy: bool,
}

fn has_finalizer(finalizers: &[String]) -> bool {
    finalizers.iter().any(|f| f == FINALIZER)
}

/// A plan, and when the namespace should be looked at again even if nothing changes (a
/// Service kept for the gateways to catch up).
pub(super) struct Built {
    pub plan: Plan,
    pub wake_at: Option<Instant>,
    /// LaneRoutes whose status this plan writes.
    pub statuses_written: Vec<String>,
    /// What its LaneRoute statuses leave to the next plan (`None`: they were not looked at).
    pub memo: Option<RouteMemo>,
    /// The routine status writes' budget after this plan's (`None`: untouched).
    pub budget: Option<CountBudget>,
    /// The outputs changed by hand that this plan writes back.
    pub repairs: Vec<Target>,
}

/// The plan for one namespace, and the Events it tells (recorded in `told`), in these steps:
/// [`finalizers_on`]; [`applies`] (Services and EndpointSlices); [`route_applies`] (each
/// HTTPRoute after the Services and slices it names); [`deletes`] (HTTPRoutes nobody wants,
/// then Services and slices nobody wants, but a Service a route named stays until the gateways
/// have seen the route without it, plus the route grace); then [`tail`], which may still be
/// written while the namespace's next plan starts: statuses, [`finalizers_off`], Events.
pub(super) fn build(input: &Input, told: &mut Told, events: Vec<Op>) -> Built {
    let space = &input.space;
    let routes_served = input.outside.routes_served();
    let mut plan = Plan::new(space.ns);
    let (finalizers, adding) = finalizers_on(space.index, space.ns);
    plan.phase(finalizers);
    let instant = input.statuses.clock.instant;
    let mut compared = Compared::new(space.desired, space.live);
    compared.hold_back(space, instant);
    let retry_at = space.retries.next_due(instant);
    let mut owned = Owned::new(space, &adding);
    let held = input.held();
    let applies = applies(space, &compared, &held, &mut owned);
    let routes = route_applies(space, routes_served, &compared, &applies, &mut owned);
    let deletes = deletes(space, routes_served, &held, &compared.unwanted);
    let outputs: Vec<Subject> = [&applies, &routes, &deletes.routes, &deletes.others]
        .into_iter()
        .flatten()
        .map(|s| s.op.subject())
        .collect();
    let repairs = compared
        .repairs
        .iter()
        .filter(|t| outputs.contains(&Subject::Output((**t).clone())))
        .map(|t| (*t).clone())
        .collect();
    plan.phase(applies);
    plan.phase(routes);
    plan.phase(deletes.routes);
    plan.phase(deletes.others);
    if input.tail_busy {
        plan.tail = None;
        return Built {
            plan,
            wake_at: held.wake_at().into_iter().chain(retry_at).min(),
            statuses_written: Vec::new(),
            memo: None,
            budget: None,
            repairs,
        };
    }
    let released = Released {
        kept: deletes.kept,
        outputs,
    };
    let mut tail = tail(input, told, events, &owned.touched, &released);
    // A finalizer put on in this plan changes its object's version before the status goes out.
    for step in tail.phases.iter_mut().flatten() {
        if let Op::Status { status, key, version } = &mut step.op {
            if adding.contains(&(status.kind(), key.name.clone())) {
                *version = None;
            }
        }
    }
    for phase in tail.phases {
        plan.tail_phase(phase);
    }
    Built {
        plan,
        wake_at: held
            .wake_at()
            .into_iter()
            .chain(tail.statuses_due)
            .chain(retry_at)
            .min(),
        statuses_written: tail.statuses_written,
        memo: Some(tail.memo),
        budget: Some(tail.budget),
        repairs,
    }
}

/// Step 1: laneway's finalizer goes on every LaneRoute, TagRule and LaneEntry that lacks it,
/// before any output exists. Also returns the LaneRoutes and LaneEntries it goes on, whose
/// outputs wait for it.
pub(super) fn finalizers_on(index: &Index, ns: &str) -> (Vec<Step>, BTreeSet<(OwnKind, String)>) {
    let missing = |f: &[String]| !has_finalizer(f);
    let routes = index.lane_routes(ns).filter(|r| missing(r.finalizers()));
    let rules = index.tag_rules_in(ns).filter(|r| missing(r.finalizers()));
    let entries = index.lane_entries(ns).filter(|e| missing(e.finalizers()));
    let finalizers: Vec<(OwnKind, String)> = routes
        .map(|r| (OwnKind::LaneRoute, r.name_any()))
        .chain(rules.map(|r| (OwnKind::TagRule, r.name_any())))
        .chain(entries.map(|e| (OwnKind::LaneEntry, e.name_any())))
        .collect();
    let adding = finalizers
        .iter()
        .filter(|(k, _)| *k != OwnKind::TagRule)
        .cloned()
        .collect();
    let steps = finalizers
        .into_iter()
        .map(|(kind, name)| {
            Step::from(Op::Finalizer {
                kind,
                key: ObjectKey::new(ns, &name),
                present: true,
            })
        })
        .collect();
    (steps, adding)
}

impl Input<'_> {
    /// What laneway's routes name and what they hold back for the gateways, as of this plan.
    pub fn held(&self) -> Held {
        Held::new(&self.space, &self.grace, self.statuses.clock.instant)
    }
}

/// Makes the apply steps of outputs, each after its owners' finalizers, and notes which
/// writes each owner's status waits for.
pub(super) struct Owned<'a> {
    ns: &'a str,
    live: &'a LiveObjects,
    failed: &'a BTreeMap<Target, WriteError>,
    adding: &'a BTreeSet<(OwnKind, String)>,
    pub touched: Touched,
}

impl<'a> Owned<'a> {
    pub fn new(space: &Snapshot<'a>, adding: &'a BTreeSet<(OwnKind, String)>) -> Self {
        Owned {
            ns: space.ns,
            live: space.live,
            failed: space.failed,
            adding,
            touched: Touched::new(),
        }
    }

    fn step(
        &mut self,
        hash: &str,
        output: Output,
        owners: Vec<(OwnKind, String)>,
        mut needs: Vec<Subject>,
    ) -> Step {
        let target = output.target();
        needs.extend(
            owners
                .iter()
                .filter(|o| self.adding.contains(*o))
                .map(|(kind, name)| Subject::Finalizer(*kind, ObjectKey::new(self.ns, name))),
        );
        // A status waits for writes of its object's outputs that have not failed before (a
        // known failure is already in the status).
        if !self.failed.contains_key(&target) {
            for o in owners {
                self.touched
                    .entry(o)
                    .or_default()
                    .push(Subject::Output(target.clone()));
            }
        }
        // Slices and Services are created, or replaced at the version last seen: cheaper for
        // the API server than an apply, and an object only ever created and replaced keeps no
        // field laneway dropped. Routes are applied, but replaced when changed by hand: an
        // apply would keep the fields someone else added.
        let live = self.live.get(&target);
        let version = live.and_then(|l| l.version.clone());
        let known = match target.kind {
            OutputKind::EndpointSlice | OutputKind::Service => version.map_or(Known::Absent, Known::At),
            OutputKind::HttpRoute => match version {
                Some(v) if live.is_some_and(|l| l.drifted) => Known::At(v),
                _ => Known::Unsure,
            },
        };
        Step {
            op: Op::Apply {
                output,
                hash: hash.to_owned(),
                known,
            },
            needs,
        }
    }
}

/// Step 2: the Services and EndpointSlices whose content differs from what was applied; a
/// slice carries when laneway first saw the pod change it carries out.
pub(super) fn applies(space: &Snapshot, compared: &Compared, held: &Held, owned: &mut Owned) -> Vec<Step> {
    let desired = space.desired;
    let mut steps = Vec::new();
    for name in &compared.services {
        let svc = &desired.services[*name];
        steps.push(owned.step(
            &svc.hash,
            Output::Service(svc.object.clone()),
            owners(&*svc.object),
            Vec::new(),
        ));
    }
    for name in &compared.slices {
        let slice = &desired.slices[*name];
        let service = slice.labels().get(SERVICE_NAME_LABEL);
        if service.is_some_and(|s| held.frozen.contains(s)) {
            continue;
        }
        // The user Service of the slice: the one a lane or baseline Service is for, or a
        // guarded Service itself.
        let trigger = service.and_then(|s| {
            let user = desired
                .services
                .get(s)
                .map_or(Some(s), |s| s.labels().get(FOR_SERVICE_LABEL));
            space.triggers.get(user?)
        });
        let mut object = slice.object.clone();
        if let Some(t) = trigger {
            std::sync::Arc::make_mut(&mut object)
                .annotations_mut()
                .insert(TRIGGER_TIME_ANNOTATION.to_owned(), t.to_string());
        }
        steps.push(owned.step(
            &slice.hash,
            Output::Slice(object),
            owners(&*slice.object),
            Vec::new(),
        ));
    }
    steps
}

/// Step 3: the HTTPRoutes whose content differs, each after the writes of the Services (and
/// their slices) it names; none until the API server is known to serve HTTPRoutes.
pub(super) fn route_applies(
    space: &Snapshot,
    routes_served: bool,
    compared: &Compared,
    applies: &[Step],
    owned: &mut Owned,
) -> Vec<Step> {
    if !routes_served {
        return Vec::new();
    }
    // What each Service being written needs before a route may name it: itself and its slices.
    let mut written: BTreeMap<String, Vec<Subject>> = BTreeMap::new();
    for a in applies {
        if let Subject::Output(t) = a.op.subject() {
            let service = match t.kind {
                OutputKind::EndpointSlice => space
                    .desired
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
    let mut steps = Vec::new();
    for (name, hash) in &compared.routes {
        let route = &space.desired.http_routes[*name];
        let backends = route_backends(route);
        if backends.iter().any(|b| compared.waiting.contains(b)) {
            continue;
        }
        let needs = backends
            .iter()
            .flat_map(|b| written.get(b).cloned().unwrap_or_default())
            .collect();
        steps.push(owned.step(
            hash,
            Output::Route(std::sync::Arc::new(route.clone())),
            owners(route),
            needs,
        ));
    }
    steps
}

/// What step 4 deletes, and what it keeps for the gateways.
pub(super) struct Deletes {
    /// HTTPRoutes nobody wants (they go first, so that no route names a Service that is gone).
    pub routes: Vec<Step>,
    /// Services and EndpointSlices nobody wants.
    pub others: Vec<Step>,
    /// A Service or slice nobody wants is kept for the gateways.
    pub kept: bool,
}

/// Step 4: the outputs nobody wants. A Service that one of laneway's routes names now (as
/// written) stays, and so do the slices of a [`Held`] (frozen) Service.
pub(super) fn deletes(space: &Snapshot, routes_served: bool, held: &Held, unwanted: &[&Target]) -> Deletes {
    let routes = unwanted
        .iter()
        .filter(|t| t.kind == OutputKind::HttpRoute && routes_served)
        .map(|t| Step::from(Op::Delete((*t).clone())))
        .collect();
    let mut out = Deletes {
        routes,
        others: Vec::new(),
        kept: false,
    };
    let kept_slices = &space.desired.plan.guard_kept;
    for t in unwanted.iter().filter(|t| t.kind != OutputKind::HttpRoute) {
        if !ours(space, t) {
            continue;
        }
        // The slices of a Service whose guard cannot be read stay: deleting them would cut
        // off every caller of it.
        let slice_of = (t.kind == OutputKind::EndpointSlice).then(|| naming::slice_service(&t.key.name));
        if slice_of.flatten().is_some_and(|s| kept_slices.contains(s)) {
            continue;
        }
        let service = match t.kind {
            OutputKind::Service => Some(t.key.name.as_str()),
            _ => slice_of.flatten(),
        };
        if t.kind == OutputKind::Service && held.named.contains(&t.key.name) {
            out.kept = true;
            continue;
        }
        if service.is_some_and(|s| held.frozen.contains(s)) {
            out.kept = true;
            continue;
        }
        out.others.push(Step::from(Op::Delete((*t).clone())));
    }
    out
}

/// Not a slice laneway did not write under a Service it does not guard: laneway deletes only
/// slices of the Services it manages.
fn ours(space: &Snapshot, target: &Target) -> bool {
    let guarded_by = space.live.get(target).and_then(|l| l.guarded_by.as_deref());
    guarded_by.is_none_or(|s| {
        space
            .index
            .service(space.ns, s)
            .is_some_and(|svc| svc.guard != Guard::None)
    })
}

/// What laneway's routes name, as written, and the Services they stopped naming (or will, with
/// this plan's routes): a frozen Service keeps its slices as the gateways last saw them, neither
/// rewritten nor deleted, until they have seen the routes without it plus the route grace, so
/// that a lane switching tier never routes to a Service that just lost its instances.
pub(super) struct Held {
    named: BTreeSet<String>,
    frozen: BTreeSet<String>,
    /// When the route grace of the frozen Services passes.
    until: Option<Instant>,
}

impl Held {
    pub fn new(space: &Snapshot, grace: &RouteGrace, instant: Instant) -> Held {
        let named: BTreeSet<String> = space
            .live
            .keys()
            .filter(|t| t.kind == OutputKind::HttpRoute)
            .filter_map(|t| space.index.http_route(space.ns, &t.key.name))
            .flat_map(|r| r.backends.iter().cloned())
            .collect();
        let wanted: BTreeSet<String> = space
            .desired
            .http_routes
            .values()
            .flat_map(route_backends)
            .collect();
        let in_grace = grace.hold_until.filter(|at| instant < *at);
        let released = grace.released.iter().filter(|_| in_grace.is_some());
        let frozen = named
            .iter()
            .chain(released)
            .filter(|s| !wanted.contains(*s))
            .cloned()
            .collect();
        Held {
            named,
            frozen,
            until: in_grace,
        }
    }

    /// When the plan should be made again for what it holds back.
    pub fn wake_at(&self) -> Option<Instant> {
        self.until.filter(|_| !self.frozen.is_empty())
    }
}

/// What the finalizers coming off wait for: every output write of the plan, and no output
/// kept for the gateways.
pub(super) struct Released {
    pub kept: bool,
    pub outputs: Vec<Subject>,
}

/// The tail of a plan, in phases, and what its statuses rest on.
pub(super) struct Tail {
    pub phases: Vec<Vec<Step>>,
    pub statuses_written: Vec<String>,
    /// When statuses held back (see [`STATUS_SPACING`](pacing::STATUS_SPACING)) are due.
    pub statuses_due: Option<Instant>,
    pub memo: RouteMemo,
    pub budget: CountBudget,
}

/// Step 5, the tail: statuses that differ from what the objects show (each after the writes
/// of its object's outputs, so that it never claims what failed), then [`finalizers_off`],
/// then Events (last: they never hold anything up).
pub(super) fn tail(
    input: &Input,
    told: &mut Told,
    mut events: Vec<Op>,
    touched: &Touched,
    released: &Released,
) -> Tail {
    let (space, outside, context) = (&input.space, &input.outside, &input.statuses);
    let write_problems = rejected(space.ns, space.desired, space.failed);
    let routes = route_statuses(space, context, touched, &write_problems);
    let mut statuses = routes.steps;
    let statuses_written = statuses
        .iter()
        .filter_map(|s| match &s.op {
            Op::Status { key, .. } => Some(key.name.clone()),
            _ => None,
        })
        .collect();
    statuses.extend(rule_statuses(space, outside, context));
    let entries = Entries {
        gateways: outside.gateways,
        touched,
        rejected: &write_problems,
    };
    statuses.extend(entry_statuses(space, context, &entries));
    let ns = space.ns;
    let rule_problems = outside
        .rules
        .problems
        .iter()
        .filter(|p| p.subjects().iter().any(|(_, k)| k.namespace == ns));
    let problems = space
        .desired
        .problems
        .iter()
        .chain(rule_problems)
        .chain(write_problems.iter());
    events.extend(told.tell(space.index, ns, problems));
    Tail {
        phases: vec![
            statuses,
            finalizers_off(space, outside, released),
            events.into_iter().map(Step::from).collect(),
        ],
        statuses_written,
        statuses_due: routes.due,
        memo: routes.memo,
        budget: routes.budget,
    }
}

/// Laneway's finalizer comes off an object being deleted once what it produced is gone: the
/// outputs of a LaneRoute or LaneEntry (none kept for the gateways, every write of the plan
/// done), the Dubbo rule of a TagRule (removed from every centre).
pub(super) fn finalizers_off(space: &Snapshot, outside: &Outside, released: &Released) -> Vec<Step> {
    let mut steps = Vec::new();
    for ((kind, key), rule) in space
        .deleting
        .iter()
        .filter(|((_, k), _)| k.namespace == space.ns)
    {
        let needs = match (kind, rule) {
            (OwnKind::LaneRoute | OwnKind::LaneEntry, _) => {
                (!released.kept).then(|| released.outputs.clone())
            }
            (OwnKind::TagRule, Some(rule)) => outside
                .publishing
                .may_release(rule, key, outside.rules)
                .then(Vec::new),
            (OwnKind::TagRule, None) => Some(Vec::new()),
        };
        if let Some(needs) = needs {
            steps.push(Step {
                op: Op::Finalizer {
                    kind: *kind,
                    key: key.clone(),
                    present: false,
                },
                needs,
            });
        }
    }
    steps
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

#[cfg(test)]
#[path = "drift_tests.rs"]
mod drift_tests;
#[cfg(test)]
#[path = "held_tests.rs"]
mod held_tests;
#[cfg(test)]
#[path = "tests.rs"]
pub(super) mod tests;
