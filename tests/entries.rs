//! The HTTPRoutes of LaneEntries, computed by the pure core: which Service each lane's requests
//! go to, weights, header rules, limits, conflicts and the mesh form.

mod fixtures;

use fixtures::*;
use kube::ResourceExt;
use laneway::api::{EntryMode, LaneEntry, LaneRoute};
use laneway::gateway::HttpRoute;
use laneway::lanes::{naming, Config, Desired, Index, Kind, PodInfo, RouteInfo};
use serde_json::json;

fn entry(name: &str, spec: serde_json::Value) -> LaneEntry {
    let mut e: LaneEntry = serde_json::from_value(json!({
        "apiVersion": "laneway.io/v1alpha1", "kind": "LaneEntry",
        "metadata": {"name": name, "namespace": NS, "uid": format!("uid-le-{name}")},
        "spec": spec,
    }))
    .expect("entry");
    e.metadata.namespace = Some(NS.into());
    e
}

fn edge(name: &str, service: &str) -> LaneEntry {
    entry(
        name,
        json!({
            "parentRefs": [{"name": "public", "namespace": "infra", "sectionName": "http"}],
            "hostnames": ["shop.example.com"],
            "rules": [{"matches": [{"path": {"type": "PathPrefix", "value": "/"}}], "backend": {"service": service, "port": 80}}],
        }),
    )
}

/// order: 2 baseline, 1 gray, 1 dev-alice; user: 1 baseline, 1 feature-x; pay: 1 baseline;
/// bff: 1 baseline, 1 feature-x.
fn shop() -> Vec<PodInfo> {
    vec![
        pod("order-1", "order", None, "10.0.0.1"),
        pod("order-2", "order", None, "10.0.0.2"),
        pod("order-gray", "order", Some("gray"), "10.0.0.3"),
        pod("order-alice", "order", Some("dev-alice"), "10.0.0.4"),
        pod("user-1", "user", None, "10.0.1.1"),
        pod("user-featx", "user", Some("feature-x"), "10.0.1.2"),
        pod("pay-1", "pay", None, "10.0.2.1"),
        pod("bff-1", "bff", None, "10.0.3.1"),
        pod("bff-featx", "bff", Some("feature-x"), "10.0.3.2"),
    ]
}

fn services() -> Vec<laneway::lanes::ServiceInfo> {
    ["order", "user", "pay", "bff"]
        .iter()
        .map(|s| service(s))
        .collect()
}

fn resolve(routes: Vec<LaneRoute>, entries: Vec<LaneEntry>, http: Vec<RouteInfo>) -> (Index, Desired) {
    let mut idx = Index::from_objects(Config::default(), shop(), services(), routes, vec![]);
    for e in entries {
        idx.apply(e);
    }
    for r in http {
        idx.apply(r);
    }
    let d = idx.desired(NS, now());
    (idx, d)
}

/// Rules of every route of the desired state as (matches' headers, backends with weights).
/// A rule's header matches and its backends with their weights.
type Rule = (Vec<(String, String)>, Vec<(String, Option<i32>)>);

/// The rules that enter lanes by header and the rules for requests in no lane, not those of
/// lane links, cookies ([`link_rules`]) or preview hostnames.
fn rules(d: &Desired) -> Vec<Rule> {
    d.http_routes
        .values()
        .filter(|r| !is_preview(r))
        .flat_map(|r| r.spec.rules.clone().unwrap_or_default())
        .filter(|rule| link_part(rule).is_none())
        .map(|rule| {
            let headers = rule
                .matches
                .iter()
                .flatten()
                .flat_map(|m| m.headers.clone().unwrap_or_default())
                .map(|h| (h.name, h.value))
                .collect();
            let backends = rule
                .backend_refs
                .iter()
                .flatten()
                .map(|b| (b.name.clone(), b.weight))
                .collect();
            (headers, backends)
        })
        .collect()
}

fn lane_rule(d: &Desired, value: &str) -> Vec<(String, Option<i32>)> {
    rules(d)
        .into_iter()
        .find(|(h, _)| h.iter().any(|(_, v)| v == value))
        .map(|(_, b)| b)
        .unwrap_or_default()
}

fn default_rule(d: &Desired) -> Vec<(String, Option<i32>)> {
    rules(d)
        .into_iter()
        .find(|(h, _)| h.is_empty())
        .map(|(_, b)| b)
        .unwrap_or_default()
}

fn weighted(name: &str, services: &[&str], fallback: &[&str], weight: i32) -> LaneRoute {
    let mut r = route(name, services, fallback, false);
    r.spec.weight = weight;
    r
}

#[test]
fn each_lane_header_goes_to_the_first_lane_of_its_chain_that_has_the_service() {
    let routes = vec![
        route("gray", &["order"], &[], false),
        route("feature-x", &["user", "bff"], &[], false),
        route("dev-alice", &["order"], &["feature-x"], false),
    ];
    let (_, d) = resolve(routes, vec![edge("web", "bff")], vec![]);
    let bff = |lane: Option<&str>| match lane {
        Some(l) => naming::lane_service_name("bff", l),
        None => naming::baseline_service_name("bff"),
    };
    assert_eq!(lane_rule(&d, "feature-x"), [(bff(Some("feature-x")), None)]);
    assert_eq!(
        lane_rule(&d, "dev-alice"),
        [(bff(Some("feature-x")), None)],
        "dev-alice falls back to feature-x, which has bff"
    );
    assert_eq!(
        lane_rule(&d, "gray"),
        [(bff(None), None)],
        "gray has no bff and no fallback: baseline"
    );
    assert_eq!(default_rule(&d), [(bff(None), None)]);
    // The entry's backend gets a baseline Service even where no lane includes it.
    assert!(d.services.contains_key(&naming::baseline_service_name("bff")));
    let route = d.http_routes.values().next().expect("route");
    assert_eq!(route.labels()["laneway.io/entry"], "web");
    assert_eq!(route.owner_references()[0].kind, "LaneEntry");
    let parent = &route.spec.parent_refs.as_ref().expect("parents")[0];
    assert_eq!(
        (parent.name.as_str(), parent.namespace.as_deref()),
        ("public", Some("infra"))
    );
    assert_eq!(
        route.spec.hostnames.as_deref(),
        Some(&["shop.example.com".to_owned()][..])
    );
    assert_eq!(d.routes["dev-alice"].entries, ["web"]);
}

