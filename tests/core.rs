//! The pure core, rule by rule: tags, subsets, slices, names, Dubbo rules and problems.

mod fixtures;

use std::collections::BTreeSet;

use fixtures::*;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::ResourceExt;
use laneway::api::{SubsetSource, TagRule};
use laneway::lanes::{
    naming, Config, ContainerPortInfo, Desired, Index, PodInfo, Problem, ServiceInfo, NOT_READY_TAG,
};

fn index(
    pods: Vec<PodInfo>,
    services: Vec<ServiceInfo>,
    routes: Vec<laneway::api::LaneRoute>,
    rules: Vec<TagRule>,
) -> Index {
    Index::from_objects(Config::default(), pods, services, routes, rules)
}

/// Everything laneway wants when one LaneRoute `gray` spans `order`.
fn gray_order(pods: Vec<PodInfo>, services: Vec<ServiceInfo>) -> Desired {
    index(
        pods,
        services,
        vec![route("gray", &["order"], &[], false)],
        vec![],
    )
    .desired(NS, now())
}

fn slices_of<'a>(d: &'a Desired, service: &str) -> Vec<&'a EndpointSlice> {
    d.slices
        .values()
        .filter(|s| s.labels().get("kubernetes.io/service-name").map(String::as_str) == Some(service))
        .map(|s| &*s.object)
        .collect()
}

/// Pod names in a Service's slices, sorted.
fn members(d: &Desired, service: &str) -> Vec<String> {
    let mut names: Vec<String> = slices_of(d, service)
        .iter()
        .flat_map(|s| s.endpoints.iter())
        .filter_map(|e| e.target_ref.as_ref()?.name.clone())
        .collect();
    names.sort();
    names
}

/// The pods that serve `lane` at `service`: those of the Service its status names.
fn lane_members(d: &Desired, service: &str, lane: &str) -> Vec<String> {
    let report = d.routes.values().find(|r| r.lane == lane).expect("lane");
    let s = report
        .services
        .iter()
        .find(|s| s.name == service)
        .expect("service");
    members(d, s.served_by.as_deref().expect("served"))
}

fn status(d: &Desired, route: &str, service: &str) -> laneway::api::ServiceLaneStatus {
    d.routes[route]
        .services
        .iter()
        .find(|s| s.name == service)
        .cloned()
        .expect("service status")
}

/// The problem reported with `reason`; there must be one.
fn problem<'a>(d: &'a Desired, reason: &str) -> &'a Problem {
    d.problems
        .iter()
        .find(|p| p.reason() == reason)
        .unwrap_or_else(|| panic!("no {reason} in {:?}", d.problems))
}

fn shop() -> Vec<PodInfo> {
    vec![
        pod("order-base-1", "order", None, "10.0.0.1"),
        pod("order-base-2", "order", None, "10.0.0.2"),
        pod("order-gray", "order", Some("gray"), "10.0.0.3"),
        pod("order-alice", "order", Some("dev-alice"), "10.0.0.4"),
        pod("user-base", "user", None, "10.0.1.1"),
        pod("user-featx", "user", Some("feature-x"), "10.0.1.2"),
        pod("pay-base", "pay", None, "10.0.2.1"),
    ]
}

fn shop_services() -> Vec<ServiceInfo> {
    vec![service("order"), service("user"), service("pay")]
}

#[test]
fn lane_subset_holds_only_the_lane_pods() {
    let d = gray_order(shop(), shop_services());
    assert_eq!(lane_members(&d, "order", "gray"), ["order-gray"]);
    let s = status(&d, "gray", "order");
    assert_eq!(s.source, SubsetSource::Lane);
    assert_eq!(s.endpoints, Some(1));
    assert_eq!(
        s.lane_service.as_deref(),
        Some(naming::lane_service_name("order", "gray").as_str())
    );
}

#[test]
fn baseline_service_holds_only_untagged_pods() {
    let d = gray_order(shop(), shop_services());
    assert_eq!(
        members(&d, &naming::baseline_service_name("order")),
        ["order-base-1", "order-base-2"]
    );
    assert_eq!(
        status(&d, "gray", "order").baseline_service.as_deref(),
        Some(naming::baseline_service_name("order").as_str())
    );
}

#[test]
fn a_service_without_lane_pods_falls_back_along_the_chain_in_order() {
    let routes = vec![
        route("dev-alice", &["order", "user", "pay"], &["feature-x"], false),
        route("feature-x", &["user"], &[], false),
    ];
    let idx = index(shop(), shop_services(), routes, vec![]);
    let d = idx.desired(NS, now());
    assert_eq!(status(&d, "dev-alice", "order").source, SubsetSource::Lane);
    assert_eq!(lane_members(&d, "order", "dev-alice"), ["order-alice"]);
    assert_eq!(
        status(&d, "dev-alice", "user").source,
        SubsetSource::Fallback("feature-x".into())
    );
    assert_eq!(lane_members(&d, "user", "dev-alice"), ["user-featx"]);
    assert_eq!(status(&d, "dev-alice", "pay").source, SubsetSource::Baseline);
    assert_eq!(lane_members(&d, "pay", "dev-alice"), ["pay-base"]);
    // By reference: the fallback lane's and the baseline Service serve, no copy is made.
    let user = status(&d, "dev-alice", "user");
    assert_eq!(
        user.served_by,
        Some(naming::lane_service_name("user", "feature-x"))
    );
    assert_eq!(user.lane_service, None);
    let pay = status(&d, "dev-alice", "pay");
    assert_eq!(pay.served_by, Some(naming::baseline_service_name("pay")));
    for (service, lane) in [("user", "dev-alice"), ("pay", "dev-alice"), ("pay", "feature-x")] {
        let name = naming::lane_service_name(service, lane);
        assert!(!d.services.contains_key(&name), "{name}");
        assert!(slices_of(&d, &name).is_empty(), "{name}");
    }
}

#[test]
fn a_baseline_pod_event_changes_only_the_baseline_slice_however_many_lanes_fall_back() {
    let lanes = ["dev-a", "dev-b", "dev-c", "dev-d"];
    let routes = lanes
        .iter()
        .map(|l| route(l, &["order", "pay"], &[], false))
        .collect();
    let pods = shop();
    let before = index(pods.clone(), shop_services(), routes, vec![]).desired(NS, now());
    let mut after_pods = pods;
    let pay = after_pods
        .iter_mut()
        .find(|p| p.name == "pay-base")
        .expect("pay-base");
    *pay = not_ready(pay.clone());
    let routes = lanes
        .iter()
        .map(|l| route(l, &["order", "pay"], &[], false))
        .collect();
    let after = index(after_pods, shop_services(), routes, vec![]).desired(NS, now());
    let changed: Vec<&String> = after
        .slices
        .iter()
        .filter(|(n, s)| before.slices.get(*n).map(|b| &b.hash) != Some(&s.hash))
        .map(|(n, _)| n)
        .collect();
    let baseline = naming::baseline_service_name("pay");
    assert_eq!(changed.len(), 1, "{changed:?}");
    assert!(changed[0].starts_with(&baseline), "{changed:?}");
    assert_eq!(
        before.services.keys().collect::<Vec<_>>(),
        after.services.keys().collect::<Vec<_>>()
    );
}

