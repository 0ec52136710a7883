//! Self-test of the Gateway API support in `tests/gateway`: Traefik routing to hand-written
//! selectorless Services and EndpointSlices (no laneway), backend pods in one Python process,
//! chains through the gateway, the load and watch helpers. Run with
//! `tests/in-cluster.sh cargo test --test gateway_selftest -- --nocapture`.

mod cluster;
mod gateway;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use gateway::*;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::DeleteParams;
use kube::Api;
use serde_json::{json, Value};

/// Traefik, timing and 1,000-request loads: one scenario at a time on two cores.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// One scenario: its namespace, Traefik and backend pods; [`SERIAL`] is held while it lives.
struct Env {
    c: cluster::Cluster,
    traefik: Traefik,
    backends: Backends,
    _serial: tokio::sync::MutexGuard<'static, ()>,
}

async fn env(test: &str) -> Env {
    let serial = SERIAL.lock().await;
    let c = cluster::cluster(test).await;
    let traefik = Traefik::start(&c.client, &c.ns).await;
    Env {
        traefik,
        backends: Backends::start(),
        c,
        _serial: serial,
    }
}

impl Env {
    /// Serves `backend` and creates its Pod (see [`Backends::deploy`]).
    async fn deploy(&self, backend: &Backend) -> SocketAddr {
        self.backends.deploy(&self.c.client, &self.c.ns, backend).await
    }

    async fn apply(&self, objects: &[Value]) {
        for object in objects {
            apply(&self.c.client, &self.c.ns, &object.to_string())
                .await
                .unwrap_or_else(|e| panic!("apply {object}: {e}"));
        }
    }

    /// An HTTPRoute for `host` with `rules`, on the fixture's Gateway.
    fn route(&self, name: &str, host: &str, rules: Value) -> Value {
        json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
               "metadata": {"name": name},
               "spec": {"parentRefs": [self.traefik.parent_ref()], "hostnames": [host], "rules": rules}})
    }
}

/// A selectorless Service with port 80 named `http` (as laneway writes lane Services).
fn service(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": name},
           "spec": {"ports": [{"name": "http", "port": 80, "targetPort": "http"}]}})
}

/// An EndpointSlice of `service`: the endpoints (address, ready) on one `port`.
fn slice(name: &str, service: &str, port: u16, endpoints: &[(SocketAddr, bool)]) -> Value {
    let endpoints: Vec<Value> = endpoints
        .iter()
        .map(|(addr, ready)| json!({"addresses": [addr.ip().to_string()], "conditions": {"ready": ready}}))
        .collect();
    json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
           "metadata": {"name": name, "labels": {"kubernetes.io/service-name": service}},
           "addressType": "IPv4", "ports": [{"name": "http", "port": port, "protocol": "TCP"}],
           "endpoints": endpoints})
}

/// A slice holding one ready backend.
fn slice_of(name: &str, service: &str, addr: SocketAddr) -> Value {
    slice(name, service, addr.port(), &[(addr, true)])
}

fn backend_ref(service: &str, weight: Option<u32>) -> Value {
    match weight {
        Some(w) => json!({"name": service, "port": 80, "weight": w}),
        None => json!({"name": service, "port": 80}),
    }
}

