//! Messages keep their lane, end to end, through two real brokers side by side: Kafka (KRaft,
//! `tests/kafka`) and RocketMQ (`tests/rocketmq`); ZooKeeper, the operator, and one JVM per pod and
//! broker with laneway's Java libraries by configuration only (plain Kafka clients with laneway's
//! interceptors, applications on RocketMQ's Spring Boot starter): producers stamp the lane on each message, `order`
//! consumers (one per tier, each in its own group) keep the messages their tier owns by the
//! ownership document the operator publishes to ZooKeeper, and handle each by a Dubbo call to
//! `user`, in the message's lane.
//!
//! The brokers and the JVMs start once for the whole binary; the scenarios run one after another,
//! on both brokers at once.

mod cluster;
mod peers;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use cluster::*;
use peers::brokers::{drain, Broker, ConsumerPod, Handled, Kind, MessageConsumer, Producer};
use peers::{Peer, ZooKeeper};

const LANE_LABEL: &str = "laneway.io/lane";
const TOPIC: &str = "orders";
const MESSAGES_ZNODE: &str = "/dubbo/config/dubbo/order-service.laneway-messages";

/// The pods: (name, app, lane, IP). `order-alice` is relabelled out and back during the test;
/// `dev-bob` has a `user` of its own but no `order` consumer.
const PODS: [(&str, &str, Option<&str>, &str); 5] = [
    ("order-0", "order", None, "198.18.0.30"),
    ("order-alice", "order", Some("dev-alice"), "198.18.0.31"),
    ("user-0", "user", None, "198.18.0.32"),
    ("user-alice", "user", Some("dev-alice"), "198.18.0.33"),
    ("user-bob", "user", Some("dev-bob"), "198.18.0.34"),
];

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock")
        .as_millis() as u64
}

/// The epochs (from, owners) of the ownership document in ZooKeeper.
fn epochs(zk: &ZooKeeper) -> Vec<(u64, serde_json::Value)> {
    let Some(text) = zk.get(MESSAGES_ZNODE) else {
        return Vec::new();
    };
    let doc: serde_json::Value = serde_json::from_str(&text).expect("ownership JSON");
    doc["epochs"]
        .as_array()
        .expect("epochs")
        .iter()
        .map(|e| (e["from"].as_u64().expect("from"), e["owners"].clone()))
        .collect()
}

/// Waits until the document's last epoch has `owners`, then until that epoch is in effect.
async fn await_owners(zk: &ZooKeeper, owners: serde_json::Value) -> u64 {
    wait_for_within(
        &format!("owners {owners} in ZooKeeper"),
        true,
        Duration::from_secs(60),
        || async { epochs(zk).last().is_some_and(|(_, o)| *o == owners) },
    )
    .await;
    let from = epochs(zk).last().expect("an epoch").0;
    tokio::time::sleep(Duration::from_millis(from.saturating_sub(now_ms()) + 200)).await;
    from
}

/// One broker with its producers (in no lane, in `dev-alice`) and its `order` consumers.
struct Lanes {
    broker: Broker,
    baseline: MessageConsumer,
    alice: MessageConsumer,
    plain_producer: Producer,
    alice_producer: Producer,
}

impl Lanes {
    fn start(kind: Kind, dir: &Path, labels: &Path, zk: &ZooKeeper) -> Lanes {
        let broker = Broker::start(kind, &dir.join(format!("{kind:?}")), &format!("{TOPIC}:4"));
        let baseline = Lanes::consumer(&broker, labels, zk, "order-0", None);
        let alice = Lanes::consumer(&broker, labels, zk, "order-alice", Some("dev-alice"));
        let producer =
            |name: &str| Producer::start(name, &broker, TOPIC, &labels.join(format!("producer-{name}")));
        let (plain_producer, alice_producer) = (producer("plain"), producer("alice"));
        Lanes {
            broker,
            baseline,
            alice,
            plain_producer,
            alice_producer,
        }
    }