/// What the watch shows once laneway's Services of `d` are written.
fn written(idx: &mut Index, d: &Desired) {
    for svc in d.services.values() {
        idx.apply(ServiceInfo::from_service(svc).expect("service"));
    }
}

#[test]
fn a_lane_keeps_its_service_without_endpoints_while_it_includes_the_service() {
    let mut idx = index(
        shop(),
        shop_services(),
        vec![route("gray", &["order"], &[], false)],
        vec![],
    );
    let before = idx.desired(NS, now());
    written(&mut idx, &before);
    let own = naming::lane_service_name("order", "gray");
    let slice = slices_of(&before, &own)[0].name_any();

    // The lane's last pod leaves: its Service stays, and so does its slice (same name, no
    // endpoint), while requests go to baseline.
    idx.delete::<PodInfo>(NS, "order-gray");
    let d = idx.desired(NS, now());
    let s = status(&d, "gray", "order");
    assert_eq!(s.source, SubsetSource::Baseline);
    assert_eq!(s.served_by, Some(naming::baseline_service_name("order")));
    assert_eq!(s.lane_service.as_deref(), Some(own.as_str()));
    let slices = slices_of(&d, &own);
    assert_eq!(slices.len(), 1);
    assert_eq!(slices[0].name_any(), slice);
    assert!(slices[0].endpoints.is_empty());
    assert_eq!(
        d.services.keys().collect::<Vec<_>>(),
        before.services.keys().collect::<Vec<_>>()
    );

    // A pod coming back fills the same slice.
    idx.apply(pod("order-gray-2", "order", Some("gray"), "10.0.0.9"));
    let back = idx.desired(NS, now());
    assert_eq!(slices_of(&back, &own)[0].name_any(), slice);
    assert_eq!(members(&back, &own), ["order-gray-2"]);

    // The lane no longer includes the service: its Service goes.
    idx.delete::<PodInfo>(NS, "order-gray-2");
    idx.apply(route("gray", &["user"], &[], false));
    let d = idx.desired(NS, now());
    assert!(!d.services.contains_key(&own));
    assert!(slices_of(&d, &own).is_empty());
}

#[test]
fn fallback_chains_are_followed_transitively() {
    let mut pods = shop();
    pods.push(pod("pay-gray", "pay", Some("gray"), "10.0.2.9"));
    let routes = vec![
        route("dev-bob", &["pay"], &["feature-x"], false),
        route("feature-x", &["pay"], &["gray"], false),
    ];
    let d = index(pods, shop_services(), routes, vec![]).desired(NS, now());
    assert_eq!(
        status(&d, "dev-bob", "pay").source,
        SubsetSource::Fallback("gray".into())
    );
    assert_eq!(lane_members(&d, "pay", "dev-bob"), ["pay-gray"]);
}

#[test]
fn a_lane_served_by_another_tier_refers_to_it_and_that_tier_s_pod_events_leave_its_report_alone() {
    let routes = || {
        vec![
            route("feature-x", &["order", "user", "pay"], &[], false),
            route("dev-alice", &["order", "user", "pay"], &["feature-x"], false),
        ]
    };
    let idx = index(shop(), shop_services(), routes(), vec![]);
    let d = idx.desired(NS, now());
    let pay = status(&d, "dev-alice", "pay");
    assert_eq!(pay.source, SubsetSource::Baseline);
    assert_eq!(pay.endpoints, None, "baseline's count is on its Service");
    assert_eq!(pay.served_by, Some(naming::baseline_service_name("pay")));
    let user = status(&d, "dev-alice", "user");
    assert_eq!(user.source, SubsetSource::Fallback("feature-x".into()));
    assert_eq!(user.endpoints, None);
    assert_eq!(status(&d, "feature-x", "user").endpoints, Some(1));

    // Another baseline pod of pay and another feature-x pod of user come up: the lanes that
    // fall back there are reported as before; feature-x counts its own pod.
    let mut pods = shop();
    pods.push(pod("pay-base-2", "pay", None, "10.0.2.2"));
    pods.push(pod("user-featx-2", "user", Some("feature-x"), "10.0.1.3"));
    let after = index(pods, shop_services(), routes(), vec![]).desired(NS, now());
    assert_eq!(after.routes["dev-alice"].services, d.routes["dev-alice"].services);
    assert_eq!(status(&after, "feature-x", "user").endpoints, Some(2));
}

#[test]
fn a_strict_lane_never_falls_back() {
    let idx = index(
        shop(),
        shop_services(),
        vec![route("gray", &["pay"], &[], true)],
        vec![],
    );
    let d = idx.desired(NS, now());
    let s = status(&d, "gray", "pay");
    assert_eq!(s.source, SubsetSource::Empty);
    assert_eq!(s.endpoints, Some(0));
    assert!(lane_members(&d, "pay", "gray").is_empty());
    // Like Kubernetes, an empty Service still has one (placeholder) slice.
    assert_eq!(slices_of(&d, &naming::lane_service_name("pay", "gray")).len(), 1);
}

#[test]
fn not_ready_lane_pods_do_not_hold_the_lane_but_are_listed_not_ready() {
    let mut pods = shop();
    pods.retain(|p| p.name != "order-gray");
    pods.push(not_ready(pod("order-gray", "order", Some("gray"), "10.0.0.3")));
    let d = gray_order(pods.clone(), shop_services());
    assert_eq!(status(&d, "gray", "order").source, SubsetSource::Baseline);
    assert_eq!(
        lane_members(&d, "order", "gray"),
        ["order-base-1", "order-base-2"]
    );
    // The lane's own Service stays, with its pod not ready, for the route to switch back to.
    let own = status(&d, "gray", "order").lane_service.expect("lane Service");
    assert_eq!(own, naming::lane_service_name("order", "gray"));
    assert_eq!(members(&d, &own), ["order-gray"]);

    let strict = index(
        pods,
        shop_services(),
        vec![route("gray", &["order"], &[], true)],
        vec![],
    );
    let d = strict.desired(NS, now());
    assert_eq!(status(&d, "gray", "order").source, SubsetSource::Empty);
    let slice = &slices_of(&d, &naming::lane_service_name("order", "gray"))[0];
    let c = slice.endpoints[0].conditions.clone().expect("conditions");
    assert_eq!(
        (c.ready, c.serving, c.terminating),
        (Some(false), Some(false), Some(false))
    );
}

#[test]
fn endpoint_conditions_follow_kubernetes() {
    let pods = vec![
        pod("ready", "order", None, "10.0.0.1"),
        terminating(pod("leaving", "order", None, "10.0.0.2")),
        terminating(not_ready(pod("leaving-unready", "order", None, "10.0.0.3"))),
        not_ready(pod("starting", "order", None, "10.0.0.4")),
    ];
    let mut finished = pod("done", "order", None, "10.0.0.5");
    finished.terminal = true;
    let mut no_ip = pod("pending", "order", None, "10.0.0.6");
    no_ip.ips.clear();
    let mut all = pods;
    all.extend([finished, no_ip]);
    let d = gray_order(all, shop_services());
    let slices = slices_of(&d, &naming::baseline_service_name("order"));
    let cond = |name: &str| {
        let e = slices
            .iter()
            .flat_map(|s| &s.endpoints)
            .find(|e| e.target_ref.as_ref().and_then(|r| r.name.as_deref()) == Some(name))
            .unwrap_or_else(|| panic!("{name} missing"));
        let c = e.conditions.clone().expect("conditions");
        (
            c.ready.unwrap_or_default(),
            c.serving.unwrap_or_default(),
            c.terminating.unwrap_or_default(),
        )
    };
    assert_eq!(cond("ready"), (true, true, false));
    assert_eq!(cond("leaving"), (false, true, true));
    assert_eq!(cond("leaving-unready"), (false, false, true));
    assert_eq!(cond("starting"), (false, false, false));
    assert_eq!(
        members(&d, &naming::baseline_service_name("order")).len(),
        4,
        "finished and IP-less pods are left out"
    );
}

