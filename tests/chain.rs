//! The front-end chain end to end: a request enters at the gateway (Traefik), `gateway-bff` (Jetty
//! with laneway's LaneFilter) calls `order` over Dubbo, `order` calls `user` over Dubbo; every
//! pod is its own JVM bound to its pod IP, with laneway's Dubbo filters on the classpath and its
//! labels in a downward-API file. The application code sets no tag: the lane is kept from hop to
//! hop by `clients/java`, and routed at each hop by laneway's HTTPRoutes and Dubbo rules.
//!
//! The JVMs start once for the whole binary; the scenarios run one after another on them.

mod cluster;
mod gateway;
mod peers;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use cluster::*;
use gateway::*;
use peers::{Peer, ZooKeeper};
use serde_json::json;

const HOST: &str = "shop.example.com";
const LANE_LABEL: &str = "laneway.io/lane";

/// The pods of the chain: (name, app, lane, IP). `order-1` is relabelled and `order-alice` turns
/// not ready during the test.
const PODS: [(&str, &str, Option<&str>, &str); 10] = [
    ("bff-0", "gateway-bff", None, "198.18.0.20"),
    ("bff-gray", "gateway-bff", Some("gray"), "198.18.0.21"),
    ("order-0", "order", None, "198.18.0.22"),
    ("order-1", "order", None, "198.18.0.23"),
    ("order-alice", "order", Some("dev-alice"), "198.18.0.24"),
    ("order-gray", "order", Some("gray"), "198.18.0.25"),
    ("user-0", "user", None, "198.18.0.26"),
    ("user-1", "user", None, "198.18.0.27"),
    ("user-fx", "user", Some("feature-x"), "198.18.0.28"),
    ("user-gray", "user", Some("gray"), "198.18.0.29"),
];

/// Requests per assertion.
const N: usize = 1000;

fn chain(pods: &[&str]) -> Vec<String> {
    pods.iter().map(|p| p.to_string()).collect()
}

struct Chain {
    c: Cluster,
    traefik: Traefik,
    labels: PathBuf,
    _zk: ZooKeeper,
    _jvms: Vec<Peer>,
    _op: Operator,
}

impl Chain {
    async fn start() -> Chain {
        let c = cluster("chain").await;
        let traefik = Traefik::start(&c.client, &c.ns).await;
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("chain-{}", std::process::id()));
        let (labels, zk) = peers::chain_base(&c, &dir).await;
        let all = ["gateway-bff", "order", "user"];
        c.apply_yaml(&route("feature-x", &all, &[], false))
            .await
            .expect("lane");
        c.apply_yaml(&route("dev-alice", &all, &["feature-x"], false))
            .await
            .expect("lane");
        let entry = json!({
            "apiVersion": "laneway.io/v1alpha1", "kind": "LaneEntry",
            "metadata": {"name": "shop"},
            "spec": {"parentRefs": [traefik.parent_ref()], "hostnames": [HOST], "stickyGray": "cookie",
                     "rules": [{"backend": {"service": "gateway-bff", "port": 80}}]},
        });
        c.apply_yaml(&entry.to_string()).await.expect("entry");
        for (name, app, lane, ip) in PODS {
            c.pod(name, app, lane, ip).await;
            peers::write_labels(&labels.join(name), app, lane);
        }
        // Its own namespace only: objects earlier test binaries left (a rule set past the
        // ConfigMap limit) must not share the centres with it.
        let op = c
            .operator_watching(
                "lease",
                &[&c.ns],
                &["--zookeeper", &zk.address(), "--route-grace=1s"],
            )
            .await;

