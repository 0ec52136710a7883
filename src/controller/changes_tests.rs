//! What watched changes do to the controller's state, fed by hand: no API server (the client
//! is never called, hence the Tokio runtime).

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

use super::super::planner::Live;
use super::super::watch::Change;
use super::super::{Centres, Controller, Settings};
use crate::api::LaneRoute;
use crate::kind::Kind;
use crate::lanes::{Config, ObjectKey, ServiceInfo, MANAGED_BY_LABEL, MANAGED_BY_VALUE};
use crate::leader::Fence;
use crate::metrics::Metrics;
use crate::publish::{ConfigMapCentre, Timing};
use crate::writer::{Limits, Target, Writer};
use crate::writer::{OutputKind, OwnKind};

const NS: &str = "shop";

fn controller() -> Controller {
    let client = kube::Client::try_from(kube::Config::new("http://127.0.0.1:9".parse().expect("url")))
        .expect("client");
    let metrics = Arc::new(Metrics::default());
    let fence = Fence::new(Duration::from_secs(1), metrics.clone());
    let limits = Limits {
        concurrency: 1,
        qps: 0.0,
        burst: 1,
    };
    let writer = Writer::new(client.clone(), fence, metrics, limits, "test");
    let centres = Centres {
        configmap: Arc::new(ConfigMapCentre::new(client.clone(), "laneway", "rules")),
        all: Vec::new(),
        timing: Timing::default(),
        registry: None,
        mark_timing: Default::default(),
    };
    let settings = Settings {
        config: Config::default(),
        namespaces: Vec::new(),
        debounce: Duration::from_millis(10),
        route_grace: Duration::from_secs(1),
        status_entries_per_second: crate::controller::COUNT_BUDGET,
    };
    Controller::new(client, settings, centres, writer, Arc::default())
}

fn key(name: &str) -> ObjectKey {
    ObjectKey::new(NS, name)
}

fn service(name: &str, managed: bool) -> ServiceInfo {
    let mut labels = std::collections::BTreeMap::new();
    if managed {
        labels.insert(MANAGED_BY_LABEL.to_owned(), MANAGED_BY_VALUE.to_owned());
    }
    ServiceInfo {
        namespace: NS.into(),
        name: name.into(),
        labels,
        selector: (!managed).then(|| [("app".to_owned(), name.to_owned())].into()),
        owned_by_laneway: managed,
        ..Default::default()
    }
}

/// A Service as the watch shows it: written by laneway with `hash`, at version 1.
fn live(hash: &str) -> Live {
    Live {
        hash: Some(hash.to_owned()),
        version: Some("1".to_owned()),
        ..Live::default()
    }
}

fn route(name: &str) -> LaneRoute {
    super::super::planner::tests::route(name, &["order"], false)
}

#[tokio::test]
async fn laneway_s_own_service_is_only_compared_again_and_a_user_service_recomputes_the_namespace() {
    let mut c = controller();
    c.handle(Change::Service(
        key("order--baseline-0"),
        Some((service("order--baseline-0", true), live("h1"))),
    ));
    let target = Target {
        kind: OutputKind::Service,
        key: key("order--baseline-0"),
    };
    assert_eq!(c.live[NS].get(&target), Some(&live("h1")));
    let dirty = c.spaces[NS].schedule.pending().cloned().expect("rechecked");
    assert!(!dirty.whole && dirty.services.is_empty());

    c.handle(Change::Service(
        key("order"),
        Some((service("order", false), Live::hashed(None))),
    ));
    assert!(c.spaces[NS].schedule.pending().expect("marked").whole);
    assert!(c.rules_dirty);
}

#[tokio::test]
async fn a_lane_route_s_finalizer_is_only_planned_for_and_a_new_spec_recomputes_the_namespace() {
    let mut c = controller();
    c.handle(Change::LaneRoute(key("gray"), Some(route("gray"))));
    c.spaces.get_mut(NS).expect("space").schedule.start();
    c.rules_dirty = false;

    let mut finalized = route("gray");
    finalized.metadata.finalizers = Some(vec![crate::writer::FINALIZER.to_owned()]);
    c.handle(Change::LaneRoute(key("gray"), Some(finalized.clone())));
    let space = c.spaces.get_mut(NS).expect("space");
    let dirty = space.schedule.pending().cloned().expect("rechecked");
    space.schedule.start();
    assert!(!dirty.whole && dirty.services.is_empty());
    assert!(!c.rules_dirty);

    let mut respecified = finalized;
    respecified.spec.services = Some(vec!["order".to_owned(), "cart".to_owned()]);
    c.handle(Change::LaneRoute(key("gray"), Some(respecified)));
    assert!(c.spaces[NS].schedule.pending().expect("marked").whole);
}

