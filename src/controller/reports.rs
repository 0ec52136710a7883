//! What the writer reports back: the outputs that now exist, failures kept for status and
//! retried with backoff, and Events for objects that had to be recreated.

use std::time::Duration;

use kube::runtime::events::EventType;
use tokio::time::Instant;
use tracing::warn;

use super::{backoff, events, plan, Controller, Dirty};
use crate::lanes::ObjectKey;
use crate::metrics::ResultLabels;
use crate::writer::{Done, OutputKind, Report, Subject, Target, WriteError};

impl Controller {
    /// Takes in what a plan did.
    pub(super) fn reported(&mut self, report: Report, took: Duration) {
        self.metrics.reconcile_duration.observe(took.as_secs_f64());
        let ns = report.namespace.clone();
        let mut failed = false;
        let mut lost_lease = false;
        let mut recovered = false;
        let mut recreated = Vec::new();
        for (subject, result) in report.results {
            match (&subject, result) {
                (Subject::Output(target), Ok(done)) => {
                    let hash = match done {
                        Done::Applied(hash) => Some(Some(hash)),
                        Done::Recreated { hash, reason } => {
                            recreated.push((target.clone(), reason));
                            Some(Some(hash))
                        }
                        Done::Deleted => {
                            if target.kind == OutputKind::Service {
                                self.space(&ns).released.remove(&target.key.name);
                            }
                            None
                        }
                        Done::Written => continue,
                    };
                    self.set_live(target.clone(), hash);
                    if self.space(&ns).failed.remove(target).is_some() {
                        // The status written with this plan still showed the failure.
                        recovered = true;
                    }
                }
                (Subject::Finalizer(kind, key), Ok(_)) => {
                    // A finalizer that came off ends the object's deletion.
                    if self.deleting.contains_key(&(*kind, key.clone())) {
                        self.deleting.remove(&(*kind, key.clone()));
                    }
                }
                (_, Ok(_)) => {}
                (_, Err(WriteError::NotLeader)) => lost_lease = true,
                (subject, Err(e)) => {
                    failed = true;
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
                        self.space(&ns).failed.insert(target.clone(), e);
                    }
                }
            }
        }
        let label = ResultLabels {
            result: if failed { "error" } else { "ok" },
        };
        self.metrics.reconciles.get_or_create(&label).inc();
        for (target, reason) in recreated {
            self.tell_recreated(&ns, &target, &reason);
        }
        let space = self.space(&ns);
        if report.tail {
            space.tail_in_flight = false;
            if std::mem::take(&mut space.tail_skipped) {
                space.dirty.get_or_insert_with(Dirty::default);
            }
            if std::mem::take(&mut space.verifying) && (failed || lost_lease) {
                space.verify_statuses = true;
            }
        } else {
            space.in_flight = false;
        }
        if lost_lease {
            return;
        }
        if failed {
            space.failures += 1;
            let backoff = backoff(space.failures);
            space.not_before = Some(Instant::now() + backoff);
            space.dirty.get_or_insert_with(Dirty::default);
        } else {
            space.failures = 0;
            if recovered {
                space.dirty.get_or_insert_with(Dirty::default);
            } else if space.dirty.is_none() {
                self.forget_if_gone(&ns);
            }
        }
    }

    /// A Warning Event on the LaneRoutes owning an output that had to be recreated.
    pub(super) fn tell_recreated(&mut self, ns: &str, target: &Target, reason: &str) {
        let owners = self
            .spaces
            .get(ns)
            .and_then(|s| s.desired.as_ref())
            .and_then(|d| plan::output_owners(d, target))
            .unwrap_or_default();
        let note = format!(
            "{target} was deleted and created again because a field that cannot change changed: {reason}"
        );
        let events: Vec<_> = owners
            .iter()
            .filter_map(|(kind, o)| {
                events::event(
                    &self.index,
                    plan::kind_of(kind),
                    &ObjectKey::new(ns, o),
                    EventType::Warning,
                    "Recreated",
                    note.clone(),
                )
            })
            .collect();
        let space = self.space(ns);
        space.events.extend(events);
        space.dirty.get_or_insert_with(Dirty::default);
    }
}