#[tokio::test]
async fn header_rule_and_weighted_default_split_80_20() {
    let e = env("gw-split").await;
    let (client, ns) = (&e.c.client, e.c.ns.as_str());
    let a = e.deploy(&Backend::new("a-1", "a", POD_IPS[0])).await;
    let b = e.deploy(&Backend::new("b-1", "b", POD_IPS[1]).lane("gray")).await;
    assert_eq!(
        pod_status(client, ns, "b-1").await,
        Some(("Running".into(), POD_IPS[1].into(), true)),
        "the backend's Pod as a kubelet reports it"
    );

    let rules = json!([
        {"matches": [{"headers": [{"name": LANE_HEADER, "value": "gray"}]}], "backendRefs": [backend_ref("b", None)]},
        {"backendRefs": [backend_ref("a", Some(80)), backend_ref("b", Some(20))]}
    ]);
    e.apply(&[
        service("a"),
        service("b"),
        slice_of("a-1", "a", a),
        slice_of("b-1", "b", b),
        e.route("shop", "shop", rules),
    ])
    .await;

    let http = e.traefik.http();
    let gray = Request::new("shop").lane("gray");
    let (first, took) = http
        .wait_for("the header rule to serve", &gray, |r| {
            r.first_hop() == Some("b-1")
        })
        .await;
    println!("route served {took:?} after it was applied");
    let answer = first.answer.expect("answer");
    assert_eq!(answer.headers.get(LANE_HEADER).map(String::as_str), Some("gray"));
    let conds = route_conditions(client, ns, "shop").await;
    assert!(
        has_condition(&conds, "Accepted", "True") && has_condition(&conds, "ResolvedRefs", "True"),
        "{conds:?}"
    );

    let features = e.traefik.supported_features().await;
    println!("GatewayClass supportedFeatures: {features:?}");
    for f in ["Gateway", "HTTPRoute", "ReferenceGrant"] {
        assert!(features.iter().any(|x| x == f), "{f} missing from {features:?}");
    }

    let untagged = http.load(&Request::new("shop"), 1000, 8).await;
    println!(
        "1000 untagged requests (8 at a time) in {:?}: {:?} {:?}",
        untagged.elapsed, untagged.by_first_hop, untagged.statuses
    );
    assert_eq!(untagged.statuses.get(&200), Some(&1000), "{:?}", untagged.samples);
    let to_a = untagged.first_hop("a-1");
    assert!((780..=820).contains(&to_a), "80/20 ± 2: a-1 got {to_a}/1000");
    assert_eq!(to_a + untagged.first_hop("b-1"), 1000);

    let tagged = http.load(&gray, 200, 4).await;
    assert_eq!(
        tagged.by_first_hop,
        [("b-1".to_owned(), 200)].into(),
        "{:?}",
        tagged.samples
    );
    let other = http.load(&Request::new("shop").lane("blue"), 100, 4).await;
    assert_eq!(other.ok(), 100, "another lane falls to the default rule");
    assert_eq!(other.total(), other.first_hop("a-1") + other.first_hop("b-1"));
    let served = e.backends.requests().await;
    assert!(served["a-1"] >= to_a as u64 && served["b-1"] >= 300, "{served:?}");
}

