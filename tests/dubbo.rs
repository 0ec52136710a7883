//! End to end: the operator against a real API server publishes tag-router rules to a real
//! ZooKeeper, and unmodified Dubbo 3.3 consumers route by them.

mod cluster;
mod peers;

use std::time::Duration;

use cluster::*;
use kube::ResourceExt;
use laneway::api::TagRule;
use laneway::lanes::DubboRule;
use peers::{provider, Caller, Calls, Consumer, ZooKeeper};

const APP: &str = "order-service";
const ZNODE: &str = "/dubbo/config/dubbo/order-service.tag-router";

/// The JVM peers are heavy for two cores: one scenario at a time.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn tag_rule(force: bool) -> String {
    format!(
        "apiVersion: laneway.io/v1alpha1\nkind: TagRule\nmetadata: {{name: order}}\nspec:\n  selector: {{matchLabels: {{app: order}}}}\n  dubbo: {{application: {APP}, port: 20880}}\n  force: {force}\n"
    )
}

fn rule(tags: &[(&str, &[&str])]) -> String {
    let tags: Vec<(String, Vec<String>)> = tags
        .iter()
        .map(|(t, ips)| {
            (
                t.to_string(),
                ips.iter().map(|ip| format!("{ip}:20880")).collect(),
            )
        })
        .collect();
    DubboRule::new(APP, false, &tags).content
}

async fn configmap_rule(c: &Cluster) -> Option<String> {
    c.dubbo_rule("order-service.tag-router").await
}