#[test]
fn publish_not_ready_addresses_marks_every_endpoint_ready() {
    let mut svc = service("order");
    svc.publish_not_ready_addresses = true;
    let pods = vec![not_ready(pod("starting", "order", None, "10.0.0.4"))];
    let d = gray_order(pods, vec![svc]);
    let s = &slices_of(&d, &naming::baseline_service_name("order"))[0];
    assert_eq!(
        s.endpoints[0].conditions.as_ref().and_then(|c| c.ready),
        Some(true)
    );
}

#[test]
fn slices_carry_ports_node_target_labels_and_owner() {
    let d = gray_order(shop(), shop_services());
    let name = naming::lane_service_name("order", "gray");
    let slice = slices_of(&d, &name)[0];
    assert_eq!(slice.address_type, "IPv4");
    let port = &slice.ports.as_ref().expect("ports")[0];
    assert_eq!(
        (port.name.as_deref(), port.port, port.protocol.as_deref()),
        (Some("web"), Some(8080), Some("TCP"))
    );
    let e = &slice.endpoints[0];
    assert_eq!(e.addresses, ["10.0.0.3"]);
    assert_eq!(e.node_name.as_deref(), Some("node-1"));
    let target = e.target_ref.as_ref().expect("targetRef");
    assert_eq!(
        (target.kind.as_deref(), target.uid.as_deref()),
        (Some("Pod"), Some("uid-order-gray"))
    );
    assert_eq!(
        slice.labels()["endpointslice.kubernetes.io/managed-by"],
        "controller.laneway.io"
    );
    let owners = slice.owner_references();
    assert_eq!(
        (owners[0].kind.as_str(), owners[0].name.as_str()),
        ("LaneRoute", "gray")
    );
    let svc = &d.services[&name];
    let spec = svc.spec.as_ref().expect("spec");
    assert!(spec.selector.is_none(), "lane Services are selectorless");
    assert_eq!(spec.ports.as_ref().expect("ports")[0].port, 80);
}

#[test]
fn pods_that_resolve_a_named_port_differently_go_to_different_slices() {
    let mut other = pod("order-base-3", "order", None, "10.0.0.9");
    other.ports[0].port = 9090;
    let mut missing = pod("order-base-4", "order", None, "10.0.0.10");
    missing.ports.retain(|p| p.name.as_deref() != Some("http"));
    let mut pods = shop();
    pods.extend([other, missing]);
    let d = gray_order(pods, shop_services());
    let slices = slices_of(&d, &naming::baseline_service_name("order"));
    let mut shapes: Vec<(Vec<i32>, usize)> = slices
        .iter()
        .map(|s| {
            (
                s.ports.iter().flatten().filter_map(|p| p.port).collect(),
                s.endpoints.len(),
            )
        })
        .collect();
    shapes.sort();
    assert_eq!(shapes, [(vec![], 1), (vec![8080], 2), (vec![9090], 1)]);
    assert!(d.problems.iter().any(|p| matches!(p,
        Problem::UnresolvedTargetPort { port, pod, .. } if port == "http" && pod == "order-base-4")));
}

/// A pod with other ports coming or going never takes a pod that stays out of a slice that
/// stays: it joins new slices (written before old ones go), so a reader that sees a slice's
/// update before another's create (kube-proxy) never misses it.
#[test]
fn a_port_set_coming_or_going_never_moves_the_others_out_of_their_slices() {
    let mut other = pod("order-base-3", "order", None, "10.0.0.9");
    other.ports[0].port = 7070;
    let mut with_other = shop();
    with_other.push(other);
    let name = naming::baseline_service_name("order");
    let one = gray_order(shop(), shop_services());
    let two = gray_order(with_other, shop_services());
    let addresses = |s: &EndpointSlice| -> BTreeSet<String> {
        s.endpoints.iter().flat_map(|e| e.addresses.clone()).collect()
    };
    for (from, to) in [(&one, &two), (&two, &one)] {
        let (from, to) = (slices_of(from, &name), slices_of(to, &name));
        let staying: BTreeSet<String> = to.iter().flat_map(|s| addresses(s)).collect();
        for old in &from {
            let Some(new) = to.iter().find(|s| s.name_any() == old.name_any()) else {
                continue;
            };
            let kept = addresses(new);
            for ip in addresses(old).intersection(&staying) {
                assert!(kept.contains(ip), "{ip} moved out of slice {}", old.name_any());
            }
        }
    }
    assert_eq!(slices_of(&two, &name).len(), 2, "one slice per port set");
}

#[test]
fn large_subsets_are_split_at_100_endpoints_and_by_address_family() {
    let mut pods = Vec::new();
    for i in 0..250 {
        let mut p = pod(
            &format!("order-{i:03}"),
            "order",
            None,
            &format!("10.1.{}.{}", i / 200, i % 200 + 1),
        );
        p.ips.push(format!("fd00::{:x}", i + 1));
        pods.push(p);
    }
    let mut svc = service("order");
    svc.ip_families = vec!["IPv4".into(), "IPv6".into()];
    let d = gray_order(pods, vec![svc]);
    let slices = slices_of(&d, &naming::baseline_service_name("order"));
    assert_eq!(slices.len(), 6);
    for family in ["IPv4", "IPv6"] {
        let sizes: Vec<usize> = slices
            .iter()
            .filter(|s| s.address_type == family)
            .map(|s| s.endpoints.len())
            .collect();
        assert_eq!(sizes.iter().sum::<usize>(), 250);
        assert!(sizes.iter().all(|n| *n <= 100), "{sizes:?}");
        for s in slices.iter().filter(|s| s.address_type == family) {
            assert!(s
                .endpoints
                .iter()
                .all(|e| e.addresses[0].contains(':') == (family == "IPv6")));
        }
    }
}

#[test]
fn static_lane_label_key_is_configurable() {
    let pods = vec![
        with_label(pod("order-base", "order", None, "10.0.0.1"), "version", "canary"),
        pod("order-ignored", "order", Some("canary"), "10.0.0.2"),
    ];
    let config = Config {
        lane_label: "version".into(),
        ..Config::default()
    };
    let idx = Index::from_objects(
        config,
        pods,
        shop_services(),
        vec![route("canary", &["order"], &[], false)],
        vec![],
    );
    let d = idx.desired(NS, now());
    assert_eq!(lane_members(&d, "order", "canary"), ["order-base"]);
}

