//! The statuses a plan writes in its tail: LaneRoutes, TagRules and LaneEntries, each only when
//! it differs from what the object shows, and each after the writes of its outputs.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::jiff::Timestamp;
use kube::{Resource, ResourceExt};
use tokio::time::Instant;

use super::super::gateways::Gateways;
use super::super::publishing::Publishing;
use super::input::{Clock, Outside, Snapshot};
use super::outputs::output_owners;
use super::pacing::{self, Change, CountBudget, CountsDue, When};
use crate::api::{
    ConditionStatus, EntryMode, EntryParentStatus, EntryRouteStatus, LaneRoute, LaneRouteStatus, Publication,
    Reason, ServiceLaneStatus,
};
use crate::lanes::{Kind, ObjectKey, Problem, RouteReport, Stamp, TagRuleReport, SERVICE_NAME_LABEL};
use crate::publish::marks::MARKS;
use crate::status;
use crate::writer::{Op, OutputKind, OwnKind, Status, Step, Subject};

/// What the status steps rest on besides the namespace: what earlier plans wrote, and when
/// this one is made.
#[derive(Clone, Copy)]
pub(crate) struct StatusContext<'a> {
    pub book: StatusBook<'a>,
    pub clock: Clock,
}

/// What earlier plans of the namespace wrote of LaneRoute statuses, so that this one skips
/// what is unchanged.
#[derive(Clone, Copy)]
pub(crate) struct StatusBook<'a> {
    /// Write statuses even where the object already shows them.
    pub verify: bool,
    /// When each LaneRoute's status was last written: a change of endpoint counts alone waits
    /// [`count_refresh`](super::pacing::count_refresh) after it, any other change
    /// [`STATUS_SPACING`](super::pacing::STATUS_SPACING).
    pub written: &'a BTreeMap<String, Instant>,
    /// What the last plan's LaneRoute statuses left.
    pub memo: &'a RouteMemo,
    /// What is left of the routine status writes' budget, shared by every namespace.
    pub budget: CountBudget,
}

pub(crate) type Touched = BTreeMap<(OwnKind, String), Vec<Subject>>;

/// A LaneRoute whose status a plan had nothing to write for, and what that rested on: while
/// they hold, later plans skip building its status (a pod event touches a few LaneRoutes of
/// many).
#[derive(Clone, Debug)]
pub(crate) struct Skip {
    stamp: Stamp,
    shape: Stamp,
    problems: Stamp,
    resource_version: Option<String>,
    /// The LaneEntries letting requests into the lane whose routes a gateway accepted.
    accepted: Vec<String>,
    /// Its status (a change of endpoint counts, or any within a second of the last write) held
    /// back until then.
    held_until: Option<Instant>,
    /// The status held back differs from the one shown in endpoint counts alone.
    counts_only: bool,
}

impl Skip {
    /// What a plan would find for a LaneRoute skipped before, as long as it holds: its report
    /// `report`, the namespace's problems `problems` and the object `route`. When only the
    /// report's endpoint counts changed since, a status held back is held back still, until the
    /// same time, unless the counts are back to those shown (then there is nothing to write).
    fn still(
        &self,
        (report, accepted): (&RouteReport, &[String]),
        problems: Stamp,
        route: &LaneRoute,
        instant: Instant,
    ) -> Option<Skip> {
        let same = self.problems == problems
            && self.accepted == accepted
            && self.resource_version == route.resource_version()
            && self.held_until.is_none_or(|t| instant < t);
        if !same {
            return None;
        }
        if self.stamp == report.stamp {
            return Some(self.clone());
        }
        let held = self.held_until.is_some() && self.shape == report.shape;
        let differs = || {
            let shown = route.status.as_ref().map_or(&[][..], |s| &s.services);
            !self.counts_only
                || shown
                    .iter()
                    .zip(&report.services)
                    .any(|(s, r)| s.endpoints != r.endpoints)
        };
        (held && differs()).then(|| Skip {
            stamp: report.stamp,
            ..self.clone()
        })
    }
}

