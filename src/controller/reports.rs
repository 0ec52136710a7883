//! What the writer reports back: the outputs that now exist, failures kept for status and
//! retried with back-off (each output on its own), and Events for objects that had to be recreated.

use std::time::Duration;

use kube::ResourceExt;
use tokio::time::Instant;
use tracing::warn;

use super::planner::Live;
use super::probes::{self, Tried};
use super::schedule::{self, Part};
use super::{events, planner, Controller};
use crate::api::Reason;
use crate::lanes::{ObjectKey, ENTRY_LABEL};
use crate::metrics::ResultLabels;
use crate::writer::{Done, OutputKind, OwnKind, Report, Subject, Target, WriteError};

impl Controller {
    /// Takes in what a plan did.
    pub(super) fn reported(&mut self, report: Report, took: Duration) {
        self.metrics.reconcile_duration.observe(took.as_secs_f64());
        let ns = report.namespace.clone();
        let mut outcome = Outcome::default();
        for (subject, result) in report.results {
            self.take_result(&ns, subject, result, &mut outcome);
        }
        if !outcome.tried.is_empty() {
            self.take_tried(&ns, std::mem::take(&mut outcome.tried));
        }
        let label = ResultLabels {
            result: if outcome.schedule.failed || outcome.schedule.output_failed {
                "error"
            } else {
                "ok"
            },
        };
        self.metrics.reconciles.get_or_create(&label).inc();
        for (target, reason) in std::mem::take(&mut outcome.recreated) {
            let note = format!(
                "{target} was deleted and created again because a field that cannot change changed: {reason}"
            );
            self.tell_owners(&ns, &target, Reason::Recreated, note);
        }
        for target in std::mem::take(&mut outcome.repaired) {
            self.metrics.repaired(target.kind.into());
            let note = format!("{target} was changed by hand and written back as laneway wants it");
            self.tell_owners(&ns, &target, Reason::Repaired, note);
        }
        let part = if report.tail { Part::Tail } else { Part::Head };
        let space = self.space(&ns);
        space.schedule.reported(part, outcome.schedule, Instant::now());
        if !outcome.schedule.lost_lease {
            self.forget_if_gone(&ns);
        }
    }

    /// Takes in what one step did: outputs as they exist now, finalizers that came off, and
    /// failures to retry.
    fn take_result(
        &mut self,
        ns: &str,
        subject: Subject,
        result: Result<Done, WriteError>,
        outcome: &mut Outcome,
    ) {
        let repair = match &subject {
            Subject::Output(target) => self.space(ns).repairing.remove(target),
            _ => false,
        };
        match (&subject, result) {
            (Subject::Probe(entry, lane), result) => {
                outcome
                    .tried
                    .push((entry.name.clone(), lane.clone(), result.map(|_| ())));
            }
            (Subject::Output(target), Ok(done)) => self.output_done(ns, (target, repair), done, outcome),
            (Subject::Finalizer(kind, key), Ok(_)) => {
                // A finalizer that came off ends the object's deletion.
                if self.deleting.contains_key(&(*kind, key.clone())) {
                    self.deleting.remove(&(*kind, key.clone()));
                }
            }
            (Subject::Status(kind, key), Ok(_)) => {
                self.space(ns).refused_statuses.remove(&(*kind, key.clone()));
            }
            (_, Ok(_)) => {}
            (_, Err(WriteError::NotLeader)) => outcome.schedule.lost_lease = true,
            (subject, Err(e)) => self.step_failed(ns, subject, e, outcome),
        }
    }

    /// An output written (`repair`: over a hand edit) or deleted: what exists now, and a
    /// failure it ends.
    fn output_done(
        &mut self,
        ns: &str,
        (target, repair): (&Target, bool),
        done: Done,
        outcome: &mut Outcome,
    ) {
        if repair && matches!(done, Done::Applied { .. } | Done::Recreated { .. }) {
            outcome.repaired.push(target.clone());
        }
        let hash = match done {
            Done::Applied { hash, version } => Some(Live {
                hash: Some(hash),
                version,
                ..Live::default()
            }),
            Done::Recreated {
                hash,
                version,
                reason,
            } => {
                outcome.recreated.push((target.clone(), reason));
                Some(Live {
                    hash: Some(hash),
                    version,
                    ..Live::default()
                })
            }
            Done::Deleted => {
                if target.kind == OutputKind::Service {
                    self.space(ns).grace.released.remove(&target.key.name);
                }
                None
            }
            Done::Written => return,
        };
        self.set_live(target.clone(), hash);
        let space = self.space(ns);
        space.retries.succeeded(target);
        if space.failed.remove(target).is_some() {
            // The status written with this plan still showed the failure.
            outcome.schedule.recovered = true;
        }
    }

