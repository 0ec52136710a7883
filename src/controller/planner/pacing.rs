//! When a LaneRoute's changed status goes out ([`when`]): a change of the lane's own endpoint
//! counts alone at most every [`COUNT_REFRESH`] per LaneRoute, all of them together within a
//! budget of service entries a second ([`CountBudget`]); any other change at once, at most
//! every [`STATUS_SPACING`].

use tokio::time::Instant;

/// Shortest time between any two status writes of a LaneRoute: a condition that changes its
/// status or reason is written at once after a quiet second, and the changes of a busy second
/// go out together.
pub(crate) const STATUS_SPACING: std::time::Duration = std::time::Duration::from_secs(1);

/// Shortest time between two status writes of a LaneRoute that change only the lane's own
/// endpoint counts: a LaneRoute's status holds every service of the lane, and rewriting it for
/// each pod event would cost the API server more than the slices do, while the routes and
/// slices themselves follow at once.
pub(crate) const COUNT_REFRESH: std::time::Duration = std::time::Duration::from_secs(10);
/// How long after its last status write a LaneRoute's changed counts are written:
/// [`COUNT_REFRESH`] plus [`count_offset`], so that LaneRoutes written together (at start, or
/// after one change of many) do not all refresh together, which would hand the API server
/// dozens of large status writes at once every 10 s.
pub(crate) fn count_refresh(name: &str) -> std::time::Duration {
    COUNT_REFRESH + count_offset(name)
}

/// Up to a quarter of [`COUNT_REFRESH`], fixed per LaneRoute: how long counts that change after
/// a quiet spell (longer than [`count_refresh`] since the last status write) wait, so that one
/// pod event every LaneRoute includes does not write them all at once.
pub(crate) fn count_offset(name: &str) -> std::time::Duration {
    // FNV-1a: names that differ in one character land far apart.
    let hash = name.bytes().fold(0x811c_9dc5_u32, |h, b| {
        (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
    });
    COUNT_REFRESH / 4 * (hash % 1000) / 1000
}

/// Service entries a second that the routine status writes of all LaneRoutes share by default:
/// the API server's work for a LaneRoute status grows with its services, and with thousands of
/// services in lanes, count refreshes every 10 s alone would keep it busy.
pub const COUNT_BUDGET: u32 = 500;

/// Paces the routine status writes of every namespace to a number of service entries a
/// second: each write takes as many entries as its status has services, and one whose turn has
/// not come waits for it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct CountBudget {
    /// Service entries a second.
    per_second: u32,
    /// When the entries of the writes granted so far are paid for.
    paid_until: Option<Instant>,
}

impl CountBudget {
    pub(crate) fn new(per_second: u32) -> Self {
        CountBudget {
            per_second: per_second.max(1),
            paid_until: None,
        }
    }

    /// When a routine write of a status with `services` entries, due at `now`, may go out:
    /// at once, or after the writes granted before it.
    pub(crate) fn grant(&mut self, now: Instant, services: usize) -> Instant {
        let at = self.paid_until.map_or(now, |t| t.max(now));
        let entries = u32::try_from(services.max(1)).unwrap_or(u32::MAX);
        self.paid_until = Some(at + std::time::Duration::from_secs(1) * entries / self.per_second);
        at
    }

    /// Gives back what is left of a turn from `at` to `ends` that goes unused (the change it
    /// was for undone, or written at once for a condition): the turns granted after it move up
    /// by as much, so the budget is not spent on writes that never happen.
    pub(crate) fn refund(&mut self, now: Instant, at: Instant, ends: Instant) {
        let unused = ends.saturating_duration_since(at.max(now));
        if let Some(paid) = self.paid_until.as_mut() {
            *paid = paid.checked_sub(unused).map_or(now, |t| t.max(now));
        }
    }

    /// Until when the writes granted so far use the budget: a routine write that comes due
    /// before then waits for it.
    pub(crate) fn paid_until(&self) -> Option<Instant> {
        self.paid_until
    }
}

/// When a LaneRoute's held-back counts go out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct CountsDue {
    pub at: Instant,
    /// When the turn the [`CountBudget`] granted it ends: `at` is that turn (else the write
    /// asks for one once `at` has come).
    pub turn_ends: Option<Instant>,
}
/// What pacing reads of a LaneRoute whose status is to change.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Change<'a> {
    pub name: &'a str,
    /// Only the lane's own endpoint counts change.
    pub counts_only: bool,
    /// When its counts go out, as fixed when they were first held back, if they are.
    pub held: Option<CountsDue>,
    /// When its status was last written.
    pub written: Option<Instant>,
    /// Entries in its status: what its write takes of the budget.
    pub services: usize,
    /// Every status is written with this plan, at once.
    pub verify: bool,
}

/// When a LaneRoute's changed status goes out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum When {
    /// With this plan (in the budget's turn it was granted, for a change of counts alone).
    Now { turn: bool },
    /// Not before `at`; `counts`: when the counts held back go out, kept for the next plans.
    Later { at: Instant, counts: Option<CountsDue> },
}

/// When `change` goes out: a change of the lane's own endpoint counts alone after
/// [`count_refresh`] and its turn of the budget; any other change at once, but at most once
/// every [`STATUS_SPACING`] per LaneRoute.
pub(crate) fn when(change: Change, now: Instant, budget: &mut CountBudget) -> When {
    let routine = change.counts_only.then(|| routine_due(&change, now, budget));
    let due = match routine {
        Some(due) => Some(due.at),
        None => change.written.map(|t| t + STATUS_SPACING),
    };
    match due.filter(|d| now < *d && !change.verify) {
        Some(at) => When::Later { at, counts: routine },
        None => When::Now {
            turn: routine.is_some(),
        },
    }
}

/// When a LaneRoute's changed counts are written: as fixed when they were first held back;
/// else [`count_refresh`] after its last status write, or [`count_offset`] from `now` when
/// that was longer ago.
fn counts_due(change: &Change, now: Instant) -> CountsDue {
    if let Some(due) = change.held {
        return due;
    }
    let quiet = now + count_offset(change.name);
    let at = match change.written {
        Some(t) => quiet.max(t + count_refresh(change.name)),
        None => quiet,
    };
    CountsDue { at, turn_ends: None }
}

/// When a LaneRoute's change of its own endpoint counts goes out: its [`counts_due`], and once
/// that has come, the turn `budget` grants it.
fn routine_due(change: &Change, now: Instant, budget: &mut CountBudget) -> CountsDue {
    let due = counts_due(change, now);
    if due.turn_ends.is_some() || now < due.at || change.verify {
        return due;
    }
    let at = budget.grant(now, change.services);
    CountsDue {
        at,
        turn_ends: budget.paid_until,
    }
}