#[test]
fn tag_rules_give_dynamic_tags_without_relabelling() {
    let pods = vec![
        pod("order-v1", "order", None, "10.0.0.1"),
        with_label(pod("order-v2", "order", None, "10.0.0.2"), "version", "v2"),
        with_label(pod("user-v2", "user", None, "10.0.1.2"), "version", "v2"),
    ];
    let rule = tag_rule("order", "order", &[("gray", &[("version", "v2")])], None);
    let idx = index(
        pods,
        shop_services(),
        vec![route("gray", &["order", "user"], &[], false)],
        vec![rule],
    );
    let d = idx.desired(NS, now());
    assert_eq!(lane_members(&d, "order", "gray"), ["order-v2"]);
    assert_eq!(members(&d, &naming::baseline_service_name("order")), ["order-v1"]);
    // The rule governs only app=order: user-v2 stays baseline.
    assert_eq!(status(&d, "gray", "user").source, SubsetSource::Baseline);
    let reports = idx.tag_rules(now());
    let report = &reports.reports[&laneway::lanes::ObjectKey::new(NS, "order")];
    assert_eq!((report.tags[0].pods, report.tagged_pods), (1, 1));
    assert_eq!(report.tags[0].pod_names, ["order-v2"]);
}

#[test]
fn editing_a_tag_rule_moves_pods_between_lanes() {
    let pods = vec![
        with_label(pod("order-a", "order", None, "10.0.0.1"), "version", "v2"),
        with_label(pod("order-b", "order", None, "10.0.0.2"), "version", "v3"),
    ];
    let mut idx = index(
        pods,
        shop_services(),
        vec![route("gray", &["order"], &[], false)],
        vec![tag_rule(
            "order",
            "order",
            &[("gray", &[("version", "v2")])],
            None,
        )],
    );
    assert_eq!(
        lane_members(&idx.desired(NS, now()), "order", "gray"),
        ["order-a"]
    );
    let affected = idx.apply(tag_rule(
        "order",
        "order",
        &[("gray", &[("version", "v3")])],
        None,
    ));
    assert!(affected.whole_namespace);
    let mut same = tag_rule("order", "order", &[("gray", &[("version", "v3")])], None);
    same.status = Some(Default::default());
    assert!(
        !idx.apply(same).whole_namespace,
        "a status write changes no output"
    );
    let d = idx.desired(NS, now());
    assert_eq!(lane_members(&d, "order", "gray"), ["order-b"]);
    assert_eq!(members(&d, &naming::baseline_service_name("order")), ["order-a"]);
    idx.delete::<TagRule>(NS, "order");
    assert_eq!(
        status(&idx.desired(NS, now()), "gray", "order").source,
        SubsetSource::Baseline
    );
}

#[test]
fn a_pod_given_two_lanes_is_reported_and_serves_both_but_never_baseline() {
    let pods = vec![
        with_label(pod("order-x", "order", Some("gray"), "10.0.0.1"), "version", "v2"),
        pod("order-base", "order", None, "10.0.0.2"),
    ];
    let rule = tag_rule("order", "order", &[("blue", &[("version", "v2")])], None);
    let routes = vec![
        route("gray", &["order"], &[], false),
        route("blue", &["order"], &[], false),
    ];
    let d = index(pods, shop_services(), routes, vec![rule]).desired(NS, now());
    assert_eq!(lane_members(&d, "order", "gray"), ["order-x"]);
    assert_eq!(lane_members(&d, "order", "blue"), ["order-x"]);
    assert_eq!(
        members(&d, &naming::baseline_service_name("order")),
        ["order-base"]
    );
    let conflict = problem(&d, "ConflictingTags");
    assert!(conflict.to_string().contains("order-x"), "{conflict}");
    assert_eq!(conflict.subjects().len(), 1);
}

#[test]
fn an_unknown_service_is_reported_and_the_rest_of_the_lane_still_works() {
    let idx = index(
        shop(),
        shop_services(),
        vec![route("gray", &["order", "ghost"], &[], false)],
        vec![],
    );
    let d = idx.desired(NS, now());
    assert!(d.problems.contains(&Problem::UnknownService {
        route: laneway::lanes::ObjectKey::new(NS, "gray"),
        service: "ghost".into()
    }));
    assert_eq!(status(&d, "gray", "ghost").source, SubsetSource::Empty);
    assert_eq!(lane_members(&d, "order", "gray"), ["order-gray"]);
}

#[test]
fn a_selectorless_service_is_reported() {
    let mut svc = service("legacy");
    svc.selector = None;
    let d = index(
        shop(),
        vec![svc],
        vec![route("gray", &["legacy"], &[], false)],
        vec![],
    )
    .desired(NS, now());
    assert!(d.problems.iter().any(|p| p.reason() == "ServiceWithoutSelector"));
    assert!(d.services.is_empty());
}

#[test]
fn a_fallback_cycle_is_reported_once_and_resolution_still_terminates() {
    let routes = vec![
        route("a", &["pay"], &["b"], false),
        route("b", &["pay"], &["c"], false),
        route("c", &["pay"], &["a"], false),
    ];
    let d = index(shop(), shop_services(), routes, vec![]).desired(NS, now());
    let cycles: Vec<&Problem> = d
        .problems
        .iter()
        .filter(|p| p.reason() == "FallbackCycle")
        .collect();
    assert_eq!(cycles.len(), 1, "{cycles:?}");
    assert!(
        cycles[0].to_string().contains("a -> b -> c -> a"),
        "{}",
        cycles[0]
    );
    assert_eq!(cycles[0].subjects().len(), 3);
    assert_eq!(status(&d, "a", "pay").source, SubsetSource::Baseline);
}

#[test]
fn a_second_route_for_the_same_lane_is_ignored_and_reported() {
    let mut second = route("gray-too", &["user"], &[], false);
    second.spec.lane = Some("gray".into());
    let d = index(
        shop(),
        shop_services(),
        vec![route("gray", &["order"], &[], false), second],
        vec![],
    )
    .desired(NS, now());
    assert!(d.routes["gray-too"].ignored);
    assert!(d
        .problems
        .iter()
        .any(|p| matches!(p, Problem::DuplicateLane { declared_by, .. } if declared_by == "gray")));
    assert!(!d
        .services
        .contains_key(&naming::lane_service_name("user", "gray")));
}

#[test]
fn a_user_service_holding_our_name_is_never_overwritten() {
    let mut squatter = service("squatter");
    squatter.name = naming::lane_service_name("order", "gray");
    let mut services = shop_services();
    services.push(squatter);
    let d = gray_order(shop(), services);
    assert!(d.problems.iter().any(|p| p.reason() == "NameTaken"));
    assert!(!d
        .services
        .contains_key(&naming::lane_service_name("order", "gray")));
    assert_eq!(status(&d, "gray", "order").lane_service, None);
}

#[test]
fn service_selector_picks_user_services_only() {
    let mut r = route("gray", &[], &[], false);
    r.spec.services = None;
    r.spec.service_selector = Some(selector(&[("tier", "backend")]));
    let mut managed = service("order--gray-abc");
    managed
        .labels
        .insert("app.kubernetes.io/managed-by".into(), "laneway".into());
    managed.owned_by_laneway = true;
    let mut impostor = service("impostor");
    impostor
        .labels
        .insert("app.kubernetes.io/managed-by".into(), "laneway".into());
    impostor.labels.insert("tier".into(), "backend".into());
    let mut services = shop_services();
    services.push(managed);
    services.push(impostor);
    let d = index(shop(), services, vec![r], vec![]).desired(NS, now());
    let names: Vec<&str> = d.routes["gray"]
        .services
        .iter()
        .map(|s| s.name.as_str())
        .collect();
    assert_eq!(
        names,
        ["impostor", "order", "pay", "user"],
        "a label alone does not make a Service laneway's"
    );
}

