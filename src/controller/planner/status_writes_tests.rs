//! The statuses step of a plan's tail, fed hand-built namespaces (see `plan_tests.rs`).

use super::*;
use crate::api::{Condition, ConditionStatus, ConditionType, SubsetSource};
use crate::controller::planner::pacing::{count_offset, count_refresh, COUNT_BUDGET, COUNT_REFRESH};
use crate::controller::planner::tests::{edge_entry, pod, World, NS};
use crate::lanes::{ParentKey, ParentVerdict, PodInfo, RouteInfo};

fn status_of(step: &Step) -> serde_json::Value {
    match &step.op {
        Op::Status { status, .. } => match status {
            Status::LaneRoute(s) => serde_json::json!(s),
            Status::TagRule(s) => serde_json::json!(s),
            Status::LaneEntry(s) => serde_json::json!(s),
        },
        other => panic!("{other:?}"),
    }
}

#[test]
fn what_pod_events_change_is_told_apart_from_a_change_of_source_or_condition() {
    let ready = |status: bool, reason: Reason, message: &str| {
        Condition::new(ConditionType::Ready, status, reason, message)
    };
    let old = LaneRouteStatus {
        services: vec![ServiceLaneStatus {
            name: "order".into(),
            endpoints: Some(1),
            source: SubsetSource::Lane,
            ..Default::default()
        }],
        conditions: vec![ready(true, Reason::Resolved, "1 service")],
        ..Default::default()
    };
    let mut more = old.clone();
    more.services[0].endpoints = Some(3);
    assert!(counts_only(&old, &more));
    // The lane's last pod went: baseline serves it now, which the status says at once.
    let mut moved = old.clone();
    moved.services[0].endpoints = None;
    moved.services[0].source = SubsetSource::Baseline;
    moved.services[0].served_by = Some("order--baseline-0".into());
    moved.fallback_count = 1;
    assert!(!counts_only(&old, &moved));
    let mut down = more.clone();
    down.conditions[0] = ready(false, Reason::EmptySubset, "no ready pod");
    assert!(!counts_only(&old, &down));
    let mut newer = more.clone();
    newer.observed_generation = Some(2);
    assert!(!counts_only(&old, &newer));
}

#[test]
fn lane_routes_written_together_refresh_their_counts_apart() {
    let due: Vec<_> = (0..50).map(|l| count_refresh(&format!("lane-{l}"))).collect();
    let (first, last) = (due.iter().min().expect("due"), due.iter().max().expect("due"));
    assert!(
        COUNT_REFRESH <= *first && *last <= COUNT_REFRESH * 5 / 4,
        "{first:?}..{last:?}"
    );
    assert!(
        *last - *first >= COUNT_REFRESH / 5,
        "spread over {:?}",
        *last - *first
    );
    assert_eq!(count_refresh("lane-7"), count_refresh("lane-7"));
}

/// The `gray` LaneRoute of `w` showing the status it should, but for one more endpoint of
/// `order`: only its counts differ.
fn counts_behind(w: &mut World) {
    let out = route_statuses(&w.input().space, &w.input().statuses, &Touched::new(), &[]);
    let mut shown: LaneRouteStatus = serde_json::from_value(status_of(&out.steps[0])).expect("status");
    shown.services[0].endpoints = shown.services[0].endpoints.map(|n| n + 1);
    let mut route = w.index.lane_route(NS, "gray").expect("route").clone();
    route.status = Some(shown);
    w.index.apply(route);
}

#[tokio::test]
async fn counts_that_change_after_a_quiet_spell_wait_the_lane_routes_own_offset_and_keep_it() {
    let mut w = World::new(true);
    counts_behind(&mut w);
    let before = Instant::now();
    let out = route_statuses(&w.input().space, &w.input().statuses, &Touched::new(), &[]);
    assert!(out.steps.is_empty(), "held back: {:?}", out.steps);
    let due = out.memo.counts_due["gray"];
    assert!(due.turn_ends.is_none(), "no turn asked for before it is due");
    let due = due.at;
    let offset = count_offset("gray");
    assert!(
        before + offset <= due && due <= Instant::now() + offset,
        "{due:?}"
    );
    assert_eq!(out.due, Some(due), "looked at again then");

    // Counts that change again, or a plan made later, keep the time fixed when first held back.
    w.memo = out.memo;
    w.memo.skips.clear();
    let out = route_statuses(&w.input().space, &w.input().statuses, &Touched::new(), &[]);
    assert_eq!(out.memo.counts_due["gray"].at, due);

    // Written once due; a change right after a write waits for the whole refresh.
    let now = CountsDue {
        at: Instant::now(),
        turn_ends: None,
    };
    w.memo.counts_due.insert("gray".into(), now);
    let out = route_statuses(&w.input().space, &w.input().statuses, &Touched::new(), &[]);
    assert_eq!(out.steps.len(), 1);
    assert!(out.memo.counts_due.is_empty());
    w.memo = out.memo;
    let written = Instant::now();
    w.written.insert("gray".into(), written);
    let out = route_statuses(&w.input().space, &w.input().statuses, &Touched::new(), &[]);
    assert_eq!(out.memo.counts_due["gray"].at, written + count_refresh("gray"));
}