        let jvms = peers::chain_jvms(&PODS, &labels, &zk.address());
        Chain {
            c,
            traefik,
            labels,
            _zk: zk,
            _jvms: jvms,
            _op: op,
        }
    }

    async fn relabel(&self, pod: &str, lane: Option<&str>) {
        let app = PODS.iter().find(|p| p.0 == pod).expect("pod").1;
        self.c.label_pod(pod, LANE_LABEL, lane).await;
        peers::write_labels(&self.labels.join(pod), app, lane);
    }

    /// Makes `pod` call onward the broken way `how` (`plain`, `pool`), or as it should (`None`).
    fn break_hop(&self, pod: &str, how: Option<&str>) {
        let file = peers::break_file(&self.labels.join(pod));
        match how {
            Some(how) => std::fs::write(&file, how).expect("break file"),
            None => std::fs::remove_file(&file).expect("break file"),
        }
    }

    /// `kubectl laneway probe LANE` at the entry through Traefik: its exit status and output.
    fn probe(&self, lane: &str) -> (bool, String) {
        let gateway = format!("http://{}", self.traefik.http().web);
        let args = [lane, "--entry", "shop", "-n", &self.c.ns, "--gateway", &gateway];
        let expect = ["--expect", "gateway-bff,order,user"];
        probe(
            &[&args[..], &expect].concat(),
            &self.labels.with_file_name("state"),
        )
    }

    async fn set_ready(&self, pod: &str, ready: bool) {
        let ip = PODS.iter().find(|p| p.0 == pod).expect("pod").3;
        self.c.set_pod_status(pod, ip, ready).await;
    }
}

/// `t`'s chains, each with its count, asserting that every request was answered.
fn chains(t: &Tally, what: &str) -> BTreeMap<Vec<String>, usize> {
    assert_eq!(
        t.ok(),
        t.total(),
        "{what}: failed requests {:?} {:?}",
        t.statuses,
        t.samples
    );
    t.chain_counts()
}

/// Chains that touch a pod of `pods`.
fn touching(counts: &BTreeMap<Vec<String>, usize>, pods: &[&str]) -> usize {
    counts
        .iter()
        .filter(|(c, _)| c.iter().any(|p| pods.contains(&p.as_str())))
        .map(|(_, n)| n)
        .sum()
}

/// Exactly these chains, each taking a fair share of the requests (Dubbo's round robin).
fn assert_split(counts: &BTreeMap<Vec<String>, usize>, want: &[&[&str]]) {
    let keys: Vec<Vec<String>> = want.iter().map(|c| chain(c)).collect();
    assert_eq!(counts.keys().cloned().collect::<Vec<_>>(), keys, "{counts:?}");
    let fair = N / want.len();
    assert!(
        counts.values().all(|n| n * 10 >= fair * 7),
        "an uneven split: {counts:?}"
    );
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1]
}

#[tokio::test(flavor = "multi_thread")]
async fn every_hop_keeps_the_lane_from_the_gateway_through_dubbo() {
    let s = Chain::start().await;
    let http = s.traefik.http();
    let alice = Request::new(HOST).lane("dev-alice");
    let untagged = Request::new(HOST);
    let alice_chain = chain(&["bff-0", "order-alice", "user-fx"]);
    http.wait_for_within("dev-alice's chain", &alice, Duration::from_secs(90), |r| {
        r.chain() == alice_chain
    })
    .await;

    the_probe_names_the_hop_that_loses_the_lane(&s).await;

    // The lane header: bff has no dev-alice pod (baseline), order has one, user falls back to
    // feature-x, every time.
    let t = http.load(&alice, N, 8).await;
    assert_eq!(chains(&t, "x-lane"), [(alice_chain.clone(), N)].into());

    // OpenTelemetry baggage alone carries the lane the same way.
    let baggage = Request::new(HOST).header("baggage", "userId=42,lane=dev-alice;p=1");
    let t = http.load(&baggage, N, 8).await;
    assert_eq!(chains(&t, "baggage"), [(alice_chain.clone(), N)].into());

    // No lane: baseline at every hop, never a tagged pod.
    let t = http.load(&untagged, N, 8).await;
    let counts = chains(&t, "no lane");
    assert_eq!(
        touching(
            &counts,
            &["bff-gray", "order-alice", "order-gray", "user-fx", "user-gray"]
        ),
        0,
        "{counts:?}"
    );
    assert!(
        counts.keys().all(|c| c.len() == 3 && c[0] == "bff-0"),
        "{counts:?}"
    );

    relabel_moves_calls_without_a_failed_call(&s, &http, &alice, &untagged).await;
    a_lane_pod_not_ready_falls_back_and_returns(&s, &http, &alice).await;
    weighted_gray_stays_gray_at_every_hop(&s, &http, &untagged).await;
    a_sticky_draw_keeps_each_client_in_the_lane_it_was_drawn_into(&http, &untagged).await;
}