#[test]
fn weights_split_requests_in_no_lane_and_set_the_lane_header() {
    let routes = vec![
        weighted("gray", &["order"], &[], 20),
        weighted("feature-x", &["order"], &[], 5),
    ];
    let (_, d) = resolve(routes, vec![edge("web", "order")], vec![]);
    let default = default_rule(&d);
    assert_eq!(
        default,
        [
            (naming::baseline_service_name("order"), Some(75)),
            (naming::baseline_service_name("order"), Some(5)),
            (naming::lane_service_name("order", "gray"), Some(20)),
        ],
        "feature-x has no order of its own: its share goes to baseline's Service, with its header"
    );
    let rule = d
        .http_routes
        .values()
        .flat_map(|r| r.spec.rules.clone().unwrap_or_default())
        .find(|r| {
            r.matches
                .iter()
                .flatten()
                .all(|m| m.headers.is_none() && m.query_params.is_none())
        });
    let gray_ref = rule
        .and_then(|r| r.backend_refs)
        .and_then(|refs| refs.into_iter().find(|b| b.name.contains("--gray-")))
        .expect("gray backend");
    let set = serde_json::to_value(&gray_ref.filters).expect("filters");
    assert_eq!(
        set[0]["requestHeaderModifier"]["set"][0],
        json!({"name": "x-lane", "value": "gray"})
    );
    assert_eq!(d.entries["web"].baseline_weight, Some(75));
}

#[test]
fn an_entry_that_applies_no_weights_sends_requests_in_no_lane_to_baseline() {
    let mut internal = edge("internal", "order");
    internal.spec.apply_weights = Some(false);
    let (_, d) = resolve(
        vec![weighted("gray", &["order"], &[], 20)],
        vec![internal],
        vec![],
    );
    assert_eq!(default_rule(&d), [(naming::baseline_service_name("order"), None)]);
    assert_eq!(
        lane_rule(&d, "gray"),
        [(naming::lane_service_name("order", "gray"), None)],
        "the lane's header still enters it"
    );
    assert_eq!(d.entries["internal"].baseline_weight, Some(100));
    assert_eq!(d.entries["internal"].lanes[0].weight, 0);
}

#[test]
fn weights_above_100_leave_baseline_nothing_and_an_empty_strict_lane_takes_no_share() {
    let mut strict = weighted("dev-bob", &["order"], &[], 30);
    strict.spec.strict = true;
    let routes = vec![
        weighted("gray", &["order"], &[], 80),
        weighted("feature-x", &["order"], &[], 40),
        strict,
    ];
    let (_, d) = resolve(routes, vec![edge("web", "order")], vec![]);
    let default = default_rule(&d);
    assert_eq!(default[0], (naming::baseline_service_name("order"), Some(0)));
    assert!(
        !default.iter().any(|(n, _)| n.contains("--dev-bob-")),
        "{default:?}"
    );
    // Its header still reaches its (empty) lane Service: the gateway answers 503 there.
    assert_eq!(
        lane_rule(&d, "dev-bob"),
        [(naming::lane_service_name("order", "dev-bob"), None)]
    );
}

#[test]
fn weights_over_100_are_reported_on_the_entry_with_the_shares_the_lanes_get() {
    let routes = vec![
        weighted("gray", &["order"], &[], 80),
        weighted("feature-x", &["order"], &[], 80),
    ];
    let (_, d) = resolve(routes, vec![edge("web", "order")], vec![]);
    let reported: Vec<String> = d
        .problems
        .iter()
        .filter(|p| p.reason() == laneway::api::Reason::WeightsOver100)
        .map(|p| p.to_string())
        .collect();
    assert_eq!(
        reported,
        [
            "spec.weight of the lanes' LaneRoutes: feature-x (80), gray (80) add up to 160, over 100; \
          requests in no lane go to feature-x 50%, gray 50% and none to baseline"
        ]
    );
    let (_, d) = resolve(
        vec![
            weighted("gray", &["order"], &[], 60),
            weighted("feature-x", &["order"], &[], 40),
        ],
        vec![edge("web", "order")],
        vec![],
    );
    assert!(d.problems.is_empty(), "{:?}", d.problems);
}

#[test]
fn a_service_whose_every_ready_pod_is_tagged_is_reported_as_an_empty_baseline() {
    let (mut idx, d) = resolve(
        vec![route("gray", &["order"], &[], false)],
        vec![edge("web", "pay")],
        vec![],
    );
    assert!(d.problems.is_empty(), "{:?}", d.problems);
    let mut everything = tag_rule("everything", "pay", &[("gray", &[])], None);
    everything.spec.tags[0].pod_selector = Default::default();
    idx.apply(everything);
    let d = idx.desired(NS, now());
    let empty: Vec<_> = d
        .problems
        .iter()
        .filter(|p| p.reason() == laneway::api::Reason::BaselineEmpty)
        .collect();
    assert_eq!(empty.len(), 1, "{:?}", d.problems);
    assert_eq!(
        empty[0].to_string(),
        "Service \"pay\": every ready pod is in a lane (gray), so its baseline is empty and the \
         requests in no lane that a LaneEntry sends to it are refused (503)"
    );
    let subjects: Vec<(Kind, String)> = empty[0]
        .subjects()
        .into_iter()
        .map(|(k, o)| (k, o.name))
        .collect();
    assert_eq!(
        subjects,
        [
            (Kind::LaneEntry, "web".to_owned()),
            (Kind::LaneRoute, "gray".to_owned()),
            (Kind::TagRule, "everything".to_owned())
        ]
    );
}