#[test]
fn an_invalid_selector_is_reported_on_its_field() {
    let mut rule = tag_rule("order", "order", &[], None);
    rule.spec.selector = invalid_selector();
    let d = index(shop(), shop_services(), vec![], vec![rule]).desired(NS, now());
    let p = problem(&d, "InvalidSelector");
    assert!(p.to_string().starts_with("spec.selector"), "{p}");
}

#[test]
fn an_expired_lane_produces_nothing_and_says_so() {
    let mut r = route("gray", &["order"], &[], false);
    r.spec.ttl = Some("60s".parse().expect("duration"));
    let d = index(shop(), shop_services(), vec![r.clone()], vec![]).desired(NS, now());
    assert!(d.routes["gray"].expired);
    assert!(d.services.is_empty() && d.slices.is_empty());

    r.spec.ttl = Some("72h".parse().expect("duration"));
    let d = index(shop(), shop_services(), vec![r], vec![]).desired(NS, now());
    assert!(!d.routes["gray"].expired);
    assert_eq!(d.next_expiry, d.routes["gray"].expires_at);
    assert!(!d.services.is_empty());
}

#[test]
fn a_pod_change_reports_only_the_services_and_rules_it_touches() {
    let rule = tag_rule(
        "order",
        "order",
        &[("gray", &[("version", "v2")])],
        Some("order-service"),
    );
    let mut idx = index(
        shop(),
        shop_services(),
        vec![route("gray", &["order", "user"], &[], false)],
        vec![rule],
    );
    let moved = with_label(pod("order-base-1", "order", None, "10.0.0.1"), "version", "v2");
    let affected = idx.apply(moved.clone());
    assert_eq!(affected.services.iter().collect::<Vec<_>>(), ["order"]);
    assert_eq!(affected.rules.iter().collect::<Vec<_>>(), ["order"]);
    assert!(!affected.whole_namespace);
    assert_eq!(
        idx.apply(moved),
        laneway::lanes::Affected {
            namespace: NS.into(),
            ..Default::default()
        }
    );
    let gone = idx.delete::<PodInfo>(NS, "user-base");
    assert_eq!(gone.services.iter().collect::<Vec<_>>(), ["user"]);
}

fn dubbo_rule(idx: &Index, name: &str) -> String {
    idx.tag_rules(now()).reports[&laneway::lanes::ObjectKey::new(NS, name)]
        .dubbo
        .as_ref()
        .expect("dubbo rule")
        .content
        .clone()
}

#[test]
fn dubbo_rule_lists_tagged_pods_and_never_untagged_ones() {
    let rule = tag_rule("order", "order", &[], Some("order-service"));
    let idx = index(shop(), shop_services(), vec![], vec![rule]);
    assert_eq!(
        dubbo_rule(&idx, "order"),
        "configVersion: v3.0\nkey: order-service\nforce: false\nenabled: true\nruntime: true\ntags:\n  - name: dev-alice\n    addresses: [\"10.0.0.4:20880\"]\n  - name: gray\n    addresses: [\"10.0.0.3:20880\"]\n"
    );
}

#[test]
fn dubbo_rule_lists_the_fallback_lane_for_a_lane_without_ready_pods() {
    let pods = vec![
        pod("order-base", "order", None, "10.0.0.1"),
        pod("order-featx", "order", Some("feature-x"), "10.0.0.2"),
    ];
    let routes = vec![
        route("dev-alice", &["order"], &["feature-x"], false),
        route("dev-bob", &["order"], &[], false),
    ];
    let rule = tag_rule("order", "order", &[], Some("order-service"));
    let content = dubbo_rule(&index(pods, shop_services(), routes, vec![rule]), "order");
    assert!(
        content.contains("  - name: dev-alice\n    addresses: [\"10.0.0.2:20880\"]\n"),
        "{content}"
    );
    assert!(
        content.contains("  - name: feature-x\n    addresses: [\"10.0.0.2:20880\"]\n"),
        "{content}"
    );
    assert!(
        !content.contains("dev-bob"),
        "a lane falling back to baseline is left to Dubbo: {content}"
    );
    assert!(!content.contains("10.0.0.1"), "{content}");
}

#[test]
fn dubbo_rule_parks_tagged_pods_that_are_not_ready() {
    let pods = vec![
        pod("order-base", "order", None, "10.0.0.1"),
        not_ready(pod("order-alice", "order", Some("dev-alice"), "10.0.0.2")),
        pod("order-gray", "order", Some("gray"), "10.0.0.3"),
        not_ready(pod("order-gray-2", "order", Some("gray"), "10.0.0.4")),
        not_ready(pod("order-starting", "order", None, "10.0.0.5")),
    ];
    let routes = vec![route("dev-alice", &["order"], &[], false)];
    let rule = tag_rule("order", "order", &[], Some("order-service"));
    let content = dubbo_rule(&index(pods, shop_services(), routes, vec![rule]), "order");
    // dev-alice has no ready pod: left to Dubbo's fallback (baseline); the not-ready pods of
    // both lanes are held under a tag no request carries, so untagged calls exclude them too.
    assert_eq!(
        content,
        format!("configVersion: v3.0\nkey: order-service\nforce: false\nenabled: true\nruntime: true\ntags:\n  - name: gray\n    addresses: [\"10.0.0.3:20880\"]\n  - name: {NOT_READY_TAG}\n    addresses: [\"10.0.0.2:20880\", \"10.0.0.4:20880\"]\n")
    );
}

#[test]
fn dubbo_port_name_is_resolved_per_pod_and_missing_ports_are_reported() {
    let mut rule = tag_rule("order", "order", &[], Some("order-service"));
    if let Some(d) = rule.spec.dubbo.as_mut() {
        d.port = None;
        d.port_name = Some("dubbo".into());
    }
    let mut odd = pod("order-odd", "order", Some("gray"), "10.0.0.8");
    odd.ports = vec![ContainerPortInfo {
        name: Some("dubbo".into()),
        port: 20881,
        protocol: "TCP".into(),
    }];
    let mut none = pod("order-none", "order", Some("gray"), "10.0.0.9");
    none.ports.clear();
    let mut pods = shop();
    pods.extend([odd, none]);
    let idx = index(pods, shop_services(), vec![], vec![rule]);
    let content = dubbo_rule(&idx, "order");
    assert!(
        content.contains("addresses: [\"10.0.0.3:20880\", \"10.0.0.8:20881\"]"),
        "{content}"
    );
    assert!(idx
        .tag_rules(now())
        .problems
        .iter()
        .any(|p| p.reason() == "DubboPortMissing"));
}

#[test]
fn dubbo_rule_with_force_and_without_tags() {
    let mut rule = tag_rule("pay", "pay", &[], Some("pay-service"));
    rule.spec.force = true;
    let content = dubbo_rule(&index(shop(), shop_services(), vec![], vec![rule]), "pay");
    assert_eq!(
        content,
        "configVersion: v3.0\nkey: pay-service\nforce: true\nenabled: false\nruntime: true\ntags: []\n"
    );
}