/// With `stickyGray: cookie` (which Traefik cannot set: it ignores backendRef filters),
/// gateway-bff's LaneFilter (`sticky-cookie`) answers a new client's first request with the
/// cookie of the lane it was drawn into: 20% ± 2 of 1,000 new clients are drawn into gray, and
/// each client keeps its lane, gray or baseline, for its next 100 requests.
async fn a_sticky_draw_keeps_each_client_in_the_lane_it_was_drawn_into(http: &Http, untagged: &Request) {
    use futures::StreamExt;
    let gray_chain = chain(&["bff-gray", "order-gray", "user-gray"]);
    let firsts: Vec<Response> = futures::stream::iter(0..N)
        .map(|_| async { http.get(untagged).await.expect("answer") })
        .buffer_unordered(8)
        .collect()
        .await;
    let mut jars: BTreeMap<bool, Vec<String>> = BTreeMap::new();
    for r in &firsts {
        let gray = r.chain() == gray_chain;
        let want = if gray { "x-lane=gray" } else { "x-lane=-" };
        assert_eq!(
            r.set_cookies,
            [format!("{want}; Path=/; HttpOnly; SameSite=Lax")],
            "{:?}",
            r.chain()
        );
        jars.entry(gray).or_default().push(want.to_owned());
    }
    let drawn = jars.get(&true).map_or(0, Vec::len);
    println!("sticky gray: {drawn} of {N} new clients drawn into gray");
    assert!((N * 18 / 100..=N * 22 / 100).contains(&drawn), "20% ± 2: {drawn}");
    let tagged = ["bff-gray", "order-alice", "order-gray", "user-fx", "user-gray"];
    for (gray, cookies) in jars {
        for cookie in cookies.iter().take(5) {
            let t = http
                .load(&untagged.clone().header("cookie", cookie), 100, 4)
                .await;
            let counts = chains(&t, cookie);
            if gray {
                assert_eq!(
                    counts,
                    [(gray_chain.clone(), 100)].into(),
                    "a client drawn into gray"
                );
            } else {
                assert_eq!(
                    touching(&counts, &tagged),
                    0,
                    "a client drawn into baseline: {counts:?}"
                );
            }
        }
    }
}