/// `new` differs from `old` in its services' endpoint counts alone: the only part of a LaneRoute's
/// status that pod events change without changing where its lane is served from.
fn counts_only(old: &LaneRouteStatus, new: &LaneRouteStatus) -> bool {
    let LaneRouteStatus {
        observed_generation,
        lane,
        conditions,
        services,
        service_count,
        fallback_count,
        expires_at,
    } = new;
    *observed_generation == old.observed_generation
        && *lane == old.lane
        && *conditions == old.conditions
        && *service_count == old.service_count
        && *fallback_count == old.fallback_count
        && *expires_at == old.expires_at
        && services.len() == old.services.len()
        && services
            .iter()
            .zip(&old.services)
            .all(|(n, o)| n.same_but_endpoints(o))
}

/// A namespace's problems by the objects they concern (a problem may concern many).
struct BySubject<'a>(BTreeMap<(Kind, ObjectKey), Vec<&'a Problem>>);

impl<'a> BySubject<'a> {
    fn new(problems: &'a [Problem], rejected: &'a [Problem]) -> Self {
        let mut by: BTreeMap<_, Vec<&Problem>> = BTreeMap::new();
        for p in problems.iter().chain(rejected) {
            for subject in p.subjects() {
                let mine = by.entry(subject).or_default();
                if mine.last().is_none_or(|q| !std::ptr::eq(*q, p)) {
                    mine.push(p);
                }
            }
        }
        BySubject(by)
    }
}

/// Problems of one object, and the writes of its outputs being retried.
fn problems_and_retries<'a>(
    space: &Snapshot,
    by_subject: &BySubject<'a>,
    kind: OwnKind,
    key: &ObjectKey,
) -> (Vec<&'a Problem>, Option<String>) {
    let mine = by_subject
        .0
        .get(&(kind.into(), key.clone()))
        .cloned()
        .unwrap_or_default();
    let retrying: Vec<String> = space
        .failed
        .iter()
        .filter(|(t, e)| {
            e.is_transient()
                && output_owners(space.desired, t)
                    .is_some_and(|o| o.iter().any(|(k, n)| *k == kind && *n == key.name))
        })
        .map(|(t, e)| format!("{t}: {e}"))
        .collect();
    (mine, (!retrying.is_empty()).then(|| retrying.join("; ")))
}

/// The LaneRoute statuses a plan writes, and what the next plan rests on.
#[derive(Debug)]
pub(crate) struct RouteStatuses {
    pub steps: Vec<Step>,
    /// When the soonest status held back is due.
    pub due: Option<Instant>,
    pub memo: RouteMemo,
    /// The budget after the routine writes this plan was granted.
    pub budget: CountBudget,
}

impl RouteStatuses {
    fn new(budget: CountBudget) -> Self {
        RouteStatuses {
            steps: Vec::new(),
            due: None,
            memo: RouteMemo::default(),
            budget,
        }
    }

    /// Holds a LaneRoute's status back until `at`, with the counts held back, if any (and what
    /// lets the next plans skip building it until then).
    fn hold(&mut self, name: &str, at: Instant, counts: Option<CountsDue>, skip: Option<Skip>) {
        self.due = self.due.into_iter().chain([at]).min();
        if let Some(skip) = skip {
            self.memo.skips.insert(name.to_owned(), skip);
        }
        if let Some(counts) = counts {
            self.memo.counts_due.insert(name.to_owned(), counts);
        }
    }

    /// Carries over a LaneRoute whose skip still holds, with the counts it holds back.
    fn keep(&mut self, name: &str, skip: Skip, memo: &RouteMemo) {
        self.due = self.due.into_iter().chain(skip.held_until).min();
        self.memo.skips.insert(name.to_owned(), skip);
        if let Some(due) = memo.counts_due.get(name) {
            self.memo.counts_due.insert(name.to_owned(), *due);
        }
    }
}

/// What a plan's LaneRoute statuses leave to the next plan of the namespace.
#[derive(Debug, Default)]
pub(crate) struct RouteMemo {
    /// The LaneRoutes with nothing to write.
    pub skips: BTreeMap<String, Skip>,
    /// The LaneRoutes whose changed counts are held back, and until when (fixed when first held
    /// back, however often they change again, and put off once if the budget is spent then).
    pub counts_due: BTreeMap<String, CountsDue>,
}