#[tokio::test]
async fn three_hop_chain_returns_the_pods_of_each_hop() {
    let e = env("gw-chain").await;
    let web = e.traefik.web;
    let bff = Backend::new("bff-1", "gateway-bff", POD_IPS[0]).next(web, "order", "/orders");
    let order = Backend::new("order-1", "order", POD_IPS[1]).next(web, "user", "/users");
    let order_gray = Backend::new("order-gray", "order", POD_IPS[2])
        .lane("gray")
        .next(web, "user", "/users");
    let user = Backend::new("user-1", "user", POD_IPS[3]);
    let mut objects = Vec::new();
    for (svc, b) in [
        ("gateway-bff", &bff),
        ("order", &order),
        ("order-gray", &order_gray),
        ("user", &user),
    ] {
        let addr = e.deploy(b).await;
        objects.push(service(svc));
        objects.push(slice_of(&b.name, svc, addr));
    }
    objects.push(e.route(
        "bff",
        "bff",
        json!([{"backendRefs": [backend_ref("gateway-bff", None)]}]),
    ));
    objects.push(e.route(
        "order",
        "order",
        json!([
            {"matches": [{"headers": [{"name": LANE_HEADER, "value": "gray"}]}], "backendRefs": [backend_ref("order-gray", None)]},
            {"backendRefs": [backend_ref("order", None)]}
        ]),
    ));
    objects.push(e.route(
        "user",
        "user",
        json!([{"backendRefs": [backend_ref("user", None)]}]),
    ));
    e.apply(&objects).await;

    let http = e.traefik.http();
    let chain = |pods: &[&str]| pods.iter().map(|p| p.to_string()).collect::<Vec<_>>();
    let untagged = Request::new("bff");
    let baseline = chain(&["bff-1", "order-1", "user-1"]);
    http.wait_for("the chain to be served", &untagged, |r| r.chain() == baseline)
        .await;
    let gray = untagged.clone().lane("gray");
    let gray_chain = chain(&["bff-1", "order-gray", "user-1"]);
    http.wait_for("the gray chain", &gray, |r| r.chain() == gray_chain)
        .await;

    let t = http.load(&untagged, 100, 4).await;
    assert_eq!(
        t.chain_counts(),
        [(baseline.clone(), 100)].into(),
        "{:?}",
        t.samples
    );
    assert_eq!(t.by_hop.len(), 3);
    assert_eq!(t.by_hop[1], [("order-1".to_owned(), 100)].into());
    let t = http.load(&gray, 100, 4).await;
    assert_eq!(t.chain_counts(), [(gray_chain, 100)].into(), "{:?}", t.samples);
    println!(
        "3-hop chains: 100 requests in {:?}; RSS: Traefik {:.0} MiB, backends.py (4 pods) {:.0} MiB",
        t.elapsed,
        e.traefik.rss_mib().unwrap_or_default(),
        e.backends.rss_mib().unwrap_or_default()
    );

    // Each hop forwards the lane header; paths are the next hops' paths.
    let hops = http
        .get(&gray)
        .await
        .expect("answer")
        .answer
        .expect("answer")
        .hops();
    let seen: Vec<(&str, &str, Option<&str>)> = hops
        .iter()
        .map(|h| {
            (
                h.pod.as_str(),
                h.path.as_str(),
                h.headers.get(LANE_HEADER).map(String::as_str),
            )
        })
        .collect();
    assert_eq!(
        seen,
        [
            ("bff-1", "/", Some("gray")),
            ("order-gray", "/orders", Some("gray")),
            ("user-1", "/users", Some("gray"))
        ]
    );
    let direct = Http::new(e.backends.addr("order-gray").expect("order-gray"))
        .get(&Request::new("anything").lane("gray"))
        .await
        .expect("direct");
    assert_eq!(direct.chain(), chain(&["order-gray", "user-1"]));
}

#[tokio::test]
async fn no_ready_endpoint_is_503_and_a_missing_service_is_500() {
    let e = env("gw-broken").await;
    let (client, ns, web) = (&e.c.client, e.c.ns.as_str(), e.traefik.web);
    // The not-ready endpoint is a live backend: a 503 proves Traefik did not use it.
    let idle = e.deploy(&Backend::new("idle-1", "idle", POD_IPS[0])).await;
    let front = Backend::new("front-1", "front", POD_IPS[1]).next(web, "empty", "/");
    let front_addr = e.deploy(&front).await;
    e.apply(&[
        service("empty"),
        slice("empty-1", "empty", idle.port(), &[(idle, false)]),
        service("front"),
        slice_of("front-1", "front", front_addr),
        e.route(
            "empty",
            "empty",
            json!([{"backendRefs": [backend_ref("empty", None)]}]),
        ),
        e.route(
            "missing",
            "missing",
            json!([{"backendRefs": [backend_ref("nosuch", None)]}]),
        ),
        e.route(
            "front",
            "front",
            json!([{"backendRefs": [backend_ref("front", None)]}]),
        ),
    ])
    .await;

    let http = e.traefik.http();
    for (host, status) in [("empty", 503), ("missing", 500), ("front", 503)] {
        http.wait_for(&format!("{host} answered {status}"), &Request::new(host), |r| {
            r.status == status
        })
        .await;
        let t = http.load(&Request::new(host), 50, 4).await;
        assert_eq!(t.statuses, [(status, 50)].into(), "Host {host}: {:?}", t.samples);
        println!("Host {host}: {:?}; sample: {:?}", t.statuses, t.samples.first());
    }
    // A failing hop's status reaches the client, with the chain up to it.
    let r = http.get(&Request::new("front")).await.expect("answer");
    let answer = r.answer.expect("front-1 answers");
    assert_eq!(answer.chain, vec!["front-1".to_owned()]);
    assert!(answer.error.unwrap_or_default().contains("answered 503"));
    assert_eq!(
        e.backends.requests().await["idle-1"],
        0,
        "the not-ready endpoint got traffic"
    );

    let conds = route_conditions(client, ns, "missing").await;
    assert!(
        conds
            .iter()
            .any(|c| c.0 == "ResolvedRefs" && c.1 == "False" && c.2 == "BackendNotFound"),
        "{conds:?}"
    );
}