#[tokio::test(flavor = "multi_thread")]
async fn dubbo_calls_follow_lanes_fallbacks_relabels_and_force() {
    let _serial = SERIAL.lock().await;
    let c = cluster("dubbo-routing").await;
    let zk_dir = tempdir("zk-routing");
    let zk = ZooKeeper::start(&zk_dir);
    c.service("order").await;
    c.pod("order-p1", "order", None, "198.18.0.2").await;
    c.pod("order-p2", "order", Some("gray"), "198.18.0.3").await;
    c.pod("order-p3", "order", None, "198.18.0.4").await;
    c.pod("order-p4", "order", Some("feature-x"), "198.18.0.5").await;
    let mut p1 = provider(APP, "p1", "198.18.0.2", &zk);
    let mut p2 = provider(APP, "p2", "198.18.0.3", &zk);
    let _p3 = provider(APP, "p3", "198.18.0.4", &zk);
    let _p4 = provider(APP, "p4", "198.18.0.5", &zk);
    let mut consumer = Consumer::start(APP, &zk);
    consumer.expect(
        "before any rule, plain load balancing",
        None,
        &["p1", "p2", "p3", "p4"],
    );

    let _op = c
        .operator_with("lease", &["--zookeeper", &zk.address(), "--rule-grace", "2s"])
        .await;
    c.apply_yaml(&route_yaml("dev-alice", &["order"], &["feature-x"]))
        .await
        .expect("route");
    c.apply_yaml(&tag_rule(false)).await.expect("tag rule");

    let expected = rule(&[
        ("dev-alice", &["198.18.0.5"]),
        ("feature-x", &["198.18.0.5"]),
        ("gray", &["198.18.0.3"]),
    ]);
    wait_for("rule in ZooKeeper", Some(expected.clone()), || async {
        zk.get(ZNODE)
    })
    .await;
    wait_for("rule in the ConfigMap", Some(expected.clone()), || {
        configmap_rule(&c)
    })
    .await;
    consumer.expect("gray calls land only on the gray pod", Some("gray"), &["p2"]);
    consumer.expect("untagged calls never reach a tagged pod", None, &["p1", "p3"]);
    consumer.expect("feature-x", Some("feature-x"), &["p4"]);
    consumer.expect("dev-alice falls back to feature-x", Some("dev-alice"), &["p4"]);
    consumer.expect(
        "an unknown lane falls back to baseline",
        Some("dev-bob"),
        &["p1", "p3"],
    );

    let status = c
        .api::<TagRule>()
        .get("order")
        .await
        .expect("rule")
        .status
        .expect("status");
    let centres: Vec<&str> = status.publications.iter().map(|p| p.centre.as_str()).collect();
    assert_eq!(centres, ["configmap", "zookeeper"]);
    let hash = laneway::lanes::naming::digest(&[&expected]);
    assert!(status
        .publications
        .iter()
        .all(|p| p.content_hash.as_deref() == Some(hash.as_str()) && p.last_error.is_none()));

    // Relabelling a pod moves Dubbo traffic; no provider or consumer restarts.
    c.label_pod("order-p3", "laneway.io/lane", Some("gray")).await;
    consumer.expect("relabelled p3 joins gray", Some("gray"), &["p2", "p3"]);
    consumer.expect("and leaves baseline", None, &["p1"]);
    c.label_pod("order-p3", "laneway.io/lane", None).await;
    consumer.expect("back to baseline", None, &["p1", "p3"]);

    // The gray pod goes away (its provider stops with it): gray falls back to baseline ...
    p2.stop();
    c.remove_pod("order-p2").await;
    consumer.expect("gray falls back to baseline", Some("gray"), &["p1", "p3"]);
    // ... unless the rule forces tags: then gray calls fail.
    c.pod("order-p2", "order", Some("gray"), "198.18.0.3").await;
    c.apply_yaml(&tag_rule(true)).await.expect("force");
    let forced = DubboRule::new(
        APP,
        true,
        &[
            ("dev-alice".into(), vec!["198.18.0.5:20880".into()]),
            ("feature-x".into(), vec!["198.18.0.5:20880".into()]),
            ("gray".into(), vec!["198.18.0.3:20880".into()]),
        ],
    );
    wait_for("forced rule in ZooKeeper", Some(forced.content), || async {
        zk.get(ZNODE)
    })
    .await;
    let r = consumer.await_routing(Some("gray"), &["error"], false, Duration::from_secs(20));
    assert!(
        r.ok,
        "with force, gray calls without a gray provider must fail; last {}",
        r.last
    );

    // Deleting the TagRule retires the rule (disabled, then deleted) and routing is plain again.
    p1.stop();
    c.delete::<TagRule>("order").await;
    wait_for("znode deleted", None, || async { zk.get(ZNODE) }).await;
    wait_for("ConfigMap key removed", None, || configmap_rule(&c)).await;
    wait_for("TagRule gone once retired everywhere", false, || async {
        c.api::<TagRule>().get("order").await.is_ok()
    })
    .await;
    consumer.expect("plain load balancing again", Some("gray"), &["p3", "p4"]);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_zookeeper_outage_loses_no_rule_and_a_zookeeper_back_empty_gets_every_rule_again() {
    let _serial = SERIAL.lock().await;
    let c = cluster("dubbo-outage").await;
    let mut zk = ZooKeeper::start(&tempdir("zk-outage"));
    let port = zk.port;
    c.service("order").await;
    c.pod("order-p1", "order", None, "198.18.0.6").await;
    c.pod("order-p2", "order", Some("gray"), "198.18.0.7").await;
    c.service("pay").await;
    c.pod("pay-p1", "pay", Some("gray"), "198.18.0.8").await;
    // No read-back audit within the test: what comes back must come from the recovery.
    let op = c
        .operator_with(
            "lease",
            &[
                "--zookeeper",
                &zk.address(),
                "--rule-grace",
                "2s",
                "--centre-resync",
                "1h",
            ],
        )
        .await;
    c.apply_yaml(&tag_rule(false)).await.expect("tag rule");
    c.apply_yaml(&app_rule("pay", "pay-service"))
        .await
        .expect("tag rule");
    let first = rule(&[("gray", &["198.18.0.7"])]);
    wait_for("rule in ZooKeeper", Some(first.clone()), || async {
        zk.get(ZNODE)
    })
    .await;
    let pay = zk_rule_of(&zk, "pay-service").await;

    zk.peer.stop();
    c.label_pod("order-p1", "laneway.io/lane", Some("gray")).await;
    let second = rule(&[("gray", &["198.18.0.6", "198.18.0.7"])]);
    wait_for(
        "the ConfigMap moves on while ZooKeeper is down",
        Some(second.clone()),
        || configmap_rule(&c),
    )
    .await;
    wait_for("TagRule status shows the ZooKeeper error", true, || async {
        let rule = c.api::<TagRule>().get("order").await.ok();
        rule.and_then(|r| r.status).is_some_and(|s| {
            s.publications
                .iter()
                .any(|p| p.centre == "zookeeper" && p.last_error.is_some())
        })
    })
    .await;
    assert!(op.metric("laneway_publishes_total", "result=\"error\"").await > 0.0);

    // It comes back on the same port without its data, as after losing its volume.
    let zk = ZooKeeper::start_on(&tempdir("zk-outage-empty"), port);
    wait_for(
        "the current rule reaches ZooKeeper after recovery",
        Some(second),
        || async { zk.get(ZNODE) },
    )
    .await;
    wait_for(
        "the rule that did not change meanwhile is written again",
        Some(pay),
        || async { zk.get(&rule_path("pay-service")) },
    )
    .await;
    let rule = c.api::<TagRule>().get("order").await.expect("rule");
    assert!(rule.finalizers().iter().any(|f| f == "laneway.io/cleanup"));
}

/// Waits for `application`'s rule znode and returns its content.
async fn zk_rule_of(zk: &ZooKeeper, application: &str) -> String {
    let path = rule_path(application);
    eventually(&format!("{application} rule"), || async {
        zk.get(&path).is_some()
    })
    .await;
    zk.get(&path).expect("rule")
}

fn route_yaml(name: &str, services: &[&str], fallback: &[&str]) -> String {
    format!(
        "apiVersion: laneway.io/v1alpha1\nkind: LaneRoute\nmetadata: {{name: {name}}}\nspec:\n  services: [{}]\n  fallback: [{}]\n",
        services.join(", "),
        fallback.join(", ")
    )
}

fn tempdir(name: &str) -> std::path::PathBuf {
    let dir =
        std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

/// A ZooKeeper session of the test itself, optionally with digest credentials.
async fn zk_session(zk: &ZooKeeper, digest: Option<&str>) -> zookeeper_client::Client {
    let mut connector = zookeeper_client::Client::connector();
    if let Some(digest) = digest {
        connector = connector.with_auth("digest", digest.as_bytes());
    }
    connector.connect(&zk.address()).await.expect("zookeeper session")
}

fn rule_path(application: &str) -> String {
    format!("/dubbo/config/dubbo/{application}.tag-router")
}

fn app_rule(name: &str, application: &str) -> String {
    format!(
        "apiVersion: laneway.io/v1alpha1\nkind: TagRule\nmetadata: {{name: {name}}}\nspec:\n  selector: {{matchLabels: {{app: {name}}}}}\n  dubbo: {{application: {application}, port: 20880}}\n"
    )
}

/// Applies [`app_rule`]`(name, application)` and waits until its znode is there.
async fn publish(c: &Cluster, zk: &ZooKeeper, name: &str, application: &str) {
    c.apply_yaml(&app_rule(name, application))
        .await
        .expect("tag rule");
    eventually(&format!("{name} rule"), || async {
        zk.get(&rule_path(application)).is_some()
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn znodes_deleted_or_edited_by_hand_are_repaired_while_pods_keep_changing() {
    let _serial = SERIAL.lock().await;
    let c = cluster("zk-drift").await;
    let zk = ZooKeeper::start(&tempdir("zk-drift"));
    for s in ["order", "pay", "user"] {
        c.service(s).await;
    }
    c.pod("order-p1", "order", None, "10.8.0.1").await;
    c.pod("order-p2", "order", Some("gray"), "10.8.0.2").await;
    c.pod("pay-p1", "pay", Some("gray"), "10.8.1.1").await;
    c.pod("user-p1", "user", Some("gray"), "10.8.2.1").await;
    let _op = c
        .operator_with("lease", &["--zookeeper", &zk.address(), "--centre-resync", "2s"])
        .await;
    for (name, application) in [
        ("order", "order-service"),
        ("pay", "pay-service"),
        ("user", "user-service"),
    ] {
        c.apply_yaml(&app_rule(name, application))
            .await
            .expect("tag rule");
    }
    let pay = DubboRule::new(
        "pay-service",
        false,
        &[("gray".into(), vec!["10.8.1.1:20880".into()])],
    );
    let user = DubboRule::new(
        "user-service",
        false,
        &[("gray".into(), vec!["10.8.2.1:20880".into()])],
    );
    wait_for("pay rule", Some(pay.content.clone()), || async {
        zk.get(&rule_path("pay-service"))
    })
    .await;
    wait_for("user rule", Some(user.content.clone()), || async {
        zk.get(&rule_path("user-service"))
    })
    .await;

    // By hand: one znode deleted, another edited, while the order rule changes every 300 ms.
    let session = zk_session(&zk, None).await;
    session
        .delete(&rule_path("pay-service"), None)
        .await
        .expect("delete");
    session
        .set_data(
            &rule_path("user-service"),
            b"configVersion: v3.0\nkey: user-service\nenabled: false\n",
            None,
        )
        .await
        .expect("edit");
    let churn = c.flip_lane("order-p1", "gray", 60, Duration::from_millis(300));
    wait_for("the deleted znode is back", Some(pay.content), || async {
        zk.get(&rule_path("pay-service"))
    })
    .await;
    wait_for("the edited znode is repaired", Some(user.content), || async {
        zk.get(&rule_path("user-service"))
    })
    .await;
    assert!(!churn.is_finished(), "repaired only once the changes stopped");
    churn.abort();
}

#[tokio::test(flavor = "multi_thread")]
async fn with_digest_credentials_only_laneway_can_change_its_rule_znodes() {
    const DIGEST: &str = "laneway:Zk-pass-31d7a0";
    let _serial = SERIAL.lock().await;
    let c = cluster("zk-acl").await;
    let zk = ZooKeeper::start(&tempdir("zk-acl"));
    c.service("order").await;
    c.service("pay").await;
    c.pod("order-p1", "order", Some("gray"), "10.9.0.1").await;
    c.pod("pay-p1", "pay", Some("gray"), "10.9.1.1").await;
    // A rule published before credentials were configured: its znode is open to anyone.
    let mut op = c.operator_with("lease", &["--zookeeper", &zk.address()]).await;
    publish(&c, &zk, "order", "order-service").await;
    op.stop();

    let op = c
        .operator_with(
            "lease",
            &[
                "--zookeeper",
                &zk.address(),
                "--zookeeper-auth",
                DIGEST,
                "--centre-resync",
                "2s",
            ],
        )
        .await;
    publish(&c, &zk, "pay", "pay-service").await;
    let anyone = zk_session(&zk, None).await;
    for application in ["pay-service", "order-service"] {
        let path = rule_path(application);
        eventually("laneway's identity alone may write, anyone may read", || async {
            let Ok((acls, _)) = anyone.get_acl(&path).await else {
                return false;
            };
            let world: Vec<_> = acls.iter().filter(|a| a.scheme() == "world").collect();
            world.len() == 1
                && world[0].permission() == zookeeper_client::Permission::READ
                && acls
                    .iter()
                    .any(|a| a.scheme() == "digest" && a.id().starts_with("laneway:"))
        })
        .await;
        assert!(anyone.get_data(&path).await.is_ok(), "{path}: anyone may read");
        assert!(
            matches!(
                anyone.set_data(&path, b"tampered", None).await,
                Err(zookeeper_client::Error::NoAuth)
            ),
            "{path}: an anonymous write went through"
        );
    }
    let log = std::fs::read_to_string(&op.log).expect("log");
    assert!(
        !log.contains("Zk-pass-31d7a0"),
        "the ZooKeeper password is in the log"
    );
}

/// The chain of pods (IP) for the RPC-entry test: order calls user, each with a baseline and a
/// gray pod.
const ENTRY_PODS: [(&str, &str, Option<&str>, &str); 4] = [
    ("order-0", "order", None, "198.18.0.10"),
    ("order-gray", "order", Some("gray"), "198.18.0.11"),
    ("user-0", "user", None, "198.18.0.12"),
    ("user-gray", "user", Some("gray"), "198.18.0.13"),
];
const BASE_CHAIN: &str = "order-0>user-0";
const GRAY_CHAIN: &str = "order-gray>user-gray";
const ENTRY_ZNODE: &str = "/dubbo/config/dubbo/order-service.laneway-entry";

/// Starts the chain's JVMs (each pod's own lane in a downward-API labels file) and the caller.
fn entry_jvms(zk: &ZooKeeper, dir: &std::path::Path) -> (Vec<peers::Peer>, Caller) {
    let zk_addr = zk.address();
    let jvms = std::thread::scope(|scope| {
        let handles: Vec<_> = ENTRY_PODS
            .iter()
            .map(|(name, app, lane, ip)| {
                let labels = dir.join(name);
                let lane_line = lane
                    .map(|l| format!("laneway.io/lane=\"{l}\"\n"))
                    .unwrap_or_default();
                std::fs::write(&labels, format!("app=\"{app}\"\n{lane_line}")).expect("labels");
                let zk = zk_addr.as_str();
                scope.spawn(move || match *app {
                    "order" => peers::hop("order-service", name, ip, zk, Some("user-service"), &labels),
                    _ => peers::hop("user-service", name, ip, zk, None, &labels),
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().expect("JVM")).collect()
    });
    (jvms, Caller::start("order-service", zk))
}

fn percentile(sorted: &[u64], p: f64) -> u64 {
    sorted[((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1]
}

/// Waits until the caller's calls tagged `tag` match `done` (checked on `calls` calls with `users`).
async fn until_calls(
    caller: &mut Caller,
    what: &str,
    (calls, users, tag): (usize, usize, Option<&str>),
    done: impl Fn(&Calls) -> bool,
) -> Calls {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let got = caller.calls(calls, users, tag);
        if done(&got) {
            return got;
        }
        assert!(std::time::Instant::now() < deadline, "{what}: last {got:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn calls_that_pass_no_gateway_are_drawn_into_gray_once_at_the_first_dubbo_hop() {
    let _serial = SERIAL.lock().await;
    let c = cluster("rpc-entry").await;
    let dir = tempdir("rpc-entry");
    let zk = ZooKeeper::start(&dir.join("zk"));
    for s in ["order", "user"] {
        c.service(s).await;
    }
    for (name, app, lane, ip) in ENTRY_PODS {
        c.pod(name, app, lane, ip).await;
    }
    c.apply_yaml(&app_rule("order", "order-service"))
        .await
        .expect("tag rule");
    c.apply_yaml(&app_rule("user", "user-service"))
        .await
        .expect("tag rule");
    c.apply_yaml(&gray_route(10, "")).await.expect("gray");
    // strict, drawing 20%, but with no instance anywhere: never drawn, so no call fails
    c.apply_yaml("apiVersion: laneway.io/v1alpha1\nkind: LaneRoute\nmetadata: {name: blue}\nspec:\n  services: [order, user]\n  strict: true\n  weight: 20\n")
        .await
        .expect("blue");
    let _op = c
        .operator_with("lease", &["--zookeeper", &zk.address(), "--rule-grace", "2s"])
        .await;
    let (_jvms, mut caller) = entry_jvms(&zk, &dir);
    eventually("the entry document in ZooKeeper", || async {
        zk.get(ENTRY_ZNODE)
            .is_some_and(|d| d.contains("\"weight\": 10") && !d.contains("blue"))
    })
    .await;
    until_calls(
        &mut caller,
        "tagged calls go along the gray chain",
        (20, 0, Some("gray")),
        |got| got.chains.keys().eq([GRAY_CHAIN]),
    )
    .await;
    until_calls(
        &mut caller,
        "every hop finds its baseline provider",
        (20, 0, Some("dev-x")),
        |got| got.chains.keys().eq([BASE_CHAIN]),
    )
    .await;

    // weight: 10% ± 2 of 2,000 calls in no lane are gray at both hops; no chain mixes tiers
    let got = caller.calls(2000, 0, None);
    assert_eq!(got.errors, 0, "{got:?}");
    assert!(
        got.chains.keys().all(|k| k == BASE_CHAIN || k == GRAY_CHAIN),
        "a chain mixes tiers: {:?}",
        got.chains
    );
    let gray = got.chains.get(GRAY_CHAIN).copied().unwrap_or(0);
    println!("weight 10: {gray} of 2000 calls in no lane went along the gray chain");
    assert!(
        (160..=240).contains(&gray),
        "gray took {gray} of 2000: {:?}",
        got.chains
    );
    // calls already in a lane are never drawn
    let tagged = caller.calls(200, 0, Some("gray"));
    assert_eq!(
        tagged.chains.keys().collect::<Vec<_>>(),
        [GRAY_CHAIN],
        "{tagged:?}"
    );
    let elsewhere = caller.calls(200, 0, Some("dev-x"));
    assert_eq!(
        elsewhere.chains.keys().collect::<Vec<_>>(),
        [BASE_CHAIN],
        "{elsewhere:?}"
    );

    // a condition: users 1-100 and no one else
    let users =
        "  rpcEntry:\n    applyWeight: false\n    conditions: [{attachment: user_id, values: \"1~100\"}]\n";
    c.apply_yaml(&gray_route(10, users)).await.expect("gray by user");
    let by_user = |got: &Calls| {
        got.users.iter().all(|(user, chains)| {
            let want = if user.parse::<u32>().expect("user") <= 100 {
                GRAY_CHAIN
            } else {
                BASE_CHAIN
            };
            chains.keys().eq([want])
        })
    };
    let got = until_calls(&mut caller, "users 1-100 in gray", (2000, 1000, None), by_user).await;
    assert_eq!(got.errors, 0);

    // sticky: each user stays in one tier for 100 calls, the one crc32(user) % 100 < 10 says
    let sticky = "  rpcEntry:\n    sticky: {attachment: user_id}\n";
    c.apply_yaml(&gray_route(10, sticky)).await.expect("sticky gray");
    let stuck = |got: &Calls| {
        got.users.iter().all(|(user, chains)| {
            let want = if peers::sticky_roll(user) < 10 {
                GRAY_CHAIN
            } else {
                BASE_CHAIN
            };
            chains.len() == 1 && chains.get(want) == Some(&100)
        })
    };
    let got = until_calls(&mut caller, "sticky users", (4000, 40, None), stuck).await;
    assert!(got.users.values().any(|c| c.contains_key(GRAY_CHAIN)), "{got:?}");

    // a weight change reaches the callers: 100 and 0 in turn, timed from the edit
    let mut took = Vec::new();
    for i in 0..20 {
        let weight = if i % 2 == 0 { 100 } else { 0 };
        let edited = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("clock")
            .as_millis() as u64;
        c.apply_yaml(&gray_route(weight, "")).await.expect("weight");
        let at = caller
            .await_chain(GRAY_CHAIN, weight == 100, Duration::from_secs(30))
            .unwrap_or_else(|| panic!("weight {weight} never drawn within 30 s"));
        took.push(at.saturating_sub(edited));
    }
    took.sort_unstable();
    println!(
        "weight edit -> drawn at the new weight: p50 {} ms, p99 {} ms, max {} ms ({} edits)",
        percentile(&took, 0.5),
        percentile(&took, 0.99),
        took[took.len() - 1],
        took.len()
    );
    assert!(took[took.len() - 1] < 15_000, "{took:?}");
}