/// The LaneRoute statuses to write, when those held back are due, and the LaneRoutes with
/// nothing to write.
/// `rejected`: the problems of writes the API server refused ([`super::rejected`]).
pub(crate) fn route_statuses(
    space: &Snapshot,
    context: &StatusContext,
    touched: &Touched,
    rejected: &[Problem],
) -> RouteStatuses {
    let Snapshot {
        ns,
        desired,
        index,
        failed,
        ..
    } = *space;
    let (book, clock) = (&context.book, context.clock);
    let by_subject = std::cell::OnceCell::new();
    let stale = stale_services(space);
    let mut out = RouteStatuses::new(book.budget);
    let mut turns_taken = BTreeSet::new();
    for (name, report) in &desired.routes {
        let Some(route) = index.lane_route(ns, name) else {
            continue;
        };
        // With no write failing, the status follows from the report, the problems and the
        // object alone: unchanged since a plan found nothing to write, there is nothing still.
        let skippable = !book.verify && failed.is_empty();
        let accepted = accepted_entries(space, report);
        let skip = |held_until, counts_only| Skip {
            stamp: report.stamp,
            shape: report.shape,
            problems: desired.problems_stamp,
            resource_version: route.resource_version(),
            accepted: accepted.clone(),
            held_until,
            counts_only,
        };
        let unchanged = book
            .memo
            .skips
            .get(name)
            .filter(|_| skippable)
            .and_then(|k| k.still((report, &accepted), desired.problems_stamp, route, clock.instant));
        if let Some(k) = unchanged {
            out.keep(name, k, book.memo);
            continue;
        }
        let by_subject = by_subject.get_or_init(|| BySubject::new(&desired.problems, rejected));
        let none = LaneRouteStatus::default();
        let old = route.status.as_ref().unwrap_or(&none);
        let status = wanted(space, (by_subject, &stale), route, (report, &accepted), clock.now);
        if route.status.as_ref() == Some(&status) && !book.verify {
            if skippable {
                out.memo.skips.insert(name.clone(), skip(None, false));
            }
            continue;
        }
        let change = Change {
            name,
            counts_only: counts_only(old, &status),
            held: book.memo.counts_due.get(name).copied(),
            written: book.written.get(name).copied(),
            services: status.services.len(),
            verify: book.verify,
        };
        match pacing::when(change, clock.instant, &mut out.budget) {
            When::Later { at, counts } => {
                let skip = skippable.then(|| skip(Some(at), change.counts_only));
                out.hold(name, at, counts, skip);
            }
            When::Now { turn } => {
                if turn {
                    turns_taken.insert(name);
                }
                let key = ObjectKey::new(ns, name);
                out.steps
                    .push(status_step(route, key, Status::LaneRoute(status), touched));
            }
        }
    }
    give_back_unused_turns(context, out, &turns_taken)
}

/// The status `route` should show: from its `report`, where a service whose lane Service
/// still waits for a write (`stale`) keeps what it shows; its problems and the writes of its
/// outputs being retried; `Routed` as far as a gateway `accepted` the entries' routes; its
/// conditions' transition times carried over.
fn wanted(
    space: &Snapshot,
    (by_subject, stale): (&BySubject, &BTreeSet<String>),
    route: &LaneRoute,
    (report, accepted): (&RouteReport, &[String]),
    now: Timestamp,
) -> LaneRouteStatus {
    let key = ObjectKey::new(space.ns, &route.name_any());
    let (problems, retrying) = problems_and_retries(space, by_subject, OwnKind::LaneRoute, &key);
    let none = LaneRouteStatus::default();
    let old = route.status.as_ref().unwrap_or(&none);
    let report = held_back(report, old, stale);
    let mut status = status::lane_route_status(route.meta().generation, &report, &problems, retrying);
    status::routed_only_where_accepted(&mut status, &report.entries, accepted);
    status::carry_transition_times(&old.conditions, &mut status.conditions, now);
    status
}

/// The LaneEntries letting requests into `report`'s lane whose routes a gateway accepted: an
/// edge entry once a gateway's controller says `Accepted=True` of one of its routes, a mesh entry
/// once its routes are written (no mesh controller may report on them).
fn accepted_entries(space: &Snapshot, report: &RouteReport) -> Vec<String> {
    let accepted = |route: &String| {
        space.index.http_route(space.ns, route).is_some_and(|info| {
            info.verdicts
                .iter()
                .any(|v| v.accepted.as_ref().is_some_and(|a| a.0 == ConditionStatus::True))
        })
    };
    report
        .entries
        .iter()
        .filter(|name| {
            space
                .desired
                .entries
                .get(*name)
                .is_some_and(|entry| match entry.mode {
                    EntryMode::Mesh => !entry.routes.is_empty(),
                    EntryMode::Edge => entry.routes.iter().any(accepted),
                })
        })
        .cloned()
        .collect()
}

