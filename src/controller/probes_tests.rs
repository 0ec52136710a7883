//! Which lanes are left out of an entry's routes after dry runs, and when a refused route is
//! looked into.

use std::time::Duration;

use super::*;

fn refused() -> Result<(), WriteError> {
    Err(WriteError::Rejected {
        code: 403,
        message: "refused by policy".into(),
    })
}

fn timed_out() -> Result<(), WriteError> {
    Err(WriteError::TimedOut(Duration::from_secs(10)))
}

fn tried(entry: &str, lane: Option<&str>, result: Result<(), WriteError>) -> Tried {
    (entry.into(), lane.map(str::to_owned), result)
}

fn key(entry: &str, lane: &str) -> (String, String) {
    (entry.into(), lane.into())
}

/// After `runs` of dry runs, one after another: the lanes left out, and the probes' state.
fn after(runs: Vec<Vec<Tried>>) -> (Vec<(String, String)>, Probes, Instant) {
    let mut probes = Probes::default();
    let mut left_out = LeftOut::new();
    let now = Instant::now();
    for run in runs {
        probes.tried(run, now, |e, l| format!("{e}/{l}"), &mut left_out);
    }
    (left_out.into_keys().collect(), probes, now)
}

#[test]
fn a_lane_refused_alone_is_left_out_and_its_neighbours_are_not() {
    let run = vec![
        tried("web", None, Ok(())),
        tried("web", Some("ok"), Ok(())),
        tried("web", Some("bad"), refused()),
    ];
    let (left_out, probes, now) = after(vec![run.clone()]);
    assert_eq!(left_out, [key("web", "bad")]);
    let mut messages = LeftOut::new();
    Probes::default().tried(run, now, |_, _| String::new(), &mut messages);
    assert_eq!(messages[&key("web", "bad")], "refused by policy");
    // Tried again after its back-off, or at once when its routes would change.
    let k = key("web", "bad");
    assert!(probes.retries.waits(&k, Some("web/bad"), now));
    assert!(!probes
        .retries
        .waits(&k, Some("web/bad"), now + Duration::from_millis(130)));
    assert!(!probes.retries.waits(&k, Some("changed"), now));
}

#[test]
fn routes_refused_with_no_lane_leave_no_lane_out() {
    let run = vec![
        tried("web", None, refused()),
        tried("web", Some("ok"), refused()),
        tried("web", Some("bad"), refused()),
    ];
    let (left_out, probes, _) = after(vec![run]);
    assert_eq!(
        left_out,
        Vec::<(String, String)>::new(),
        "the entry itself is at fault"
    );
    assert!(
        probes.retries.next_due(Instant::now()).is_none(),
        "nothing is tried again"
    );
}

#[test]
fn a_lane_left_out_comes_back_once_it_is_taken_alone() {
    let first = vec![tried("web", None, Ok(())), tried("web", Some("bad"), refused())];
    let again = vec![tried("web", Some("bad"), Ok(()))];
    let (left_out, probes, now) = after(vec![first, again]);
    assert_eq!(left_out, Vec::<(String, String)>::new());
    assert!(probes.next_due(now).is_none());
}

#[test]
fn a_dry_run_without_an_answer_leaves_nothing_out_and_looks_again() {
    let run = vec![tried("web", None, Ok(())), tried("web", Some("bad"), timed_out())];
    let (left_out, probes, _) = after(vec![run]);
    assert_eq!(left_out, Vec::<(String, String)>::new());
    assert!(probes.due.contains("web"));
}

#[test]
fn a_refused_route_is_looked_into_once_per_content() {
    let mut probes = Probes::default();
    probes.refused("web", "web-0", Some("a".into()));
    assert!(probes.due.contains("web"));
    probes.due.clear();
    probes.refused("web", "web-0", Some("a".into()));
    assert!(probes.due.is_empty(), "refused again as it was");
    probes.refused("web", "web-0", Some("b".into()));
    assert!(probes.due.contains("web"), "new content");
    probes.due.clear();
    probes.retain_routes(|_| false);
    probes.refused("web", "web-0", Some("b".into()));
    assert!(probes.due.contains("web"), "refused again after it was written");
}
