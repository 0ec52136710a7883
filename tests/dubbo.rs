//! End to end: the operator against a real API server publishes tag-router rules to a real
//! ZooKeeper, and unmodified Dubbo 3.3 consumers route by them.

mod cluster;
mod peers;

use std::time::Duration;

use cluster::*;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::ResourceExt;
use laneway::api::TagRule;
use laneway::lanes::DubboRule;
use peers::{provider, Consumer, ZooKeeper};

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
    let cm = c.api::<ConfigMap>().get_opt("laneway-dubbo-rules").await.ok()??;
    cm.data?.remove("order-service.tag-router")
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
async fn a_zookeeper_outage_loses_no_rule_and_the_current_rule_is_written_on_recovery() {
    let _serial = SERIAL.lock().await;
    let c = cluster("dubbo-outage").await;
    let zk_dir = tempdir("zk-outage");
    let mut zk = ZooKeeper::start(&zk_dir);
    let port = zk.port;
    c.service("order").await;
    c.pod("order-p1", "order", None, "198.18.0.6").await;
    c.pod("order-p2", "order", Some("gray"), "198.18.0.7").await;
    let op = c
        .operator_with("lease", &["--zookeeper", &zk.address(), "--rule-grace", "2s"])
        .await;
    c.apply_yaml(&tag_rule(false)).await.expect("tag rule");
    let first = rule(&[("gray", &["198.18.0.7"])]);
    wait_for("rule in ZooKeeper", Some(first.clone()), || async {
        zk.get(ZNODE)
    })
    .await;

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

    let zk = ZooKeeper::start_on(&zk_dir, port);
    wait_for(
        "the current rule reaches ZooKeeper after recovery",
        Some(second),
        || async { zk.get(ZNODE) },
    )
    .await;
    let rule = c.api::<TagRule>().get("order").await.expect("rule");
    assert!(rule.finalizers().iter().any(|f| f == "laneway.io/cleanup"));
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