#[test]
fn lane_routes_whose_counts_are_due_together_take_turns_within_the_budget() {
    for entries in [COUNT_BUDGET, 100] {
        let start = Instant::now();
        let mut budget = CountBudget::new(entries);
        let turns: Vec<Instant> = (0..200).map(|_| budget.grant(start, 50)).collect();
        assert_eq!(turns[0], start, "the first goes out at once");
        let per_second = entries as usize / 50;
        for (i, turn) in turns.iter().enumerate() {
            let second = (*turn - start).as_millis() / 1000;
            assert_eq!(
                second as usize,
                i / per_second,
                "{entries}/s: turn {i} at {:?}",
                *turn - start
            );
        }
        // Turns not taken are not saved up: after a quiet spell, the budget is what it was.
        let later = *turns.last().expect("turns") + COUNT_REFRESH * 3;
        assert_eq!(budget.grant(later, entries as usize), later);
        assert_eq!(budget.grant(later, 50), later + std::time::Duration::from_secs(1));
    }
}

#[tokio::test]
async fn counts_that_come_due_while_the_budget_is_spent_wait_their_turn_then_go_out() {
    let mut w = World::new(true);
    counts_behind(&mut w);
    let begun = Instant::now();
    // Other namespaces' count refreshes took the next two seconds.
    w.budget.grant(begun, 2 * COUNT_BUDGET as usize);
    let due = CountsDue {
        at: begun,
        turn_ends: None,
    };
    w.memo.counts_due.insert("gray".into(), due);
    let out = route_statuses(&w.input().space, &w.input().statuses, &Touched::new(), &[]);
    assert!(out.steps.is_empty(), "waits its turn: {:?}", out.steps);
    let turn = out.memo.counts_due["gray"];
    assert!(turn.turn_ends.is_some());
    assert!(
        begun + std::time::Duration::from_secs(2) <= turn.at
            && turn.at <= Instant::now() + std::time::Duration::from_secs(2),
        "{:?}",
        turn.at - begun
    );
    assert_eq!(out.due, Some(turn.at), "looked at again then");
    let next_turn = |mut budget: CountBudget| budget.grant(begun, 1);
    let next = next_turn(out.budget);
    assert!(next > turn.at, "its entries are taken from the budget");

    // Its turn come, it goes out without asking again, and takes nothing more.
    let came = CountsDue {
        at: Instant::now(),
        turn_ends: turn.turn_ends,
    };
    w.memo.counts_due.insert("gray".into(), came);
    w.memo.skips.clear();
    w.budget = out.budget;
    let out = route_statuses(&w.input().space, &w.input().statuses, &Touched::new(), &[]);
    assert_eq!(out.steps.len(), 1);
    assert_eq!(next_turn(out.budget), next);
}

#[tokio::test]
async fn a_turn_whose_change_is_undone_before_it_comes_is_given_back() {
    let mut w = World::new(true);
    let out = route_statuses(&w.input().space, &w.input().statuses, &Touched::new(), &[]);
    let shown: LaneRouteStatus = serde_json::from_value(status_of(&out.steps[0])).expect("status");
    counts_behind(&mut w);
    let begun = Instant::now();
    w.budget.grant(begun, 2 * COUNT_BUDGET as usize);
    let spent = w.budget;
    w.memo.counts_due.insert(
        "gray".into(),
        CountsDue {
            at: begun,
            turn_ends: None,
        },
    );
    let out = route_statuses(&w.input().space, &w.input().statuses, &Touched::new(), &[]);
    let turn = out.memo.counts_due["gray"];
    assert!(turn.turn_ends.is_some(), "waits its turn");

    // The pod that changed its counts is back before the turn comes: nothing to write, and
    // whoever asks next gets the turn it had.
    let mut route = w.index.lane_route(NS, "gray").expect("route").clone();
    route.status = Some(shown);
    w.index.apply(route);
    w.memo = out.memo;
    w.memo.skips.clear();
    w.budget = out.budget;
    let out = route_statuses(&w.input().space, &w.input().statuses, &Touched::new(), &[]);
    assert!(out.steps.is_empty() && out.memo.counts_due.is_empty());
    let next_turn = |mut budget: CountBudget| budget.grant(begun, 1);
    assert_eq!(next_turn(out.budget), next_turn(spent));
}

