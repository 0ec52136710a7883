//! The schedule's transitions, as a user of the namespace would notice them: when it runs
//! again after changes, plans, failures and wake-ups.

use std::collections::BTreeSet;
use std::time::Duration;

use k8s_openapi::jiff::{SignedDuration, Timestamp};
use tokio::time::Instant;

use super::*;

const DEBOUNCE: Duration = Duration::from_millis(100);

/// One thing that happens to a namespace, at the clock's current time.
#[derive(Clone, Copy, Debug)]
enum Step {
    Change,
    Recheck,
    Verify,
    /// A plan starts, and is made with writes (and a tail, when the plan may have one).
    Plan,
    /// A plan starts and finds nothing to write.
    PlanNothing,
    /// A plan starts, writes nothing and asks to be looked at again after this many ms.
    PlanWake(u64),
    Head(Writes),
    Tail(Writes),
    /// This many ms pass.
    Wait(u64),
}

#[derive(Clone, Copy, Debug)]
enum Writes {
    Done,
    Failed,
    LostLease,
    Recovered,
    /// Only outputs failed (each retried on its own back-off).
    OutputFailed,
    /// A write failed with a 429 asking to retry after this many ms.
    Throttled(u64),
}

use Step::*;
use Writes::{Done, Failed, LostLease, OutputFailed, Recovered, Throttled};

struct Run {
    schedule: Schedule,
    now: Instant,
    starts: Vec<Start>,
}

fn run(steps: &[Step]) -> Run {
    let mut r = Run {
        schedule: Schedule::default(),
        now: Instant::now(),
        starts: Vec::new(),
    };
    for step in steps {
        let s = &mut r.schedule;
        match *step {
            Change => s.changed(None),
            Recheck => s.recheck(),
            Verify => s.verify_statuses(),
            Plan | PlanNothing | PlanWake(_) => {
                let start = s.start();
                let planned = Planned {
                    writes: matches!(step, Plan),
                    tail: matches!(step, Plan) && start.with_tail,
                    wake_at: match step {
                        PlanWake(ms) => Some(r.now + Duration::from_millis(*ms)),
                        _ => None,
                    },
                };
                s.planned(planned, r.now, DEBOUNCE);
                r.starts.push(start);
            }
            Head(result) => s.reported(Part::Head, outcome(result), r.now),
            Tail(result) => s.reported(Part::Tail, outcome(result), r.now),
            Wait(ms) => r.now += Duration::from_millis(ms),
        }
    }
    r
}

fn outcome(result: Writes) -> Outcome {
    Outcome {
        failed: matches!(result, Failed | Throttled(_)),
        lost_lease: matches!(result, LostLease),
        recovered: matches!(result, Recovered),
        output_failed: matches!(result, OutputFailed),
        retry_after: match result {
            Throttled(ms) => Some(Duration::from_millis(ms)),
            _ => None,
        },
    }
}

impl Run {
    /// When the namespace runs next, in ms from now (`None`: not until something happens).
    fn due_in(&self) -> Option<u64> {
        let at = self.schedule.due_at(self.now)?;
        Some(at.saturating_duration_since(self.now).as_millis() as u64)
    }
}

/// A plan whose head fails and whose tail (its statuses, saying so) is written.
const FAILING_PLAN: [Step; 3] = [Plan, Head(Failed), Tail(Done)];

