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
