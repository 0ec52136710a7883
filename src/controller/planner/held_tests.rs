//! What a plan holds back, fed hand-built namespaces (see `plan_tests.rs`): Services a route
//! names or named lately, slices of a Service whose guard cannot be read, and the slices of a
//! lane switching tier until the gateways have caught up, and outputs whose last write failed
//! until their back-off ends.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;

use tokio::time::Instant;

use super::tests::*;
use super::*;
use crate::lanes::{Content, RouteInfo, ServiceInfo};
use crate::writer::OutputKind;

#[tokio::test]
async fn a_service_a_route_still_names_or_named_lately_is_kept_and_the_rest_goes() {
    let mut w = World::new(true);
    w.applied();
    let named = "order--old-named";
    let released = "order--old-released";
    let unwanted = "order--old-gone";
    for name in [named, released, unwanted] {
        w.live
            .insert(target(OutputKind::Service, name), Live::hashed(Some("h".into())));
    }
    w.live.insert(
        target(OutputKind::HttpRoute, "web-0"),
        Live::hashed(Some("h".into())),
    );
    let mut info = RouteInfo {
        namespace: NS.into(),
        name: "web-0".into(),
        ours: true,
        ..Default::default()
    };
    info.backends.insert(named.into());
    w.index.apply(info);
    w.released.insert(released.into());
    let until = Instant::now() + Duration::from_secs(30);
    w.hold_until = Some(until);
    let d = planned_deletes(&w);
    assert_eq!(
        applied_targets(&d.routes),
        [target(OutputKind::HttpRoute, "web-0")]
    );
    assert_eq!(
        applied_targets(&d.others),
        [target(OutputKind::Service, unwanted)]
    );
    assert!(d.kept);
    assert_eq!(w.input().held().wake_at(), Some(until));
}

/// `web`, guarded (`guard`) and with one pod.
fn guarded_web(w: &mut World, guard: crate::lanes::Guard) {
    let mut web = service("web");
    web.selector =
        (guard == crate::lanes::Guard::Guarded).then(|| BTreeMap::from([("app".into(), "web".into())]));
    web.guard = guard;
    w.index.apply(web);
    w.index.apply(pod("web-1", "web", None, "10.0.0.9"));
    w.resolve();
}

#[tokio::test]
async fn a_guarded_services_slice_carries_the_trigger_time_and_stays_while_its_guard_is_unreadable() {
    let mut w = World::new(true);
    guarded_web(&mut w, crate::lanes::Guard::Guarded);
    let seen = Timestamp::from_second(1_800_000_000).expect("time");
    w.triggers.insert("web".into(), seen);
    let input = w.input();
    let compared = Compared::new(&w.desired, &w.live);
    let adding = BTreeSet::new();
    let mut owned = Owned::new(&input.space, &adding);
    let steps = applies(&input.space, &compared, &input.held(), &mut owned);
    let web_slice = steps
        .iter()
        .find_map(|s| match &s.op {
            Op::Apply {
                output: Output::Slice(slice),
                ..
            } if slice.labels().get(SERVICE_NAME_LABEL).map(String::as_str) == Some("web") => {
                Some(slice.clone())
            }
            _ => None,
        })
        .expect("web's own slice");
    assert_eq!(
        web_slice.annotations().get(TRIGGER_TIME_ANNOTATION),
        Some(&seen.to_string())
    );
    w.applied();
    let slice_target = target(OutputKind::EndpointSlice, &web_slice.name_any());

    // Unreadable, as laneway first sees it after a restart: it knows no selector to keep.
    w.index.delete::<ServiceInfo>(NS, "web");
    guarded_web(
        &mut w,
        crate::lanes::Guard::Invalid("laneway.io/selector: bad".into()),
    );
    let compared = Compared::new(&w.desired, &w.live);
    assert!(compared.unwanted.contains(&&slice_target));
    assert!(!applied_targets(&planned_deletes(&w).others).contains(&slice_target));

    guarded_web(&mut w, crate::lanes::Guard::None);
    assert!(applied_targets(&planned_deletes(&w).others).contains(&slice_target));
}

/// The deletions a plan of `w` makes, and what it keeps for the gateways.
/// The live routes of `w` as the index sees them.
fn routes_seen(w: &mut World) {
    let routes: Vec<RouteInfo> = w
        .desired
        .http_routes
        .values()
        .filter_map(RouteInfo::from_route)
        .collect();
    for info in routes {
        w.index.apply(info);
    }
}

