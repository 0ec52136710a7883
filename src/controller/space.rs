//! What the controller keeps of one namespace between plans: what is to be resolved and
//! when, the last resolution, failed writes, the route grace and the status book.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use tokio::time::Instant;

use super::{events, pacing, plan, statuses};
use crate::api::SubsetSource;
use crate::lanes::{Desired, Index};
use crate::writer::{Target, WriteError};

/// Longest wait for gateways to report on a changed route before its Services go anyway.
const UNSETTLED_LIMIT: Duration = Duration::from_secs(60);

/// What needs resolving in one namespace.
#[derive(Clone, Debug, Default)]
pub(super) struct Dirty {
    /// Recompute everything.
    pub(super) whole: bool,
    /// Recompute these services only (otherwise only compare again and write what differs).
    pub(super) services: BTreeSet<String>,
}

/// What the controller keeps of one namespace between plans.
#[derive(Debug, Default)]
pub(super) struct Space {
    pub(super) schedule: Schedule,
    /// The last resolution, kept to refresh only what changed.
    pub(super) desired: Option<Desired>,
    /// The last failed write of each output.
    pub(super) failed: BTreeMap<Target, WriteError>,
    pub(super) grace: Grace,
    pub(super) book: StatusBook,
    pub(super) told: events::Told,
    /// Events to send with the next plan.
    pub(super) events: Vec<crate::writer::Op>,
    /// When the earliest pod change not yet written was seen, per user Service.
    pub(super) triggers: BTreeMap<String, Timestamp>,
    /// The services of its LaneRoutes by the source that serves them, as of `desired`.
    pub(super) subsets: SubsetCounts,
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

/// When a namespace is resolved and written next.
#[derive(Debug, Default)]
pub(super) struct Schedule {
    pub(super) dirty: Option<Dirty>,
    pub(super) in_flight: bool,
    /// The tail of a plan (statuses, finalizers off, Events) is being written.
    pub(super) tail_in_flight: bool,
    /// A plan was made without its tail while one was being written: look again after it.
    pub(super) tail_skipped: bool,
    pub(super) failures: u32,
    /// Not resolved again before this (debounce or backoff).
    pub(super) not_before: Option<Instant>,
    /// Look again then, even if nothing changes.
    pub(super) wake_at: Option<Instant>,
    /// When the first LaneRoute's ttl passes.
    pub(super) expiry: Option<Timestamp>,
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
    /// Write every status with the next plan, even those that look unchanged (the watch of
    /// statuses broke, so what they look like may be out of date).
    pub(super) verify: bool,
    /// The plan under way writes every status.
    pub(super) verifying: bool,
    /// When each LaneRoute's status was last written.
    pub(super) written: BTreeMap<String, Instant>,
    /// What the last plan's LaneRoute statuses left to the next.
    pub(super) memo: statuses::RouteMemo,
}

impl Space {
    pub(super) fn mark(&mut self, services: Option<&BTreeSet<String>>) {
        let dirty = self.schedule.dirty.get_or_insert_with(Dirty::default);
        match services {
            None => dirty.whole = true,
            Some(s) => dirty.services.extend(s.iter().cloned()),
        }
    }

    /// What the namespace should hold: the last resolution with the Services marked
    /// recomputed, or a whole new one.
    pub(super) fn resolve(&mut self, index: &Index, ns: &str, now: Timestamp) -> Desired {
        let dirty = self.schedule.dirty.take().unwrap_or_default();
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
        self.schedule.expiry = desired.next_expiry;
        desired
    }

    /// The Events the next plan sends, unless an earlier plan's tail is still being written:
    /// then that plan has no tail, and the one after it looks again.
    pub(super) fn events_for_plan(&mut self) -> Vec<crate::writer::Op> {
        if self.schedule.tail_in_flight {
            self.schedule.tail_skipped = true;
            Vec::new()
        } else {
            self.book.verifying = std::mem::take(&mut self.book.verify);
            std::mem::take(&mut self.events)
        }
    }

    /// Keeps what a plan rests on for the next one; the plan to write.
    pub(super) fn record(&mut self, built: plan::Built) -> crate::writer::Plan {
        if let Some(memo) = built.memo {
            self.book.memo = memo;
        }
        self.schedule.wake_at = built.wake_at;
        let instant = Instant::now();
        self.book
            .written
            .retain(|name, t| instant < *t + pacing::count_refresh(name));
        for name in built.statuses_written {
            self.book.written.insert(name, instant);
        }
        built.plan
    }
}
