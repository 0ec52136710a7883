//! When a namespace is resolved and written next: one type whose transitions are the only way
//! the controller changes it (a change arrived, a plan started, a plan was made, a report came
//! back, a LaneRoute's ttl passed), and which answers "when does this namespace run again?";
//! and when each output whose write failed is tried again ([`Retries`]).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use tokio::time::Instant;

/// Longest wait between two tries of a namespace whose writes keep failing.
pub(super) const MAX_BACKOFF: Duration = Duration::from_secs(30);
/// Wait after a plan's first failure; each further failure doubles it, up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_millis(100);

/// What needs resolving in one namespace.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct Dirty {
    /// Recompute everything.
    pub(super) whole: bool,
    /// Recompute these services only (otherwise only compare again and write what differs).
    pub(super) services: BTreeSet<String>,
}

/// The two parts of a plan that the writer reports on separately: its outputs (the head), and
/// its tail (statuses, finalizers coming off, Events), which may still be written while the
/// namespace's next plan starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Part {
    Head,
    Tail,
}

/// What the writer's report on one part of a plan amounts to.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Outcome {
    /// A write failed (or was skipped because one it needs failed), other than an output's.
    pub(super) failed: bool,
    /// An output's write failed: the output is retried on its own back-off ([`Retries`]), the
    /// namespace's other writes go on at once.
    pub(super) output_failed: bool,
    /// The lease was lost: the new leader takes over, nothing is retried here.
    pub(super) lost_lease: bool,
    /// An output whose failure the last status showed was written since.
    pub(super) recovered: bool,
    /// The longest `Retry-After` the API server gave a write of this part that failed, other
    /// than an output's: the namespace waits at least that.
    pub(super) retry_after: Option<Duration>,
}

/// What a plan starting now is to do.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Start {
    pub(super) dirty: Dirty,
    /// The plan has a tail: no earlier plan's tail is still being written.
    pub(super) with_tail: bool,
    /// Its tail writes every status, even those that look unchanged.
    pub(super) verify: bool,
}

/// When a namespace is resolved and written next.
#[derive(Debug, Default)]
pub(super) struct Schedule {
    dirty: Option<Dirty>,
    /// The head of a plan is being written.
    in_flight: bool,
    /// The tail of a plan is being written.
    tail_in_flight: bool,
    /// A plan was made without its tail while one was being written: look again after it.
    tail_skipped: bool,
    /// Plans in a row whose head failed, and whose tail failed. A part's success resets only
    /// its own count, so a tail that succeeds after a failed head does not cut the back-off.
    head_failures: u32,
    tail_failures: u32,
    /// Not resolved again before this (debounce or back-off).
    not_before: Option<Instant>,
    /// Look again then, even if nothing changes.
    wake_at: Option<Instant>,
    /// When the first LaneRoute's ttl passes.
    expiry: Option<Timestamp>,
    /// Write every status with the next tail (the watch of statuses broke, so what they look
    /// like may be out of date).
    verify: bool,
    /// The tail being written writes every status.
    verifying: bool,
}

impl Schedule {
    /// A change that `services` (all of them: `None`) must be computed again for.
    pub(super) fn changed(&mut self, services: Option<&BTreeSet<String>>) {
        let dirty = self.dirty.get_or_insert_with(Dirty::default);
        match services {
            None => dirty.whole = true,
            Some(s) => dirty.services.extend(s.iter().cloned()),
        }
    }

    /// Compare again without computing anything again (statuses, outputs seen to change).
    pub(super) fn recheck(&mut self) {
        self.dirty.get_or_insert_with(Dirty::default);
    }

    /// The next plan writes every status, whether or not it looks unchanged.
    pub(super) fn verify_statuses(&mut self) {
        self.verify = true;
        self.recheck();
    }

    /// When the namespace is next due (`None`: not until something happens).
    pub(super) fn due_at(&self, now: Instant) -> Option<Instant> {
        if self.in_flight {
            return None;
        }
        let dirty = self
            .dirty
            .as_ref()
            .map(|_| self.not_before.map_or(now, |t| t.max(now)));
        dirty.into_iter().chain(self.wake_at).min()
    }

    /// Whether a plan is due at `now`; a wake-up that has come makes the namespace dirty.
    pub(super) fn is_due(&mut self, now: Instant) -> bool {
        if self.wake_at.is_some_and(|t| t <= now) {
            self.wake_at = None;
            self.recheck();
        }
        !self.in_flight && self.dirty.is_some() && self.not_before.is_none_or(|t| t <= now)
    }

    /// A plan starts: what it is to compute again, and whether it has a tail.
    pub(super) fn start(&mut self) -> Start {
        let dirty = self.dirty.take().unwrap_or_default();
        if self.tail_in_flight {
            self.tail_skipped = true;
            return Start {
                dirty,
                with_tail: false,
                verify: self.verify,
            };
        }
        self.verifying = std::mem::take(&mut self.verify);
        Start {
            dirty,
            with_tail: true,
            verify: self.verifying,
        }
    }

    /// The plan that started is made: it writes something (with or without a tail) or nothing,
    /// and wants the namespace looked at again at `wake_at`. The next plan waits `debounce`.
    pub(super) fn planned(&mut self, plan: Planned, now: Instant, debounce: Duration) {
        self.wake_at = plan.wake_at;
        if !plan.writes {
            return;
        }
        self.in_flight = true;
        self.tail_in_flight |= plan.tail;
        self.not_before = Some(now + debounce);
    }

