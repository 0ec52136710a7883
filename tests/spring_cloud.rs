//! Spring Cloud over Nacos: laneway marks each Nacos instance with the lanes it serves, and a
//! stock Spring Cloud Gateway and Spring Boot services (tests/spring, with laneway-spring-cloud)
//! route every hop by those marks: a real Nacos 3.1 server, real gRPC registrations from the pod
//! IPs, one harness JVM per test.

mod cluster;
mod peers;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cluster::*;
use k8s_openapi::jiff::Timestamp;
use laneway::api::TagRule;
use peers::{Nacos, SpringApps, NACOS_PASSWORD};

const GATEWAY: &str = "198.18.0.30:8080";
const ORDER_BASE: &str = "198.18.0.31:8080";
const ORDER_ALICE: &str = "198.18.0.32:8080";
const USER_BASE: &str = "198.18.0.33:8080";
const USER_FEATX: &str = "198.18.0.34:8080";

fn ip(address: &str) -> &str {
    address.split(':').next().unwrap_or_default()
}

/// The path a request took: `order-service A > user-service B`, or the status when not 200.
async fn hop(http: &reqwest::Client, lane: Option<&str>) -> Result<String, String> {
    let mut request = http.get(format!("http://{GATEWAY}/order/hop"));
    if let Some(lane) = lane {
        request = request.header("x-lane", lane);
    }
    let response = request.send().await.map_err(|e| e.to_string())?;
    let status = response.status();
    let body = response.text().await.map_err(|e| e.to_string())?;
    if status.is_success() {
        Ok(body.trim().to_owned())
    } else {
        Err(format!("{status}: {}", body.trim()))
    }
}

fn path(order: &str, user: &str) -> String {
    format!("order-service {order} > user-service {user}")
}

/// Sends `n` requests in `lane` and counts the paths they took.
async fn paths(http: &reqwest::Client, lane: Option<&str>, n: usize) -> BTreeMap<String, usize> {
    let mut seen = BTreeMap::new();
    for _ in 0..n {
        let took = hop(http, lane).await.unwrap_or_else(|e| e);
        *seen.entry(took).or_default() += 1;
    }
    seen
}

fn only(path: String, n: usize) -> BTreeMap<String, usize> {
    BTreeMap::from([(path, n)])
}

fn tag_rule(name: &str, app: &str, service: &str) -> String {
    format!(
        "apiVersion: laneway.io/v1alpha1\nkind: TagRule\nmetadata: {{name: {name}}}\nspec:\n  selector: {{matchLabels: {{app: {app}}}}}\n  nacos: {{service: {service}}}\n"
    )
}

/// Starts the operator against `nacos` and has it mark order-service and user-service.
async fn mark_order_and_user(c: &Cluster, nacos: &Nacos) -> Operator {
    let url = nacos.url();
    let op = c
        .operator_with(
            "lease",
            &[
                "--nacos-addr",
                &url,
                "--nacos-username",
                "nacos",
                "--nacos-password",
                NACOS_PASSWORD,
            ],
        )
        .await;
    c.apply_yaml(&tag_rule("order", "order", "order-service"))
        .await
        .expect("order rule");
    c.apply_yaml(&tag_rule("user", "user", "user-service"))
        .await
        .expect("user rule");
    op
}

/// The metadata of every instance of `service`, by address.
async fn metadata(nacos: &Nacos, service: &str) -> BTreeMap<String, BTreeMap<String, String>> {
    nacos.instances(service).await.unwrap_or_default()
}

async fn lanes_of(nacos: &Nacos, service: &str, address: &str) -> Option<String> {
    metadata(nacos, service)
        .await
        .get(address)?
        .get("laneway.lanes")
        .cloned()
}

/// Traffic in the background until stopped: every request must succeed.
struct Traffic {
    stop: Arc<AtomicBool>,
    sent: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<Vec<String>>,
}

impl Traffic {
    fn start(http: &reqwest::Client, lanes: &'static [Option<&'static str>]) -> Traffic {
        let stop = Arc::new(AtomicBool::new(false));
        let sent = Arc::new(AtomicUsize::new(0));
        let (http, flag, count) = (http.clone(), stop.clone(), sent.clone());
        let task = tokio::spawn(async move {
            let mut failures = Vec::new();
            while !flag.load(Ordering::Relaxed) {
                for &lane in lanes {
                    if let Err(e) = hop(&http, lane).await {
                        failures.push(format!("{lane:?}: {e}"));
                    }
                    count.fetch_add(1, Ordering::Relaxed);
                }
            }
            failures
        });
        Traffic { stop, sent, task }
    }

    async fn finish(self) -> (usize, Vec<String>) {
        self.stop.store(true, Ordering::Relaxed);
        let failures = self.task.await.expect("traffic");
        (self.sent.load(Ordering::Relaxed), failures)
    }
}

