use super::*;
use crate::api::ServiceLaneStatus;
use crate::lanes::ObjectKey;

fn report(sources: &[(&str, SubsetSource)]) -> RouteReport {
    RouteReport {
        lane: "dev-alice".into(),
        services: sources
            .iter()
            .map(|(n, s)| ServiceLaneStatus {
                name: n.to_string(),
                lane_service: Some(format!("{n}--dev-alice-0")),
                baseline_service: None,
                served_by: Some(format!("{n}--dev-alice-0")),
                endpoints: Some(1),
                source: s.clone(),
            })
            .collect(),
        ..Default::default()
    }
}

fn condition(s: &LaneRouteStatus, t: ConditionType) -> &Condition {
    s.conditions.iter().find(|c| c.type_ == t).expect("condition")
}

#[test]
fn fallback_is_counted_and_explained() {
    let r = report(&[
        ("order", SubsetSource::Lane),
        ("user", SubsetSource::Fallback("feature-x".into())),
        ("pay", SubsetSource::Baseline),
    ]);
    let s = lane_route_status(Some(3), &r, &[], None);
    assert_eq!(
        (s.service_count, s.fallback_count, s.observed_generation),
        (3, 2, Some(3))
    );
    let f = condition(&s, FALLBACK_ACTIVE);
    assert_eq!(f.status, ConditionStatus::True);
    assert_eq!(f.message, "user from Fallback:feature-x, pay from Baseline");
    assert_eq!(condition(&s, READY).status, ConditionStatus::True);
    assert_eq!(condition(&s, DEGRADED).status, ConditionStatus::False);
}

#[test]
fn a_strict_lane_without_instances_is_ready_by_design_and_any_other_empty_subset_is_an_outage() {
    let mut r = report(&[("order", SubsetSource::Lane), ("pay", SubsetSource::Empty)]);
    let outage = condition(&lane_route_status(Some(1), &r, &[], None), READY).clone();
    assert_eq!(
        (outage.status, outage.reason.as_str()),
        (ConditionStatus::False, "EmptySubset")
    );
    assert!(
        outage.message.ends_with("baseline for: pay"),
        "{}",
        outage.message
    );
    r.strict = true;
    let s = lane_route_status(Some(1), &r, &[], None);
    let ready = condition(&s, READY);
    assert_eq!(
        (ready.status, ready.reason.as_str()),
        (ConditionStatus::True, "Resolved")
    );
    assert!(
        ready.message.ends_with("(answered 503): pay"),
        "{}",
        ready.message
    );
}

#[test]
fn an_empty_subset_or_a_problem_is_visible() {
    let r = report(&[("pay", SubsetSource::Empty)]);
    let p = Problem::UnknownService {
        route: ObjectKey::new("shop", "dev-alice"),
        service: "ghost".into(),
    };
    let s = lane_route_status(None, &r, &[&p], None);
    let ready = condition(&s, READY);
    assert_eq!(
        (ready.status, ready.reason.as_str()),
        (ConditionStatus::False, "EmptySubset")
    );
    let d = condition(&s, DEGRADED);
    assert_eq!(
        (d.status, d.reason.as_str()),
        (ConditionStatus::True, "UnknownService")
    );
    assert!(d.message.contains("spec.services"), "{}", d.message);
    let r = condition(&s, RECONCILING);
    assert_eq!(
        (r.status, r.reason.as_str()),
        (ConditionStatus::True, "WaitingForService")
    );
    assert_eq!(condition(&s, STALLED).status, ConditionStatus::False);
}

#[test]
fn a_rejected_write_stalls_and_a_failing_one_is_retried() {
    let r = report(&[("order", SubsetSource::Lane)]);
    let p = Problem::WriteRejected {
        owners: vec![(crate::lanes::Kind::LaneRoute, ObjectKey::new("shop", "gray"))],
        object: "Service shop/order--gray-1".into(),
        message: "spec.ports: Required value".into(),
    };
    let s = lane_route_status(Some(1), &r, &[&p], None);
    let stalled = condition(&s, STALLED);
    assert_eq!(stalled.status, ConditionStatus::True);
    assert!(stalled.message.contains("spec.ports"), "{}", stalled.message);
    let ready = condition(&s, READY);
    assert_eq!(
        (ready.status, ready.reason.as_str()),
        (ConditionStatus::False, "WriteRejected")
    );
    let s = lane_route_status(Some(1), &r, &[], Some("EndpointSlice x: timed out".into()));
    let reconciling = condition(&s, RECONCILING);
    assert_eq!(
        (reconciling.status, reconciling.reason.as_str()),
        (ConditionStatus::True, "Retrying")
    );
    assert_eq!(condition(&s, STALLED).status, ConditionStatus::False);
}

/// An edge entry with no lanes, routes or parents.
fn edge_report() -> EntryReport {
    EntryReport {
        mode: EntryMode::Edge,
        lanes: Vec::new(),
        baseline_weight: None,
        routes: Vec::new(),
        parents: Vec::new(),
    }
}