/// Applies `change(i)` (objects, the pod that must then answer) and times until `req` is
/// answered by that pod: `samples` changes each after a quiet second, then `samples` back to back.
async fn time_changes<F>(
    e: &Env,
    http: &Http,
    req: &Request,
    samples: usize,
    change: F,
) -> (Vec<Duration>, Vec<Duration>)
where
    F: Fn(usize) -> (Vec<Value>, &'static str),
{
    let (mut quiet, mut burst) = (Vec::new(), Vec::new());
    for i in 0..2 * samples {
        let after_quiet = i < samples;
        if after_quiet {
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        let (objects, pod) = change(i);
        e.apply(&objects).await;
        let (_, took) = http
            .wait_for_within(&format!("{pod} served"), req, Duration::from_secs(5), |r| {
                r.first_hop() == Some(pod)
            })
            .await;
        if after_quiet { &mut quiet } else { &mut burst }.push(took);
    }
    (quiet, burst)
}

fn report(what: &str, quiet: &[Duration], burst: &[Duration]) {
    let ms = |v: &[Duration]| {
        let mut v: Vec<u128> = v.iter().map(|d| d.as_millis()).collect();
        v.sort();
        let median = v[v.len() / 2];
        format!("{v:?} ms (median {median})")
    };
    println!(
        "{what} -> served (200 ms throttle): after 1 s quiet {}; back to back {}",
        ms(quiet),
        ms(burst)
    );
}

#[tokio::test]
async fn endpointslice_changes_apply_quickly_and_a_move_has_no_errors() {
    let e = env("gw-timing").await;
    let (client, ns) = (&e.c.client, e.c.ns.as_str());
    let p1 = e.deploy(&Backend::new("p1", "s", POD_IPS[0])).await;
    let p2 = e.deploy(&Backend::new("p2", "s", POD_IPS[1])).await;
    e.apply(&[
        service("s"),
        slice_of("s-1", "s", p1),
        e.route("s", "s", json!([{"backendRefs": [backend_ref("s", None)]}])),
    ])
    .await;
    let http = e.traefik.http();
    let req = Request::new("s");
    http.wait_for("p1 served", &req, |r| r.first_hop() == Some("p1"))
        .await;

    // One slice switched between p1 and p2; then the route switched between Services s (p1) and
    // s-alt (p2). Each ends on p1.
    let samples: usize = std::env::var("LANEWAY_GW_SAMPLES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(5);
    let (quiet, burst) = time_changes(&e, &http, &req, samples, |i| {
        let (pod, addr) = if i % 2 == 0 { ("p2", p2) } else { ("p1", p1) };
        (vec![slice_of("s-1", "s", addr)], pod)
    })
    .await;
    report("EndpointSlice change", &quiet, &burst);
    e.apply(&[service("s-alt"), slice_of("s-alt-1", "s-alt", p2)])
        .await;
    let (route_quiet, route_burst) = time_changes(&e, &http, &req, samples, |i| {
        let (pod, svc) = if i % 2 == 0 { ("p2", "s-alt") } else { ("p1", "s") };
        let rules = json!([{"backendRefs": [backend_ref(svc, None)]}]);
        (vec![e.route("s", "s", rules)], pod)
    })
    .await;
    report("HTTPRoute change", &route_quiet, &route_burst);
    for took in [quiet, burst, route_quiet, route_burst].concat() {
        assert!(took < Duration::from_secs(3), "a change took {took:?}");
    }
    // The loop ended on p1. A move p1 -> p2 while requests keep flowing: add p2, drop p1 from
    // the slices, let Traefik apply it, then stop p1 gracefully. No request may fail.
    let watch = http.watch(&req, 2, Duration::from_millis(5));
    tokio::time::sleep(Duration::from_millis(300)).await;
    e.apply(&[slice_of("s-2", "s", p2)]).await;
    http.wait_for("p2 in the pool", &req, |r| r.first_hop() == Some("p2"))
        .await;
    let dropped = watch.now();
    Api::<EndpointSlice>::namespaced(client.clone(), ns)
        .delete("s-1", &DeleteParams::default())
        .await
        .expect("delete slice");
    // Out of rotation: the last 40 answers (round robin over every client) none from p1.
    let t0 = Instant::now();
    watch
        .wait_until("p1 out of rotation", Duration::from_secs(10), |r| {
            r.streak_without("p1") >= 40
        })
        .await;
    println!("slice deleted -> p1 out of rotation after {:?}", t0.elapsed());
    tokio::time::sleep(Duration::from_millis(500)).await;
    let stopped = watch.now();
    e.backends.remove("p1").await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let report = watch.stop().await;
    println!(
        "move: {} requests, {:?}; p1 last served at {:?}, slice dropped at {dropped:?}, p1 stopped at {stopped:?}",
        report.hits.len(),
        report.tally.by_first_hop,
        report.last_served_by("p1")
    );
    report.assert_no_failures("move p1 -> p2");
    assert!(report.last_served_by("p1") < Some(stopped));
    assert!(report.first_served_by("p2", stopped).is_some());

    // The watch does see failures: p2 crashes while it is the only endpoint.
    let watch = http.watch(&req, 1, Duration::from_millis(5));
    tokio::time::sleep(Duration::from_millis(200)).await;
    let crashed = watch.now();
    e.backends.kill("p2").await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let report = watch.stop().await;
    let failures = report.failures();
    assert!(!failures.is_empty(), "no failure seen after the crash");
    assert!(failures.iter().all(|h| h.at >= crashed), "{failures:?}");
    println!(
        "crash of the only endpoint: {} of {} requests failed, statuses {:?}, first at {:?} (crash at {crashed:?})",
        failures.len(),
        report.hits.len(),
        report.tally.statuses,
        failures[0].at
    );
}

#[tokio::test]
async fn backends_process_add_update_remove_kill() {
    let backends = Backends::start();
    let a = backends.add(&Backend::new("a", "a", "127.0.0.1")).await;
    let b = backends
        .add(
            &Backend::new("b", "b", "127.0.0.1")
                .next(a, "a", "/x")
                .forward(&["x-team"]),
        )
        .await;
    let req = Request::new("b").header("x-team", "blue").lane("gray");
    let r = Http::new(b).get(&req).await.expect("b answers");
    assert_eq!(r.status, 200);
    assert_eq!(r.chain(), vec!["b".to_owned(), "a".to_owned()]);
    let hops = r.answer.expect("answer").hops();
    assert_eq!((hops[1].pod.as_str(), hops[1].path.as_str()), ("a", "/x"));
    assert_eq!(hops[1].headers.get("host").map(String::as_str), Some("a"));
    assert_eq!(hops[1].headers.get("x-team").map(String::as_str), Some("blue"));
    assert_eq!(
        hops[1].headers.get(LANE_HEADER),
        None,
        "only the configured headers are forwarded"
    );

    backends
        .update(&Backend::new("a", "a", "127.0.0.1").status(503))
        .await;
    let r = Http::new(b).get(&req).await.expect("b answers");
    assert_eq!(r.status, 503, "a failing next hop's status is passed on");
    assert_eq!(
        backends.requests().await,
        [("a".to_owned(), 2), ("b".to_owned(), 2)].into()
    );

    assert_eq!(backends.remove("a").await, 2);
    let r = Http::new(b).get(&req).await.expect("b answers");
    assert_eq!(r.status, 502, "unreachable next hop");
    assert!(Http::new(a).get(&req).await.is_err(), "a still listening");
    backends.kill("b").await;
    assert!(Http::new(b).get(&req).await.is_err(), "b still listening");
    assert!(backends.requests().await.is_empty());
}
