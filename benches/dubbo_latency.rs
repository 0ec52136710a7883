//! From a pod label change to a real Dubbo consumer routing by it, through laneway and a real
//! ZooKeeper; and the same change made the way Dubbo teams make it today (a static tag, which
//! needs a provider restart). Run with `make bench-dubbo` (it needs the control plane, ZooKeeper
//! and the pod IPs that tests/in-cluster.sh provides).

#[path = "../tests/cluster/mod.rs"]
mod cluster;
#[path = "../tests/peers/mod.rs"]
mod peers;

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use cluster::*;
use peers::{provider, provider_with_static_tag, Consumer, ZooKeeper};

const APP: &str = "order-service";
const CHANGES: usize = 60;
const RESTARTS: usize = 5;

fn epoch_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or_default()
}

fn percentile(sorted: &[u64], p: f64) -> u64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

#[tokio::main]
async fn main() {
    let c = cluster("dubbo-latency").await;
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("zk-latency");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("zk dir");
    let zk = ZooKeeper::start(&dir);
    c.service("order").await;
    c.pod("order-p1", "order", None, "198.18.0.2").await;
    c.pod("order-p2", "order", Some("gray"), "198.18.0.3").await;
    c.pod("order-p3", "order", None, "198.18.0.4").await;
    let _p1 = provider(APP, "p1", "198.18.0.2", &zk);
    let _p2 = provider(APP, "p2", "198.18.0.3", &zk);
    let mut p3 = provider(APP, "p3", "198.18.0.4", &zk);
    let mut consumer = Consumer::start(APP, &zk);
    // The operator as shipped: default debounce (100ms).
    let op = c
        .operator_with("lease", &["--zookeeper", &zk.address(), "--debounce", "100ms"])
        .await;
    let rule = format!(
        "apiVersion: laneway.io/v1alpha1\nkind: TagRule\nmetadata: {{name: order}}\nspec:\n  selector: {{matchLabels: {{app: order}}}}\n  dubbo: {{application: {APP}, port: 20880}}\n"
    );
    c.apply_yaml(&rule).await.expect("tag rule");
    consumer.expect("gray", Some("gray"), &["p2"]);

    let writes_before = op
        .metric("laneway_publishes_total", "centre=\"zookeeper\",result=\"ok\"")
        .await;
    let mut latencies = Vec::with_capacity(CHANGES);
    for i in 0..CHANGES {
        let joining = i % 2 == 0;
        let sent = epoch_ms();
        c.label_pod("order-p3", "laneway.io/lane", joining.then_some("gray"))
            .await;
        let want: &[&str] = if joining { &["p2", "p3"] } else { &["p2"] };
        let r = consumer.await_routing(Some("gray"), want, false, Duration::from_secs(20));
        assert!(r.ok, "change {i} never reached the consumer: {}", r.last);
        latencies.push(r.at.saturating_sub(sent));
    }
    let writes = op
        .metric("laneway_publishes_total", "centre=\"zookeeper\",result=\"ok\"")
        .await
        - writes_before;
    latencies.sort_unstable();

    // Today's way: remove the dynamic rule, then give p3 a static tag by restarting it.
    c.delete::<laneway::api::TagRule>("order").await;
    consumer.expect("no rule", None, &["p1", "p2", "p3"]);
    let mut restarts = Vec::with_capacity(RESTARTS);
    for i in 0..RESTARTS {
        let started = Instant::now();
        p3.stop();
        p3 = if i % 2 == 0 {
            provider_with_static_tag(APP, "p3", "198.18.0.4", &zk, "gray")
        } else {
            provider(APP, "p3", "198.18.0.4", &zk)
        };
        let want: &[&str] = if i % 2 == 0 { &["p3"] } else { &["p1", "p2", "p3"] };
        let tag = if i % 2 == 0 { Some("gray") } else { None };
        let r = consumer.await_routing(tag, want, false, Duration::from_secs(60));
        assert!(r.ok, "restart {i}: {}", r.last);
        restarts.push(started.elapsed().as_millis() as u64);
    }
    restarts.sort_unstable();

    let p50 = percentile(&latencies, 0.5);
    let report = format!(
        "label change -> Dubbo consumer routes by it ({CHANGES} changes, laneway + ZooKeeper):\n  \
         p50 {p50} ms, p90 {} ms, p99 {} ms, max {} ms\n\
         ZooKeeper writes per pod event: {:.2} ({writes} writes for {CHANGES} label changes)\n\
         static tag + provider restart ({RESTARTS} restarts): p50 {} ms, max {} ms\n\
         ratio (restart p50 / laneway p50): {:.0}x\n",
        percentile(&latencies, 0.9),
        percentile(&latencies, 0.99),
        latencies.last().copied().unwrap_or_default(),
        writes / CHANGES as f64,
        percentile(&restarts, 0.5),
        restarts.last().copied().unwrap_or_default(),
        percentile(&restarts, 0.5) as f64 / p50.max(1) as f64,
    );
    println!("{report}");
}