#[tokio::test]
async fn a_broken_watch_of_httproutes_tells_whether_the_gateway_api_is_served() {
    let mut c = controller();
    c.handle(Change::Broken(Kind::HttpRoute, true));
    assert_eq!(c.gateways.api, Some(false));
    c.handle(Change::Resynced(Kind::HttpRoute, Vec::new()));
    assert_eq!(c.gateways.api, Some(true));
    // Other kinds' watches say nothing about the Gateway API.
    c.handle(Change::Broken(Kind::Pod, true));
    assert_eq!(c.gateways.api, Some(true));
}

#[tokio::test]
async fn a_broken_watch_of_laneway_s_kinds_makes_every_namespace_verify_its_statuses() {
    let mut c = controller();
    c.handle(Change::LaneRoute(key("gray"), Some(route("gray"))));
    c.spaces.get_mut(NS).expect("space").schedule.start();
    c.handle(Change::Broken(Kind::LaneRoute, false));
    let space = &c.spaces[NS];
    assert!(space.schedule.verifies() && space.schedule.pending().is_some());
}

#[tokio::test]
async fn a_lane_route_being_deleted_leaves_the_index_and_waits_for_its_finalizer() {
    let mut c = controller();
    c.handle(Change::LaneRoute(key("gray"), Some(route("gray"))));
    assert!(c.index.lane_route(NS, "gray").is_some());
    let mut deleting = route("gray");
    deleting.metadata.deletion_timestamp = Some(Time(Timestamp::now()));
    c.handle(Change::LaneRoute(key("gray"), Some(deleting)));
    assert!(c.index.lane_route(NS, "gray").is_none());
    assert!(c.deleting.contains_key(&(OwnKind::LaneRoute, key("gray"))));
    c.handle(Change::LaneRoute(key("gray"), None));
    assert!(c.deleting.is_empty());
}

#[tokio::test]
async fn a_relist_handles_what_went_missing_as_deletions() {
    let mut c = controller();
    c.handle(Change::LaneRoute(key("gray"), Some(route("gray"))));
    c.handle(Change::Resynced(
        Kind::LaneRoute,
        vec![Change::LaneRoute(key("gray"), None)],
    ));
    assert!(c.index.lane_route(NS, "gray").is_none());
}

#[tokio::test]
async fn an_entry_or_a_previewed_lane_recomputes_every_namespace_whose_entries_claim_hostnames() {
    let mut c = controller();
    let entry = |ns: &str, preview: bool| -> crate::api::LaneEntry {
        let mut spec = serde_json::json!({"hostnames": ["shop.example.com"], "rules": []});
        if preview {
            spec["previewHostnames"] = serde_json::json!(["{lane}.example.com"]);
        }
        serde_json::from_value(serde_json::json!({
            "apiVersion": "laneway.io/v1alpha1", "kind": "LaneEntry",
            "metadata": {"name": "web", "namespace": ns}, "spec": spec,
        }))
        .expect("entry")
    };
    let web = |ns: &str| ObjectKey::new(ns, "web");
    c.handle(Change::LaneEntry(web("a"), Some(entry("a", true))));
    c.spaces.get_mut("a").expect("space").schedule.start();
    c.handle(Change::LaneEntry(web("b"), Some(entry("b", false))));
    assert!(c.spaces["a"].schedule.pending().expect("marked").whole);
    for ns in ["a", "b"] {
        c.spaces.get_mut(ns).expect("space").schedule.start();
    }
    let mut lane = route("dev-a");
    lane.metadata.namespace = Some("b".into());
    c.handle(Change::LaneRoute(ObjectKey::new("b", "dev-a"), Some(lane)));
    assert!(
        c.spaces["a"].schedule.pending().is_none(),
        "b gives no lane a preview hostname"
    );
    let mut lane = route("dev-a");
    lane.metadata.namespace = Some("a".into());
    c.handle(Change::LaneRoute(ObjectKey::new("a", "dev-a"), Some(lane)));
    assert!(c.spaces["a"].schedule.pending().expect("marked").whole);
}

