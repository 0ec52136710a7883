use super::*;
use crate::api::SubsetSource;

/// dev-alice as in the chain test: bff from baseline, its own order, user from feature-x.
fn alice() -> Vec<Expected> {
    [
        ("gateway-bff", SubsetSource::Baseline),
        ("order", SubsetSource::Lane),
        ("user", SubsetSource::Fallback("feature-x".into())),
    ]
    .map(|(service, source)| Expected {
        service: service.into(),
        source: Some(source),
    })
    .to_vec()
}

fn hop(service: &str, pod: &str, lane: Option<&str>, learnt: &str, own: Option<&str>) -> Hop {
    Hop {
        app: None,
        pod: Some(pod.into()),
        lane: lane.map(Into::into),
        learnt: learnt.into(),
        own: own.map(Into::into),
        service: Some(service.into()),
    }
}

fn clean_chain() -> Vec<Hop> {
    vec![
        hop("gateway-bff", "bff-0", Some("dev-alice"), "header", None),
        hop(
            "order",
            "order-alice",
            Some("dev-alice"),
            "tag",
            Some("dev-alice"),
        ),
        hop("user", "user-fx", Some("dev-alice"), "tag", Some("feature-x")),
    ]
}

#[test]
fn a_chain_that_keeps_the_lane_on_the_expected_tiers_is_clean() {
    let v = judge("dev-alice", &alice(), clean_chain());
    assert_eq!(v.finding, Finding::Clean);
    assert_eq!(
        v.expected,
        [
            Some("Baseline".into()),
            Some("Lane".into()),
            Some("Fallback:feature-x".into())
        ]
    );
    let text = render(&v);
    assert!(
        text.ends_with("clean: every hop carried lane dev-alice, each on the tier laneway expected\n"),
        "{text}"
    );
}

#[test]
fn the_first_hop_in_no_lane_is_named_with_the_hop_that_called_it() {
    let mut hops = clean_chain();
    hops[2] = hop("user", "user-0", None, "none", None);
    let v = judge("dev-alice", &alice(), hops);
    assert_eq!(v.finding, Finding::LaneLost { at: 2, from: Some(1) });
    assert!(render(&v).ends_with(
        "lane dev-alice lost at hop 3: user (pod user-0) got no lane from order (pod order-alice)\n"
    ));
}

#[test]
fn a_lane_lost_comes_before_a_tier_that_differs_later() {
    let mut hops = clean_chain();
    hops[1] = hop("order", "order-0", Some("gray"), "tag", None);
    hops[2] = hop("user", "user-0", Some("dev-alice"), "tag", None);
    let v = judge("dev-alice", &alice(), hops);
    assert_eq!(v.finding, Finding::LaneLost { at: 1, from: Some(0) });
}

#[test]
fn a_pod_of_another_tier_than_the_status_names_differs() {
    let mut hops = clean_chain();
    hops[1] = hop("order", "order-0", Some("dev-alice"), "tag", None);
    let v = judge("dev-alice", &alice(), hops);
    assert_eq!(v.finding, Finding::TierDiffers { at: 1 });
    assert!(render(&v).ends_with(
        "tier differs at hop 2: order (pod order-0) is not on the tier laneway expected (Lane)\n"
    ));
}

#[test]
fn a_chain_that_stops_short_names_the_last_hop_and_the_service_never_reached() {
    let mut hops = clean_chain();
    hops.pop();
    let v = judge("dev-alice", &alice(), hops);
    assert_eq!(
        v.finding,
        Finding::NotReached {
            after: Some(1),
            service: "user".into()
        }
    );
    assert!(render(&v).ends_with(
        "lane dev-alice never reached user: the last hop to report was hop 2 order (pod order-alice), whose onward call carried no probe\n"
    ));
    let none = judge("dev-alice", &alice(), Vec::new());
    assert_eq!(
        none.finding,
        Finding::NotReached {
            after: None,
            service: "gateway-bff".into()
        }
    );
}

#[test]
fn a_hop_outside_the_lanes_services_is_shown_and_only_its_lane_judged() {
    let mut hops = clean_chain();
    hops.insert(
        1,
        hop("audit", "audit-0", Some("dev-alice"), "header", Some("gray")),
    );
    hops[1].service = None;
    hops[1].app = Some("audit".into());
    let v = judge("dev-alice", &alice(), hops);
    assert_eq!(v.finding, Finding::Clean);
    assert_eq!(v.expected[1], None);
    assert!(
        render(&v).contains("\n2    audit        audit-0      dev-alice  header  -"),
        "{}",
        render(&v)
    );
}

#[test]
fn hop_records_read_as_the_java_libraries_write_them() {
    let hops: Vec<Hop> = serde_json::from_str(
        r#"[{"app":"order-service","pod":"order-0","lane":"dev-alice","learnt":"tag","own":null}]"#,
    )
    .expect("records");
    assert_eq!(
        hops,
        [Hop {
            app: Some("order-service".into()),
            pod: Some("order-0".into()),
            lane: Some("dev-alice".into()),
            learnt: "tag".into(),
            own: None,
            service: None
        }]
    );
}