#[test]
fn one_application_is_published_by_one_tag_rule() {
    let a = tag_rule("a", "order", &[], Some("order-service"));
    let b = tag_rule("b", "order", &[], Some("order-service"));
    let rules = index(shop(), shop_services(), vec![], vec![b, a]).tag_rules(now());
    assert!(rules.reports[&laneway::lanes::ObjectKey::new(NS, "a")]
        .dubbo
        .is_some());
    assert!(rules.reports[&laneway::lanes::ObjectKey::new(NS, "b")]
        .dubbo
        .is_none());
    assert!(rules
        .problems
        .iter()
        .any(|p| p.reason() == "DuplicateApplication"));
}

/// Each problem of the TagRules as `reason: message`.
fn reported(rules: &laneway::lanes::TagRules) -> Vec<String> {
    rules
        .problems
        .iter()
        .map(|p| format!("{}: {p}", p.reason()))
        .collect()
}

/// `rule` created at second `at`, in namespace `ns`.
fn created_in(mut rule: TagRule, ns: &str, at: i64) -> TagRule {
    rule.metadata.namespace = Some(ns.into());
    rule.metadata.creation_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
        k8s_openapi::jiff::Timestamp::from_second(at).expect("time"),
    ));
    rule
}

#[test]
fn an_application_stays_with_the_tag_rule_that_published_it_first_whatever_the_namespace() {
    let first = created_in(tag_rule("order", "order", &[], Some("shop-service")), "shop", 100);
    let late = created_in(
        tag_rule("order", "order", &[], Some("shop-service")),
        "a-team",
        200,
    );
    let rules = index(vec![], shop_services(), vec![], vec![late, first]).tag_rules(now());
    let key = |ns: &str| laneway::lanes::ObjectKey::new(ns, "order");
    assert!(rules.reports[&key("shop")].dubbo.is_some());
    assert!(rules.reports[&key("a-team")].dubbo.is_none());
    let reported = reported(&rules);
    assert_eq!(
        reported,
        ["DuplicateApplication: spec.dubbo.application: application \"shop-service\" is already published by TagRule shop/order; this rule is not published"]
    );
    let subjects: Vec<_> = rules.problems.iter().flat_map(|p| p.subjects()).collect();
    assert_eq!(subjects, [(laneway::lanes::Kind::TagRule, key("a-team"))]);
}

/// `order` as a guarded Service: no `spec.selector`, its pods named in `laneway.io/selector`.
fn guarded(name: &str, annotation: &str, keep_selector: bool) -> ServiceInfo {
    let svc = k8s_openapi::api::core::v1::Service {
        metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
            name: Some(name.into()),
            namespace: Some(NS.into()),
            uid: Some(format!("uid-svc-{name}")),
            annotations: Some(labels(&[("laneway.io/selector", annotation)])),
            ..Default::default()
        },
        spec: Some(k8s_openapi::api::core::v1::ServiceSpec {
            selector: keep_selector.then(|| labels(&[("app", name)])),
            ports: service(name).ports.into(),
            ..Default::default()
        }),
        status: None,
    };
    ServiceInfo::from_service(&svc).expect("named")
}

#[test]
fn a_guarded_service_gets_its_own_slices_with_untagged_pods_only_and_is_its_own_baseline() {
    let services = vec![
        guarded("order", "app=order", false),
        service("user"),
        service("pay"),
    ];
    let d = gray_order(shop(), services.clone());
    assert_eq!(members(&d, "order"), ["order-base-1", "order-base-2"]);
    for slice in slices_of(&d, "order") {
        let owner = &slice.metadata.owner_references.as_ref().expect("owner")[0];
        assert_eq!((owner.kind.as_str(), owner.name.as_str()), ("Service", "order"));
        assert_eq!(
            slice
                .labels()
                .get("endpointslice.kubernetes.io/managed-by")
                .map(String::as_str),
            Some("controller.laneway.io")
        );
    }
    let baseline = naming::baseline_service_name("order");
    assert!(
        !d.services.contains_key(&baseline),
        "no separate baseline Service"
    );
    assert!(members(&d, &baseline).is_empty());
    let s = status(&d, "gray", "order");
    assert_eq!(s.baseline_service.as_deref(), Some("order"));
    assert_eq!(lane_members(&d, "order", "gray"), ["order-gray"]);

    // No lane needed: a guarded Service in no LaneRoute is guarded all the same.
    let alone = index(shop(), services, vec![], vec![]).desired(NS, now());
    assert_eq!(members(&alone, "order"), ["order-base-1", "order-base-2"]);
    assert!(alone.problems.is_empty(), "{:?}", alone.problems);
}

#[test]
fn a_pod_event_of_a_guarded_service_rewrites_its_slice() {
    let services = vec![guarded("order", "app=order", false)];
    let idx = index(shop(), services.clone(), vec![], vec![]);
    let mut d = idx.desired(NS, now());
    let mut pods = shop();
    pods.retain(|p| p.name != "order-base-2");
    pods.push(pod("order-base-3", "order", None, "10.0.0.9"));
    let idx = index(pods, services, vec![], vec![]);
    idx.refresh(&mut d, NS, &["order".to_owned()].into(), now());
    assert_eq!(members(&d, "order"), ["order-base-1", "order-base-3"]);
    assert_eq!(d, idx.desired(NS, now()));
}

#[test]
fn a_guard_that_guards_nothing_is_reported_on_the_service_and_its_lanes() {
    for (svc, reason, says, kept) in [
        (
            guarded("order", "app in (order)", false),
            "InvalidGuard",
            "is not key=value",
            true,
        ),
        (
            guarded("order", "app=order", true),
            "GuardWithSelector",
            "also has spec.selector",
            false,
        ),
    ] {
        let d = gray_order(shop(), vec![svc, service("user")]);
        let p = problem(&d, reason);
        let text = p.to_string();
        assert!(
            text.contains("laneway.io/selector") && text.contains(says),
            "{text}"
        );
        let subjects = p.subjects();
        assert!(subjects
            .iter()
            .any(|(k, o)| *k == laneway::kind::Kind::Service && o.name == "order"));
        assert!(subjects
            .iter()
            .any(|(k, o)| *k == laneway::kind::Kind::LaneRoute && o.name == "gray"));
        assert!(
            slices_of(&d, "order").is_empty(),
            "laneway writes no slice of its own"
        );
        assert_eq!(d.plan.guard_kept.contains("order"), kept, "{text}");
    }
}

#[test]
fn an_unreadable_guard_keeps_the_selector_the_service_had() {
    let mut idx = index(
        shop(),
        vec![guarded("order", "app=order", false)],
        vec![route("gray", &["order"], &[], false)],
        vec![],
    );
    idx.apply(guarded("order", "app=order,", false));
    let d = idx.desired(NS, now());
    assert_eq!(members(&d, "order"), ["order-base-1", "order-base-2"]);
    assert_eq!(lane_members(&d, "order", "gray"), ["order-gray"]);
    let text = problem(&d, "InvalidGuard").to_string();
    assert!(text.contains("keeps selecting app=order"), "{text}");
    assert_eq!(d.problems.len(), 1, "{:?}", d.problems);
}