    /// The writer reported on one part of a plan.
    pub(super) fn reported(&mut self, part: Part, outcome: Outcome, now: Instant) {
        match part {
            Part::Head => self.in_flight = false,
            Part::Tail => {
                self.tail_in_flight = false;
                if std::mem::take(&mut self.tail_skipped) {
                    self.recheck();
                }
                if std::mem::take(&mut self.verifying) && (outcome.failed || outcome.lost_lease) {
                    self.verify = true;
                }
            }
        }
        if outcome.lost_lease {
            return;
        }
        let failures = match part {
            Part::Head => &mut self.head_failures,
            Part::Tail => &mut self.tail_failures,
        };
        if outcome.failed {
            *failures = failures.saturating_add(1);
            let backoff = with_jitter(backoff(self.head_failures.max(self.tail_failures)));
            self.not_before = Some(now + backoff.max(outcome.retry_after.unwrap_or_default()));
            self.recheck();
        } else {
            *failures = 0;
            if outcome.recovered || outcome.output_failed {
                self.recheck();
            }
        }
    }

    /// The first LaneRoute ttl of the namespace's last resolution.
    pub(super) fn set_expiry(&mut self, expiry: Option<Timestamp>) {
        self.expiry = expiry;
    }

    pub(super) fn expiry(&self) -> Option<Timestamp> {
        self.expiry
    }

    /// A LaneRoute's ttl passed by `now`: the namespace is computed again.
    pub(super) fn expire(&mut self, now: Timestamp) {
        if self.expiry.is_some_and(|t| t <= now) {
            self.expiry = None;
            self.changed(None);
        }
    }

    /// Nothing is being written and nothing waits: what is kept of the namespace may go.
    pub(super) fn idle(&self) -> bool {
        !self.in_flight && !self.tail_in_flight && self.dirty.is_none()
    }

    /// What the next plan will compute again, if it is to run.
    #[cfg(test)]
    pub(super) fn pending(&self) -> Option<&Dirty> {
        self.dirty.as_ref()
    }

    /// The next plan writes every status.
    #[cfg(test)]
    pub(super) fn verifies(&self) -> bool {
        self.verify
    }
}

/// Writes of single outputs that failed, each retried on its own back-off: [`FIRST_BACKOFF`]
/// doubling up to [`MAX_BACKOFF`] while the output's content stays what failed; a change of
/// content is tried at once.
#[derive(Debug)]
pub(super) struct Retries<K> {
    by_key: BTreeMap<K, Retry>,
}

impl<K> Default for Retries<K> {
    fn default() -> Self {
        Retries {
            by_key: BTreeMap::new(),
        }
    }
}

/// The failed writes of one output.
#[derive(Debug)]
struct Retry {
    /// Failures in a row of the same content.
    failures: u32,
    /// The content hash that failed.
    hash: Option<String>,
    /// Not tried again before this.
    not_before: Instant,
    /// Not tried again before this whatever its content: the API server's `Retry-After`.
    held_until: Option<Instant>,
}

impl<K: Ord> Retries<K> {
    /// A write of `key` with content `hash` failed at `now`: it waits one step longer than the
    /// last failure of the same content, or the first step for new content. When the API server
    /// asked for `retry_after` (a 429), the wait is at least that, and new content waits too.
    pub(super) fn failed(
        &mut self,
        key: K,
        hash: Option<String>,
        now: Instant,
        retry_after: Option<Duration>,
    ) {
        let failures = match self.by_key.get(&key) {
            Some(r) if r.hash == hash => r.failures.saturating_add(1),
            _ => 1,
        };
        let held_until = retry_after.map(|wait| now + wait);
        let not_before = (now + with_jitter(backoff(failures))).max(held_until.unwrap_or(now));
        self.by_key.insert(
            key,
            Retry {
                failures,
                hash,
                not_before,
                held_until,
            },
        );
    }

    /// A write of `key` succeeded: its next failure starts the back-off over.
    pub(super) fn succeeded(&mut self, key: &K) {
        self.by_key.remove(key);
    }

    /// Whether a write of `key` with content `hash` waits for its back-off at `now`.
    pub(super) fn waits(&self, key: &K, hash: Option<&str>, now: Instant) -> bool {
        self.by_key.get(key).is_some_and(|r| {
            r.held_until.is_some_and(|t| now < t) || (r.hash.as_deref() == hash && now < r.not_before)
        })
    }

    /// When the first back-off still running at `now` ends.
    pub(super) fn next_due(&self, now: Instant) -> Option<Instant> {
        self.by_key
            .values()
            .map(|r| r.not_before)
            .filter(|t| now < *t)
            .min()
    }

    /// Forgets the outputs `keep` says no longer need a retry, but not before the
    /// `Retry-After` the API server gave them has passed at `now`: content that changes back and
    /// forth meanwhile still waits.
    pub(super) fn retain(&mut self, now: Instant, mut keep: impl FnMut(&K) -> bool) {
        self.by_key
            .retain(|k, r| r.held_until.is_some_and(|t| now < t) || keep(k));
    }
}

/// What a plan that was made does, for the schedule.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Planned {
    /// It writes anything at all.
    pub(super) writes: bool,
    /// It has a tail.
    pub(super) tail: bool,
    pub(super) wake_at: Option<Instant>,
}

/// Exponential back-off after `failures` failures in a row: [`FIRST_BACKOFF`] doubling up to
/// [`MAX_BACKOFF`].
pub(super) fn backoff(failures: u32) -> Duration {
    let doublings = failures.saturating_sub(1).min(9);
    (FIRST_BACKOFF * (1u32 << doublings)).min(MAX_BACKOFF)
}

/// `base` plus up to 25% of it, drawn from the clock's nanoseconds: enough to spread retries
/// of namespaces that failed together, without a random number generator in the dependencies.
pub(super) fn with_jitter(base: Duration) -> Duration {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    base + base.mul_f64(f64::from(nanos % 1000) / 4000.0)
}

#[cfg(test)]
#[path = "schedule_tests.rs"]
mod tests;