/// `w`'s plan of LaneRoute statuses, which must be what a plan that skips nothing finds.
fn planned_as_in_full(w: &World) -> RouteStatuses {
    let input = w.input();
    let out = route_statuses(&input.space, &input.statuses, &Touched::new(), &[]);
    let mut full = w.input();
    full.statuses.clock = input.statuses.clock;
    let none = RouteMemo {
        skips: BTreeMap::new(),
        counts_due: w.memo.counts_due.clone(),
    };
    full.statuses.book.memo = &none;
    let full = route_statuses(&full.space, &full.statuses, &Touched::new(), &[]);
    let seen = |o: &RouteStatuses| {
        let steps: Vec<_> = o.steps.iter().map(status_of).collect();
        (steps, o.due, o.memo.counts_due.clone(), o.budget.paid_until())
    };
    assert_eq!(seen(&out), seen(&full), "a skip must not change the plan");
    out
}

/// Brings `w`'s desired outputs up to date after `pods` changed.
fn pods_changed(w: &mut World, pods: impl IntoIterator<Item = PodInfo>) {
    let mut services = BTreeSet::new();
    for p in pods {
        services.extend(w.index.apply(p).services);
    }
    w.index
        .refresh(&mut w.desired, NS, &services, k8s_openapi::jiff::Timestamp::now());
}

#[tokio::test]
async fn counts_that_change_again_while_held_back_stay_held_without_building_the_status_again() {
    let mut w = World::new(true);
    // The lane's pods of `order`: `order-gray` and `order-gray-{1,2,3}`, ready or not.
    let gray = |n: u8, ready: bool| PodInfo {
        ready,
        ..match n {
            0 => pod("order-gray", "order", Some("gray"), "10.0.0.2"),
            n => pod(
                &format!("order-gray-{n}"),
                "order",
                Some("gray"),
                &format!("10.0.1.{n}"),
            ),
        }
    };
    let plan_after = |w: &mut World, pods: &[(u8, bool)]| {
        pods_changed(w, pods.iter().map(|(n, ready)| gray(*n, *ready)));
        let out = planned_as_in_full(w);
        w.memo = out.memo;
        (out.steps, w.memo.skips["gray"].clone())
    };
    counts_behind(&mut w);
    let out = planned_as_in_full(&w);
    assert!(out.memo.skips["gray"].held_until.is_some());
    w.memo = out.memo;

    // A second pod of the lane: the counts are those shown, and nothing is held back any more.
    let (steps, skip) = plan_after(&mut w, &[(1, true)]);
    assert!(steps.is_empty() && w.memo.counts_due.is_empty(), "{steps:?}");
    assert_eq!(skip.held_until, None);

    // A third: held back again; a fourth: the counts change alone, and stay held back until the
    // same time, with the status not built again.
    let (_, held) = plan_after(&mut w, &[(2, true)]);
    assert!(held.held_until.is_some() && held.counts_only, "{held:?}");
    let (_, skip) = plan_after(&mut w, &[(3, true)]);
    assert_eq!(skip.stamp, w.desired.routes["gray"].stamp, "skipped as it is");
    assert_eq!(skip.held_until, held.held_until);

    // The lane's pods all not ready: `order` falls back to baseline, which the status says at
    // once, counts held back or not.
    pods_changed(&mut w, (0..4).map(|n| gray(n, false)));
    let out = planned_as_in_full(&w);
    let written: LaneRouteStatus = serde_json::from_value(status_of(&out.steps[0])).expect("status");
    let order = written
        .services
        .iter()
        .find(|s| s.name == "order")
        .expect("order");
    assert_eq!((&order.source, order.endpoints), (&SubsetSource::Baseline, None));
    assert!(!out.memo.counts_due.contains_key("gray"));
    w.memo = out.memo;

    // Back to what is shown: nothing to write.
    let (steps, _) = plan_after(&mut w, &[(0, true), (1, true)]);
    assert!(steps.is_empty() && w.memo.counts_due.is_empty(), "{steps:?}");
}

