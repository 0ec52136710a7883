//! Requests entering lanes through a real gateway: the operator writes the HTTPRoutes of
//! LaneEntries, Traefik (tests/traefik) serves them, and one small HTTP server per pod, bound to
//! the pod's IP, answers with its name. For chains, each server calls the next service through
//! the gateway and forwards the lane header, as an application that propagates it does.

mod browser;
mod cluster;
mod faults;
mod gateway;

use std::time::{Duration, Instant};

use cluster::*;
use gateway::*;
use k8s_openapi::api::core::v1::Service;
use kube::api::{DeleteParams, ListParams, PostParams};
use kube::{Api, ResourceExt};
use laneway::api::{ConditionStatus, ConditionType, LaneEntry, LaneRoute};
use laneway::gateway::HttpRoute;
use laneway::lanes::naming;
use serde_json::json;

/// Traefik, the operator and 1,000-request loads: one scenario at a time on two cores.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Longer than Traefik's reload throttle in these tests (200 ms).
const ROUTE_GRACE: &str = "--route-grace=1s";

/// One scenario: its namespace, Traefik and backend pods; [`SERIAL`] is held while it lives.
struct Shop {
    c: Cluster,
    traefik: Traefik,
    backends: Backends,
    ip: usize,
    _serial: tokio::sync::MutexGuard<'static, ()>,
}

impl Shop {
    async fn new(test: &str) -> Shop {
        let serial = SERIAL.lock().await;
        let c = cluster(test).await;
        let traefik = Traefik::start(&c.client, &c.ns).await;
        Shop {
            c,
            traefik,
            backends: Backends::start(),
            ip: 0,
            _serial: serial,
        }
    }

    /// A Shop of `service` alone with its `pods` (name, lane), the LaneRoute `lane` (strict or
    /// not) over it and a LaneEntry for host `service`; with the operator running.
    async fn one_service(
        test: &str,
        service: &str,
        pods: &[(&str, Option<&str>)],
        (lane, strict): (&str, bool),
        apply_weights: bool,
    ) -> (Shop, Operator) {
        let mut s = Shop::new(test).await;
        s.service(service).await;
        for (name, pod_lane) in pods {
            s.pod(name, service, *pod_lane, None).await;
        }
        s.lane(lane, &[service], &[], strict, 0).await;
        s.entry(service, service, service, apply_weights).await;
        let op = s.operator().await;
        (s, op)
    }

    async fn operator(&self) -> Operator {
        self.c.operator_with("lease", &[ROUTE_GRACE]).await
    }

    /// A Service `name` selecting `app=<name>`, HTTP on port 80 (to the pods' port `http`) and
    /// Dubbo on 20880.
    async fn service(&self, name: &str) {
        self.c
            .apply_yaml(&format!(
                "apiVersion: v1\nkind: Service\nmetadata: {{name: {name}}}\nspec:\n  selector: {{app: {name}}}\n  ports: [{{name: http, port: 80, targetPort: http}}, {{name: dubbo, port: 20880, targetPort: 20880}}]\n"
            ))
            .await
            .expect("service");
    }

    /// A pod of `app` with its own IP, serving HTTP; a chain's pod calls `next` (a host at the
    /// gateway) for each request.
    async fn pod(&mut self, name: &str, app: &str, lane: Option<&str>, next: Option<&str>) {
        let ip = format!("198.18.0.{}", 10 + self.ip);
        self.ip += 1;
        let mut b = Backend::new(name, app, &ip);
        if let Some(lane) = lane {
            b = b.lane(lane);
        }
        if let Some(host) = next {
            b = b.next(self.traefik.web, host, "/");
        }
        self.backends.deploy(&self.c.client, &self.c.ns, &b).await;
    }

    /// A LaneEntry at the test's Gateway: requests for `host` go to `service`.
    async fn entry(&self, name: &str, host: &str, service: &str, apply_weights: bool) {
        self.entry_with(name, host, service, json!({"applyWeights": apply_weights}))
            .await;
    }

    /// [`Shop::entry`] with more fields of the spec.
    async fn entry_with(&self, name: &str, host: &str, service: &str, fields: serde_json::Value) {
        let mut spec = json!({
            "parentRefs": [self.traefik.parent_ref()],
            "hostnames": [host],
            "rules": [{"backend": {"service": service, "port": 80}}],
        });
        for (k, v) in fields.as_object().into_iter().flatten() {
            spec[k] = v.clone();
        }
        let entry = json!({
            "apiVersion": "laneway.io/v1alpha1", "kind": "LaneEntry",
            "metadata": {"name": name},
            "spec": spec,
        });
        self.c.apply_yaml(&entry.to_string()).await.expect("entry");
    }

    async fn lane(&self, name: &str, services: &[&str], fallback: &[&str], strict: bool, weight: i32) {
        self.c
            .apply_yaml(&format!(
                "{}  weight: {weight}\n",
                route(name, services, fallback, strict)
            ))
            .await
            .expect("lane route");
    }
}

async fn entry_status(c: &Cluster, name: &str) -> laneway::api::LaneEntryStatus {
    let entry = c.api::<LaneEntry>().get(name).await.ok();
    entry.and_then(|e| e.status).unwrap_or_default()
}

/// (status, reason) of LaneEntry `name`'s condition `type_`.
async fn entry_condition(c: &Cluster, name: &str, type_: &str) -> (String, String) {
    status_and_reason(entry_status(c, name).await.conditions, type_)
}

/// The HTTPRoutes in the namespace.
async fn http_routes(c: &Cluster) -> Vec<HttpRoute> {
    c.api::<HttpRoute>()
        .list(&ListParams::default())
        .await
        .expect("routes")
        .items
}