#[test]
fn requests_in_no_lane_go_to_a_guarded_service_itself() {
    let mut idx = index(
        shop(),
        vec![guarded("order", "app=order", false)],
        vec![route("gray", &["order"], &[], false)],
        vec![],
    );
    let entry: laneway::api::LaneEntry = serde_json::from_value(serde_json::json!({
        "apiVersion": "laneway.io/v1alpha1",
        "kind": "LaneEntry",
        "metadata": {"name": "mesh", "namespace": NS, "uid": "uid-mesh"},
        "spec": {"mesh": {"services": ["order"]}},
    }))
    .expect("entry");
    idx.apply(entry);
    let d = idx.desired(NS, now());
    let backends: Vec<String> = d
        .http_routes
        .values()
        .flat_map(|r| r.spec.rules.iter().flatten())
        .flat_map(|r| r.backend_refs.iter().flatten())
        .map(|b| b.name.clone())
        .collect();
    assert_eq!(
        backends,
        [naming::lane_service_name("order", "gray"), "order".to_owned()]
    );
}

fn nacos_rule(name: &str, app: &str, service: &str) -> TagRule {
    let mut rule = tag_rule(name, app, &[], None);
    rule.spec.nacos = Some(laneway::api::NacosNamingSpec {
        service: service.into(),
        group: "DEFAULT_GROUP".into(),
        port: None,
        port_name: None,
        lane_key: "laneway.lane".into(),
    });
    rule
}

/// Each marked instance as `ip lanes [own lane]`.
fn marks(rules: &laneway::lanes::TagRules, name: &str) -> Vec<String> {
    let report = &rules.reports[&laneway::lanes::ObjectKey::new(NS, name)];
    let marks = report.nacos.as_ref().expect("nacos marks");
    marks
        .instances
        .iter()
        .map(|(addr, m)| {
            let lanes = m[laneway::lanes::LANES_KEY]
                .clone()
                .expect("lanes key is always set");
            match m["laneway.lane"].as_deref() {
                Some(own) => format!("{} {lanes:?} {own}", addr.ip),
                None => format!("{} {lanes:?}", addr.ip),
            }
        })
        .collect()
}

fn nacos_index(pods: Vec<PodInfo>, routes: Vec<laneway::api::LaneRoute>, rules: Vec<TagRule>) -> Index {
    let config = Config {
        nacos_marks: true,
        ..Config::default()
    };
    Index::from_objects(config, pods, shop_services(), routes, rules)
}

#[test]
fn nacos_marks_say_which_lanes_each_instance_serves_after_fallback() {
    let pods = vec![
        pod("order-base", "order", None, "10.0.0.1"),
        not_ready(pod("order-base-2", "order", None, "10.0.0.2")),
        pod("order-featx", "order", Some("feature-x"), "10.0.0.3"),
        not_ready(pod("order-alice", "order", Some("dev-alice"), "10.0.0.4")),
        pod("user-base", "user", None, "10.0.1.1"),
    ];
    let routes = vec![
        route("dev-alice", &["order"], &["feature-x"], false),
        route("dev-bob", &["order"], &[], false),
        route("secure", &["order"], &[], true),
    ];
    let rules =
        nacos_index(pods, routes, vec![nacos_rule("order", "order", "order-service")]).tag_rules(now());
    // dev-alice has no ready pod and falls back to feature-x; dev-bob to baseline; the strict
    // lane has no instance at all; pods that are not ready serve nothing; user is not governed.
    assert_eq!(
        marks(&rules, "order"),
        [
            "10.0.0.1 \"baseline,dev-bob\"",
            "10.0.0.2 \"\"",
            "10.0.0.3 \"dev-alice,feature-x\" feature-x",
            "10.0.0.4 \"\" dev-alice",
        ]
    );
    let target = &rules.reports[&laneway::lanes::ObjectKey::new(NS, "order")]
        .nacos
        .as_ref()
        .expect("marks")
        .target;
    assert_eq!(target.key(), "DEFAULT_GROUP@@order-service");
    assert_eq!(target.keys, ["laneway.lanes", "laneway.lane"]);
}

#[test]
fn forced_nacos_marks_keep_tagged_calls_off_baseline() {
    let mut rule = nacos_rule("order", "order", "order-service");
    rule.spec.force = true;
    let routes = vec![route("dev-bob", &["order"], &[], false)];
    let pods = vec![
        pod("order-base", "order", None, "10.0.0.1"),
        pod("order-gray", "order", Some("gray"), "10.0.0.3"),
    ];
    let rules = nacos_index(pods, routes, vec![rule]).tag_rules(now());
    assert_eq!(
        marks(&rules, "order"),
        ["10.0.0.1 \"baseline\"", "10.0.0.3 \"gray\" gray"]
    );
}

#[test]
fn nacos_marks_need_a_nacos_server_a_port_and_one_owner() {
    let unconfigured = index(
        shop(),
        shop_services(),
        vec![],
        vec![nacos_rule("order", "order", "order-service")],
    )
    .tag_rules(now());
    assert!(unconfigured.reports.values().all(|r| r.nacos.is_none()));
    assert!(unconfigured
        .problems
        .iter()
        .any(|p| p.reason() == "NacosNotConfigured" && p.to_string().starts_with("spec.nacos:")));

    let mut named = nacos_rule("a", "order", "order-service");
    if let Some(n) = named.spec.nacos.as_mut() {
        n.port_name = Some("web".into());
    }
    let mut web = pod("order-web", "order", None, "10.0.0.9");
    web.ports.push(ContainerPortInfo {
        name: Some("web".into()),
        port: 18080,
        protocol: "TCP".into(),
    });
    let mut pods = shop();
    pods.push(web);
    let rules = nacos_index(
        pods,
        vec![],
        vec![named, nacos_rule("b", "user", "order-service")],
    )
    .tag_rules(now());
    let report = rules.reports[&laneway::lanes::ObjectKey::new(NS, "a")]
        .nacos
        .as_ref()
        .expect("marks");
    let ports: Vec<_> = report.instances.keys().map(|a| (a.ip.as_str(), a.port)).collect();
    assert_eq!(ports, [("10.0.0.9", Some(18080))]);
    assert!(rules.problems.iter().any(|p| p.reason() == "NacosPortMissing"));
    assert!(rules.reports[&laneway::lanes::ObjectKey::new(NS, "b")]
        .nacos
        .is_none());
    assert!(rules
        .problems
        .iter()
        .any(|p| p.reason() == "DuplicateNacosService"));
}

#[test]
fn a_nacos_service_stays_with_the_tag_rule_that_marked_it_first_whatever_the_namespace() {
    let first = created_in(nacos_rule("order", "order", "order-service"), "shop", 100);
    let late = created_in(nacos_rule("order", "order", "order-service"), "a-team", 200);
    let rules = nacos_index(vec![], vec![], vec![late, first]).tag_rules(now());
    let key = |ns: &str| laneway::lanes::ObjectKey::new(ns, "order");
    assert!(rules.reports[&key("shop")].nacos.is_some());
    assert!(rules.reports[&key("a-team")].nacos.is_none());
    let reported = reported(&rules);
    assert_eq!(
        reported,
        ["DuplicateNacosService: spec.nacos.service: Nacos service \"DEFAULT_GROUP@@order-service\" is already marked by TagRule shop/order; this rule marks nothing"]
    );
}