#[tokio::test]
async fn a_route_status_is_written_after_its_outputs_then_skipped_while_nothing_changed() {
    let mut w = World::new(true);
    let key = (OwnKind::LaneRoute, "gray".to_owned());
    let output = Subject::Output(crate::controller::planner::tests::target(
        OutputKind::Service,
        "x",
    ));
    let touched = Touched::from([(key, vec![output.clone()])]);
    let out = route_statuses(&w.input().space, &w.input().statuses, &touched, &[]);
    let steps = out.steps;
    assert_eq!(steps.len(), 1);
    assert_eq!(steps[0].needs, [output]);
    assert!(out.memo.skips.is_empty(), "a status to write is no skip");

    // The object shows that status now: nothing to write, and the next plan need not look.
    let written: LaneRouteStatus = serde_json::from_value(status_of(&steps[0])).expect("status");
    let mut route = w.index.lane_route(NS, "gray").expect("route").clone();
    route.status = Some(written);
    w.index.apply(route);
    let out = route_statuses(&w.input().space, &w.input().statuses, &Touched::new(), &[]);
    assert!(out.steps.is_empty(), "{:?}", out.steps);
    assert!(out.memo.skips.contains_key("gray"));
    w.memo = out.memo;
    let out = route_statuses(&w.input().space, &w.input().statuses, &Touched::new(), &[]);
    assert!(out.steps.is_empty() && out.memo.skips.contains_key("gray"));
}

#[tokio::test]
async fn an_entry_whose_route_a_gateway_refused_says_so_per_parent_and_in_ready() {
    let mut w = World::new(true);
    w.index.apply(edge_entry("web", "order"));
    w.resolve();
    let name = w.desired.entries["web"].routes[0].clone();
    w.index
        .apply(verdict_on(&name, (ConditionStatus::False, "no listener")));
    let input = w.input();
    let entries = Entries {
        gateways: input.outside.gateways,
        touched: &Touched::new(),
        rejected: &[],
    };
    let steps = entry_statuses(&input.space, &input.statuses, &entries);
    assert_eq!(steps.len(), 1);
    let status = status_of(&steps[0]);
    let parent = &status["routes"][0]["parents"][0];
    assert_eq!(parent["accepted"], "False");
    assert_eq!(parent["message"], "no listener");
    let ready = status["conditions"]
        .as_array()
        .expect("conditions")
        .iter()
        .find(|c| c["type"] == "Ready")
        .expect("Ready");
    assert_eq!(
        (&ready["status"], &ready["reason"]),
        (&"False".into(), &"NotAccepted".into())
    );
}

/// The route `name`, as its gateway's controller reports on it: `Accepted` and its message.
fn verdict_on(name: &str, (accepted, message): (ConditionStatus, &str)) -> RouteInfo {
    RouteInfo {
        namespace: NS.into(),
        name: name.to_owned(),
        ours: true,
        verdicts: vec![ParentVerdict {
            parent: ParentKey {
                namespace: NS.into(),
                name: "public".into(),
                ..Default::default()
            },
            controller: "example.com/gateway".into(),
            accepted: Some((accepted, Some(1), message.to_owned())),
            resolved_refs: Some((ConditionStatus::True, Some(1), String::new())),
        }],
        ..Default::default()
    }
}

/// The `Routed` condition of the LaneRoute `gray` that a plan writes, once written and shown.
fn routed_of_gray(w: &mut World) -> (String, String) {
    let out = route_statuses(&w.input().space, &w.input().statuses, &Touched::new(), &[]);
    w.memo = out.memo;
    let step = out
        .steps
        .iter()
        .find(|s| matches!(&s.op, Op::Status { key, .. } if key.name == "gray"));
    let Some(step) = step else {
        let route = w.index.lane_route(NS, "gray").expect("route");
        let routed = route
            .status
            .as_ref()
            .expect("status")
            .conditions
            .iter()
            .find(|c| c.type_ == ConditionType::Routed);
        let routed = routed.expect("Routed");
        return (format!("{:?}", routed.status), routed.reason.clone());
    };
    let written: LaneRouteStatus = serde_json::from_value(status_of(step)).expect("status");
    let routed = written
        .conditions
        .iter()
        .find(|c| c.type_ == ConditionType::Routed)
        .expect("Routed")
        .clone();
    let mut route = w.index.lane_route(NS, "gray").expect("route").clone();
    route.status = Some(written);
    w.index.apply(route);
    (format!("{:?}", routed.status), routed.reason)
}

#[tokio::test]
async fn a_lane_is_routed_only_once_a_gateway_accepted_a_route_that_carries_it() {
    let mut w = World::new(true);
    w.index.apply(edge_entry("web", "order"));
    w.resolve();
    let name = w.desired.entries["web"].routes[0].clone();
    assert_eq!(
        routed_of_gray(&mut w),
        ("False".into(), "WaitingForGateway".into())
    );
    w.index
        .apply(verdict_on(&name, (ConditionStatus::False, "no listener")));
    assert_eq!(
        routed_of_gray(&mut w),
        ("False".into(), "WaitingForGateway".into())
    );
    w.index.apply(verdict_on(&name, (ConditionStatus::True, "")));
    assert_eq!(routed_of_gray(&mut w), ("True".into(), "Routed".into()));
    assert_eq!(
        routed_of_gray(&mut w),
        ("True".into(), "Routed".into()),
        "nothing more to write"
    );
}