/// What happened, and when the namespace runs next: at least and at most this many ms from now
/// (`None`: not until something happens).
type Case = (&'static str, Vec<Step>, Option<(u64, u64)>);

#[test]
fn when_a_namespace_runs_next() {
    let cases: Vec<Case> = vec![
        ("nothing happened", vec![], None),
        (
            "a change on an idle namespace runs at once",
            vec![Change],
            Some((0, 0)),
        ),
        ("a recheck runs at once", vec![Recheck], Some((0, 0))),
        (
            "a plan in flight holds the next one",
            vec![Change, Plan, Change],
            None,
        ),
        (
            "after a plan's head, a change waits the debounce",
            vec![Change, Plan, Head(Done), Change],
            Some((100, 100)),
        ),
        (
            "the debounce counts from the plan's start",
            vec![Change, Plan, Wait(60), Head(Done), Change],
            Some((40, 40)),
        ),
        (
            "a written plan with no change after it rests",
            vec![Change, Plan, Head(Done), Tail(Done)],
            None,
        ),
        (
            "a plan made while the last tail is written looks again once it is",
            vec![
                Change,
                Plan,
                Head(Done),
                Wait(200),
                Change,
                Plan,
                Head(Done),
                Wait(200),
                Tail(Done),
            ],
            Some((0, 0)),
        ),
        (
            "a wake-up runs without a change",
            vec![Change, PlanWake(500)],
            Some((500, 500)),
        ),
        (
            "a wake-up that came is due",
            vec![Change, PlanWake(500), Wait(600)],
            Some((0, 0)),
        ),
    ];
    check(cases);
}

#[test]
fn failures_back_off() {
    let mut cases: Vec<Case> = vec![
        (
            "a failed head retries after 100 ms",
            vec![Change, Plan, Head(Failed)],
            Some((100, 125)),
        ),
        (
            "a failed tail retries after 100 ms",
            vec![Change, Plan, Head(Done), Tail(Failed)],
            Some((100, 125)),
        ),
        (
            "a lost lease retries nothing",
            vec![Change, Plan, Head(LostLease), Tail(LostLease)],
            None,
        ),
        (
            "a recovered output looks again at once, after the debounce",
            vec![Change, Plan, Head(Recovered), Wait(100)],
            Some((0, 0)),
        ),
    ];
    // Plans in a row whose head fails, each followed by a tail that succeeds: the back-off doubles
    // (100, 200, 400, 800 ms) and the succeeding tails do not reset it.
    let mut four = vec![Change];
    for wait in [0, 125, 250, 500] {
        four.push(Wait(wait));
        four.extend(FAILING_PLAN);
    }
    cases.push((
        "four failed heads with succeeding tails back off 800 ms",
        four.clone(),
        Some((800, 1000)),
    ));
    let mut then_ok = four.clone();
    then_ok.extend([Wait(1000), Plan, Head(Done), Tail(Done), Change]);
    cases.push((
        "a head that succeeds ends the back-off",
        then_ok,
        Some((100, 100)),
    ));
    let mut many = vec![Change];
    for _ in 0..20 {
        many.extend([Wait(40_000), Plan, Head(Failed)]);
    }
    cases.push(("the back-off stops at 30 s", many, Some((30_000, 37_500))));
    let mut failing_tails = vec![Change];
    for _ in 0..3 {
        failing_tails.extend([Wait(1000), Plan, Head(Done), Tail(Failed)]);
    }
    cases.push((
        "tails that fail back off whatever their heads did",
        failing_tails,
        Some((400, 500)),
    ));

    cases.push((
        "a throttled write waits the server's Retry-After, not the first back-off step",
        vec![Change, Plan, Head(Throttled(1000))],
        Some((1000, 1000)),
    ));
    let mut throttled_late = four.clone();
    throttled_late.extend([Wait(1000), Plan, Head(Throttled(300))]);
    cases.push((
        "a Retry-After shorter than the back-off reached leaves it as it is",
        throttled_late,
        Some((1600, 2000)),
    ));
    cases.push((
        "a throttled status waits the Retry-After too",
        vec![Change, Plan, Head(Done), Tail(Throttled(2000))],
        Some((2000, 2000)),
    ));

    check(cases);
}

#[test]
fn a_failed_output_holds_back_no_other_write() {
    let cases: Vec<Case> = vec![
        (
            "a failed output holds nothing else back: the namespace looks again after the debounce",
            vec![Change, Plan, Head(OutputFailed), Tail(Done)],
            Some((100, 100)),
        ),
        (
            "outputs that keep failing never back the namespace off",
            vec![
                Change,
                Plan,
                Head(OutputFailed),
                Wait(100),
                Plan,
                Head(OutputFailed),
                Wait(100),
                Plan,
                Head(OutputFailed),
                Wait(100),
                Change,
            ],
            Some((0, 0)),
        ),
    ];
    check(cases);
}

fn check(cases: Vec<Case>) {
    for (what, steps, want) in cases {
        let got = run(&steps).due_in();
        match want {
            None => assert_eq!(got, None, "{what}"),
            Some((lo, hi)) => {
                let got = got.unwrap_or_else(|| panic!("{what}: never due"));
                assert!((lo..=hi).contains(&got), "{what}: due in {got} ms, not {lo}-{hi}");
            }
        }
    }
}

#[test]
fn what_a_plan_computes_again_and_whether_it_has_a_tail() {
    let services: BTreeSet<String> = ["order".to_owned()].into();
    let mut s = Schedule::default();
    s.changed(Some(&services));
    s.changed(Some(&["user".to_owned()].into()));
    let start = s.start();
    assert!(!start.dirty.whole);
    assert_eq!(start.dirty.services.len(), 2);
    assert!(start.with_tail);

    s.changed(Some(&services));
    s.changed(None);
    assert!(
        s.start().dirty.whole,
        "a change of the namespace outweighs its services'"
    );

    let r = run(&[Change, Plan, Head(Done), Change, Plan]);
    assert!(!r.starts[1].with_tail, "an earlier tail is still being written");
}

#[test]
fn statuses_are_verified_by_the_next_tail_and_again_if_it_fails() {
    let r = run(&[Verify]);
    assert_eq!(r.due_in(), Some(0), "verifying needs a plan");
    let r = run(&[Verify, Plan]);
    assert!(r.starts[0].verify);
    let r = run(&[Verify, Plan, Head(Done), Tail(Done), Change, Wait(100), Plan]);
    assert!(!r.starts[1].verify, "a written tail verified them");
    let r = run(&[Verify, Plan, Head(Done), Tail(Failed), Wait(200), Plan]);
    assert!(r.starts[1].verify, "a failed tail verifies again");
    let r = run(&[Verify, Plan, Head(Done), Tail(LostLease)]);
    assert!(r.schedule.verifies(), "the next leader's first plan verifies");
    // A plan made while a tail is written has none: the verification waits for the next one.
    let r = run(&[
        Change,
        Plan,
        Head(Done),
        Verify,
        Wait(100),
        Plan,
        Tail(Done),
        Wait(100),
        Plan,
    ]);
    assert!(!r.starts[1].with_tail && r.starts[2].verify);
}

#[test]
fn a_ttl_that_passes_computes_the_namespace_again() {
    let mut s = Schedule::default();
    let at = Timestamp::now();
    s.set_expiry(Some(at));
    s.expire(at - SignedDuration::from_secs(1));
    assert!(s.idle(), "not yet");
    s.expire(at);
    assert_eq!(s.pending().map(|d| d.whole), Some(true));
    assert_eq!(s.expiry(), None);
}

#[test]
fn a_namespace_is_idle_only_with_nothing_written_or_waiting() {
    assert!(run(&[]).schedule.idle());
    assert!(!run(&[Change]).schedule.idle());
    assert!(!run(&[Change, Plan]).schedule.idle());
    assert!(
        !run(&[Change, Plan, Head(Done)]).schedule.idle(),
        "its tail is written"
    );
    assert!(run(&[Change, Plan, Head(Done), Tail(Done)]).schedule.idle());
    assert!(run(&[Change, PlanNothing]).schedule.idle());
}

#[test]
fn backoff_doubles_from_100_ms_to_30_s() {
    let waits: Vec<u64> = (1..=11).map(|n| backoff(n).as_millis() as u64).collect();
    assert_eq!(
        waits,
        [100, 200, 400, 800, 1600, 3200, 6400, 12800, 25600, 30000, 30000]
    );
    assert_eq!(backoff(u32::MAX), MAX_BACKOFF);
}

/// A write of one output: it fails with this content hash, is throttled with a Retry-After of
/// this many ms, or succeeds.
#[derive(Clone, Copy, Debug)]
enum Write {
    Fails(&'static str),
    Throttled(&'static str, u64),
    Succeeds,
}

/// After `writes` (each `ms` after the one before), whether content `hash` waits `ms_later`
/// ms after the last, and when the first back-off still running ends (ms from then).
fn retry(writes: &[(Write, u64)], hash: &str, ms_later: u64) -> (bool, Option<u64>) {
    let mut retries = Retries::default();
    let mut now = Instant::now();
    for (write, ms) in writes {
        now += Duration::from_millis(*ms);
        match write {
            Write::Fails(hash) => retries.failed("route", Some((*hash).to_owned()), now, None),
            Write::Throttled(hash, ms) => {
                let wait = Some(Duration::from_millis(*ms));
                retries.failed("route", Some((*hash).to_owned()), now, wait);
            }
            Write::Succeeds => retries.succeeded(&"route"),
        }
    }
    now += Duration::from_millis(ms_later);
    let due = retries.next_due(now).map(|t| (t - now).as_millis() as u64);
    (retries.waits(&"route", Some(hash), now), due)
}

#[test]
fn each_failed_output_backs_off_on_its_own_and_new_content_goes_at_once() {
    use Write::*;
    let a = Fails("a");
    assert_eq!(retry(&[], "a", 0), (false, None), "nothing failed");
    let (waits, due) = retry(&[(a, 0)], "a", 0);
    assert!(waits && (100..=125).contains(&due.unwrap_or(0)), "{due:?}");
    assert_eq!(retry(&[(a, 0)], "a", 130), (false, None), "its back-off ended");
    let (waits, due) = retry(&[(a, 0)], "b", 0);
    assert!(!waits && due.is_some(), "new content goes at once");
    // Failures of the same content double the wait: 100, 200, 400, 800, 1600 ms.
    let five: Vec<(Write, u64)> = [0, 130, 260, 510, 1010].iter().map(|ms| (a, *ms)).collect();
    let (waits, due) = retry(&five, "a", 0);
    assert!(waits && (1600..=2000).contains(&due.unwrap_or(0)), "{due:?}");
    // Failing with new content starts again at 100 ms.
    let mut changed = five.clone();
    changed.push((Fails("b"), 2010));
    let (waits, due) = retry(&changed, "b", 0);
    assert!(waits && (100..=125).contains(&due.unwrap_or(0)), "{due:?}");
    let mut ok = five.clone();
    ok.push((Succeeds, 2010));
    assert_eq!(
        retry(&ok, "a", 0),
        (false, None),
        "a success forgets the failures"
    );
    // Standing failures settle at one try per 30 s (plus jitter).
    let many: Vec<(Write, u64)> = (0..20).map(|_| (a, 40_000)).collect();
    let (waits, due) = retry(&many, "a", 0);
    assert!(waits && (30_000..=37_500).contains(&due.unwrap_or(0)), "{due:?}");
}

#[test]
fn a_throttled_output_waits_the_retry_after_whatever_its_content() {
    use Write::*;
    let throttled = Throttled("a", 1000);
    let (waits, due) = retry(&[(throttled, 0)], "a", 0);
    assert!(waits && due == Some(1000), "{due:?}");
    assert!(retry(&[(throttled, 0)], "a", 999).0, "not before the Retry-After");
    assert_eq!(retry(&[(throttled, 0)], "a", 1000), (false, None));
    // New content waits too: the server throttles the client, not the content.
    assert!(retry(&[(throttled, 0)], "b", 500).0);
    assert!(!retry(&[(throttled, 0)], "b", 1000).0);
    // After five failures (a 1.6 s step), a Retry-After of 1 s leaves the longer step.
    let mut five: Vec<(Write, u64)> = [0, 130, 260, 510, 1010]
        .iter()
        .map(|ms| (Fails("a"), *ms))
        .collect();
    five.push((Throttled("a", 1000), 2010));
    let (waits, due) = retry(&five, "a", 0);
    assert!(waits && (3200..=4000).contains(&due.unwrap_or(0)), "{due:?}");
    assert_eq!(retry(&[(throttled, 0), (Succeeds, 10)], "b", 0), (false, None));
}

#[test]
fn a_throttled_output_no_longer_needed_still_waits_the_retry_after() {
    // Its content went back to what exists (nothing to write), then changed again.
    let mut retries = Retries::default();
    let now = Instant::now();
    retries.failed("slice", Some("b".to_owned()), now, Some(Duration::from_secs(2)));
    retries.failed("other", Some("x".to_owned()), now, None);
    retries.retain(now + Duration::from_millis(300), |_| false);
    let later = now + Duration::from_millis(500);
    assert!(
        retries.waits(&"slice", Some("c"), later),
        "new content waits the Retry-After"
    );
    assert!(
        !retries.waits(&"other", Some("x"), later),
        "a plain back-off is forgotten"
    );
    retries.retain(now + Duration::from_secs(2), |_| false);
    assert_eq!(
        retries.next_due(now),
        None,
        "forgotten once the Retry-After passed"
    );
}