    /// The `order` consumer of pod `id`, started in `lane`.
    fn consumer(
        broker: &Broker,
        labels: &Path,
        zk: &ZooKeeper,
        id: &str,
        lane: Option<&str>,
    ) -> MessageConsumer {
        let group = match (broker.kind, lane) {
            // a Kafka pod's configuration names its tier's group, as a lane's Deployment would
            (Kind::Kafka, Some(lane)) => format!("orders_{lane}"),
            // RocketMQ's Spring Boot starter: laneway-rocketmq makes it orders_<own lane>
            _ => "orders".to_string(),
        };
        let pod = ConsumerPod {
            id,
            app: "order-service",
            next: "user-service",
            topic: TOPIC,
            group: &group,
            labels: &labels.join(id),
        };
        MessageConsumer::start(&pod, broker, zk)
    }

    /// Everything handled, after `handled`, until every message of `prefixes` is in (`expected`
    /// in all), then a quiet spell that a message handled twice would show in.
    fn collect(&self, mut handled: Vec<Handled>, expected: usize, prefixes: &[&str]) -> Vec<Handled> {
        let of = |h: &Handled| prefixes.iter().any(|p| h.h.starts_with(&format!("{p}-")));
        let consumers = [&self.baseline, &self.alice];
        let all_in = MessageConsumer::collect(&consumers, &mut handled, Duration::from_secs(180), |hs| {
            hs.iter().filter(|h| of(h)).count() >= expected
        });
        MessageConsumer::collect(&consumers, &mut handled, Duration::from_secs(3), |_| false);
        let kind = self.broker.kind;
        assert!(
            all_in,
            "{kind:?}: only {} of {expected} messages were handled",
            handled.len()
        );
        handled.retain(of);
        handled
    }
}

struct Messages {
    c: Cluster,
    labels: PathBuf,
    dir: PathBuf,
    zk: ZooKeeper,
    brokers: Vec<Lanes>,
    _jvms: Vec<Peer>,
    _op: Operator,
}