fn with_status(mut route: LaneRoute, reason: &str) -> LaneRoute {
    let ready = crate::api::Condition::new(
        crate::api::ConditionType::Ready,
        false,
        crate::api::Reason::Resolved,
        "",
    );
    route.status = Some(crate::api::LaneRouteStatus {
        conditions: vec![crate::api::Condition {
            reason: reason.to_owned(),
            ..ready
        }],
        ..Default::default()
    });
    route
}

#[tokio::test]
async fn a_status_written_by_anyone_else_is_looked_at_again_and_laneway_s_own_is_not() {
    let mut c = controller();
    c.handle(Change::LaneRoute(key("gray"), Some(route("gray"))));
    let mine = with_status(route("gray"), "Resolved");
    let status = mine.status.clone().expect("status");
    let space = c.spaces.get_mut(NS).expect("space");
    space.schedule.start();
    space.sent_statuses.insert(
        (OwnKind::LaneRoute, "gray".to_owned()),
        crate::writer::Status::LaneRoute(status).content_hash(),
    );
    c.handle(Change::LaneRoute(key("gray"), Some(mine)));
    assert!(c.spaces[NS].schedule.pending().is_none(), "laneway's own status");

    c.handle(Change::LaneRoute(
        key("gray"),
        Some(with_status(route("gray"), "Hacked")),
    ));
    let dirty = c.spaces[NS].schedule.pending().cloned().expect("rechecked");
    assert!(!dirty.whole);
}

#[tokio::test]
async fn a_refused_status_write_is_told_once_by_a_warning_event_and_a_conflict_not_at_all() {
    let mut c = controller();
    c.handle(Change::LaneRoute(key("gray"), Some(route("gray"))));
    let refused = |message: &str, code| crate::writer::Report {
        namespace: NS.to_owned(),
        tail: true,
        results: vec![(
            crate::writer::Subject::Status(OwnKind::LaneRoute, key("gray")),
            Err(crate::writer::WriteError::Rejected {
                code,
                message: message.to_owned(),
            }),
        )],
    };
    let events = |c: &Controller| -> Vec<String> {
        c.spaces[NS]
            .events
            .iter()
            .filter_map(|op| match op {
                crate::writer::Op::Event { reason, note, .. } => Some(format!("{reason}: {note}")),
                _ => None,
            })
            .collect()
    };
    c.reported(refused("the object has been modified", 409), Duration::ZERO);
    assert!(events(&c).is_empty());
    for _ in 0..3 {
        c.reported(refused("etcdserver: request is too large", 500), Duration::ZERO);
    }
    assert_eq!(
        events(&c),
        ["StatusRejected: status could not be written: etcdserver: request is too large"]
    );
}

#[tokio::test]
async fn an_unreadable_lane_route_is_told_once_and_its_last_readable_version_stays() {
    let mut c = controller();
    c.handle(Change::LaneRoute(
        key("gray"),
        Some(with_status(route("gray"), "Resolved")),
    ));
    let unreadable = || {
        let reference = k8s_openapi::api::core::v1::ObjectReference {
            name: Some("gray".to_owned()),
            resource_version: Some("8".to_owned()),
            ..Default::default()
        };
        Change::Unreadable(
            key("gray"),
            Box::new(super::super::lenient::Unreadable {
                kind: Kind::LaneRoute,
                reference,
                error: "spec.ttl: invalid duration".to_owned(),
            }),
        )
    };
    c.handle(unreadable());
    c.handle(unreadable());
    let notes: Vec<String> = c.spaces[NS]
        .events
        .iter()
        .filter_map(|op| match op {
            crate::writer::Op::Event { reason, note, .. } => Some(format!("{reason}: {note}")),
            _ => None,
        })
        .collect();
    assert_eq!(
        notes,
        ["Unreadable: LaneRoute shop/gray cannot be read, so laneway leaves it as it was (every other LaneRoute is resolved as usual): spec.ttl: invalid duration"]
    );
    let kept = c.index.lane_route(NS, "gray").expect("last readable version");
    assert_eq!(kept.metadata.resource_version.as_deref(), Some("8"));
    assert!(kept.status.is_none(), "its status is written again");
}