/// The lanes (name, weight) of the entry document `key` that the TagRule `name` publishes.
fn entry_lanes(idx: &Index, name: &str, key: &str) -> Vec<(String, i32)> {
    let report = &idx.tag_rules(now()).reports[&laneway::lanes::ObjectKey::new(NS, name)];
    let Some(entry) = report.entries.iter().find(|e| e.key == key) else {
        return Vec::new();
    };
    let doc: serde_json::Value = serde_json::from_str(&entry.content).expect("entry document is JSON");
    assert_eq!(doc["key"], key.trim_end_matches(".laneway-entry"));
    doc["lanes"]
        .as_array()
        .expect("lanes")
        .iter()
        .map(|l| {
            (
                l["name"].as_str().expect("name").to_owned(),
                l["weight"].as_i64().expect("weight") as i32,
            )
        })
        .collect()
}

fn weighted(
    mut r: laneway::api::LaneRoute,
    weight: i32,
    rpc: Option<serde_json::Value>,
) -> laneway::api::LaneRoute {
    r.spec.weight = weight;
    r.spec.rpc_entry = rpc.map(|v| serde_json::from_value(v).expect("rpcEntry"));
    r
}

#[test]
fn entry_documents_list_the_lanes_that_draw_calls_to_the_application() {
    let routes = vec![
        weighted(route("gray", &["order", "user"], &[], false), 10, None),
        // draws only by condition: listed with weight 0
        weighted(
            route("dev-alice", &["order"], &[], false),
            30,
            Some(
                serde_json::json!({"applyWeight": false, "conditions": [{"attachment": "user_id", "values": "1~100"}]}),
            ),
        ),
        // includes user only: not a lane of order's calls
        weighted(route("feature-x", &["user"], &[], false), 20, None),
        // neither weight nor condition: draws nothing
        route("blue", &["order"], &["gray"], false),
    ];
    let rule = tag_rule("order", "order", &[], Some("order-service"));
    let idx = index(shop(), shop_services(), routes, vec![rule]);
    assert_eq!(
        entry_lanes(&idx, "order", "order-service.laneway-entry"),
        [("dev-alice".to_string(), 0), ("gray".to_string(), 10)]
    );
    let doc = &idx.tag_rules(now()).reports[&laneway::lanes::ObjectKey::new(NS, "order")].entries[0];
    assert!(doc.content.contains("\"values\": \"1~100\""), "{}", doc.content);
}

#[test]
fn a_lane_without_a_ready_instance_in_its_chain_draws_nothing() {
    let pods = vec![
        pod("order-base", "order", None, "10.0.0.1"),
        not_ready(pod("order-gray", "order", Some("gray"), "10.0.0.2")),
        pod("user-featx", "user", Some("feature-x"), "10.0.1.2"),
    ];
    let routes = vec![
        weighted(route("gray", &["order"], &[], false), 10, None),
        // no instance of its own anywhere, but its fallback has one: drawn, and served there
        weighted(route("dev-bob", &["order"], &["feature-x"], false), 5, None),
    ];
    let rule = tag_rule("order", "order", &[], Some("order-service"));
    let idx = index(pods, shop_services(), routes, vec![rule]);
    assert_eq!(
        entry_lanes(&idx, "order", "order-service.laneway-entry"),
        [("dev-bob".to_string(), 5)]
    );
}

#[test]
fn no_drawing_lane_publishes_no_entry_document_and_a_nacos_service_gets_its_own() {
    let rule = tag_rule("order", "order", &[], Some("order-service"));
    let idx = index(
        shop(),
        shop_services(),
        vec![route("gray", &["order"], &[], false)],
        vec![rule],
    );
    let reports = idx.tag_rules(now());
    assert!(reports.reports[&laneway::lanes::ObjectKey::new(NS, "order")]
        .entries
        .is_empty());

    let mut rule = tag_rule("order", "order", &[], None);
    rule.spec.nacos =
        Some(serde_json::from_value(serde_json::json!({"service": "order-web"})).expect("nacos"));
    let routes = vec![weighted(route("gray", &["order"], &[], false), 25, None)];
    let idx = Index::from_objects(
        Config {
            nacos_marks: true,
            ..Default::default()
        },
        shop(),
        shop_services(),
        routes,
        vec![rule],
    );
    assert_eq!(
        entry_lanes(&idx, "order", "order-web.laneway-entry"),
        [("gray".to_string(), 25)]
    );
}

/// The owners (tier and the lanes whose messages it handles) in the TagRule `name`'s message
/// ownership documents, one per name it publishes under.
fn message_owners(idx: &Index, name: &str) -> Vec<(String, laneway::lanes::Owners)> {
    let report = &idx.tag_rules(now()).reports[&laneway::lanes::ObjectKey::new(NS, name)];
    report
        .messages
        .iter()
        .map(|m| (m.name.clone(), m.owners.clone()))
        .collect()
}

fn owners(pairs: &[(&str, &[&str])]) -> laneway::lanes::Owners {
    pairs
        .iter()
        .map(|(t, lanes)| (t.to_string(), lanes.iter().map(|l| l.to_string()).collect()))
        .collect()
}

fn consumers(mut rule: TagRule) -> TagRule {
    rule.spec.messages = true;
    rule
}

#[test]
fn each_lane_s_messages_are_owned_by_the_tier_that_serves_it_and_baseline_owns_the_rest() {
    let pods = vec![
        pod("order-base", "order", None, "10.0.0.1"),
        pod("order-alice", "order", Some("dev-alice"), "10.0.0.2"),
        not_ready(pod("order-gray", "order", Some("gray"), "10.0.0.3")),
    ];
    let routes = vec![
        route("dev-alice", &["order"], &[], false),
        // no consumer of its own: falls back to dev-alice's
        route("dev-carol", &["order"], &["dev-alice"], false),
        // its consumer is not ready: baseline
        route("gray", &["order"], &[], false),
        // strict, without consumers: baseline all the same (messages never wait)
        route("dev-dan", &["order"], &[], true),
    ];
    let rule = consumers(tag_rule("order", "order", &[], Some("order-service")));
    let idx = index(pods, shop_services(), routes, vec![rule]);
    assert_eq!(
        message_owners(&idx, "order"),
        [(
            "order-service".to_string(),
            owners(&[("dev-alice", &["dev-alice", "dev-carol"])])
        )]
    );
}

#[test]
fn message_documents_are_published_only_for_tag_rules_that_ask() {
    let rule = tag_rule("order", "order", &[], Some("order-service"));
    let routes = vec![route("dev-alice", &["order"], &[], false)];
    let idx = index(shop(), shop_services(), routes.clone(), vec![rule.clone()]);
    assert_eq!(message_owners(&idx, "order"), []);
    // a dynamic tag makes a tier too
    let mut rule = consumers(tag_rule(
        "order",
        "order",
        &[("blue", &[("laneway.io/lane", "gray")])],
        Some("order-service"),
    ));
    rule.spec.nacos =
        Some(serde_json::from_value(serde_json::json!({"service": "order-web"})).expect("nacos"));
    let idx = nacos_index(shop(), routes, vec![rule]);
    let expected = owners(&[
        ("blue", &["blue"]),
        ("dev-alice", &["dev-alice"]),
        ("gray", &["gray"]),
    ]);
    assert_eq!(
        message_owners(&idx, "order"),
        [
            ("order-service".to_string(), expected.clone()),
            ("order-web".to_string(), expected)
        ]
    );
}