/// An entry's facts with the Gateway API there, no route and no write being retried.
fn quiet_facts() -> EntryFacts {
    EntryFacts {
        api_missing: false,
        routes: Vec::new(),
        filters_unsupported: Vec::new(),
        retrying: None,
    }
}

#[test]
fn an_entry_with_a_rule_it_cannot_route_is_not_ready() {
    let report = edge_report();
    let facts = quiet_facts;
    let ready = |s: &LaneEntryStatus| {
        let c = s.conditions.iter().find(|c| c.type_ == READY).expect("ready");
        (c.status, c.reason.clone())
    };
    let s = lane_entry_status(Some(1), &report, &[], facts());
    assert_eq!(ready(&s), (ConditionStatus::True, "Accepted".to_owned()));
    let p = Problem::EntryBackend {
        entry: ObjectKey::new("shop", "e"),
        field: "spec.rules[0].backend.port".into(),
        message: "Service order has no port 81".into(),
    };
    let s = lane_entry_status(Some(1), &report, &[&p], facts());
    assert_eq!(ready(&s), (ConditionStatus::False, "InvalidBackend".to_owned()));
}

#[test]
fn an_entry_with_one_lane_left_out_stays_ready_and_says_so_in_degraded() {
    let report = edge_report();
    let p = Problem::LaneRefused {
        entry: ObjectKey::new("shop", "e"),
        route: ObjectKey::new("shop", "bad"),
        lane: "bad".into(),
        message: "refused by policy".into(),
    };
    let s = lane_entry_status(Some(1), &report, &[&p], quiet_facts());
    let of = |t| {
        let c = s.conditions.iter().find(|c| c.type_ == t).expect("condition");
        (c.status, c.reason.clone())
    };
    assert_eq!(of(READY), (ConditionStatus::True, "Accepted".to_owned()));
    assert_eq!(of(STALLED).0, ConditionStatus::False);
    assert_eq!(of(DEGRADED), (ConditionStatus::True, "WriteRejected".to_owned()));
}

#[test]
fn a_flood_of_problems_keeps_the_message_bounded() {
    let many: Vec<String> = (0..5000)
        .map(|i| format!("spec.tags: pod p{i} is given more than one lane"))
        .collect();
    let m = summarize(&many);
    assert!(m.len() < MAX_MESSAGE + 40, "{}", m.len());
    assert!(m.starts_with("spec.tags: pod p0 "), "{m}");
    assert!(m.ends_with(" more"), "{m}");
    let huge = vec!["x".repeat(10_000)];
    assert!(summarize(&huge).len() <= MAX_MESSAGE + 4);
}

#[test]
fn transition_times_move_only_on_change() {
    let (t0, t1) = (Timestamp::UNIX_EPOCH, Timestamp::from_second(60).expect("t1"));
    let old = vec![Condition {
        last_transition_time: Some(Time(t0)),
        ..Condition::new(READY, true, Reason::Resolved, "")
    }];
    let mut same = vec![Condition::new(READY, true, Reason::Resolved, "x")];
    carry_transition_times(&old, &mut same, t1);
    assert_eq!(same[0].last_transition_time, Some(Time(t0)));
    let mut changed = vec![Condition::new(READY, false, Reason::EmptySubset, "")];
    carry_transition_times(&old, &mut changed, t1);
    assert_eq!(changed[0].last_transition_time, Some(Time(t1)));
}

#[test]
fn a_status_past_the_size_budget_keeps_its_counts_and_conditions_and_says_services_were_cut() {
    let sources: Vec<(String, SubsetSource)> = (0..5200)
        .map(|i| (format!("service-{i:05}"), SubsetSource::Baseline))
        .collect();
    let sources: Vec<(&str, SubsetSource)> = sources.iter().map(|(n, s)| (n.as_str(), s.clone())).collect();
    let s = lane_route_status(Some(1), &report(&sources), &[], None);
    let size = serde_json::to_vec(&s).expect("json").len();
    assert!(size <= STATUS_BUDGET, "{size}");
    assert_eq!((s.service_count, s.fallback_count), (5200, 5200));
    let kept = s.services.len();
    assert!((1000..5200).contains(&kept), "{kept}");
    assert_eq!(s.services[0].name, "service-00000");
    let d = condition(&s, DEGRADED);
    assert_eq!(
        (d.status, d.reason.as_str()),
        (ConditionStatus::True, "StatusTruncated")
    );
    assert_eq!(
        d.message,
        format!("status.services lists {kept} of 5200 services, as many as fit in the status size budget (262144 bytes); serviceCount and fallbackCount count them all")
    );
    assert!(condition(&s, FALLBACK_ACTIVE).message.len() < 4200);
    assert_eq!(condition(&s, READY).status, ConditionStatus::True);

    let small = lane_route_status(Some(1), &report(&sources[..100]), &[], None);
    assert_eq!(small.services.len(), 100);
    assert_eq!(condition(&small, DEGRADED).status, ConditionStatus::False);
}