#[test]
fn a_lane_match_replaces_the_header_and_the_selector_limits_the_lanes() {
    let mut gray = route("gray", &["order"], &[], false);
    gray.spec.match_ =
        serde_json::from_value(json!({"headers": [{"name": "X-Canary", "value": "yes"}]})).ok();
    gray.metadata.labels = Some([("exposure".to_owned(), "public".to_owned())].into());
    let alice = route("dev-alice", &["order"], &[], false);
    let mut e = edge("web", "order");
    e.spec.lane_selector = serde_json::from_value(json!({"matchLabels": {"exposure": "public"}})).ok();
    let (_, d) = resolve(vec![gray, alice], vec![e], vec![]);
    let all = rules(&d);
    assert!(
        all.iter()
            .any(|(h, _)| h == &[("x-canary".to_owned(), "yes".to_owned())]),
        "{all:?}"
    );
    assert!(
        !all.iter().any(|(h, _)| h.iter().any(|(_, v)| v == "dev-alice")),
        "dev-alice is not exposed: {all:?}"
    );
    assert_eq!(d.entries["web"].lanes.len(), 1);
    assert!(d.routes["dev-alice"].entries.is_empty());
}

#[test]
fn conflicting_inputs_are_reported_naming_the_field() {
    let mut gray = route("gray", &["order"], &[], false);
    gray.spec.match_ = serde_json::from_value(json!({"headers": [{"name": "x-lane", "value": "blue"}]})).ok();
    let blue = route("blue", &["order"], &[], false);
    let mut uses_header = edge("web", "order");
    uses_header.spec.rules.as_mut().expect("rules")[0].matches[0].headers =
        serde_json::from_value(json!([{"name": "X-Lane", "value": "x"}])).expect("headers");
    let ghost = edge("ghost", "nope");
    let foreign: HttpRoute = serde_json::from_value(json!({
        "apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
        "metadata": {"name": "legacy", "namespace": "other"},
        "spec": {"parentRefs": [{"name": "public", "namespace": "infra"}], "hostnames": ["shop.example.com"],
                 "rules": [{"matches": [{"path": {"type": "PathPrefix", "value": "/"}}], "backendRefs": [{"name": "x", "port": 80}]}]},
    }))
    .expect("route");
    let foreign = RouteInfo::from_route(&foreign).expect("info");
    let (_, d) = resolve(vec![gray, blue], vec![uses_header, ghost], vec![foreign]);
    let reasons: Vec<String> = d
        .problems
        .iter()
        .map(|p| format!("{}: {p}", p.reason()))
        .collect();
    let has = |words: &[&str]| reasons.iter().any(|r| words.iter().all(|w| r.contains(w)));
    assert!(
        has(&["DuplicateLaneMatch", "spec.laneSelector", "blue", "gray"]),
        "{reasons:#?}"
    );
    assert!(
        has(&["LaneHeaderInMatch", "spec.rules[0].matches"]),
        "{reasons:#?}"
    );
    assert!(
        has(&["UnknownService", "spec.rules[0].backend.service", "nope"]),
        "{reasons:#?}"
    );
    assert!(
        has(&["HostnameConflict", "HTTPRoute other/legacy", "PathPrefix /"]),
        "{reasons:#?}"
    );
}

#[test]
fn more_rules_than_one_route_holds_are_split() {
    let lanes: Vec<LaneRoute> = (0..40)
        .map(|i| route(&format!("lane-{i:02}"), &["order"], &[], false))
        .collect();
    let (_, d) = resolve(lanes, vec![edge("web", "order")], vec![]);
    assert_eq!(rules(&d).len(), 41);
    // Per lane its header, link and cookie rules; the link's clearing; requests in no lane.
    let all: usize = d
        .http_routes
        .values()
        .map(|r| r.spec.rules.as_ref().expect("rules").len())
        .sum();
    assert_eq!(all, 40 * 5 + 2 + 1);
    assert_eq!(d.http_routes.len(), 21, "10 rules per route at most");
    for r in d.http_routes.values() {
        assert!(r.spec.rules.as_ref().expect("rules").len() <= 10);
    }
    assert_eq!(d.entries["web"].routes.len(), 21);
}

#[test]
fn the_mesh_form_routes_each_http_port_of_each_service_without_weights() {
    let mut order = service("order");
    order.ports.push(k8s_openapi::api::core::v1::ServicePort {
        name: Some("dubbo".into()),
        port: 20880,
        ..Default::default()
    });
    let mut idx = Index::from_objects(
        Config::default(),
        shop(),
        vec![order, service("user"), service("pay")],
        vec![weighted("gray", &["order"], &[], 50)],
        vec![],
    );
    idx.apply(entry(
        "mesh",
        json!({"mesh": {"serviceSelector": {"matchLabels": {"tier": "backend"}}}}),
    ));
    let d = idx.desired(NS, now());
    assert_eq!(
        d.http_routes.len(),
        3,
        "one per Service and HTTP port: the Dubbo port is left out"
    );
    let order_route = d
        .http_routes
        .values()
        .find(|r| r.spec.parent_refs.as_ref().is_some_and(|p| p[0].name == "order"))
        .expect("order route");
    let parent = &order_route.spec.parent_refs.as_ref().expect("parents")[0];
    assert_eq!((parent.kind.as_deref(), parent.port), (Some("Service"), Some(80)));
    let backends: Vec<Option<i32>> = order_route
        .spec
        .rules
        .iter()
        .flatten()
        .flat_map(|r| r.backend_refs.clone().unwrap_or_default())
        .map(|b| b.weight)
        .collect();
    assert!(
        backends.iter().all(Option::is_none),
        "no weights in a mesh: {backends:?}"
    );
    assert_eq!(d.entries["mesh"].mode, EntryMode::Mesh);
}