/// Gives the budget back the turns of LaneRoutes that no longer wait for them and did not write
/// in them: their change undone, written at once for a condition, or the LaneRoute gone.
fn give_back_unused_turns(
    context: &StatusContext,
    mut out: RouteStatuses,
    taken: &BTreeSet<&String>,
) -> RouteStatuses {
    for (name, due) in &context.book.memo.counts_due {
        let unused = !out.memo.counts_due.contains_key(name) && !taken.contains(name);
        if let Some(ends) = due.turn_ends.filter(|_| unused) {
            out.budget.refund(context.clock.instant, due.at, ends);
        }
    }
    out
}

/// Lane and baseline Services with a write still to be retried.
fn stale_services(space: &Snapshot) -> BTreeSet<String> {
    space
        .failed
        .iter()
        .filter(|(_, e)| e.is_transient())
        .filter_map(|(t, _)| match t.kind {
            OutputKind::Service => Some(t.key.name.clone()),
            OutputKind::EndpointSlice => space
                .desired
                .slices
                .get(&t.key.name)
                .and_then(|s| s.labels().get(SERVICE_NAME_LABEL).cloned()),
            _ => None,
        })
        .collect()
}

/// `report`, where a service whose lane Service still waits for a write keeps the entry it
/// had in `old`, so that the status never names a source its slices do not hold yet.
fn held_back<'a>(
    report: &'a RouteReport,
    old: &LaneRouteStatus,
    stale: &BTreeSet<String>,
) -> Cow<'a, RouteReport> {
    let waiting = |e: &ServiceLaneStatus| e.lane_service.as_ref().is_some_and(|l| stale.contains(l));
    let mut report = Cow::Borrowed(report);
    if report.services.iter().any(waiting) {
        for entry in &mut report.to_mut().services {
            if let Some(previous) = old
                .services
                .iter()
                .find(|o| o.name == entry.name)
                .filter(|_| waiting(entry))
            {
                *entry = previous.clone();
            }
        }
    }
    report
}

/// What each centre holds of a TagRule's outputs (its Dubbo rule, its entry documents, its
/// Nacos marks), and what is
/// still under way: failures first, then centres that do not hold the current content yet.
fn publications_of(
    publishing: &Publishing,
    report: &TagRuleReport,
) -> (Vec<Publication>, Option<(Reason, String)>) {
    let dubbo = report
        .dubbo
        .as_ref()
        .map(|d| (d.key.clone(), publishing.centres.clone(), &d.content_hash));
    let entries = report
        .entries
        .iter()
        .map(|e| (e.key.clone(), publishing.centres.clone(), &e.content_hash));
    let marks = report
        .nacos
        .as_ref()
        .filter(|_| publishing.marks.is_some())
        .map(|n| (n.target.key(), vec![MARKS], &n.hash));
    let mut publications = Vec::new();
    let mut behind = Vec::new();
    for (key, centres, hash) in dubbo.into_iter().chain(entries).chain(marks) {
        let held = publishing.publications(&key);
        behind.extend(centres.into_iter().filter(|c| {
            !held
                .iter()
                .any(|p| p.centre == *c && p.content_hash.as_deref() == Some(hash.as_str()))
        }));
        publications.extend(held);
    }
    let failing: Vec<String> = publications
        .iter()
        .filter_map(|p| Some(format!("{}: {}", p.centre, p.last_error.as_ref()?)))
        .collect();
    let pending = if !failing.is_empty() {
        Some((Reason::Retrying, failing.join("; ")))
    } else {
        (!behind.is_empty()).then(|| {
            (
                Reason::Publishing,
                format!("not yet published to {}", behind.join(", ")),
            )
        })
    };
    (publications, pending)
}