fn chain(pods: &[&str]) -> Vec<String> {
    pods.iter().map(|p| p.to_string()).collect()
}

/// The shop's chain gateway-bff -> order -> user, every hop through the gateway: order has a
/// dev-alice build, user a feature-x build.
async fn chain_shop(test: &str) -> (Shop, Operator) {
    chain_shop_with(test, json!({"applyWeights": true})).await
}

/// [`chain_shop`] whose entry for `shop.example.com` has `fields` too.
async fn chain_shop_with(test: &str, fields: serde_json::Value) -> (Shop, Operator) {
    let mut s = Shop::new(test).await;
    for svc in ["gateway-bff", "order", "user"] {
        s.service(svc).await;
    }
    s.pod("bff-0", "gateway-bff", None, Some("order")).await;
    s.pod("order-0", "order", None, Some("user")).await;
    s.pod("order-alice", "order", Some("dev-alice"), Some("user"))
        .await;
    s.pod("user-0", "user", None, None).await;
    s.pod("user-fx", "user", Some("feature-x"), None).await;
    let all = ["gateway-bff", "order", "user"];
    s.lane("feature-x", &all, &[], false, 0).await;
    s.lane("dev-alice", &all, &["feature-x"], false, 0).await;
    s.entry_with("shop", "shop.example.com", "gateway-bff", fields)
        .await;
    // Hops between services draw no new weights.
    s.entry("order", "order", "order", false).await;
    s.entry("user", "user", "user", false).await;
    let op = s.operator().await;
    (s, op)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_lane_header_keeps_every_hop_in_its_lane_and_no_header_stays_on_baseline() {
    let (s, _op) = chain_shop("traffic-chain").await;
    let http = s.traefik.http();
    let alice = Request::new("shop.example.com").lane("dev-alice");
    // dev-alice's own order, feature-x's user (its fallback), baseline's gateway-bff.
    let alice_chain = chain(&["bff-0", "order-alice", "user-fx"]);
    http.wait_for("dev-alice's chain", &alice, |r| r.chain() == alice_chain)
        .await;
    let t = http.load(&alice, 200, 4).await;
    assert_eq!(t.chain_counts(), [(alice_chain, 200)].into(), "{:?}", t.samples);

    let fx = Request::new("shop.example.com").lane("feature-x");
    let fx_chain = chain(&["bff-0", "order-0", "user-fx"]);
    http.wait_for("feature-x's chain", &fx, |r| r.chain() == fx_chain)
        .await;

    let untagged = Request::new("shop.example.com");
    let baseline = chain(&["bff-0", "order-0", "user-0"]);
    http.wait_for("the baseline chain", &untagged, |r| r.chain() == baseline)
        .await;
    let t = http.load(&untagged, 1000, 8).await;
    assert_eq!(
        t.chain_counts(),
        [(baseline, 1000)].into(),
        "requests without a lane header reached a tagged pod: {:?}",
        t.samples
    );
    // A lane nobody declared is no lane.
    let t = http
        .load(&Request::new("shop.example.com").lane("nobody"), 50, 4)
        .await;
    assert_eq!(t.chain_counts().len(), 1, "{:?}", t.samples);

    let status = entry_status(&s.c, "shop").await;
    let lanes: Vec<(&str, Vec<String>)> = status
        .lanes
        .iter()
        .map(|l| (l.lane.as_str(), l.headers.clone()))
        .collect();
    assert_eq!(
        lanes,
        [
            ("dev-alice", vec!["x-lane: dev-alice".to_owned()]),
            ("feature-x", vec!["x-lane: feature-x".to_owned()])
        ]
    );
    let parents: Vec<(Option<ConditionStatus>, Option<ConditionStatus>)> = status
        .routes
        .iter()
        .flat_map(|r| r.parents.iter())
        .map(|p| (p.accepted, p.resolved_refs))
        .collect();
    // The header, link and cookie rules of both lanes take two routes, each accepted.
    assert_eq!(
        parents,
        [(Some(ConditionStatus::True), Some(ConditionStatus::True)); 2],
        "{status:?}"
    );
    assert_eq!(
        entry_condition(&s.c, "shop", "Ready").await,
        ("True".to_owned(), "Accepted".to_owned())
    );
}

/// The chain shop whose entry exposes only lanes not labelled private, with preview hostnames;
/// and a private lane `hidden` with an order of its own.
async fn browser_shop(test: &str) -> (Shop, Operator) {
    let fields = json!({
        "laneSelector": {"matchExpressions": [{"key": "visibility", "operator": "NotIn", "values": ["private"]}]},
        "previewHostnames": ["{lane}.preview.example.com"],
    });
    let (mut s, op) = chain_shop_with(test, fields).await;
    s.pod("order-hidden", "order", Some("hidden"), Some("user")).await;
    s.c.apply_yaml(
        "apiVersion: laneway.io/v1alpha1\nkind: LaneRoute\nmetadata: {name: hidden, labels: {visibility: private}}\nspec:\n  services: [order]\n",
    )
    .await
    .expect("hidden lane");
    (s, op)
}

const ALICE: [&str; 3] = ["bff-0", "order-alice", "user-fx"];
const FEATURE_X: [&str; 3] = ["bff-0", "order-0", "user-fx"];
const BASELINE: [&str; 3] = ["bff-0", "order-0", "user-0"];

fn shop_request(path: &str) -> Request {
    Request::new("shop.example.com").path(path)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_lane_link_sets_a_cookie_that_keeps_every_hop_in_the_lane_until_cleared() {
    let (s, _op) = browser_shop("traffic-link").await;
    let http = s.traefik.http();
    let (link, _) = http
        .wait_for(
            "the link enters dev-alice",
            &shop_request("/?lane=dev-alice"),
            |r| r.chain() == chain(&ALICE),
        )
        .await;
    assert_eq!(
        link.set_cookies,
        ["x-lane=dev-alice; Path=/; HttpOnly; SameSite=Lax"]
    );
    let cookie = |c: &str| shop_request("/").header("cookie", c);
    // That cookie, among others; and only that cookie, exactly.
    for (jar, want) in [
        ("x-lane=dev-alice", ALICE),
        ("a=1; x-lane=dev-alice; b=2", ALICE),
        ("session=x;x-lane=dev-alice", ALICE),
        ("xx-lane=dev-alice", BASELINE),
        ("x-lane=dev-alice2", BASELINE),
        ("x-lane-old=dev-alice", BASELINE),
        ("a=x-lane=dev-alice", BASELINE),
    ] {
        let t = http.load(&cookie(jar), 50, 4).await;
        assert_eq!(
            t.chain_counts(),
            [(chain(&want), 50)].into(),
            "cookie {jar:?}: {:?}",
            t.samples
        );
    }
    let r = http.get(&cookie("x-lane=dev-alice")).await.expect("answer");
    assert!(
        r.set_cookies.is_empty(),
        "the cookie is set by the link only: {:?}",
        r.set_cookies
    );

    // The lane header first, then the link, then the cookie.
    let fx_header = shop_request("/?lane=dev-alice")
        .lane("feature-x")
        .header("cookie", "x-lane=dev-alice");
    let link_over_cookie = shop_request("/?lane=feature-x").header("cookie", "x-lane=dev-alice");
    for (what, req, want) in [
        ("the header over the link and the cookie", fx_header, FEATURE_X),
        ("the link over the cookie", link_over_cookie, FEATURE_X),
        (
            "the header over the link",
            shop_request("/?lane=dev-alice").lane("feature-x"),
            FEATURE_X,
        ),
        (
            "the header over the cookie",
            cookie("x-lane=dev-alice").lane("feature-x"),
            FEATURE_X,
        ),
    ] {
        let t = http.load(&req, 50, 4).await;
        assert_eq!(
            t.chain_counts(),
            [(chain(&want), 50)].into(),
            "{what}: {:?}",
            t.samples
        );
    }
    let r = http
        .get(&shop_request("/?lane=feature-x").header("cookie", "x-lane=dev-alice"))
        .await
        .expect("answer");
    assert_eq!(
        r.set_cookies,
        ["x-lane=feature-x; Path=/; HttpOnly; SameSite=Lax"]
    );

    // `?lane=` clears it, whatever cookie is set.
    for req in [
        shop_request("/?lane=").header("cookie", "x-lane=dev-alice"),
        shop_request("/?lane="),
    ] {
        let r = http.get(&req).await.expect("answer");
        assert_eq!(r.chain(), chain(&BASELINE), "{req:?}");
        assert_eq!(
            r.set_cookies,
            ["x-lane=; Path=/; Max-Age=0; HttpOnly; SameSite=Lax"]
        );
    }

    // A lane the entry does not expose cannot be entered by link or cookie (nor by header).
    http.wait_for(
        "hidden's own order serves its header at the order entry",
        &Request::new("order").lane("hidden"),
        |r| r.first_hop() == Some("order-hidden"),
    )
    .await;
    for req in [
        shop_request("/?lane=hidden"),
        cookie("x-lane=hidden"),
        shop_request("/").lane("hidden"),
    ] {
        let r = http.get(&req).await.expect("answer");
        assert_eq!(r.chain(), chain(&BASELINE), "{req:?}");
        assert!(r.set_cookies.is_empty(), "{req:?}: {:?}", r.set_cookies);
    }
    let links: Vec<(String, Option<String>)> = entry_status(&s.c, "shop")
        .await
        .lanes
        .into_iter()
        .map(|l| (l.lane, l.link))
        .collect();
    assert_eq!(
        links,
        [
            ("dev-alice".to_owned(), Some("?lane=dev-alice".to_owned())),
            ("feature-x".to_owned(), Some("?lane=feature-x".to_owned()))
        ]
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_preview_hostname_keeps_every_hop_in_its_lane_whatever_lane_header_comes_with_it() {
    let (s, _op) = browser_shop("traffic-preview").await;
    let http = s.traefik.http();
    let alice = Request::new("dev-alice.preview.example.com");
    http.wait_for("dev-alice's preview hostname", &alice, |r| {
        r.chain() == chain(&ALICE)
    })
    .await;
    let t = http.load(&alice, 200, 4).await;
    assert_eq!(t.chain_counts(), [(chain(&ALICE), 200)].into(), "{:?}", t.samples);
    // The hostname is the lane: a lane header sent with it is overwritten at the gateway.
    let t = http.load(&alice.clone().lane("feature-x"), 50, 4).await;
    assert_eq!(t.chain_counts(), [(chain(&ALICE), 50)].into(), "{:?}", t.samples);
    // Each lane's hostname is a route of its own, which the gateway loads when it sees it.
    let fx = Request::new("feature-x.preview.example.com").path("/orders?x=1");
    http.wait_for("feature-x's preview hostname", &fx, |r| {
        r.chain() == chain(&FEATURE_X)
    })
    .await;
    let t = http.load(&fx, 50, 4).await;
    assert_eq!(
        t.chain_counts(),
        [(chain(&FEATURE_X), 50)].into(),
        "{:?}",
        t.samples
    );
    for host in ["hidden.preview.example.com", "nobody.preview.example.com"] {
        let r = http.get(&Request::new(host)).await.expect("answer");
        assert_eq!(r.status, 404, "{host}: {r:?}");
    }
    let hosts: Vec<(String, Vec<String>)> = entry_status(&s.c, "shop")
        .await
        .lanes
        .into_iter()
        .map(|l| (l.lane, l.preview_hostnames))
        .collect();
    assert_eq!(
        hosts,
        [
            (
                "dev-alice".to_owned(),
                vec!["dev-alice.preview.example.com".to_owned()]
            ),
            (
                "feature-x".to_owned(),
                vec!["feature-x.preview.example.com".to_owned()]
            )
        ]
    );

    // A lane whose name is no DNS label gets no hostname, and the entry says why.
    s.c.apply_yaml(
        "apiVersion: laneway.io/v1alpha1\nkind: LaneRoute\nmetadata: {name: qa-team}\nspec:\n  lane: QA_Team\n  services: [order]\n",
    )
    .await
    .expect("lane");
    wait_for("the entry reports QA_Team's preview hostname", true, || async {
        entry_status(&s.c, "shop").await.conditions.iter().any(|c| {
            c.reason == "PreviewHostname"
                && c.message.contains("\"QA_Team\"")
                && c.message.contains("DNS label")
        })
    })
    .await;
    let t = http.load(&alice, 50, 4).await;
    assert_eq!(t.chain_counts(), [(chain(&ALICE), 50)].into(), "{:?}", t.samples);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_browser_that_opened_a_lane_link_gets_every_resource_of_every_page_from_the_lane() {
    let mut s = Shop::new("traffic-browser").await;
    s.service("web").await;
    s.pod("web-0", "web", None, None).await;
    s.pod("web-alice", "web", Some("dev-alice"), None).await;
    s.lane("dev-alice", &["web"], &[], false, 0).await;
    s.entry_with("shop", "shop.example.com", "web", json!({})).await;
    let _op = s.operator().await;
    s.traefik
        .http()
        .wait_for(
            "the lane link is routed",
            &Request::new("shop.example.com").path("/?lane=dev-alice"),
            |r| r.first_hop() == Some("web-alice"),
        )
        .await;
    let before = s.backends.requests().await;
    let browser = browser::Browser::start().await;
    let origin = format!("http://shop.example.com:{}", s.traefik.web.port());
    // Each page names the pod that served it, its script and its XHR; its image must load.
    let read = "var t = function (id) { return document.getElementById(id).textContent; };
        var img = document.getElementById('img');
        return [t('page'), t('script'), t('xhr'), img.complete && img.naturalWidth > 0, document.cookie];";
    let loaded = |v: &serde_json::Value| v[2] != "" && v[3] == true;
    let alice = json!(["web-alice", "web-alice", "web-alice", true, ""]);
    browser.open(&format!("{origin}/first.html?lane=dev-alice")).await;
    let first = browser.wait_for("the first page", read, loaded).await;
    assert_eq!(
        first, alice,
        "the page opened with ?lane=dev-alice (the cookie is HttpOnly)"
    );
    // A second page without the parameter, through a redirect.
    browser.open(&format!("{origin}/next")).await;
    assert_eq!(browser.url().await, format!("{origin}/second.html"));
    let second = browser.wait_for("the second page", read, loaded).await;
    assert_eq!(
        second, alice,
        "the page reached by the redirect, in the lane by its cookie"
    );
    let after = s.backends.requests().await;
    let served = |pod: &str| after.get(pod).copied().unwrap_or(0) - before.get(pod).copied().unwrap_or(0);
    assert_eq!(served("web-0"), 0, "a baseline pod served the browser");
    assert!(
        served("web-alice") >= 7,
        "2 pages, their scripts or images, 2 XHRs and the redirect: {} requests",
        served("web-alice")
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_weight_of_20_sends_a_fifth_of_untagged_requests_into_the_lane() {
    let mut s = Shop::new("traffic-weight").await;
    s.service("gateway-bff").await;
    s.pod("bff-0", "gateway-bff", None, None).await;
    s.pod("bff-gray", "gateway-bff", Some("gray"), None).await;
    s.lane("gray", &["gateway-bff"], &[], false, 20).await;
    s.entry("shop", "shop.example.com", "gateway-bff", true).await;
    // Every namespace, so that laneway reads the GatewayClass and what it supports.
    let _op = s.c.operator_watching("lease", &[], &[ROUTE_GRACE]).await;

    let http = s.traefik.http();
    let untagged = Request::new("shop.example.com");
    http.wait_for("the lane's share", &untagged, |r| {
        r.first_hop() == Some("bff-gray")
    })
    .await;
    let t = http.load(&untagged, 1000, 8).await;
    assert_eq!(t.ok(), 1000, "{:?}", t.statuses);
    let gray = t.first_hop("bff-gray");
    println!("weight 20: {gray} of 1000 untagged requests in gray");
    assert!((180..=220).contains(&gray), "20% ± 2 of 1000: {gray}");
    let t = http.load(&untagged.clone().lane("gray"), 100, 4).await;
    assert_eq!(t.first_hop("bff-gray"), 100, "the header still enters the lane");

    // The entry's status is written after its routes, in the status budget's turn.
    wait_for("the entry's baseline weight in its status", Some(80), || async {
        entry_status(&s.c, "shop").await.baseline_weight
    })
    .await;
    assert_eq!(entry_status(&s.c, "shop").await.lanes[0].weight, 20);
    // The routes ask the gateway to set the lane header on requests it sends into the lane by
    // weight; Traefik does not support filters on a backend, and the entry says so.
    let route =
        s.c.api::<HttpRoute>()
            .get(&naming::route_name("shop", "0"))
            .await
            .expect("route");
    let refs = serde_json::to_value(&route.spec.rules).expect("rules");
    assert!(
        refs.to_string()
            .contains(r#""set":[{"name":"x-lane","value":"gray"}]"#),
        "{refs}"
    );
    let features = s.traefik.supported_features().await;
    assert!(!features
        .iter()
        .any(|f| f == "HTTPRouteBackendRequestHeaderModification"));
    wait_for(
        "BackendFiltersUnsupported",
        ("True".to_owned(), "BackendFiltersUnsupported".to_owned()),
        || entry_condition(&s.c, "shop", "Degraded"),
    )
    .await;
}

/// Runs OpenKruise Rollout's custom network provider (`kruise-lua`, see tests/gitops) on the
/// live LaneRoute `name` with the chart's script and replaces the LaneRoute with what Kruise
/// would write; `Err` holds the script's error, which Kruise shows in the Rollout.
fn kruise<S: AsRef<std::ffi::OsStr>>(c: &Cluster, name: &str, args: &[S]) -> Result<(), String> {
    let bin = std::env::var("LANEWAY_GITOPS_BIN").expect("LANEWAY_GITOPS_BIN (tests/in-cluster.sh)");
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/charts/laneway/lua/kruise-rollout-laneroute.lua"
    );
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"));
    let live = dir.join(format!("{}-{name}.json", c.ns));
    let get = std::process::Command::new("kubectl")
        .args([
            "get",
            "-n",
            &c.ns,
            &format!("laneroutes.laneway.io/{name}"),
            "-o",
            "json",
        ])
        .output()
        .expect("kubectl get");
    std::fs::write(&live, &get.stdout).expect("write object");
    let mut command = std::process::Command::new(format!("{bin}/kruise-lua"));
    command.arg(&args[0]);
    if args[0].as_ref() == "step" {
        command.args(["-script", script]);
    }
    let out = command.args(&args[1..]).arg(&live).output().expect("kruise-lua");
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).into_owned());
    }
    let next = dir.join(format!("{}-{name}-next.json", c.ns));
    std::fs::write(&next, &out.stdout).expect("write object");
    let replace = std::process::Command::new("kubectl")
        .args(["replace", "-f"])
        .arg(&next)
        .output()
        .expect("kubectl replace");
    replace
        .status
        .success()
        .then_some(())
        .ok_or_else(|| String::from_utf8_lossy(&replace.stderr).into_owned())
}

/// `kruise-lua` arguments for each step of examples/kruise-rollout/rollout.yaml: its `matches`,
/// else its `traffic`.
fn kruise_example_steps() -> Vec<Vec<String>> {
    let file = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/examples/kruise-rollout/rollout.yaml"
    );
    let text = std::fs::read_to_string(file).expect("example");
    let rollout: serde_json::Value = serde_saphyr::from_str(&text).expect("YAML");
    let steps = rollout["spec"]["strategy"]["canary"]["steps"]
        .as_array()
        .expect("steps");
    steps
        .iter()
        .map(|step| match step.get("matches") {
            Some(m) => vec!["step".into(), "-matches".into(), m.to_string()],
            None => {
                let traffic = step["traffic"].as_str().expect("traffic");
                vec![
                    "step".into(),
                    "-weight".into(),
                    traffic.trim_end_matches('%').into(),
                ]
            }
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn kruise_rollout_steps_move_the_lane_by_the_charts_script_and_its_end_restores_it() {
    let mut s = Shop::new("traffic-kruise").await;
    s.service("gateway-bff").await;
    s.pod("bff-0", "gateway-bff", None, None).await;
    s.pod("bff-gray", "gateway-bff", Some("gray"), None).await;
    s.lane("gray", &["gateway-bff"], &[], false, 0).await;
    s.entry("shop", "shop.example.com", "gateway-bff", true).await;
    let _op = s.c.operator_watching("lease", &[], &[ROUTE_GRACE]).await;
    let http = s.traefik.http();
    let untagged = Request::new("shop.example.com");
    let canary = untagged.clone().header("x-canary", "yes");
    http.wait_for("the lane's route", &untagged.clone().lane("gray"), |r| {
        r.first_hop() == Some("bff-gray")
    })
    .await;

    // The steps of examples/kruise-rollout/rollout.yaml: x-canary: yes, then 20%, then 50%.
    let steps = kruise_example_steps();
    kruise(&s.c, "gray", &["store"]).expect("store the original");
    kruise(&s.c, "gray", &steps[0]).expect("a step with header matches");
    eventually("x-canary: yes entering the lane", || async {
        http.load(&canary, 20, 4).await.first_hop("bff-gray") == 20
    })
    .await;
    let t = http.load(&canary, 100, 4).await;
    assert_eq!(t.first_hop("bff-gray"), 100, "x-canary: yes enters the lane");
    let t = http.load(&untagged, 200, 4).await;
    assert_eq!(
        t.first_hop("bff-gray"),
        0,
        "a header step leaves the original weight, 0"
    );

    kruise(&s.c, "gray", &steps[1]).expect("step traffic: 20%");
    http.wait_for("the step's share", &untagged, |r| {
        r.first_hop() == Some("bff-gray")
    })
    .await;
    let t = http.load(&untagged, 1000, 8).await;
    let gray = t.first_hop("bff-gray");
    println!("kruise step 20%: {gray} of 1000 untagged requests in gray");
    assert!((180..=220).contains(&gray), "20% ± 2 of 1000: {gray}");
    kruise(&s.c, "gray", &steps[2]).expect("step traffic: 50%");
    let route = s.c.api::<LaneRoute>().get("gray").await.expect("lane route");
    assert_eq!((route.spec.weight, route.spec.match_.is_none()), (50, true));

    let regex = r#"[{"headers":[{"type":"RegularExpression","name":"x-canary","value":"y.*"}]}]"#;
    let refused = kruise(&s.c, "gray", &["step", "-matches", regex]).expect_err("a regex match");
    assert!(refused.contains("matches header values exactly"), "{refused}");

    kruise(&s.c, "gray", &["restore"]).expect("the rollout's end");
    http.wait_for("the header leaving the lane", &canary, |r| {
        r.first_hop() == Some("bff-0")
    })
    .await;
    let route = s.c.api::<LaneRoute>().get("gray").await.expect("lane route");
    assert_eq!((route.spec.weight, route.spec.match_.is_none()), (0, true));
    assert!(route.annotations().is_empty(), "{:?}", route.annotations());
    let t = http.load(&untagged.clone().lane("gray"), 100, 4).await;
    assert_eq!(
        t.first_hop("bff-gray"),
        100,
        "the lane's own header still enters it"
    );
}

/// Moves `pod` into `lane` (or back to baseline) and returns how long until the gateway served
/// the lane's requests accordingly: only from `pod` once moved in, again from `other` once out.
async fn move_and_time(s: &Shop, watch: &Watch, pod: &str, other: &str, lane: Option<&str>) -> Duration {
    let at = watch.now();
    let started = Instant::now();
    s.c.label_pod(pod, "laneway.io/lane", lane).await;
    match lane {
        Some(_) => {
            watch
                .wait_until("the lane served by the moved pod only", TIMEOUT, |r| {
                    r.streak_without(other) >= 30 && r.hits.last().is_some_and(|h| h.at > at)
                })
                .await;
            let report = watch.snapshot();
            report
                .last_served_by(other)
                .filter(|t| *t > at)
                .map(|t| t - at)
                .unwrap_or_default()
        }
        None => {
            let report = watch
                .wait_until("the lane served by baseline again", TIMEOUT, |r| {
                    r.first_served_by(other, at).is_some()
                })
                .await;
            report
                .first_served_by(other, at)
                .map(|t| t - at)
                .unwrap_or(started.elapsed())
        }
    }
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

#[tokio::test(flavor = "multi_thread")]
async fn a_relabelled_pod_moves_its_traffic_with_no_5xx() {
    let pods = [("order-0", None), ("order-1", None)];
    let (s, _op) = Shop::one_service("traffic-relabel", "order", &pods, ("gray", false), false).await;
    let http = s.traefik.http();
    let gray = Request::new("order").lane("gray");
    http.wait_for("gray served from baseline", &gray, |r| {
        r.first_hop() == Some("order-0")
    })
    .await;

    let moves: usize = std::env::var("LANEWAY_TRAFFIC_MOVES")
        .ok()
        .and_then(|m| m.parse().ok())
        .unwrap_or(6);
    let watch = http.watch(&gray, 2, Duration::from_millis(2));
    let untagged = http.watch(&Request::new("order"), 1, Duration::from_millis(5));
    let (mut into, mut out) = (Vec::new(), Vec::new());
    for _ in 0..moves {
        into.push(move_and_time(&s, &watch, "order-1", "order-0", Some("gray")).await);
        out.push(move_and_time(&s, &watch, "order-1", "order-0", None).await);
    }
    let report = watch.stop().await;
    let baseline = untagged.stop().await;
    report.assert_no_failures("gray requests while order-1 moved");
    baseline.assert_no_failures("untagged requests while order-1 moved");
    assert!(report.hits.len() > 100 && baseline.hits.len() > 50);
    let mut all: Vec<Duration> = into.iter().chain(&out).copied().collect();
    all.sort();
    println!(
        "relabel -> route effective through the gateway, {} moves: p50 {:?}, p99 {:?}, max {:?} (into the lane {:?}; out {:?}); {} gray and {} untagged requests, no failure",
        all.len(),
        percentile(&all, 0.5),
        percentile(&all, 0.99),
        all.last().copied().unwrap_or_default(),
        into,
        out,
        report.hits.len(),
        baseline.hits.len(),
    );
}

/// `order` with `pods` (one of them `order-gray`) in lane gray, once gray requests reach
/// `order-gray`: the Shop, its operator, and the gateway with the gray request.
async fn gray_order(test: &str, pods: &[(&str, Option<&str>)]) -> (Shop, Operator, Http, Request) {
    let (s, op) = Shop::one_service(test, "order", pods, ("gray", false), false).await;
    let http = s.traefik.http();
    let gray = Request::new("order").lane("gray");
    http.wait_for("gray served", &gray, |r| r.first_hop() == Some("order-gray"))
        .await;
    (s, op, http, gray)
}

#[tokio::test(flavor = "multi_thread")]
async fn lane_and_baseline_services_without_a_cluster_ip_serve_through_the_gateway() {
    let pods = [("order-0", None), ("order-1", None), ("order-gray", Some("gray"))];
    let (s, mut op, http, gray) = gray_order("traffic-headless", &pods).await;
    let names = [
        naming::lane_service_name("order", "gray"),
        naming::baseline_service_name("order"),
    ];
    // The flag changed on a running installation: laneway's Services are made again headless.
    let untagged = Request::new("order");
    let during = http.watch(&gray, 2, Duration::from_millis(2));
    let during_untagged = http.watch(&untagged, 1, Duration::from_millis(2));
    op.stop();
    let _op =
        s.c.operator_with("lease", &[ROUTE_GRACE, "--service-cluster-ip=none"])
            .await;
    eventually("laneway's Services headless", || async {
        let services: Api<Service> = s.c.api();
        let mut headless = 0;
        for name in &names {
            let ip = services
                .get_opt(name)
                .await
                .ok()
                .flatten()
                .and_then(|svc| svc.spec?.cluster_ip);
            headless += usize::from(ip.as_deref() == Some("None"));
        }
        headless == names.len()
    })
    .await;
    // Traefik may take in the moment between a Service's delete and its create after that: a
    // request routed then is answered 500 (counted, not asserted). Both kinds of request are
    // then served from the right pods for a second in a row.
    let (gray_at, untagged_at) = (during.now(), during_untagged.now());
    let second = Duration::from_secs(1);
    during
        .wait_until("a second of gray served by its pod", TIMEOUT, |r| {
            r.good_for(second, gray_at, |h| {
                h.chain.first().is_some_and(|p| p == "order-gray")
            })
        })
        .await;
    during_untagged
        .wait_until("a second of untagged served by baseline", TIMEOUT, |r| {
            r.good_for(second, untagged_at, |h| {
                h.chain.first().is_some_and(|p| p != "order-gray")
            })
        })
        .await;
    let converted = during.stop().await;
    let converted_untagged = during_untagged.stop().await;
    let t = http.load(&gray, 100, 4).await;
    assert_eq!(t.first_hop("order-gray"), 100, "{:?}", t.samples);
    let t = http.load(&untagged, 100, 4).await;
    assert_eq!(
        t.first_hop("order-0") + t.first_hop("order-1"),
        100,
        "{:?}",
        t.samples
    );
    assert!(
        t.first_hop("order-0") > 0 && t.first_hop("order-1") > 0,
        "{:?}",
        t.samples
    );

    // A pod moves into the lane and out again, with no failed request.
    let watch = http.watch(&gray, 2, Duration::from_millis(2));
    let into = move_and_time(&s, &watch, "order-gray", "order-0", None).await;
    let back = move_and_time(&s, &watch, "order-gray", "order-0", Some("gray")).await;
    watch
        .stop()
        .await
        .assert_no_failures("gray requests through headless Services");
    println!(
        "headless lane and baseline Services through Traefik: made again under {} gray and {} untagged requests (statuses {:?} and {:?}, {} without an answer); out of the lane {into:?}, back {back:?}",
        converted.hits.len(),
        converted_untagged.hits.len(),
        converted.tally.statuses,
        converted_untagged.tally.statuses,
        converted.tally.errors + converted_untagged.tally.errors
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_lane_whose_last_pod_turns_not_ready_and_back_switches_tier_with_no_5xx() {
    let pods = [("order-0", None), ("order-gray", Some("gray"))];
    let (s, _op, http, gray) = gray_order("traffic-ready", &pods).await;
    // [`Shop::pod`] gives pods addresses in the order they are made.
    let gray_ip = "198.18.0.11";

    let watch = http.watch(&gray, 2, Duration::from_millis(2));
    let mut took = Vec::new();
    for _ in 0..3 {
        let at = watch.now();
        s.c.set_pod_status("order-gray", gray_ip, false).await;
        watch
            .wait_until("gray on baseline", TIMEOUT, |r| {
                r.first_served_by("order-0", at).is_some() && r.streak_without("order-gray") >= 30
            })
            .await;
        let out = watch.snapshot().first_served_by("order-0", at).map(|t| t - at);
        let at = watch.now();
        s.c.set_pod_status("order-gray", gray_ip, true).await;
        watch
            .wait_until("gray on its own pod again", TIMEOUT, |r| {
                r.first_served_by("order-gray", at).is_some() && r.streak_without("order-0") >= 30
            })
            .await;
        let back = watch.snapshot().first_served_by("order-gray", at).map(|t| t - at);
        took.push((out, back));
    }
    let report = watch.stop().await;
    report.assert_no_failures("gray requests while its last pod turned not ready and back");
    // The lane keeps its own Service throughout, with its pod listed not ready while it falls
    // back, so that coming back needs no Service to be made.
    assert_eq!(
        s.c.own_lane_pods("order", "gray").await,
        Some(vec!["order-gray".to_owned()])
    );
    println!(
        "last lane pod not ready -> baseline, ready -> lane (gateway answers), 3 times: {took:?}; {} requests, none failed",
        report.hits.len()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn deleting_a_lane_route_sends_its_header_to_baseline_with_no_5xx() {
    let pods = [("order-0", None), ("order-gray", Some("gray"))];
    let (s, _op, http, gray) = gray_order("traffic-delete", &pods).await;
    let lane_service = naming::lane_service_name("order", "gray");

    let watch = http.watch(&gray, 2, Duration::from_millis(2));
    tokio::time::sleep(Duration::from_millis(300)).await;
    let at = watch.now();
    s.c.delete::<LaneRoute>("gray").await;
    watch
        .wait_until("gray requests on baseline", TIMEOUT, |r| {
            r.first_served_by("order-0", at).is_some() && r.streak_without("order-gray") >= 30
        })
        .await;
    // The lane Service goes once the gateway has the route without it.
    eventually("the lane Service removed", || async {
        s.c.api::<Service>()
            .get_opt(&lane_service)
            .await
            .ok()
            .flatten()
            .is_none()
    })
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let report = watch.stop().await;
    report.assert_no_failures("gray requests while its LaneRoute was deleted");
    println!(
        "LaneRoute deleted: gray requests on baseline after {:?}; {} requests, none failed",
        report.first_served_by("order-0", at).map(|t| t - at),
        report.hits.len()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_strict_lane_without_pods_answers_exactly_503_while_its_route_resolves() {
    let pods = [("pay-0", None)];
    let (s, _op) = Shop::one_service("traffic-strict", "pay", &pods, ("dev-bob", true), true).await;
    let http = s.traefik.http();
    let bob = Request::new("pay").lane("dev-bob");
    http.wait_for("503 for dev-bob", &bob, |r| r.status == 503).await;
    let t = http.load(&bob, 100, 4).await;
    assert_eq!(t.statuses, [(503, 100)].into(), "{:?}", t.samples);
    let t = http.load(&Request::new("pay"), 100, 4).await;
    assert_eq!(t.first_hop("pay-0"), 100, "{:?}", t.samples);
    let route = naming::route_name("pay", "0");
    let conds = route_conditions(&s.c.client, &s.c.ns, &route).await;
    assert!(has_condition(&conds, "ResolvedRefs", "True"), "{conds:?}");
    assert!(has_condition(&conds, "Accepted", "True"), "{conds:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn mesh_routes_are_accepted_by_the_api_server_on_http_ports_only() {
    let _serial = SERIAL.lock().await;
    let c = cluster("traffic-mesh").await;
    install_crds(&c.client).await;
    shop(&c).await;
    c.apply_route("gray", &["order", "user"], &[], false).await;
    c.apply_yaml(
        "apiVersion: v1\nkind: Service\nmetadata: {name: order}\nspec:\n  selector: {app: order}\n  ports: [{name: web, port: 80, targetPort: http}, {name: dubbo, port: 20880, targetPort: 20880}]\n",
    )
    .await
    .expect("service");
    c.apply_yaml(
        "apiVersion: laneway.io/v1alpha1\nkind: LaneEntry\nmetadata: {name: mesh}\nspec:\n  mesh: {services: [order, user]}\n",
    )
    .await
    .expect("entry");
    let _op = c.operator("lease").await;
    wait_for("mesh routes", 2, || async {
        c.api::<HttpRoute>()
            .list(&ListParams::default())
            .await
            .map(|l| l.items.len())
            .unwrap_or(0)
    })
    .await;
    for r in &http_routes(&c).await {
        let parents = r.spec.parent_refs.clone().unwrap_or_default();
        assert_eq!(parents.len(), 1);
        assert_eq!(
            parents[0].kind.as_deref(),
            Some("Service"),
            "GAMMA: {}",
            r.name_any()
        );
        assert_eq!(parents[0].port, Some(80), "HTTP port only: {}", r.name_any());
    }
    // The entry's status follows its routes.
    wait_for(
        "the mesh entry Ready, Written",
        Some(("True".to_owned(), "Written".to_owned())),
        || async {
            let entry = c.api::<LaneEntry>().get("mesh").await.expect("entry");
            entry
                .status
                .and_then(|s| s.conditions.into_iter().find(|c| c.type_ == ConditionType::Ready))
                .map(|c| (format!("{:?}", c.status), c.reason))
        },
    )
    .await;
    // The real CRDs' validation applies: a route laneway could not write would have been reported.
    let bad = json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
        "metadata": {"name": "bad"},
        "spec": {"parentRefs": [{"group": "", "kind": "Service", "name": "order", "port": 80}],
                 "rules": [{"backendRefs": [{"name": "order", "port": 80, "weight": 10}], "matches": [{"path": {"type": "Exact", "value": "no-slash"}}]}]}});
    assert!(
        c.apply_yaml(&bad.to_string()).await.is_err(),
        "the Gateway API CRDs validate"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn without_the_gateway_api_the_entry_says_so_and_routes_once_it_is_installed() {
    let _serial = SERIAL.lock().await;
    let cp = faults::ControlPlane::start_with(&["laneway"], &[]).await;
    let client = cp.client_for("laneway").await;
    for (_, doc) in laneway::api::crd_documents() {
        let crd: k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition =
            serde_saphyr::from_str(&doc).expect("CRD");
        Api::all(client.clone())
            .create(&PostParams::default(), &crd)
            .await
            .expect("create CRD");
    }
    let ns = "shop";
    Api::<k8s_openapi::api::core::v1::Namespace>::all(client.clone())
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": ns}})).expect("namespace"),
        )
        .await
        .expect("namespace");
    let c = Cluster {
        client: client.clone(),
        ns: ns.into(),
    };
    eventually("laneway's CRDs served", || async {
        c.api::<LaneEntry>().list(&ListParams::default()).await.is_ok()
    })
    .await;
    c.service("order").await;
    c.apply_yaml(
        "apiVersion: laneway.io/v1alpha1\nkind: LaneEntry\nmetadata: {name: mesh}\nspec:\n  mesh: {services: [order]}\n",
    )
    .await
    .expect("entry");
    let kubeconfig = cp.kubeconfig_for("laneway", cp.server_url());
    let mut op = c.spawn_operator_on(Some(&kubeconfig), "lease", &[], &[ROUTE_GRACE]);
    let ready = Instant::now();
    while !op.ready().await {
        assert!(
            ready.elapsed() < TIMEOUT,
            "the operator is not ready without the Gateway API"
        );
        assert!(
            op.child.try_wait().ok().flatten().is_none(),
            "the operator exited"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let condition = |type_| entry_condition(&c, "mesh", type_);
    wait_for(
        "GatewayAPIMissing",
        ("False".to_owned(), "GatewayAPIMissing".to_owned()),
        || condition("Ready"),
    )
    .await;
    wait_for(
        "waiting",
        ("True".to_owned(), "WaitingForGatewayAPI".to_owned()),
        || condition("Reconciling"),
    )
    .await;

    apply_crds(&client).await;
    // The failing watch has backed off to at most 30 s (plus jitter) by now.
    wait_for_within(
        "routes written",
        ("True".to_owned(), "Written".to_owned()),
        Duration::from_secs(45),
        || condition("Ready"),
    )
    .await;
    assert_eq!(http_routes(&c).await.len(), 1);
    assert!(
        op.child.try_wait().ok().flatten().is_none(),
        "the operator exited"
    );
    op.stop();
    let _ = c
        .api::<LaneEntry>()
        .delete("mesh", &DeleteParams::default())
        .await;
}