impl Messages {
    async fn start() -> Messages {
        let c = cluster("messages").await;
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("messages-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let labels = dir.join("labels");
        std::fs::create_dir_all(&labels).expect("labels dir");
        let zk = ZooKeeper::start(&dir.join("zk"));

        for svc in ["order", "user"] {
            c.service(svc).await;
        }
        c.apply_yaml("apiVersion: laneway.io/v1alpha1\nkind: TagRule\nmetadata: {name: order}\nspec:\n  selector: {matchLabels: {app: order}}\n  dubbo: {application: order-service, port: 20880}\n  messages: true\n")
            .await
            .expect("tag rule");
        c.apply_yaml("apiVersion: laneway.io/v1alpha1\nkind: TagRule\nmetadata: {name: user}\nspec:\n  selector: {matchLabels: {app: user}}\n  dubbo: {application: user-service, port: 20880}\n")
            .await
            .expect("tag rule");
        let both = ["order", "user"];
        c.apply_yaml(&route("dev-alice", &both, &[], false))
            .await
            .expect("lane");
        c.apply_yaml(&route("dev-carol", &both, &["dev-alice"], false))
            .await
            .expect("lane");
        c.apply_yaml(&route("dev-bob", &both, &[], false))
            .await
            .expect("lane");
        for (name, app, lane, ip) in PODS {
            c.pod(name, app, lane, ip).await;
            peers::write_labels(&labels.join(name), app, lane);
        }
        peers::write_labels(&labels.join("producer-plain"), "shop", None);
        peers::write_labels(&labels.join("producer-alice"), "shop", Some("dev-alice"));
        let op = c
            .operator_watching("lease", &[&c.ns], &["--zookeeper", &zk.address()])
            .await;
        let zk_addr = zk.address();
        let jvms: Vec<Peer> = PODS[2..]
            .iter()
            .map(|(name, _, _, ip)| peers::hop("user-service", name, ip, &zk_addr, None, &labels.join(name)))
            .collect();
        await_owners(&zk, serde_json::json!({"dev-alice": ["dev-alice", "dev-carol"]})).await;
        let brokers = [Kind::Kafka, Kind::RocketMq]
            .into_iter()
            .map(|kind| Lanes::start(kind, &dir, &labels, &zk))
            .collect();
        Messages {
            c,
            labels,
            dir,
            zk,
            brokers,
            _jvms: jvms,
            _op: op,
        }
    }

    async fn relabel(&self, pod: &str, lane: Option<&str>) {
        self.c.label_pod(pod, LANE_LABEL, lane).await;
        peers::write_labels(&self.labels.join(pod), "order", lane);
    }
}

/// Each message's handlers, by value.
fn by_value(handled: &[Handled]) -> BTreeMap<&str, Vec<&Handled>> {
    let mut out: BTreeMap<&str, Vec<&Handled>> = BTreeMap::new();
    for h in handled {
        out.entry(h.h.as_str()).or_default().push(h);
    }
    out
}

fn percentile(sorted: &[u64], p: f64) -> u64 {
    sorted[((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1]
}

/// Messages each handled once, by the tier owning their lane, calling on in the same lane.
async fn each_message_is_handled_once_by_its_tier(s: &mut Messages) {
    const N: usize = 2500;
    for b in &mut s.brokers {
        b.plain_producer.produce(N, None, "plain", 0);
        b.plain_producer.produce(N, Some("dev-carol"), "carol", 0);
        b.plain_producer.produce(N, Some("dev-bob"), "bob", 0);
        b.alice_producer.produce(N, None, "alice", 0);
    }
    for b in &mut s.brokers {
        for _ in 0..3 {
            b.plain_producer.done(Duration::from_secs(180));
        }
        b.alice_producer.done(Duration::from_secs(180));
    }
    // (prefix, its lane, the consumer that owns it, the user pod its onward call reaches)
    let want = [
        ("plain", None, "order-0", "user-0"),
        ("alice", Some("dev-alice"), "order-alice", "user-alice"),
        ("carol", Some("dev-carol"), "order-alice", "user-alice"),
        // no consumer of its own and no fallback lane: baseline handles it, in its lane, so the
        // onward call reaches dev-bob's own user
        ("bob", Some("dev-bob"), "order-0", "user-bob"),
    ];
    for b in &s.brokers {
        let kind = b.broker.kind;
        let handled = b.collect(Vec::new(), 4 * N, &["plain", "carol", "bob", "alice"]);
        assert_once(kind, &handled, 4 * N);
        for (prefix, lane, by, chain) in want {
            let of: Vec<&Handled> = handled
                .iter()
                .filter(|h| h.h.starts_with(&format!("{prefix}-")))
                .collect();
            assert_eq!(of.len(), N, "{kind:?}: {prefix}");
            let wrong: Vec<_> = of
                .iter()
                .filter(|h| h.lane.as_deref() != lane || h.by != by || h.chain != chain)
                .take(5)
                .collect();
            assert!(
                wrong.is_empty(),
                "{kind:?}: {prefix}: want lane {lane:?} by {by} calling {chain}: {wrong:?}"
            );
        }
    }
}

/// Every one of `total` messages handled, none twice.
fn assert_once(kind: Kind, handled: &[Handled], total: usize) {
    let records = by_value(handled);
    assert_eq!(records.len(), total, "{kind:?}: messages lost");
    let twice: Vec<_> = records.iter().filter(|(_, hs)| hs.len() > 1).take(5).collect();
    assert!(twice.is_empty(), "{kind:?}: handled twice: {twice:?}");
}

/// One hand-over: the consumer that owns dev-alice's messages after it, when the relabel was
/// sent, and when the new owners took effect (epoch milliseconds).
type Switch = (&'static str, u64, u64);

/// The lane's consumer relabelled out and back while dev-alice messages flow through both
/// brokers: none lost, none handled twice, each handled where its born time puts it; how long each
/// hand-over took, per broker.
async fn a_relabel_under_traffic_hands_over_without_loss_or_double_handling(
    s: &mut Messages,
) -> Vec<(Kind, Vec<u64>)> {
    const CYCLES: usize = 3;
    const RATE: usize = 100;
    let total = RATE * 18 * CYCLES + RATE * 4;
    for b in &mut s.brokers {
        b.alice_producer.produce(total, None, "relabel", RATE);
    }
    let mut switches: Vec<Switch> = Vec::new();
    let alice = serde_json::json!({"dev-alice": ["dev-alice", "dev-carol"]});
    for _ in 0..CYCLES {
        tokio::time::sleep(Duration::from_secs(2)).await;
        let out = now_ms();
        s.relabel("order-alice", None).await;
        switches.push(("order-0", out, await_owners(&s.zk, serde_json::json!({})).await));
        tokio::time::sleep(Duration::from_secs(2)).await;
        let back = now_ms();
        s.relabel("order-alice", Some("dev-alice")).await;
        switches.push(("order-alice", back, await_owners(&s.zk, alice.clone()).await));
    }
    let mut waits = Vec::new();
    for b in &mut s.brokers {
        b.alice_producer.done(Duration::from_secs(300));
        let handled = b.collect(Vec::new(), total, &["relabel"]);
        waits.push((
            b.broker.kind,
            hand_overs(b.broker.kind, &handled, total, &switches),
        ));
    }
    waits
}

/// Checks one broker's messages of the relabel scenario; relabel -> the first message the new
/// tier handled, per switch.
fn hand_overs(kind: Kind, handled: &[Handled], total: usize, switches: &[Switch]) -> Vec<u64> {
    assert_once(kind, handled, total);
    let owner_at = |born: u64| {
        switches
            .iter()
            .rev()
            .find(|(_, _, from)| *from <= born)
            .map_or("order-alice", |(by, _, _)| *by)
    };
    let misplaced: Vec<_> = handled
        .iter()
        .filter(|h| h.by != owner_at(h.born))
        .take(5)
        .collect();
    assert!(
        misplaced.is_empty(),
        "{kind:?}: handled by a tier that did not own them: {misplaced:?}"
    );
    let off_lane: Vec<_> = handled
        .iter()
        .filter(|h| h.chain != "user-alice")
        .take(5)
        .collect();
    assert!(
        off_lane.is_empty(),
        "{kind:?}: onward calls out of dev-alice: {off_lane:?}"
    );
    switches
        .iter()
        .map(|(by, at, _)| {
            let first = handled
                .iter()
                .filter(|h| h.by == *by && h.born >= *at)
                .map(|h| h.at)
                .min()
                .expect("the new tier handled messages");
            first - at
        })
        .collect()
}

/// The lane's consumer relabelled into another lane (`dev-bob`, which has no consumer) goes on as
/// its old tier until it restarts: `dev-bob`'s messages born before the hand-over are baseline's,
/// those born after wait for the restarted consumer, which joins `dev-bob`'s group from the
/// beginning of the topic and handles them; none lost, none handled twice, every onward call in
/// `dev-bob`. Restart -> the first message handled, per broker.
async fn a_consumer_relabelled_into_another_lane_takes_it_over_when_it_restarts(
    s: &mut Messages,
) -> Vec<(Kind, u64)> {
    const RATE: usize = 100;
    let total = RATE * 12;
    for b in &mut s.brokers {
        b.plain_producer.produce(total, Some("dev-bob"), "moved", RATE);
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    s.relabel("order-alice", Some("dev-bob")).await;
    let from = await_owners(&s.zk, serde_json::json!({"dev-bob": ["dev-bob"]})).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let mut before = Vec::new();
    for b in &s.brokers {
        let mut handled = Vec::new();
        MessageConsumer::collect(
            &[&b.baseline, &b.alice],
            &mut handled,
            Duration::from_millis(500),
            |_| false,
        );
        let early: Vec<_> = handled
            .iter()
            .filter(|h| h.born >= from)
            .take(5)
            .cloned()
            .collect();
        assert!(
            early.is_empty(),
            "{:?}: dev-bob's messages handled before a consumer restarted in dev-bob: {early:?}",
            b.broker.kind
        );
        before.push(handled);
    }
    let mut restarts = Vec::new();
    for b in &mut s.brokers {
        restarts.push(now_ms());
        b.alice = Lanes::consumer(&b.broker, &s.labels, &s.zk, "order-alice", Some("dev-bob"));
    }
    let mut waits = Vec::new();
    for ((b, handled), restart) in s.brokers.iter_mut().zip(before).zip(restarts) {
        let kind = b.broker.kind;
        b.plain_producer.done(Duration::from_secs(180));
        let handled = b.collect(handled, total, &["moved"]);
        assert_once(kind, &handled, total);
        let wrong: Vec<_> = handled
            .iter()
            .filter(|h| {
                let owner = if h.born >= from { "order-alice" } else { "order-0" };
                h.by != owner || h.chain != "user-bob"
            })
            .take(5)
            .collect();
        assert!(
            wrong.is_empty(),
            "{kind:?}: want baseline before the hand-over, the restarted consumer after, all calling on in dev-bob: {wrong:?}"
        );
        let first = handled
            .iter()
            .filter(|h| h.by == "order-alice")
            .map(|h| h.at)
            .min()
            .expect("the restarted consumer handled messages");
        waits.push((kind, first - restart));
    }
    waits
}

/// What the filter costs a consumer that reads the whole topic: plain against filtered.
fn filter_cost(s: &Messages) -> (u64, u64, u64) {
    let doc = s.dir.join("order-service.laneway-messages");
    std::fs::write(&doc, s.zk.get(MESSAGES_ZNODE).expect("document")).expect("document file");
    let kafka = &s
        .brokers
        .iter()
        .find(|b| b.broker.kind == Kind::Kafka)
        .expect("kafka")
        .broker;
    let (mut plain, mut filtered) = (Vec::new(), Vec::new());
    for run in 0..3 {
        plain.push(drain(kafka, TOPIC, &format!("bench-plain-{run}"), None));
        filtered.push(drain(
            kafka,
            TOPIC,
            &format!("bench-filtered-{run}"),
            Some(("baseline", &doc)),
        ));
    }
    let records = plain[0].records;
    assert!(
        filtered.iter().all(|f| f.records < records),
        "the filter kept {filtered:?} of {records}"
    );
    let fastest = |runs: &[peers::brokers::Drained]| runs.iter().map(|d| d.ms).min().expect("runs");
    (fastest(&plain), fastest(&filtered), records)
}

#[tokio::test(flavor = "multi_thread")]
async fn messages_keep_their_lane_through_kafka_and_rocketmq() {
    let mut s = Messages::start().await;
    each_message_is_handled_once_by_its_tier(&mut s).await;
    let waits = a_relabel_under_traffic_hands_over_without_loss_or_double_handling(&mut s).await;
    for (kind, mut waits) in waits {
        waits.sort();
        println!(
            "{kind:?}: relabel -> messages handled by the new tier: p50 {} ms, p99 {} ms over {} relabels ({waits:?})",
            percentile(&waits, 0.5),
            percentile(&waits, 0.99),
            waits.len()
        );
    }
    for (kind, wait) in a_consumer_relabelled_into_another_lane_takes_it_over_when_it_restarts(&mut s).await {
        println!("{kind:?}: restart in the new lane -> its messages handled: {wait} ms");
    }
    let (plain, filtered, records) = filter_cost(&s);
    println!(
        "Kafka, whole topic ({records} records), fastest of 3: plain consumer {plain} ms, with the lane filter {filtered} ms"
    );
}