#[test]
fn routes_follow_pod_changes_in_a_refresh_as_in_a_full_recomputation() {
    let mut strict = weighted("dev-bob", &["order"], &[], 30);
    strict.spec.strict = true;
    let (mut idx, mut d) = resolve(vec![strict], vec![edge("web", "order")], vec![]);
    assert!(!default_rule(&d).iter().any(|(n, _)| n.contains("--dev-bob-")));
    let affected = idx.apply(pod("order-bob", "order", Some("dev-bob"), "10.0.0.9"));
    idx.refresh(&mut d, NS, &affected.services, now());
    assert_eq!(d, idx.desired(NS, now()));
    assert!(
        default_rule(&d).iter().any(|(n, _)| n.contains("--dev-bob-")),
        "the lane has a pod now: it takes its share"
    );
}

#[test]
fn an_entry_keeps_routing_to_baseline_when_its_last_lane_goes() {
    let (mut idx, _) = resolve(
        vec![route("gray", &["order"], &[], false)],
        vec![edge("web", "order")],
        vec![],
    );
    idx.delete::<LaneRoute>(NS, "gray");
    let d = idx.desired(NS, now());
    // laneway's own Services come back through its watch, now owned by the entry alone.
    for svc in d.services.values() {
        idx.apply(laneway::lanes::ServiceInfo::from_service(svc).expect("service"));
    }
    let d = idx.desired(NS, now());
    assert_eq!(default_rule(&d), [(naming::baseline_service_name("order"), None)]);
    let baseline = naming::baseline_service_name("order");
    assert!(d.services.contains_key(&baseline));
    let pods: Vec<String> = d
        .slices
        .values()
        .filter(|s| s.labels().get("kubernetes.io/service-name") == Some(&baseline))
        .flat_map(|s| {
            s.endpoints
                .iter()
                .filter_map(|e| e.target_ref.as_ref()?.name.clone())
        })
        .collect();
    assert_eq!(pods, ["order-1", "order-2"], "untagged pods only");
}

#[test]
fn a_user_service_holding_the_baseline_name_is_reported_on_the_entry() {
    let (mut idx, _) = resolve(vec![], vec![edge("web", "order")], vec![]);
    idx.apply(service(&naming::baseline_service_name("order")));
    let d = idx.desired(NS, now());
    assert!(
        d.http_routes.is_empty(),
        "no route to a Service laneway does not own"
    );
    let problems: Vec<String> = d.problems.iter().map(|p| p.to_string()).collect();
    assert!(
        problems
            .iter()
            .any(|p| p.starts_with("spec.rules[0].backend.service: Service \"order--baseline-")),
        "{problems:?}"
    );
}

#[test]
fn a_match_an_httproute_cannot_hold_is_reported_and_only_its_rule_is_left_out() {
    let mut web = entry(
        "web",
        json!({
            "parentRefs": [{"name": "public", "namespace": "infra"}],
            "rules": [
                {"matches": [{"path": {"value": "/orders"}}], "backend": {"service": "order", "port": 80}},
                {"matches": [{"path": {"value": "/users"}}], "backend": {"service": "user", "port": 80}},
            ],
        }),
    );
    // The schema allows only the Gateway API's path types; a LaneEntry from a file (explain)
    // or an older schema may still hold another.
    web.spec.rules.as_mut().expect("rules")[1].matches[0]
        .path
        .as_mut()
        .expect("path")
        .type_ = "Prefix".into();
    let (_, d) = resolve(
        vec![route("gray", &["order", "user"], &[], false)],
        vec![web],
        vec![],
    );
    let problems: Vec<String> = d
        .problems
        .iter()
        .map(|p| format!("{}: {p}", p.reason()))
        .collect();
    assert!(
        problems.iter().any(
            |p| p.starts_with("InvalidMatch: spec.rules[1].matches[0].path.type: ") && p.contains("Prefix")
        ),
        "{problems:?}"
    );
    let backends: Vec<String> = rules(&d)
        .into_iter()
        .flat_map(|(_, b)| b.into_iter().map(|(name, _)| name))
        .collect();
    assert!(backends.iter().any(|b| b.starts_with("order-")), "{backends:?}");
    assert!(!backends.iter().any(|b| b.starts_with("user-")), "{backends:?}");
    assert_eq!(d.entries["web"].routes.len(), 1);
}

/// A rule as the link tests read it: its matches' headers and query parameters (name, type,
/// value), the request headers it sets, the answer headers it adds, and its backends.
#[derive(Debug, Default, PartialEq)]
struct Shape {
    headers: Vec<(String, String, String)>,
    query: Vec<(String, String, String)>,
    set: Vec<(String, String)>,
    removed: Vec<String>,
    answer: Vec<(String, String)>,
    backends: Vec<String>,
}

fn shape(rule: &laneway::gateway::HttpRouteRules) -> Shape {
    let json = |v: &serde_json::Value| v.as_str().unwrap_or("Exact").to_owned();
    let m = serde_json::to_value(rule.matches.as_ref().and_then(|m| m.first())).expect("match");
    let triples = |key: &str| -> Vec<(String, String, String)> {
        m[key]
            .as_array()
            .into_iter()
            .flatten()
            .map(|h| (json(&h["name"]), json(&h["type"]), json(&h["value"])))
            .collect()
    };
    let filters = serde_json::to_value(&rule.filters).expect("filters");
    let pairs = |modifier: &str, op: &str| -> Vec<(String, String)> {
        filters
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|f| f[modifier][op].as_array().cloned().unwrap_or_default())
            .map(|h| (json(&h["name"]), json(&h["value"])))
            .collect()
    };
    Shape {
        headers: triples("headers"),
        query: triples("queryParams"),
        set: pairs("requestHeaderModifier", "set"),
        removed: filters
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|f| {
                f["requestHeaderModifier"]["remove"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default()
            })
            .map(|v| json(&v))
            .collect(),
        answer: pairs("responseHeaderModifier", "add"),
        backends: rule
            .backend_refs
            .iter()
            .flatten()
            .map(|b| b.name.clone())
            .collect(),
    }
}

fn is_preview(r: &HttpRoute) -> bool {
    r.spec.hostnames.iter().flatten().any(|h| h.contains("preview"))
}

