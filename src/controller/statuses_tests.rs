//! The statuses step of a plan's tail, fed hand-built namespaces (see `plan_tests.rs`).

use super::*;
use crate::api::{Condition, ConditionStatus, ConditionType, SubsetSource};
use crate::controller::plan::tests::{edge_entry, World, NS};
use crate::lanes::{ParentKey, ParentVerdict, RouteInfo};

fn status_of(step: &Step) -> serde_json::Value {
    match &step.op {
        Op::Status { status, .. } => status.clone(),
        other => panic!("{other:?}"),
    }
}

#[test]
fn what_pod_events_change_is_told_apart_from_a_change_of_condition() {
    let ready = |status: bool, reason: &str, message: &str| {
        Condition::new(ConditionType::Ready, status, reason, message)
    };
    let old = LaneRouteStatus {
        services: vec![ServiceLaneStatus {
            name: "order".into(),
            endpoints: 1,
            source: SubsetSource::Lane,
            ..Default::default()
        }],
        conditions: vec![ready(true, "Resolved", "1 service")],
        ..Default::default()
    };
    let mut moved = old.clone();
    moved.services[0].endpoints = 3;
    moved.services[0].source = SubsetSource::Baseline;
    moved.fallback_count = 1;
    moved.conditions[0].message = "1 service, falling back".into();
    assert!(routine_only(&old, &moved));
    let mut down = moved.clone();
    down.conditions[0] = ready(false, "EmptySubset", "no ready pod");
    assert!(!routine_only(&old, &down));
    let mut newer = old.clone();
    newer.observed_generation = Some(2);
    assert!(!routine_only(&old, &newer));
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

#[tokio::test]
async fn a_route_status_is_written_after_its_outputs_then_skipped_while_nothing_changed() {
    let mut w = World::new(true);
    let key = (Kind::LaneRoute, "gray".to_owned());
    let output = Subject::Output(crate::controller::plan::tests::target(Kind::Service, "x"));
    let touched = Touched::from([(key, vec![output.clone()])]);
    let (steps, _, skips) = route_statuses(&w.input(), &touched, &[]);
    assert_eq!(steps.len(), 1);
    assert_eq!(steps[0].needs, [output]);
    assert!(skips.is_empty(), "a status to write is no skip");

    // The object shows that status now: nothing to write, and the next plan need not look.
    let written: LaneRouteStatus = serde_json::from_value(status_of(&steps[0])).expect("status");
    let mut route = w.index.lane_route(NS, "gray").expect("route").clone();
    route.status = Some(written);
    w.index.apply(route);
    let (steps, _, skips) = route_statuses(&w.input(), &Touched::new(), &[]);
    assert!(steps.is_empty(), "{steps:?}");
    assert!(skips.contains_key("gray"));
    w.skips = skips;
    let (steps, _, skips) = route_statuses(&w.input(), &Touched::new(), &[]);
    assert!(steps.is_empty() && skips.contains_key("gray"));
}

#[tokio::test]
async fn an_entry_whose_route_a_gateway_refused_says_so_per_parent_and_in_ready() {
    let mut w = World::new(true);
    w.index.apply(edge_entry("web", "order"));
    w.resolve();
    let name = w.desired.entries["web"].routes[0].clone();
    w.index.apply(RouteInfo {
        namespace: NS.into(),
        name: name.clone(),
        ours: true,
        verdicts: vec![ParentVerdict {
            parent: ParentKey {
                namespace: NS.into(),
                name: "public".into(),
                ..Default::default()
            },
            controller: "example.com/gateway".into(),
            accepted: Some((ConditionStatus::False, Some(1), "no listener".into())),
            resolved_refs: Some((ConditionStatus::True, Some(1), String::new())),
        }],
        ..Default::default()
    });
    let steps = entry_statuses(&w.input(), &Touched::new(), &[]);
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