    /// A step that failed: counted, logged, and kept for its retry and its report.
    fn step_failed(&mut self, ns: &str, subject: &Subject, e: WriteError, outcome: &mut Outcome) {
        match subject {
            Subject::Output(_) => outcome.schedule.output_failed = true,
            _ => {
                outcome.schedule.failed = true;
                outcome.schedule.retry_after = outcome.schedule.retry_after.max(e.retry_after());
            }
        }
        let step = match subject {
            Subject::Output(_) => "apply",
            Subject::Status(..) => "status",
            Subject::Finalizer(..) => "finalizer",
            Subject::Event => "event",
            Subject::Probe(..) => "probe",
        };
        self.metrics.error(step);
        if !matches!(e, WriteError::Skipped(_)) {
            warn!(namespace = %ns, subject = ?subject, error = %e, "write failed; will retry");
        }
        match subject {
            Subject::Output(target) => self.output_failed(ns, target, e),
            Subject::Status(kind, key) => self.tell_status_refused(ns, (*kind, key), &e),
            _ => {}
        }
    }

    /// A write of `target` failed: kept for status, retried with back-off, and a route the
    /// API server refused is looked into.
    fn output_failed(&mut self, ns: &str, target: &Target, e: WriteError) {
        let space = self.space(ns);
        if !matches!(e, WriteError::Skipped(_)) {
            let desired = space.desired.as_ref();
            let hash = desired.and_then(|d| planner::desired_hash(d, target));
            let route = desired.and_then(|d| d.http_routes.get(&target.key.name));
            let entry = route.and_then(|r| r.labels().get(ENTRY_LABEL));
            if let Some(entry) = entry.filter(|_| target.kind == OutputKind::HttpRoute && !e.is_transient()) {
                space.probes.refused(entry, &target.key.name, hash.clone());
            }
            space
                .retries
                .failed(target.clone(), hash, Instant::now(), e.retry_after());
        }
        space.failed.insert(target.clone(), e);
    }

    /// What dry runs of entries' routes found: the lanes left out change, and the namespace is
    /// computed again when they do.
    fn take_tried(&mut self, ns: &str, tried: Vec<Tried>) {
        let mut left_out = self.index.left_out(ns);
        let Some(space) = self.spaces.get_mut(ns) else {
            return;
        };
        let index = &self.index;
        let hashes = |entry: &str, lane: &str| {
            let desired = space.desired.as_ref();
            desired
                .map(|d| probes::routes_hash(index, ns, d, (entry, lane)))
                .unwrap_or_default()
        };
        space.probes.tried(tried, Instant::now(), hashes, &mut left_out);
        // The next plan knows when the lanes left out are tried again.
        space.schedule.recheck();
        if self.index.leave_out(ns, left_out) {
            space.schedule.changed(None);
        }
    }

    /// A Warning Event on an object whose status the API server refused (a conflict with a
    /// newer version of the object is routine and not told), once per refusal.
    fn tell_status_refused(&mut self, ns: &str, (kind, key): (OwnKind, &ObjectKey), e: &WriteError) {
        let WriteError::Rejected { code, message } = e else {
            return;
        };
        let id = (kind, key.clone());
        if *code == 409 || self.space(ns).refused_statuses.get(&id) == Some(message) {
            return;
        }
        let note = format!("status could not be written: {message}");
        let event =
            events::Notice::warning(Reason::StatusRejected, note).about(&self.index, kind.into(), key);
        let space = self.space(ns);
        space.refused_statuses.insert(id, message.clone());
        space.events.extend(event);
        space.schedule.recheck();
    }

    /// A Warning Event on the LaneRoutes and LaneEntries owning an output, and a look at the
    /// namespace again to send it.
    pub(super) fn tell_owners(&mut self, ns: &str, target: &Target, reason: Reason, note: String) {
        let owners = self
            .spaces
            .get(ns)
            .and_then(|s| s.desired.as_ref())
            .and_then(|d| planner::output_owners(d, target))
            .unwrap_or_default();
        let events: Vec<_> = owners
            .iter()
            .filter_map(|(kind, o)| {
                events::Notice::warning(reason, note.clone()).about(
                    &self.index,
                    (*kind).into(),
                    &ObjectKey::new(ns, o),
                )
            })
            .collect();
        let space = self.space(ns);
        space.events.extend(events);
        space.schedule.recheck();
    }
}

/// What a report's steps amount to.
#[derive(Default)]
struct Outcome {
    /// For the namespace's schedule.
    schedule: schedule::Outcome,
    /// Outputs deleted and created again, and why.
    recreated: Vec<(Target, String)>,
    /// What dry runs of entries' routes found.
    tried: Vec<Tried>,
    /// Outputs changed by hand and written back.
    repaired: Vec<Target>,
}