/// The part of a lane link a rule is, if it is one: it matches the link's query parameter or
/// a cookie.
fn link_part(rule: &laneway::gateway::HttpRouteRules) -> Option<Shape> {
    let s = shape(rule);
    (!s.query.is_empty() || s.headers.iter().any(|(n, _, _)| n == "cookie")).then_some(s)
}

fn every_rule(d: &Desired) -> Vec<Shape> {
    d.http_routes
        .values()
        .filter(|r| !is_preview(r))
        .flat_map(|r| r.spec.rules.clone().unwrap_or_default())
        .map(|r| shape(&r))
        .collect()
}

fn triple(name: &str, type_: &str, value: &str) -> (String, String, String) {
    (name.into(), type_.into(), value.into())
}

fn pair(name: &str, value: &str) -> (String, String) {
    (name.into(), value.into())
}

#[test]
fn a_lane_link_enters_its_lane_sets_the_cookie_and_the_cookie_keeps_the_lane() {
    let routes = vec![
        route("dev-alice", &["order"], &[], false),
        route("gray", &["user"], &[], false),
    ];
    let (_, d) = resolve(routes, vec![edge("web", "order")], vec![]);
    let alice = naming::lane_service_name("order", "dev-alice");
    let baseline = naming::baseline_service_name("order");
    let all = every_rule(&d);
    let cookie = "(^|;\\s*)x-lane=[^;]";
    let link: Vec<&Shape> = all
        .iter()
        .filter(|r| r.query == [triple("lane", "Exact", "dev-alice")])
        .collect();
    assert_eq!(link.len(), 2, "{all:#?}");
    assert_eq!(link[0].headers, [triple("cookie", "RegularExpression", cookie)]);
    assert!(link[1].headers.is_empty());
    for r in &link {
        assert_eq!(r.backends, std::slice::from_ref(&alice));
        assert_eq!(r.set, [pair("x-lane", "dev-alice")]);
        assert_eq!(
            r.answer,
            [pair(
                "set-cookie",
                "x-lane=dev-alice; Path=/; HttpOnly; SameSite=Lax"
            )]
        );
    }
    let exact = "(^|;\\s*)x-lane=dev-alice(;|$)";
    let by_cookie: Vec<&Shape> = all
        .iter()
        .filter(|r| r.headers == [triple("cookie", "RegularExpression", exact)])
        .collect();
    assert_eq!(by_cookie.len(), 1, "{all:#?}");
    assert_eq!(by_cookie[0].backends, std::slice::from_ref(&alice));
    assert_eq!(by_cookie[0].set, [pair("x-lane", "dev-alice")]);
    assert!(by_cookie[0].answer.is_empty() && by_cookie[0].query.is_empty());
    // The lane header with a cookie set: one header match more than the link's twin.
    let header_and_cookie = [
        triple("x-lane", "Exact", "dev-alice"),
        triple("cookie", "RegularExpression", cookie),
    ];
    assert!(all
        .iter()
        .any(|r| r.headers == header_and_cookie && r.backends == [alice.clone()]));

    let clear: Vec<&Shape> = all
        .iter()
        .filter(|r| r.query == [triple("lane", "RegularExpression", "^$")])
        .collect();
    assert_eq!(clear.len(), 2);
    for r in clear {
        assert_eq!(r.backends, std::slice::from_ref(&baseline));
        assert!(r.set.is_empty());
        assert_eq!(r.removed, ["x-lane"]);
        assert_eq!(
            r.answer,
            [pair(
                "set-cookie",
                "x-lane=; Path=/; Max-Age=0; HttpOnly; SameSite=Lax"
            )]
        );
    }
    // A request in no lane the entry routes loses the lane header, for the next hops.
    let no_lane: Vec<&Shape> = all
        .iter()
        .filter(|r| r.headers.is_empty() && r.query.is_empty())
        .collect();
    assert_eq!(no_lane.len(), 1);
    assert_eq!(
        (no_lane[0].removed.as_slice(), no_lane[0].backends.as_slice()),
        (&["x-lane".to_owned()][..], &[baseline.clone()][..])
    );
    // gray has no order: its link falls back to baseline, as its header does.
    assert!(all
        .iter()
        .any(|r| r.query == [triple("lane", "Exact", "gray")] && r.backends == [baseline.clone()]));
    let links: Vec<(String, Option<String>)> = d.entries["web"]
        .lanes
        .iter()
        .map(|l| (l.lane.clone(), l.link.clone()))
        .collect();
    assert_eq!(
        links,
        [
            ("dev-alice".to_owned(), Some("?lane=dev-alice".to_owned())),
            ("gray".to_owned(), Some("?lane=gray".to_owned()))
        ]
    );
}

#[test]
fn the_cookie_match_takes_that_cookie_only_and_the_query_name_and_header_are_the_entrys() {
    let mut e = edge("web", "order");
    e.spec.header = Some("x-env.lane".into());
    e.spec.lane_query = Some("env".into());
    let (_, d) = resolve(vec![route("gray", &["order"], &[], false)], vec![e], vec![]);
    let all = every_rule(&d);
    let regex = all
        .iter()
        .find(|r| {
            r.query.is_empty()
                && r.headers.len() == 1
                && r.headers[0].0 == "cookie"
                && !r.headers[0].2.ends_with("[^;]")
        })
        .map(|r| regex::Regex::new(&r.headers[0].2).expect("RE2-compatible"))
        .expect("cookie rule");
    for cookie in [
        "x-env.lane=gray",
        "a=1; x-env.lane=gray",
        "x-env.lane=gray; b=2",
        "a=1;x-env.lane=gray;b=2",
    ] {
        assert!(regex.is_match(cookie), "{cookie}");
    }
    for cookie in [
        "xx-env.lane=gray",
        "x-envXlane=gray",
        "x-env.lane=gray2",
        "a=x-env.lane=gray",
        "x-env.lane=grayish; b=2",
    ] {
        assert!(!regex.is_match(cookie), "{cookie}");
    }
    assert!(all.iter().any(|r| r.query == [triple("env", "Exact", "gray")]
        && r.answer
            == [pair(
                "set-cookie",
                "x-env.lane=gray; Path=/; HttpOnly; SameSite=Lax"
            )]));
    assert_eq!(d.entries["web"].lanes[0].link.as_deref(), Some("?env=gray"));
}