pub(crate) fn rule_statuses(space: &Snapshot, outside: &Outside, context: &StatusContext) -> Vec<Step> {
    let Snapshot { ns, index, .. } = *space;
    let Outside {
        rules, publishing, ..
    } = *outside;
    let now = context.clock.now;
    let mut steps = Vec::new();
    for rule in index.tag_rules_in(ns) {
        let key = ObjectKey::new(ns, &rule.name_any());
        let Some(report) = rules.reports.get(&key) else {
            continue;
        };
        // Conflicting tags are found with the namespace's outputs, the rest with the rules.
        let problems: Vec<&Problem> = rules
            .problems
            .iter()
            .chain(space.desired.problems.iter())
            .filter(|p| p.subjects().iter().any(|(k, o)| *k == Kind::TagRule && *o == key))
            .collect();
        let (publications, pending) = publications_of(publishing, report);
        let mut status = status::tag_rule_status(rule.meta().generation, report, &problems, pending);
        status.publications = publications;
        let old = rule.status.clone().unwrap_or_default();
        status::carry_transition_times(&old.conditions, &mut status.conditions, now);
        if rule.status.as_ref() == Some(&status) && !context.book.verify {
            continue;
        }
        steps.push(status_step(
            rule,
            key,
            Status::TagRule(status),
            &Touched::default(),
        ));
    }
    steps
}

/// What the LaneEntries' statuses read beyond the namespace: the gateways, the writes of each
/// entry's outputs in this plan, and the problems of writes the API server refused.
pub(crate) struct Entries<'a> {
    pub gateways: &'a Gateways,
    pub touched: &'a Touched,
    pub rejected: &'a [Problem],
}

pub(crate) fn entry_statuses(space: &Snapshot, context: &StatusContext, entries: &Entries) -> Vec<Step> {
    let Snapshot {
        ns, desired, index, ..
    } = *space;
    let gateways = entries.gateways;
    let now = context.clock.now;
    let by_subject = BySubject::new(&desired.problems, entries.rejected);
    let mut steps = Vec::new();
    for entry in index.lane_entries(ns) {
        let name = entry.name_any();
        let Some(report) = desired.entries.get(&name) else {
            continue;
        };
        let key = ObjectKey::new(ns, &name);
        let (problems, retrying) = problems_and_retries(space, &by_subject, OwnKind::LaneEntry, &key);
        let routes = report
            .routes
            .iter()
            .map(|r| EntryRouteStatus {
                name: r.clone(),
                parents: index
                    .http_route(ns, r)
                    .map(|info| {
                        info.verdicts
                            .iter()
                            .map(|v| {
                                let not_true = [&v.accepted, &v.resolved_refs]
                                    .into_iter()
                                    .flatten()
                                    .find(|(s, _, _)| *s != ConditionStatus::True)
                                    .map(|(_, _, m)| m.clone());
                                EntryParentStatus {
                                    parent: v.parent.display(),
                                    controller: Some(v.controller.clone()),
                                    accepted: v.accepted.as_ref().map(|a| a.0),
                                    resolved_refs: v.resolved_refs.as_ref().map(|a| a.0),
                                    message: not_true,
                                }
                            })
                            .collect()
                    })
                    .unwrap_or_default(),
            })
            .collect();
        let weighted = report.lanes.iter().any(|l| l.weight > 0);
        let unsupported: Vec<String> = report
            .parents
            .iter()
            .filter(|p| weighted && gateways.backend_header_filters(p) == Some(false))
            .map(|p| p.display())
            .collect();
        let facts = status::EntryFacts {
            api_missing: gateways.api == Some(false),
            routes,
            filters_unsupported: unsupported,
            retrying,
        };
        let mut status = status::lane_entry_status(entry.meta().generation, report, &problems, facts);
        let old = entry.status.clone().unwrap_or_default();
        status::carry_transition_times(&old.conditions, &mut status.conditions, now);
        if entry.status.as_ref() == Some(&status) && !context.book.verify {
            continue;
        }
        steps.push(status_step(
            entry,
            key,
            Status::LaneEntry(status),
            entries.touched,
        ));
    }
    steps
}

/// The write of the status of `object` (at `key`), after the writes of the outputs it speaks of.
fn status_step(object: &impl Resource, key: ObjectKey, status: Status, touched: &Touched) -> Step {
    let needs = touched
        .get(&(status.kind(), key.name.clone()))
        .cloned()
        .unwrap_or_default();
    Step {
        op: Op::Status {
            key,
            status,
            version: object.resource_version(),
        },
        needs,
    }
}

#[cfg(test)]
#[path = "status_writes_tests.rs"]
mod tests;