/// `order-1` moves into dev-alice and back, repeatedly, under load: no call fails, every chain
/// stays whole, and the moved pod serves the lane's calls (and only those) while in it.
async fn relabel_moves_calls_without_a_failed_call(
    s: &Chain,
    http: &Http,
    alice: &Request,
    untagged: &Request,
) {
    let moves: usize = std::env::var("LANEWAY_CHAIN_MOVES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10);
    let lane_watch = http.watch(alice, 2, Duration::from_millis(5));
    let plain_watch = http.watch(untagged, 2, Duration::from_millis(5));
    let mut into = Vec::new();
    let mut out = Vec::new();
    for _ in 0..moves {
        into.push(moved(s, &lane_watch, Some("dev-alice")).await);
        out.push(moved(s, &plain_watch, None).await);
    }
    for (what, watch) in [("dev-alice", lane_watch), ("no lane", plain_watch)] {
        let report = watch.stop().await;
        report.assert_no_failures(&format!("{what} calls while order-1 moved"));
        let broken: Vec<_> = report.hits.iter().filter(|h| h.chain.len() != 3).collect();
        assert!(
            broken.is_empty(),
            "{what}: chains not whole: {:?}",
            &broken[..broken.len().min(5)]
        );
    }
    into.sort();
    out.sort();
    println!(
        "relabel -> whole chain routed by it ({moves} moves): into the lane p50 {:?} p99 {:?}; back to baseline p50 {:?} p99 {:?}",
        percentile(&into, 0.5),
        percentile(&into, 0.99),
        percentile(&out, 0.5),
        percentile(&out, 0.99)
    );

    // In the lane, order-1 takes dev-alice's calls and no untagged one.
    s.relabel("order-1", Some("dev-alice")).await;
    http.wait_for("order-1 in dev-alice", alice, |r| {
        r.chain().get(1).is_some_and(|p| p == "order-1")
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let t = http.load(untagged, N, 8).await;
    assert_eq!(
        touching(&chains(&t, "no lane, order-1 in dev-alice"), &["order-1"]),
        0
    );
    let t = http.load(alice, N, 8).await;
    assert_split(
        &chains(&t, "dev-alice with order-1 in it"),
        &[
            &["bff-0", "order-1", "user-fx"],
            &["bff-0", "order-alice", "user-fx"],
        ],
    );
    s.relabel("order-1", None).await;
    // Round robin still sends every other dev-alice call to order-alice while order-1 is in the
    // lane: an untagged call through order-1 is what shows the new rule.
    http.wait_for("order-1 back on baseline", untagged, |r| {
        r.chain().get(1).is_some_and(|p| p == "order-1")
    })
    .await;
    let alice_chain = chain(&["bff-0", "order-alice", "user-fx"]);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let t = http.load(alice, N, 8).await;
    assert_eq!(chains(&t, "dev-alice, order-1 back"), [(alice_chain, N)].into());
}

/// Moves `order-1` into `lane` (or back to baseline) and returns how long until a request that
/// `watch` sends (in that lane, or in none) went through it.
async fn moved(s: &Chain, watch: &Watch, lane: Option<&str>) -> Duration {
    let at = watch.now();
    let patched = k8s_openapi::jiff::Timestamp::now();
    s.relabel("order-1", lane).await;
    let answered = watch.now() - at;
    let through = |h: &Hit| h.at > at && h.chain.get(1).is_some_and(|p| p == "order-1");
    let what = format!("order-1 serves calls in lane {lane:?}");
    let report = watch
        .wait_until(&what, TIMEOUT, |r| r.hits.iter().any(through))
        .await;
    let took = report.hits.iter().find(|h| through(h)).expect("hit").at - at;
    println!(
        "order-1 to {lane:?}: label PATCH at {patched}, answered after {answered:?}, routed after {took:?}"
    );
    took
}

/// The lane's only order pod turns not ready: that hop falls back (feature-x has no order pod, so
/// baseline), the next hop keeps the lane's fallback; and back when it is ready again.
async fn a_lane_pod_not_ready_falls_back_and_returns(s: &Chain, http: &Http, alice: &Request) {
    let watch = http.watch(alice, 2, Duration::from_millis(5));
    s.set_ready("order-alice", false).await;
    http.wait_for("dev-alice's order hop on baseline", alice, |r| {
        r.chain()
            .get(1)
            .is_some_and(|p| p.starts_with("order-") && p != "order-alice")
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let t = http.load(alice, N, 8).await;
    assert_split(
        &chains(&t, "dev-alice, order-alice not ready"),
        &[&["bff-0", "order-0", "user-fx"], &["bff-0", "order-1", "user-fx"]],
    );
    s.set_ready("order-alice", true).await;
    let alice_chain = chain(&["bff-0", "order-alice", "user-fx"]);
    http.wait_for("dev-alice's own order again", alice, |r| r.chain() == alice_chain)
        .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let t = http.load(alice, N, 8).await;
    assert_eq!(
        chains(&t, "dev-alice, order-alice ready again"),
        [(alice_chain, N)].into()
    );
    let report = watch.stop().await;
    report.assert_no_failures("dev-alice calls while order-alice turned not ready and back");
    assert!(report.hits.iter().all(|h| h.chain.len() == 3), "a chain broke");
}

/// `gray` with `weight: 20` and pods at every service: a fifth of untagged requests are drawn
/// into it at the gateway, and each of those stays gray at every hop (Traefik ignores the routes'
/// backend header filter; the gray bff passes its own lane on).
async fn weighted_gray_stays_gray_at_every_hop(s: &Chain, http: &Http, untagged: &Request) {
    s.c.apply_yaml(&format!(
        "{}  weight: 20\n",
        route("gray", &["gateway-bff", "order", "user"], &[], false)
    ))
    .await
    .expect("gray");
    http.wait_for("the gray share", untagged, |r| r.first_hop() == Some("bff-gray"))
        .await;
    let t = http.load(untagged, N, 8).await;
    let counts = chains(&t, "weighted gray");
    let gray = counts
        .get(&chain(&["bff-gray", "order-gray", "user-gray"]))
        .copied()
        .unwrap_or_default();
    println!("weight 20: {gray} of {N} untagged requests gray at every hop; chains {counts:?}");
    assert!(
        (N * 18 / 100..=N * 22 / 100).contains(&gray),
        "20% ± 2: {gray} ({counts:?})"
    );
    let baseline = ["bff-0", "order-0", "order-1", "user-0", "user-1"];
    let mixed: Vec<_> = counts
        .iter()
        .filter(|(c, _)| c[0] != "bff-gray" && !c.iter().all(|p| baseline.contains(&p.as_str())))
        .collect();
    assert!(
        mixed.is_empty(),
        "chains neither all gray nor all baseline: {mixed:?}"
    );
    assert_eq!(
        gray + counts
            .iter()
            .filter(|(c, _)| c[0] == "bff-0")
            .map(|(_, n)| n)
            .sum::<usize>(),
        N,
        "{counts:?}"
    );
}

/// `kubectl laneway probe`: on the whole chain it shows every hop with the lane and the tier
/// laneway expected there, and exits 0; where the baseline order pods (feature-x has none of its
/// own) call onward with a plain Dubbo client, it names order as the last hop that reported and
/// user as never reached; where they hand the call to a bare thread pool, it names user as the
/// hop that got no lane from order. Both exit 1.
async fn the_probe_names_the_hop_that_loses_the_lane(s: &Chain) {
    let (clean, text) = s.probe("dev-alice");
    let rows = probe_rows(&text);
    assert_eq!(
        rows,
        [
            [
                "1",
                "gateway-bff",
                "bff-0",
                "dev-alice",
                "header",
                "Baseline",
                "-"
            ],
            [
                "2",
                "order",
                "order-alice",
                "dev-alice",
                "tag",
                "Lane",
                "dev-alice"
            ],
            [
                "3",
                "user",
                "user-fx",
                "dev-alice",
                "tag",
                "Fallback:feature-x",
                "feature-x"
            ],
        ],
        "{text}"
    );
    assert!(clean, "{text}");
    assert!(
        text.ends_with("clean: every hop carried lane dev-alice, each on the tier laneway expected\n"),
        "{text}"
    );

    let (clean, text) = s.probe("feature-x");
    assert!(clean, "feature-x before any hop is broken: {text}");
    let order = ["order-0", "order-1"];
    for how in ["plain", "pool"] {
        for pod in order {
            s.break_hop(pod, Some(how));
        }
        let (clean, text) = s.probe("feature-x");
        for pod in order {
            s.break_hop(pod, None);
        }
        assert!(!clean, "{how}: {text}");
        let last = text.lines().last().unwrap_or_default();
        let named = order.iter().find(|p| last.contains(&format!("order (pod {p})")));
        assert!(named.is_some(), "{how}: {text}");
        let want = match how {
            "plain" => format!("lane feature-x never reached user: the last hop to report was hop 2 order (pod {}), whose onward call carried no probe", named.unwrap()),
            _ => {
                let user = ["user-0", "user-1"].into_iter().find(|u| last.contains(&format!("user (pod {u})")));
                format!("lane feature-x lost at hop 3: user (pod {}) got no lane from order (pod {})", user.unwrap_or("?"), named.unwrap())
            }
        };
        assert_eq!(last, want, "{how}: {text}");
    }
}