#[test]
fn a_preview_hostname_sends_every_request_into_its_lane_and_sets_the_header() {
    let mut e = edge("web", "order");
    e.spec.preview_hostnames = Some(vec!["{lane}.preview.example.com".into()]);
    let routes = vec![
        route("dev-alice", &["order"], &[], false),
        route("dev-carol", &["order"], &["dev-alice"], false),
        route("Dev_Bob", &["order"], &[], false),
    ];
    let (_, d) = resolve(routes, vec![e], vec![]);
    let mut previews: Vec<(Vec<String>, Vec<Shape>)> = d
        .http_routes
        .values()
        .filter(|r| is_preview(r))
        .map(|r| {
            (
                r.spec.hostnames.clone().unwrap_or_default(),
                r.spec.rules.iter().flatten().map(shape).collect(),
            )
        })
        .collect();
    previews.sort_by(|a, b| a.0.cmp(&b.0));
    let rule = |lane: &str, backend: String| Shape {
        set: vec![pair("x-lane", lane)],
        backends: vec![backend],
        ..Default::default()
    };
    assert_eq!(
        previews,
        [
            (
                vec!["dev-alice.preview.example.com".to_owned()],
                vec![rule("dev-alice", naming::lane_service_name("order", "dev-alice"))]
            ),
            (
                vec!["dev-carol.preview.example.com".to_owned()],
                vec![rule("dev-carol", naming::lane_service_name("order", "dev-alice"))]
            ),
        ]
    );
    let hosts: Vec<(String, Vec<String>)> = d.entries["web"]
        .lanes
        .iter()
        .map(|l| (l.lane.clone(), l.preview_hostnames.clone()))
        .collect();
    assert_eq!(
        hosts,
        [
            ("Dev_Bob".to_owned(), vec![]),
            (
                "dev-alice".to_owned(),
                vec!["dev-alice.preview.example.com".to_owned()]
            ),
            (
                "dev-carol".to_owned(),
                vec!["dev-carol.preview.example.com".to_owned()]
            ),
        ]
    );
    let problems: Vec<String> = d.problems.iter().map(|p| p.to_string()).collect();
    assert!(
        problems.iter().any(|p| p.contains("spec.previewHostnames")
            && p.contains("\"Dev_Bob\"")
            && p.contains("DNS label")),
        "{problems:?}"
    );
}

#[test]
fn a_sticky_draw_sets_the_cookie_of_the_lane_drawn_and_a_client_drawn_to_baseline_stays_there() {
    let mut e = edge("web", "order");
    e.spec.sticky_gray = Some(laneway::api::StickyGray::Cookie);
    let routes = vec![weighted("gray", &["order"], &[], 20)];
    let (_, d) = resolve(routes.clone(), vec![e], vec![]);
    let baseline = naming::baseline_service_name("order");
    let gray = naming::lane_service_name("order", "gray");
    let draw = d
        .http_routes
        .values()
        .flat_map(|r| r.spec.rules.clone().unwrap_or_default())
        .find(|r| r.backend_refs.as_ref().is_some_and(|b| b.len() == 2))
        .expect("the weighted rule");
    let refs: Vec<(String, Option<i32>, serde_json::Value)> = draw
        .backend_refs
        .iter()
        .flatten()
        .map(|b| {
            (
                b.name.clone(),
                b.weight,
                serde_json::to_value(&b.filters).expect("filters"),
            )
        })
        .collect();
    let cookie = |value: &str| {
        json!({"type": "ResponseHeaderModifier", "responseHeaderModifier": {"add": [
            {"name": "set-cookie", "value": format!("x-lane={value}; Path=/; HttpOnly; SameSite=Lax")}]}})
    };
    assert_eq!(
        refs,
        [
            (baseline.clone(), Some(80), json!([cookie("-")])),
            (
                gray,
                Some(20),
                json!([
                    {"type": "RequestHeaderModifier", "requestHeaderModifier": {"set": [{"name": "x-lane", "value": "gray"}]}},
                    cookie("gray")
                ])
            ),
        ]
    );
    let stay = every_rule(&d)
        .into_iter()
        .filter(|r| r.headers == [triple("cookie", "RegularExpression", "(^|;\\s*)x-lane=-(;|$)")])
        .collect::<Vec<_>>();
    assert_eq!(stay.len(), 1);
    assert_eq!(
        (stay[0].backends.clone(), stay[0].removed.clone()),
        (vec![baseline], vec!["x-lane".to_owned()])
    );

    // Not sticky: no cookie on the draw, no rule for the baseline cookie.
    let (_, plain) = resolve(routes, vec![edge("web", "order")], vec![]);
    let json = serde_json::to_string(&plain.http_routes).expect("json");
    assert!(!json.contains("x-lane=-"), "{json}");
    let draw = plain
        .http_routes
        .values()
        .flat_map(|r| r.spec.rules.clone().unwrap_or_default())
        .find(|r| r.backend_refs.as_ref().is_some_and(|b| b.len() == 2))
        .expect("the weighted rule");
    let filters = serde_json::to_string(&draw.backend_refs).expect("json");
    assert!(!filters.contains("set-cookie"), "{filters}");
}

