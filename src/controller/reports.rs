//! What the writer reports back: the outputs that now exist, failures kept for status and
//! retried with backoff, and Events for objects that had to be recreated.

use std::time::Duration;

use tokio::time::Instant;
use tracing::warn;

use super::planner::Live;
use super::schedule::{self, Part};
use super::{events, planner, Controller};
use crate::api::Reason;
use crate::lanes::ObjectKey;
use crate::metrics::ResultLabels;
use crate::writer::{Done, OutputKind, Report, Subject, Target, WriteError};

impl Controller {
    /// Takes in what a plan did.
    pub(super) fn reported(&mut self, report: Report, took: Duration) {
        self.metrics.reconcile_duration.observe(took.as_secs_f64());
        let ns = report.namespace.clone();
        let mut outcome = Outcome::default();
        for (subject, result) in report.results {
            self.take_result(&ns, subject, result, &mut outcome);
        }
        let label = ResultLabels {
            result: if outcome.schedule.failed { "error" } else { "ok" },
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
            (Subject::Output(target), Ok(done)) => {
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
                if self.space(ns).failed.remove(target).is_some() {
                    // The status written with this plan still showed the failure.
                    outcome.schedule.recovered = true;
                }
            }
            (Subject::Finalizer(kind, key), Ok(_)) => {
                // A finalizer that came off ends the object's deletion.
                if self.deleting.contains_key(&(*kind, key.clone())) {
                    self.deleting.remove(&(*kind, key.clone()));
                }
            }
            (_, Ok(_)) => {}
            (_, Err(WriteError::NotLeader)) => outcome.schedule.lost_lease = true,
            (subject, Err(e)) => {
                outcome.schedule.failed = true;
                let step = match subject {
                    Subject::Output(_) => "apply",
                    Subject::Status(..) => "status",
                    Subject::Finalizer(..) => "finalizer",
                    Subject::Event => "event",
                };
                self.metrics.error(step);
                if !matches!(e, WriteError::Skipped(_)) {
                    warn!(namespace = %ns, subject = ?subject, error = %e, "write failed; will retry");
                }
                if let Subject::Output(target) = subject {
                    self.space(ns).failed.insert(target.clone(), e);
                }
            }
        }
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
    /// Outputs changed by hand and written back.
    repaired: Vec<Target>,
}