/// Moves order's dev-alice pod to baseline and back `moves` times under traffic; the time from
/// each label change until the gateway routes by it.
async fn relabel_moves(
    c: &Cluster,
    http: &reqwest::Client,
    moves: usize,
    patched: &mut Vec<Timestamp>,
) -> Vec<Duration> {
    let mut took = Vec::new();
    for i in 0..moves {
        let into_lane = i % 2 == 1;
        let started = Instant::now();
        patched.push(Timestamp::now());
        c.label_pod("order-alice", "laneway.io/lane", into_lane.then_some("dev-alice"))
            .await;
        let want = if into_lane {
            path(ORDER_ALICE, USER_FEATX)
        } else {
            path(ORDER_BASE, USER_FEATX)
        };
        // Into the lane: dev-alice requests reach the pod, and untagged ones no longer do (the
        // Spring Cloud LoadBalancer takes turns: six in a row would include it). Out of it:
        // untagged requests reach it too (it is baseline now).
        loop {
            let routed = if into_lane {
                hop(http, Some("dev-alice")).await.as_deref() == Ok(want.as_str())
                    && off_the_pod(http, 6).await
            } else {
                hop(http, None).await.as_deref() == Ok(path(ORDER_ALICE, USER_BASE).as_str())
            };
            if routed {
                break;
            }
            assert!(
                started.elapsed() < Duration::from_secs(60),
                "move {i} not routed within 60 s"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        took.push(started.elapsed());
    }
    took
}

/// For each of `patched`, how long until the operator logged marking `key` (its log is in UTC,
/// to the microsecond).
fn written_after(log: &std::path::Path, key: &str, patched: &[Timestamp]) -> Vec<Duration> {
    let log = std::fs::read_to_string(log).expect("operator log");
    let needle = format!("marked centre=\"nacos-naming\" key=\"{key}\"");
    let marked: Vec<Timestamp> = log
        .lines()
        .filter(|l| l.contains(&needle))
        .filter_map(|l| l.split_whitespace().next()?.parse().ok())
        .collect();
    patched
        .iter()
        .map(|at| {
            let next = marked
                .iter()
                .find(|m| *m > at)
                .expect("a write after each relabel");
            Duration::try_from(next.duration_since(*at)).expect("later")
        })
        .collect()
}

/// `n` untagged requests in a row, none of them served by order's dev-alice pod.
async fn off_the_pod(http: &reqwest::Client, n: usize) -> bool {
    for _ in 0..n {
        if hop(http, None)
            .await
            .is_ok_and(|p| p.starts_with(&format!("order-service {ORDER_ALICE} ")))
        {
            return false;
        }
    }
    true
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

/// Each test starts its own Nacos and harness JVM, heavy for two cores: one at a time.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

#[tokio::test(flavor = "multi_thread")]
async fn a_spring_cloud_gateway_and_services_route_every_hop_by_the_nacos_marks() {
    let _serial = SERIAL.lock().await;
    let nacos = Nacos::start();
    let c = cluster("spring").await;
    c.service("order").await;
    c.service("user").await;
    c.pod("order-base", "order", None, ip(ORDER_BASE)).await;
    c.pod("order-alice", "order", Some("dev-alice"), ip(ORDER_ALICE))
        .await;
    c.pod("user-base", "user", None, ip(USER_BASE)).await;
    c.pod("user-featx", "user", Some("feature-x"), ip(USER_FEATX))
        .await;
    c.apply_route("dev-alice", &["order", "user"], &["feature-x"], false)
        .await;
    c.apply_route("feature-x", &["user"], &[], false).await;
    c.apply_route("secure", &["order", "user"], &[], true).await;

    let services: Vec<String> = [(ORDER_BASE, "order-base"), (ORDER_ALICE, "order-alice")]
        .iter()
        .map(|(a, pod)| format!("order-service@{a},next=user-service,pod={pod}"))
        .chain(
            [(USER_BASE, "user-base"), (USER_FEATX, "user-featx")]
                .iter()
                .map(|(a, pod)| format!("user-service@{a},pod={pod}")),
        )
        .collect();
    let mut args: Vec<&str> = services.iter().flat_map(|s| ["--service", s.as_str()]).collect();
    args.extend(["--gateway", GATEWAY, "--route", "order=order-service"]);
    // `make bench-spring-cache`: Spring Cloud LoadBalancer's instance cache as shipped (35 s),
    // for the relabel figures only.
    let shipped_cache = std::env::var("LANEWAY_SPRING_LB_CACHE").is_ok_and(|v| v == "on");
    if shipped_cache {
        args.extend(["--lb-cache", "on"]);
    }
    let mut apps = SpringApps::start(&nacos, NACOS_PASSWORD, &args, 5);
    let before = (
        metadata(&nacos, "order-service").await,
        metadata(&nacos, "user-service").await,
    );
    assert_eq!(before.0.len(), 2, "both order instances registered: {before:?}");
    wait_for("the gateway registered", 1, || async {
        metadata(&nacos, "gateway").await.len()
    })
    .await;
    let gateway = metadata(&nacos, "gateway").await;

    let op = mark_order_and_user(&c, &nacos).await;

    // What laneway writes: the lanes each instance serves after fallback, its own lane; and
    // nothing else changes.
    wait_for(
        "user-service marked",
        Some("dev-alice,feature-x".to_owned()),
        || lanes_of(&nacos, "user-service", USER_FEATX),
    )
    .await;
    wait_for(
        "order-service marked",
        Some("baseline,feature-x".to_owned()),
        || lanes_of(&nacos, "order-service", ORDER_BASE),
    )
    .await;
    let order = metadata(&nacos, "order-service").await;
    assert_eq!(order[ORDER_ALICE]["laneway.lanes"], "dev-alice");
    assert_eq!(order[ORDER_ALICE]["laneway.lane"], "dev-alice");
    assert!(!order[ORDER_BASE].contains_key("laneway.lane"), "{order:?}");
    for (address, own) in &before.0 {
        for (k, v) in own {
            assert_eq!(order[address].get(k), Some(v), "laneway changed {k} on {address}");
        }
    }
    eventually("status shows the marks", || async {
        c.api::<TagRule>()
            .get("order")
            .await
            .ok()
            .and_then(|r| r.status)
            .is_some_and(|s| {
                s.publications.iter().any(|p| {
                    p.centre == "nacos-naming"
                        && p.key == "DEFAULT_GROUP@@order-service"
                        && p.last_error.is_none()
                })
            })
    })
    .await;

    // Every hop routed by the marks: dev-alice at order, its fallback feature-x at user;
    // untagged requests never reach a tagged instance; a strict lane with no instance is 503.
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(15))
        .build()
        .expect("http");
    let n = 300;
    assert_eq!(
        paths(&http, Some("dev-alice"), n).await,
        only(path(ORDER_ALICE, USER_FEATX), n)
    );
    assert_eq!(paths(&http, None, n).await, only(path(ORDER_BASE, USER_BASE), n));
    assert_eq!(
        paths(&http, Some("feature-x"), 200).await,
        only(path(ORDER_BASE, USER_FEATX), 200)
    );
    let strict = hop(&http, Some("secure")).await;
    assert!(strict.as_ref().is_err_and(|e| e.starts_with("503")), "{strict:?}");

    the_probe_names_the_service_that_loses_the_lane(&c, &mut apps);

    // A pod relabelled live moves its traffic, with no failed request and no restart.
    let traffic = Traffic::start(&http, &[None, Some("dev-alice"), Some("feature-x")]);
    let moves: usize = std::env::var("LANEWAY_SPRING_MOVES")
        .ok()
        .and_then(|m| m.parse().ok())
        .unwrap_or(4);
    let mut patched = Vec::new();
    let mut took = relabel_moves(&c, &http, moves, &mut patched).await;
    let (sent, failures) = traffic.finish().await;
    assert!(
        failures.is_empty(),
        "{} of {sent} requests failed: {failures:?}",
        failures.len()
    );
    took.sort();
    println!(
        "relabel -> Spring Cloud Gateway routes by it ({moves} moves, {sent} requests alongside): p50 {:?}, p99 {:?}, max {:?}",
        percentile(&took, 0.5),
        percentile(&took, 0.99),
        took.last().expect("moves")
    );
    let mut written = written_after(&op.log, "DEFAULT_GROUP@@order-service", &patched);
    written.sort();
    println!(
        "relabel -> marks written to Nacos (laneway's part, from its log): p50 {:?}, p99 {:?}, max {:?}",
        percentile(&written, 0.5),
        percentile(&written, 0.99),
        written.last().expect("moves")
    );
    if shipped_cache {
        return;
    }

    // An instance that registers again comes back with only its own metadata: marked again.
    let app = format!("order-service@{ORDER_ALICE}");
    let resync = op
        .metric("laneway_centre_repairs_total", "centre=\"nacos-naming\"")
        .await;
    apps.restart(&app, None);
    wait_for(
        "the restarted instance is marked",
        Some("dev-alice".to_owned()),
        || lanes_of(&nacos, "order-service", ORDER_ALICE),
    )
    .await;
    // A mark edited by hand is put back.
    nacos
        .set_metadata(
            "order-service",
            ip(ORDER_BASE),
            8080,
            &[("laneway.lanes", "dev-alice")],
        )
        .await;
    eventually("a hand edit is found and repaired", || async {
        op.metric("laneway_centre_repairs_total", "centre=\"nacos-naming\"")
            .await
            > resync
    })
    .await;
    wait_for("the repair holds", Some("baseline,feature-x".to_owned()), || {
        lanes_of(&nacos, "order-service", ORDER_BASE)
    })
    .await;
    assert_eq!(
        paths(&http, Some("dev-alice"), 50).await,
        only(path(ORDER_ALICE, USER_FEATX), 50)
    );

    // Nacos down: requests keep their lanes from the clients' copies, the failure shows in
    // status, and a relabel made meanwhile reaches the instances once Nacos is back.
    nacos.stop();
    let down = Instant::now();
    assert_eq!(
        paths(&http, Some("dev-alice"), 20).await,
        only(path(ORDER_ALICE, USER_FEATX), 20)
    );
    c.label_pod("order-alice", "laneway.io/lane", None).await;
    let error = || async {
        let rule = c.api::<TagRule>().get("order").await.ok()?;
        let marks = rule
            .status?
            .publications
            .into_iter()
            .find(|p| p.centre == "nacos-naming")?;
        marks.last_error
    };
    eventually("status shows the Nacos error", || async {
        error().await.is_some()
    })
    .await;
    let shown = error().await.unwrap_or_default();
    let log = std::fs::read_to_string(&op.log).expect("operator log");
    for (place, text) in [("status", &shown), ("log", &log)] {
        for secret in [NACOS_PASSWORD, "eyJ", "accessToken="] {
            assert!(!text.contains(secret), "{secret:?} appears in the {place}");
        }
    }
    tokio::time::sleep(Duration::from_secs(60).saturating_sub(down.elapsed())).await;
    nacos.start_again();
    wait_for_within(
        "the relabel reaches Nacos once it is back",
        Some("baseline,dev-alice,feature-x".to_owned()),
        Duration::from_secs(120),
        || lanes_of(&nacos, "order-service", ORDER_ALICE),
    )
    .await;
    eventually("untagged requests reach the relabelled pod", || async {
        hop(&http, None).await.as_deref() == Ok(path(ORDER_ALICE, USER_BASE).as_str())
    })
    .await;

    // Deleting the TagRules leaves every instance's metadata as it was before laneway.
    c.delete::<TagRule>("order").await;
    c.delete::<TagRule>("user").await;
    wait_for("TagRules gone", (false, false), || async {
        (
            c.api::<TagRule>().get("order").await.is_ok(),
            c.api::<TagRule>().get("user").await.is_ok(),
        )
    })
    .await;
    assert_eq!(metadata(&nacos, "order-service").await, before.0);
    assert_eq!(metadata(&nacos, "user-service").await, before.1);
    assert_eq!(
        metadata(&nacos, "gateway").await,
        gateway,
        "a service no TagRule marks was touched"
    );

    // The way without laneway, for comparison: each instance registers its own lane, read from
    // its environment at start-up, so moving a pod is restarting it.
    let restarts: usize = std::env::var("LANEWAY_SPRING_RESTARTS")
        .ok()
        .and_then(|m| m.parse().ok())
        .unwrap_or(2);
    apps.restart(
        &format!("order-service@{ORDER_BASE}"),
        Some(&format!(
            "order-service@{ORDER_BASE},next=user-service,lanes=baseline"
        )),
    );
    // Untagged requests alongside: without laneway a lane has no fallback, so only those can
    // tell a restart's failures.
    let traffic = Traffic::start(&http, &[None]);
    let mut took = restart_moves(&mut apps, &http, restarts).await;
    let (sent, failures) = traffic.finish().await;
    took.sort();
    println!(
        "restart with a new lane -> Spring Cloud Gateway routes by it ({restarts} restarts): p50 {:?}, p99 {:?}, max {:?}; {} of {sent} untagged requests alongside failed",
        percentile(&took, 0.5),
        percentile(&took, 0.99),
        took.last().expect("restarts"),
        failures.len()
    );
    drop(apps);
}

/// Moves order's second pod into dev-alice and back by restarting it with its lane in its own
/// metadata; the time from each restart until the gateway routes by it.
async fn restart_moves(apps: &mut SpringApps, http: &reqwest::Client, moves: usize) -> Vec<Duration> {
    let mut took = Vec::new();
    for i in 0..moves {
        let into_lane = i % 2 == 0;
        let lanes = if into_lane { "dev-alice" } else { "baseline" };
        let started = Instant::now();
        apps.restart(
            &format!("order-service@{ORDER_ALICE}"),
            Some(&format!(
                "order-service@{ORDER_ALICE},next=user-service,lanes={lanes}"
            )),
        );
        loop {
            let lane = into_lane.then_some("dev-alice");
            let took = hop(http, lane).await;
            if took.is_ok_and(|p| p.starts_with(&format!("order-service {ORDER_ALICE} "))) {
                break;
            }
            assert!(
                started.elapsed() < Duration::from_secs(90),
                "restart {i} not routed within 90 s"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        took.push(started.elapsed());
    }
    took
}

/// The pods of the RPC-entry test: order calls user, each with a baseline and a gray instance;
/// `job` calls order from outside any request.
const ENTRY_ORDER: &str = "198.18.0.35:8080";
const ENTRY_ORDER_GRAY: &str = "198.18.0.36:8080";
const ENTRY_USER: &str = "198.18.0.37:8080";
const ENTRY_USER_GRAY: &str = "198.18.0.38:8080";
const JOB: &str = "job-service@198.18.0.39:8080";

/// Calls from the job until `done` holds of them, for at most a minute.
async fn until_calls(
    apps: &mut SpringApps,
    what: &str,
    (n, users): (usize, usize),
    done: impl Fn(&peers::Calls) -> bool,
) -> peers::Calls {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let got = apps.calls(JOB, "order-service", n, users);
        if done(&got) {
            return got;
        }
        assert!(Instant::now() < deadline, "{what}: last {got:?}");
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn spring_cloud_calls_that_pass_no_gateway_are_drawn_into_gray_once_at_the_first_hop() {
    let _serial = SERIAL.lock().await;
    let nacos = Nacos::start();
    let c = cluster("spring-entry").await;
    c.service("order").await;
    c.service("user").await;
    for (name, app, lane, address) in [
        ("order-0", "order", None, ENTRY_ORDER),
        ("order-gray", "order", Some("gray"), ENTRY_ORDER_GRAY),
        ("user-0", "user", None, ENTRY_USER),
        ("user-gray", "user", Some("gray"), ENTRY_USER_GRAY),
    ] {
        c.pod(name, app, lane, ip(address)).await;
    }
    let services: Vec<String> = [ENTRY_ORDER, ENTRY_ORDER_GRAY]
        .iter()
        .map(|a| format!("order-service@{a},next=user-service"))
        .chain(
            [ENTRY_USER, ENTRY_USER_GRAY]
                .iter()
                .map(|a| format!("user-service@{a}")),
        )
        .chain([JOB.to_owned()])
        .collect();
    let args: Vec<&str> = services.iter().flat_map(|s| ["--service", s.as_str()]).collect();
    let mut apps = SpringApps::start(&nacos, NACOS_PASSWORD, &args, 5);
    let _op = mark_order_and_user(&c, &nacos).await;
    c.apply_yaml(&gray_route(10, "")).await.expect("gray");
    let base = path(ENTRY_ORDER, ENTRY_USER);
    let gray = path(ENTRY_ORDER_GRAY, ENTRY_USER_GRAY);

    // weight: 10% ± 2 of 2,000 calls from the job are gray at both hops; no path mixes tiers
    let got = until_calls(&mut apps, "the job's calls drawn at 10%", (2000, 0), |got| {
        got.errors == 0
            && got.chains.keys().all(|p| *p == base || *p == gray)
            && got.chains.contains_key(&gray)
    })
    .await;
    let drawn = got.chains.get(&gray).copied().unwrap_or(0);
    println!("weight 10: {drawn} of 2000 Spring Cloud calls in no lane went along the gray path");
    assert!(
        (160..=240).contains(&drawn),
        "gray took {drawn} of 2000: {:?}",
        got.chains
    );

    // a header condition: users 1-100 and no one else
    let users =
        "  rpcEntry:\n    applyWeight: false\n    conditions: [{header: x-user-id, values: \"1~100\"}]\n";
    c.apply_yaml(&gray_route(10, users)).await.expect("gray by user");
    until_calls(&mut apps, "users 1-100 in gray", (2000, 1000), |got| {
        got.errors == 0
            && got.users.iter().all(|(user, paths)| {
                let want = if user.parse::<u32>().expect("user") <= 100 {
                    &gray
                } else {
                    &base
                };
                paths.keys().eq([want])
            })
    })
    .await;

    // sticky on the header: each user stays in the tier its hash says for all of its 100 calls
    c.apply_yaml(&gray_route(10, "  rpcEntry:\n    sticky: {header: x-user-id}\n"))
        .await
        .expect("sticky gray");
    let got = until_calls(&mut apps, "sticky users", (4000, 40), |got| {
        got.errors == 0
            && got.users.iter().all(|(user, paths)| {
                let want = if peers::sticky_roll(user) < 10 {
                    &gray
                } else {
                    &base
                };
                paths.len() == 1 && paths.get(want) == Some(&100)
            })
    })
    .await;
    assert!(got.users.values().any(|p| p.contains_key(&gray)), "{got:?}");

    // a weight change reaches the job: 100 and 0 in turn, from the edit to a batch of 10 calls
    // all along the new path
    let mut took = Vec::new();
    for i in 0..10 {
        let (weight, want) = if i % 2 == 0 { (100, &gray) } else { (0, &base) };
        let edited = Instant::now();
        c.apply_yaml(&gray_route(weight, "")).await.expect("weight");
        loop {
            let got = apps.calls(JOB, "order-service", 10, 0);
            if got.errors == 0 && got.chains.keys().eq([want]) {
                break;
            }
            assert!(
                edited.elapsed() < Duration::from_secs(30),
                "weight {weight}: {got:?}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        took.push(edited.elapsed());
    }
    took.sort_unstable();
    println!(
        "Spring Cloud weight edit -> drawn at the new weight: p50 {:?}, p99 {:?} ({} edits)",
        percentile(&took, 0.5),
        percentile(&took, 0.99),
        took.len()
    );
}

/// `kubectl laneway probe dev-alice` through the Spring Cloud Gateway: clean while every service
/// calls on through its laneway-equipped `RestTemplate` (exit 0); when order-alice calls on through
/// a plain `RestTemplate`, it names order-alice as the last hop that reported and user as never
/// reached; when it calls on from a bare thread pool, it names user-base as the hop that got no
/// lane from order-alice (exit 1 both).
fn the_probe_names_the_service_that_loses_the_lane(c: &Cluster, apps: &mut SpringApps) {
    let state = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("spring-state-{}", std::process::id()));
    let gateway = format!("http://{GATEWAY}");
    let args = [
        "dev-alice",
        "-n",
        &c.ns,
        "--path",
        "/order/hop",
        "--gateway",
        &gateway,
    ];
    let run = || probe(&[&args[..], &["--expect", "order,user"]].concat(), &state);
    let (clean, text) = run();
    let rows = probe_rows(&text);
    assert_eq!(
        rows,
        [
            [
                "1",
                "order",
                "order-alice",
                "dev-alice",
                "header",
                "Lane",
                "dev-alice"
            ],
            [
                "2",
                "user",
                "user-featx",
                "dev-alice",
                "header",
                "Fallback:feature-x",
                "feature-x"
            ],
        ],
        "{text}"
    );
    assert!(clean, "{text}");

    let order_alice = format!("order-service@{ORDER_ALICE}");
    for (how, want) in [
        ("plain", "lane dev-alice never reached user: the last hop to report was hop 1 order (pod order-alice), whose onward call carried no probe"),
        ("pool", "lane dev-alice lost at hop 2: user (pod user-base) got no lane from order (pod order-alice)"),
    ] {
        apps.break_hop(&order_alice, Some(how));
        let (clean, text) = run();
        apps.break_hop(&order_alice, None);
        assert!(!clean, "{how}: {text}");
        assert_eq!(text.lines().last(), Some(want), "{how}: {text}");
    }
}