/// The most header and query parameter matches valid input allows (the CRDs' `maxItems`): a
/// rule's own, a lane's `match.headers`, with links, cookies, sticky gray and preview hostnames
/// on. Every match laneway builds stays within the Gateway API's 16 of each, names unique.
#[test]
fn the_largest_matches_valid_input_allows_make_valid_routes() {
    let lane_max = max_items::<LaneRoute>(&["spec", "match", "headers"]);
    let rule = ["spec", "rules", "[]", "matches", "[]"];
    let header_max = max_items::<LaneEntry>(&[&rule[..], &["headers"]].concat());
    let query_max = max_items::<LaneEntry>(&[&rule[..], &["queryParams"]].concat());
    let values = |prefix: &str, n: usize| -> Vec<serde_json::Value> {
        (0..n)
            .map(|i| json!({"name": format!("{prefix}{i}"), "value": format!("v{i}")}))
            .collect()
    };
    let mut gray = weighted("gray", &["order"], &[], 20);
    gray.spec.match_ =
        Some(serde_json::from_value(json!({"headers": values("x-l", lane_max)})).expect("match"));
    let routes = vec![gray, weighted("dev-alice", &["order"], &[], 10)];
    let e = entry(
        "web",
        json!({
            "parentRefs": [{"name": "public", "namespace": "infra"}],
            "hostnames": ["shop.example.com"],
            "previewHostnames": ["{lane}.preview.example.com"],
            "stickyGray": "cookie",
            "rules": [{"matches": [{"path": {"value": "/"}, "headers": values("x-u", header_max),
                "queryParams": values("q", query_max)}], "backend": {"service": "order", "port": 80}}],
        }),
    );
    let (_, d) = resolve(routes, vec![e], vec![]);
    let matches: Vec<_> = d
        .http_routes
        .values()
        .flat_map(|r| r.spec.rules.iter().flatten())
        .flat_map(|rule| rule.matches.iter().flatten())
        .collect();
    let mut most = (0, 0);
    for m in &matches {
        let headers: Vec<String> = m
            .headers
            .iter()
            .flatten()
            .map(|h| h.name.to_ascii_lowercase())
            .collect();
        let query: Vec<&str> = m.query_params.iter().flatten().map(|q| q.name.as_str()).collect();
        assert!(
            headers.len() <= GATEWAY_MATCH_LIMIT,
            "{} headers: {headers:?}",
            headers.len()
        );
        assert!(
            query.len() <= GATEWAY_MATCH_LIMIT,
            "{} query params: {query:?}",
            query.len()
        );
        let unique: std::collections::BTreeSet<_> = headers.iter().collect();
        assert_eq!(unique.len(), headers.len(), "duplicate header names: {headers:?}");
        let unique: std::collections::BTreeSet<_> = query.iter().collect();
        assert_eq!(unique.len(), query.len(), "duplicate query names: {query:?}");
        most = (most.0.max(headers.len()), most.1.max(query.len()));
    }
    assert_eq!(
        most,
        (lane_max + header_max + 1, query_max + 1),
        "the largest match is a lane's header rule with a lane cookie, and a lane link"
    );
    assert!(
        d.http_routes.values().any(is_preview),
        "preview routes are built too"
    );
}

/// `e` in namespace `ns`, created at second `at`.
fn placed(mut e: LaneEntry, ns: &str, at: i64) -> LaneEntry {
    e.metadata.namespace = Some(ns.into());
    e.metadata.creation_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
        k8s_openapi::jiff::Timestamp::from_second(at).expect("time"),
    ));
    e
}

/// An edge entry on `hostnames` with one rule matching `path` (type, value), to `service`.
fn hosted(name: &str, hostnames: &[&str], (kind, value): (&str, &str), service: &str) -> LaneEntry {
    entry(
        name,
        json!({
            "parentRefs": [{"name": "public", "namespace": "infra", "sectionName": "http"}],
            "hostnames": hostnames,
            "rules": [{"matches": [{"path": {"type": kind, "value": value}}], "backend": {"service": service, "port": 80}}],
        }),
    )
}

/// An index of the shop, with the Services and LaneRoutes given in namespace `other` too.
fn two_namespaces(other: &str, routes: Vec<LaneRoute>, entries: Vec<LaneEntry>) -> Index {
    let mut idx = Index::from_objects(Config::default(), shop(), services(), vec![], vec![]);
    for svc in services() {
        idx.apply(laneway::lanes::ServiceInfo {
            namespace: other.into(),
            ..svc
        });
    }
    for r in routes {
        idx.apply(r);
    }
    for e in entries {
        idx.apply(e);
    }
    idx
}

/// Every hostname the desired routes are written for.
fn hostnames(d: &Desired) -> Vec<String> {
    let mut all: Vec<String> = d
        .http_routes
        .values()
        .flat_map(|r| r.spec.hostnames.clone().unwrap_or_default())
        .collect();
    all.sort();
    all.dedup();
    all
}

fn conflicts(d: &Desired) -> Vec<String> {
    d.problems
        .iter()
        .filter(|p| p.reason() == "HostnameConflict")
        .map(|p| format!("{:?} {p}", p.subjects()))
        .collect()
}

#[test]
fn a_lane_preview_hostname_never_takes_a_hostname_another_entry_serves() {
    let mut web = placed(edge("web", "order"), NS, 100);
    web.spec.hostnames = Some(vec!["shop.example.com".into()]);
    web.spec.preview_hostnames = Some(vec!["{lane}.example.com".into()]);
    let site = placed(
        hosted("api-site", &["api.example.com"], ("PathPrefix", "/"), "user"),
        NS,
        200,
    );
    let lanes = vec![
        route("api", &["order"], &[], false),
        route("dev-a", &["order"], &[], false),
    ];
    let (_, d) = resolve(lanes, vec![web, site], vec![]);
    let serving_api: Vec<String> = d
        .http_routes
        .values()
        .filter(|r| r.spec.hostnames.iter().flatten().any(|h| h == "api.example.com"))
        .map(|r| r.labels()["laneway.io/entry"].clone())
        .collect();
    assert!(
        !serving_api.is_empty() && serving_api.iter().all(|e| e == "api-site"),
        "{serving_api:?}"
    );
    let previews: Vec<(String, Vec<String>)> = d.entries["web"]
        .lanes
        .iter()
        .map(|l| (l.lane.clone(), l.preview_hostnames.clone()))
        .collect();
    assert_eq!(
        previews,
        [
            ("api".to_owned(), vec![]),
            ("dev-a".to_owned(), vec!["dev-a.example.com".to_owned()])
        ]
    );
    assert!(
        hostnames(&d).contains(&"shop.example.com".to_owned()),
        "the rest of web keeps routing"
    );
    assert_eq!(
        conflicts(&d),
        ["[(LaneEntry, ObjectKey { namespace: \"shop\", name: \"web\" })] spec.previewHostnames: \"api.example.com\" is already served by LaneEntry shop/api-site; lane \"api\" gets no preview hostname there"]
    );
}

