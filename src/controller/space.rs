//! What the controller keeps of one namespace between plans: what is to be resolved and
//! when, the last resolution, failed writes, the route grace and the status book.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use tokio::time::Instant;

use super::planner::LiveObjects;
use super::probes::Probes;
use super::schedule::{Dirty, Planned, Retries, Schedule};
use super::{events, planner};
use crate::api::SubsetSource;
use crate::kind::Kind;
use crate::lanes::{Desired, Index, ObjectKey};
use crate::writer::{Op, OwnKind, Step, Target, WriteError};

/// Longest wait for gateways to report on a changed route before its Services go anyway.
const UNSETTLED_LIMIT: Duration = Duration::from_secs(60);

/// What the controller keeps of one namespace between plans.
#[derive(Debug, Default)]
pub(super) struct Space {
    pub(super) schedule: Schedule,
    /// The last resolution, kept to refresh only what changed.
    pub(super) desired: Option<Desired>,
    /// The last failed write of each output.
    pub(super) failed: BTreeMap<Target, WriteError>,
    /// When each output whose write failed is tried again.
    pub(super) retries: Retries<Target>,
    /// What is being found out about refused routes, and when lanes left out are tried again.
    pub(super) probes: Probes,
    pub(super) grace: Grace,
    pub(super) book: StatusBook,
    pub(super) told: events::Told,
    /// The objects whose latest status write the API server refused, with its message (told
    /// once by a Warning Event).
    pub(super) refused_statuses: BTreeMap<(OwnKind, ObjectKey), String>,
    /// The content hash of the status each object was last sent, to tell laneway's own status
    /// writes from those of anyone else.
    pub(super) sent_statuses: BTreeMap<(OwnKind, String), String>,
    /// laneway's objects that cannot be read, by kind and name, with the error told.
    pub(super) unreadable: BTreeMap<(Kind, String), String>,
    /// Events to send with the next plan.
    pub(super) events: Vec<crate::writer::Op>,
    /// When the earliest pod change not yet written was seen, per user Service.
    pub(super) triggers: BTreeMap<String, Timestamp>,
    /// The services of its LaneRoutes by the source that serves them, as of `desired`.
    pub(super) subsets: SubsetCounts,
    /// Outputs changed by hand that a plan under way writes back.
    pub(super) repairing: BTreeSet<Target>,
}

/// Services of LaneRoutes served by their lane, a fallback lane, baseline, and nothing.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct SubsetCounts(pub(super) [i64; 4]);

impl SubsetCounts {
    pub(super) const LABELS: [&'static str; 4] = ["lane", "fallback", "baseline", "empty"];

    pub(super) fn of(desired: &Desired) -> Self {
        let mut counts = [0; 4];
        for s in desired.routes.values().flat_map(|r| r.services.iter()) {
            counts[match s.source {
                SubsetSource::Lane => 0,
                SubsetSource::Fallback(_) => 1,
                SubsetSource::Baseline => 2,
                SubsetSource::Empty => 3,
            }] += 1;
        }
        SubsetCounts(counts)
    }
}

/// Services laneway's routes stopped naming, kept until the gateways have caught up (the
/// route grace).
#[derive(Debug, Default)]
pub(super) struct Grace {
    pub(super) released: BTreeSet<String>,
    /// When laneway's routes last changed what they name, as the gateways reported.
    pub(super) routes_changed_at: Option<Instant>,
    /// Routes whose latest change no gateway has reported on yet, and since when.
    pub(super) unsettled: BTreeMap<String, Instant>,
}

impl Grace {
    /// Until when Services the routes stopped naming are kept; once that has passed, what was
    /// released is free to change or go.
    pub(super) fn hold(&mut self, grace: Duration) -> Option<Instant> {
        let hold_until = self.hold_until(grace);
        if hold_until.is_none_or(|t| t <= Instant::now()) {
            self.released.clear();
        }
        hold_until
    }

    /// Until when Services the routes stopped naming are kept.
    pub(super) fn hold_until(&self, grace: Duration) -> Option<Instant> {
        let settled = self.routes_changed_at.map(|t| t + grace);
        let waiting = self.unsettled.values().map(|t| *t + UNSETTLED_LIMIT);
        settled.into_iter().chain(waiting).max()
    }
}

/// What the namespace's plans wrote of statuses.
#[derive(Debug, Default)]
pub(super) struct StatusBook {
    /// When each LaneRoute's status was last written.
    pub(super) written: BTreeMap<String, Instant>,
    /// What the last plan's LaneRoute statuses left to the next.
    pub(super) memo: planner::RouteMemo,
}

impl Space {
    /// What the namespace should hold: the last resolution with the Services marked
    /// recomputed, or a whole new one.
    pub(super) fn resolve(&mut self, index: &Index, ns: &str, dirty: Dirty, now: Timestamp) -> Desired {
        let desired = match (dirty.whole, self.desired.take()) {
            (false, Some(mut cached)) => {
                if !dirty.services.is_empty() {
                    index.refresh(&mut cached, ns, &dirty.services, now);
                }
                cached
            }
            (_, replaced) => {
                let desired = index.desired(ns, now);
                // Freeing a namespace's thousands of outputs takes as long as a good part of
                // computing them: it happens off the controller's path.
                if let (Some(replaced), Ok(runtime)) = (replaced, tokio::runtime::Handle::try_current()) {
                    runtime.spawn_blocking(move || drop(replaced));
                }
                desired
            }
        };
        self.schedule.set_expiry(desired.next_expiry);
        desired
    }

    /// Forgets failures of outputs that need no write any more, and their back-offs; returns
    /// the dry runs of entries' routes that the next plan makes.
    pub(super) fn prune_failed(
        &mut self,
        index: &Index,
        ns: &str,
        (desired, live): (&Desired, &LiveObjects),
    ) -> Vec<Step> {
        planner::prune_failed(&mut self.failed, desired, live);
        let failed = &self.failed;
        self.retries.retain(Instant::now(), |t| failed.contains_key(t));
        self.probes
            .retain_routes(|name| failed.contains_key(&Target::route(ns, name)));
        self.probes.steps(index, ns, desired, Instant::now())
    }

    /// Keeps what a plan rests on for the next one, which waits `debounce` if this one writes;
    /// the plan to write, with the dry runs `probes` first.
    pub(super) fn record(
        &mut self,
        mut built: planner::Built,
        probes: Vec<Step>,
        debounce: Duration,
    ) -> crate::writer::Plan {
        built.plan.phase_first(probes);
        let instant = Instant::now();
        built.wake_at = built
            .wake_at
            .into_iter()
            .chain(self.probes.next_due(instant))
            .min();
        if let Some(memo) = built.memo {
            self.book.memo = memo;
        }
        for step in built.plan.tail.iter().flatten().flatten() {
            if let Op::Status { key, status, .. } = &step.op {
                self.sent_statuses
                    .insert((status.kind(), key.name.clone()), status.content_hash());
            }
        }
        let planned = Planned {
            writes: !built.plan.is_empty(),
            tail: built.plan.tail.is_some(),
            wake_at: built.wake_at,
        };
        self.schedule.planned(planned, instant, debounce);
        self.book
            .written
            .retain(|name, t| instant < *t + planner::count_refresh(name));
        for name in built.statuses_written {
            self.book.written.insert(name, instant);
        }
        self.repairing.extend(built.repairs);
        built.plan
    }
}