#[tokio::test]
async fn a_lane_switching_tier_keeps_its_slices_as_the_gateways_saw_them_until_the_grace_passes() {
    let mut w = World::new(true);
    w.index.apply(edge_entry("web", "order"));
    w.resolve();
    w.applied();
    routes_seen(&mut w);
    let lane = naming::lane_service_name("order", "gray");
    let lane_slices = |w: &World| -> Vec<Target> {
        let input = w.input();
        let compared = Compared::new(&w.desired, &w.live);
        applied_targets(&applies(
            &input.space,
            &compared,
            &input.held(),
            &mut Owned::new(&input.space, &BTreeSet::new()),
        ))
        .into_iter()
        .filter(|t| {
            t.kind == OutputKind::EndpointSlice && naming::slice_service(&t.key.name) == Some(lane.as_str())
        })
        .collect()
    };

    // The lane's pod turns not ready: its route goes to baseline, and the lane's slice, which
    // the gateways still route to, is not rewritten yet.
    let mut gray = pod("order-gray", "order", Some("gray"), "10.0.0.2");
    gray.ready = false;
    w.index.apply(gray);
    w.resolve();
    assert!(
        w.desired.services.contains_key(&lane),
        "the lane keeps its Service"
    );
    assert!(lane_slices(&w).is_empty(), "rewritten while a route names it");
    {
        let input = w.input();
        let compared = Compared::new(&w.desired, &w.live);
        let routes = route_applies(
            &input.space,
            input.outside.routes_served(),
            &compared,
            &[],
            &mut Owned::new(&input.space, &BTreeSet::new()),
        );
        assert_eq!(routes.len(), 1, "the route switches first");
    }

    // The gateways saw the route without it: held for the grace, then written.
    routes_seen(&mut w);
    w.released.insert(lane.clone());
    let until = Instant::now() + Duration::from_secs(30);
    w.hold_until = Some(until);
    assert!(lane_slices(&w).is_empty(), "rewritten within the grace");
    let input = w.input();
    assert_eq!(input.held().wake_at(), Some(until));
    w.released.clear();
    w.hold_until = None;
    assert_eq!(lane_slices(&w).len(), 1, "written once the grace passed");
}

#[tokio::test]
async fn an_output_whose_write_failed_waits_for_its_back_off_unless_its_content_changes() {
    let mut w = World::new(true);
    w.applied();
    w.index.apply(edge_entry("web", "order"));
    w.resolve();
    let (name, route) = w.desired.http_routes.iter().next().expect("route");
    let (name, hash) = (name.clone(), route.content_hash());
    let now = Instant::now();
    w.retries
        .failed(target(OutputKind::HttpRoute, &name), Some(hash), now, None);
    // The baseline Service changed too, and its last write failed with that content.
    let baseline = naming::baseline_service_name("order");
    w.live.insert(
        target(OutputKind::Service, &baseline),
        Live::hashed(Some("old".into())),
    );
    let baseline_hash = w.desired.services[&baseline].hash.clone();
    w.retries.failed(
        target(OutputKind::Service, &baseline),
        Some(baseline_hash),
        now,
        None,
    );
    let planned = |w: &World, at: Instant| {
        let input = w.input();
        let mut compared = Compared::new(&w.desired, &w.live);
        compared.hold_back(&input.space, at);
        let adding = BTreeSet::new();
        let mut owned = Owned::new(&input.space, &adding);
        let services = applies(&input.space, &compared, &input.held(), &mut owned);
        let routes = route_applies(&input.space, true, &compared, &services, &mut owned);
        let written = applied_targets(&services)
            .into_iter()
            .chain(applied_targets(&routes));
        written
            .filter(|t| t.kind != OutputKind::EndpointSlice)
            .collect::<Vec<_>>()
    };
    assert_eq!(planned(&w, now), [], "both wait for their back-off");
    let later = now + Duration::from_secs(1);
    let both = [
        target(OutputKind::Service, &baseline),
        target(OutputKind::HttpRoute, &name),
    ];
    assert_eq!(planned(&w, later), both, "tried again once it has passed");

    // Only the Service's back-off runs: the route that names it waits for it.
    w.retries.succeeded(&target(OutputKind::HttpRoute, &name));
    assert_eq!(planned(&w, now), [], "the route waits for the Service it names");
    // New content of the Service is written at once, and the route after it.
    let mut order = service("order");
    order.ports[0].name = Some("web".into());
    w.index.apply(order);
    w.resolve();
    let written = planned(&w, now);
    assert!(
        both.iter().all(|t| written.contains(t)),
        "new content goes at once: {written:?}"
    );
}