#[test]
fn an_entry_in_another_namespace_cannot_take_a_path_under_an_older_prefix() {
    let web = placed(edge("web", "order"), NS, 100);
    let checkout = placed(
        hosted("checkout", &["shop.example.com"], ("Exact", "/checkout"), "order"),
        "a-team",
        200,
    );
    let idx = two_namespaces("a-team", vec![], vec![checkout, web]);
    let taker = idx.desired("a-team", now());
    assert!(taker.http_routes.is_empty(), "{:?}", hostnames(&taker));
    assert_eq!(
        conflicts(&taker),
        ["[(LaneEntry, ObjectKey { namespace: \"a-team\", name: \"checkout\" })] spec.hostnames: \"shop.example.com\" (Exact /checkout) is already served by LaneEntry shop/web, which claimed it first; this entry writes no route for it"]
    );
    let holder = idx.desired(NS, now());
    assert_eq!(hostnames(&holder), ["shop.example.com"]);
    assert!(conflicts(&holder).is_empty(), "{:?}", conflicts(&holder));
}

#[test]
fn across_namespaces_a_claim_is_taken_only_where_the_paths_overlap() {
    let web = placed(
        hosted("web", &["shop.example.com"], ("PathPrefix", "/shop"), "order"),
        NS,
        100,
    );
    let near = placed(
        hosted("near", &["shop.example.com"], ("Exact", "/shopping"), "order"),
        "a-team",
        200,
    );
    let other_host = placed(
        hosted(
            "elsewhere",
            &["team.example.com"],
            ("PathPrefix", "/shop"),
            "user",
        ),
        "a-team",
        200,
    );
    let wide = placed(
        hosted("wide", &["*.example.com"], ("PathPrefix", "/"), "pay"),
        "a-team",
        300,
    );
    let idx = two_namespaces("a-team", vec![], vec![web, near, other_host, wide]);
    let d = idx.desired("a-team", now());
    let written = |entry: &str| !d.entries[entry].routes.is_empty();
    assert!(written("near") && written("elsewhere"), "{:?}", conflicts(&d));
    assert!(
        !written("wide"),
        "a wildcard over shop.example.com with a prefix over /shop"
    );
    let reported: Vec<String> = conflicts(&d);
    assert_eq!(reported.len(), 1, "{reported:?}");
    assert!(
        reported[0].contains("\"*.example.com\" (PathPrefix /) is already served by LaneEntry shop/web"),
        "{reported:?}"
    );
}

#[test]
fn within_a_namespace_entries_split_a_hostname_by_paths_but_never_share_one_match() {
    let web = placed(edge("web", "order"), NS, 100);
    let checkout = placed(
        hosted("checkout", &["shop.example.com"], ("Exact", "/checkout"), "pay"),
        NS,
        200,
    );
    let copy = placed(
        hosted("copy", &["shop.example.com"], ("PathPrefix", "/"), "user"),
        NS,
        300,
    );
    let (_, d) = resolve(vec![], vec![copy, checkout, web], vec![]);
    assert!(!d.entries["web"].routes.is_empty());
    assert!(
        !d.entries["checkout"].routes.is_empty(),
        "a team's own layout: one host, disjoint paths"
    );
    assert!(d.entries["copy"].routes.is_empty());
    let reported = conflicts(&d);
    assert_eq!(reported.len(), 1, "{reported:?}");
    assert!(
        reported[0].contains("name: \"copy\"") && reported[0].contains("LaneEntry shop/web"),
        "{reported:?}"
    );
}

#[test]
fn two_namespaces_with_one_preview_template_give_the_lane_host_to_the_older_entry() {
    let template = || Some(vec!["{lane}.preview.example.com".into()]);
    let mut web = placed(edge("web", "order"), NS, 100);
    web.spec.preview_hostnames = template();
    let mut theirs = placed(
        hosted("web", &["team.example.com"], ("PathPrefix", "/"), "order"),
        "a-team",
        200,
    );
    theirs.spec.preview_hostnames = template();
    let mut their_lane = route("dev-a", &["order"], &[], false);
    their_lane.metadata.namespace = Some("a-team".into());
    let idx = two_namespaces(
        "a-team",
        vec![route("dev-a", &["order"], &[], false), their_lane],
        vec![theirs, web],
    );
    let preview = |ns: &str| {
        idx.desired(ns, now()).entries["web"].lanes[0]
            .preview_hostnames
            .clone()
    };
    assert_eq!(preview(NS), ["dev-a.preview.example.com"]);
    assert!(preview("a-team").is_empty());
    let late = idx.desired("a-team", now());
    assert_eq!(hostnames(&late), ["team.example.com"]);
    assert_eq!(conflicts(&late).len(), 1);
    assert!(
        conflicts(&late)[0].contains("LaneEntry shop/web; lane \"dev-a\""),
        "{:?}",
        conflicts(&late)
    );
}

#[test]
fn an_entry_without_hostnames_writes_no_route_when_an_older_claim_contends_for_a_path() {
    let web = placed(edge("web", "order"), NS, 100);
    let mut anywhere = placed(
        hosted("anywhere", &[], ("Exact", "/checkout"), "order"),
        "a-team",
        200,
    );
    anywhere.spec.hostnames = None;
    let idx = two_namespaces("a-team", vec![], vec![web, anywhere]);
    let d = idx.desired("a-team", now());
    assert!(d.http_routes.is_empty(), "{:?}", hostnames(&d));
    assert_eq!(conflicts(&d).len(), 1);
    assert!(
        conflicts(&d)[0].contains("every hostname (Exact /checkout) is already served by LaneEntry shop/web"),
        "{:?}",
        conflicts(&d)
    );
}
