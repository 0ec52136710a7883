//! The fault suite's load generator: HTTP requests through a gateway at a steady rate while a
//! fault runs, tagged (the lane header) and untagged in turn, each answered by a backend pod that
//! names itself (tests/gateway/backends.py sets `X-Pod`). Per run it counts the requests sent,
//! those that failed (a connection error, no complete answer within the timeout, a status other
//! than 2xx) and those a pod of the wrong tier answered (not one of the pods the request's lane
//! resolves to), and keeps the first few of each with the time they were sent.
//!
//! It runs on a thread of its own (with its own Tokio runtime), so that the test's runtime (the
//! checker's 20 ms clock, the churn) neither slows it nor is slowed by it.
//!
//! Bounded: `rate` requests per second (a missed tick is caught up, so that the count keeps
//! pace with the clock), at most `max_in_flight` at once, `max_requests` in all and for
//! `max_duration` at most; only to an address inside the tests' network namespace (loopback or
//! the pod IPs 198.18.0.x that tests/in-cluster.sh puts on its `lo`).

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How many failures and wrong-tier answers a report keeps (each).
const KEPT: usize = 10;

/// One kind of request: its lane (None: no lane header) and the pods that may answer it.
#[derive(Clone, Debug)]
pub struct Kind {
    pub name: String,
    pub lane: Option<String>,
    pub pods: BTreeSet<String>,
}

impl Kind {
    pub fn untagged(pods: &[&str]) -> Kind {
        Kind {
            name: "untagged".into(),
            lane: None,
            pods: pods.iter().map(|p| p.to_string()).collect(),
        }
    }

    pub fn tagged(lane: &str, pods: &[&str]) -> Kind {
        Kind {
            name: lane.into(),
            lane: Some(lane.into()),
            pods: pods.iter().map(|p| p.to_string()).collect(),
        }
    }
}

/// Where requests go: `GET /` to `addr` with `Host: host`; the lane in header `header`.
#[derive(Clone, Debug)]
pub struct Target {
    pub addr: SocketAddr,
    pub host: String,
    pub header: String,
}

#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Requests per second, all kinds together.
    pub rate: u32,
    /// Per request, from connecting to the end of the body.
    pub timeout: Duration,
    pub max_duration: Duration,
    pub max_requests: u64,
    pub max_in_flight: usize,
}

impl Limits {
    /// `rate` per second with a 2 s timeout, for `max_duration` at most.
    pub fn new(rate: u32, max_duration: Duration) -> Limits {
        let timeout = Duration::from_secs(2);
        Limits {
            rate,
            timeout,
            max_duration,
            max_requests: u64::from(rate) * max_duration.as_secs().max(1),
            // Enough for every request of a whole timeout to hang.
            max_in_flight: (f64::from(rate) * timeout.as_secs_f64()) as usize + 16,
        }
    }
}

/// A request that failed or was answered by the wrong tier.
#[derive(Clone, Debug)]
pub struct Miss {
    /// When it was sent.
    pub sent: Instant,
    pub latency: Duration,
    pub kind: String,
    pub what: String,
}

impl Miss {
    /// `+1.234 s dev-alice: HTTP 503 ... (after 12 ms)`, the time relative to `origin`.
    pub fn describe(&self, origin: Instant) -> String {
        format!(
            "{} {}: {} (after {} ms)",
            offset(self.sent, origin),
            self.kind,
            self.what,
            self.latency.as_millis()
        )
    }
}

/// `+1.234 s` or `-0.500 s`: `at` relative to `origin`.
pub fn offset(at: Instant, origin: Instant) -> String {
    if at >= origin {
        format!("+{:.3} s", (at - origin).as_secs_f64())
    } else {
        format!("-{:.3} s", (origin - at).as_secs_f64())
    }
}

#[derive(Clone, Debug, Default)]
pub struct KindCount {
    pub sent: u64,
    pub failed: u64,
    pub wrong_tier: u64,
    /// Answers (2xx) per pod.
    pub by_pod: BTreeMap<String, u64>,
}

#[derive(Clone, Debug)]
pub struct Report {
    pub started: Instant,
    /// From the first request sent to the last one finished.
    pub elapsed: Duration,
    pub sent: u64,
    pub failed: u64,
    pub wrong_tier: u64,
    pub by_kind: BTreeMap<String, KindCount>,
    /// The first failures and the first wrong-tier answers, in the order they completed.
    pub failures: Vec<Miss>,
    pub wrong: Vec<Miss>,
    /// Failures by cause (`timed out`, `could not connect`, `HTTP 503`, ...).
    pub causes: BTreeMap<String, u64>,
    /// When the first and the last failed request were sent.
    pub failed_between: Option<(Instant, Instant)>,
    pub max_latency: Duration,
    /// How late the generator's own clock ticked at most, and when that tick was due: a request
    /// that timed out while the generator itself was held up this long (the machine starved of
    /// CPU) says nothing about the gateway.
    pub max_lag: (Duration, Option<Instant>),
    /// Set when a bound stopped the generator before it was told to stop.
    pub cut_short: Option<String>,
    /// The time spent sending (until stopped or a bound was reached).
    pub sending: Duration,
}

impl Report {
    /// Nothing sent yet.
    pub fn new(started: Instant) -> Report {
        Report {
            started,
            elapsed: Duration::ZERO,
            sent: 0,
            failed: 0,
            wrong_tier: 0,
            by_kind: BTreeMap::new(),
            failures: Vec::new(),
            wrong: Vec::new(),
            causes: BTreeMap::new(),
            failed_between: None,
            max_latency: Duration::ZERO,
            max_lag: (Duration::ZERO, None),
            cut_short: None,
            sending: Duration::ZERO,
        }
    }

    /// Requests sent per second while sending.
    pub fn rate(&self) -> f64 {
        self.sent as f64 / self.sending.as_secs_f64().max(1e-3)
    }

    fn record(&mut self, kind: &Kind, sent: Instant, latency: Duration, result: Result<String, String>) {
        self.max_latency = self.max_latency.max(latency);
        let count = self.by_kind.entry(kind.name.clone()).or_default();
        let miss = |what: String| Miss {
            sent,
            latency,
            kind: kind.name.clone(),
            what,
        };
        match result {
            Ok(pod) => {
                *count.by_pod.entry(pod.clone()).or_default() += 1;
                if !kind.pods.contains(&pod) {
                    count.wrong_tier += 1;
                    self.wrong_tier += 1;
                    if self.wrong.len() < KEPT {
                        let want: Vec<&str> = kind.pods.iter().map(String::as_str).collect();
                        self.wrong
                            .push(miss(format!("answered by {pod}, not by {}", want.join(" or "))));
                    }
                }
            }
            Err(e) => {
                count.failed += 1;
                self.failed += 1;
                *self.causes.entry(cause(&e)).or_default() += 1;
                self.failed_between = Some(match self.failed_between {
                    Some((first, last)) => (first.min(sent), last.max(sent)),
                    None => (sent, sent),
                });
                if self.failures.len() < KEPT {
                    self.failures.push(miss(e));
                }
            }
        }
    }

    /// The failures by cause and when they were sent, relative to `origin` (empty when none).
    pub fn failure_causes(&self, origin: Instant) -> String {
        let Some((first, last)) = self.failed_between else {
            return String::new();
        };
        let causes: Vec<String> = self.causes.iter().map(|(c, n)| format!("{n} {c}")).collect();
        format!(
            "{}, sent from {} to {}",
            causes.join(", "),
            offset(first, origin),
            offset(last, origin)
        )
    }

    /// How late the generator ticked at most, and when (relative to `origin`).
    pub fn lag(&self, origin: Instant) -> String {
        match self.max_lag {
            (lag, Some(at)) => format!("{} ms at {}", lag.as_millis(), offset(at, origin)),
            _ => "0 ms".into(),
        }
    }

    /// One line: the counts, the rate, the answers per kind and pod.
    pub fn summary(&self) -> String {
        let kinds: Vec<String> = self
            .by_kind
            .iter()
            .map(|(k, c)| {
                let pods: Vec<String> = c.by_pod.iter().map(|(p, n)| format!("{p} {n}")).collect();
                format!("{k}: {}", pods.join(", "))
            })
            .collect();
        format!(
            "{} requests in {:.1} s ({:.0}/s), {} failed, {} answered by the wrong tier, slowest {} ms, \
             the generator at most {} ms late; {}{}",
            self.sent,
            self.sending.as_secs_f64(),
            self.rate(),
            self.failed,
            self.wrong_tier,
            self.max_latency.as_millis(),
            self.max_lag.0.as_millis(),
            kinds.join("; "),
            self.cut_short
                .as_ref()
                .map(|w| format!("; STOPPED EARLY: {w}"))
                .unwrap_or_default()
        )
    }

    /// The first failures and wrong-tier answers, times relative to `origin`.
    pub fn misses(&self, origin: Instant) -> Vec<String> {
        self.failures
            .iter()
            .chain(&self.wrong)
            .map(|m| m.describe(origin))
            .collect()
    }
}

/// Whether requests to `ip` stay inside the tests' network namespace.
pub fn inside_test_netns(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => v4.is_loopback() || matches!(v4.octets(), [198, 18, 0, _]),
        IpAddr::V6(v6) => v6.is_loopback(),
    }
}

/// A load running in the background until [`Load::stop`] (or a bound).
pub struct Load {
    stop: Arc<AtomicBool>,
    done: Option<tokio::sync::oneshot::Receiver<()>>,
    report: Arc<Mutex<Report>>,
    pub started: Instant,
}

impl Load {
    /// Starts sending `kinds` in turn (list a kind twice for twice its share) to `target`.
    pub fn start(target: &Target, kinds: Vec<Kind>, limits: Limits) -> Load {
        assert!(
            inside_test_netns(target.addr.ip()),
            "the load generator sends only inside the tests' network namespace, not to {}",
            target.addr
        );
        assert!(!kinds.is_empty() && limits.rate > 0);
        let started = Instant::now();
        let report = Arc::new(Mutex::new(Report::new(started)));
        let stop = Arc::new(AtomicBool::new(false));
        let url = format!("http://{}/", target.addr);
        let target = target.clone();
        let (out, stopping) = (report.clone(), stop.clone());
        let generate = async move {
            let client = reqwest::Client::builder()
                .no_proxy()
                .timeout(limits.timeout)
                .connect_timeout(limits.timeout)
                .tcp_nodelay(true)
                .pool_max_idle_per_host(limits.max_in_flight)
                .build()
                .expect("HTTP client");
            let permits = Arc::new(tokio::sync::Semaphore::new(limits.max_in_flight));
            let mut tick = tokio::time::interval(Duration::from_secs(1) / limits.rate);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
            let kinds: Vec<Arc<Kind>> = kinds.into_iter().map(Arc::new).collect();
            let mut n: u64 = 0;
            loop {
                let due = tick.tick().await;
                let lag = due.elapsed();
                {
                    let mut report = out.lock().expect("report");
                    if lag > report.max_lag.0 {
                        report.max_lag = (lag, Some(due.into_std()));
                    }
                }
                if stopping.load(Ordering::SeqCst) {
                    break;
                }
                let why = if n >= limits.max_requests {
                    Some(format!("{} requests sent", limits.max_requests))
                } else if started.elapsed() >= limits.max_duration {
                    Some(format!("{:?} passed", limits.max_duration))
                } else {
                    None
                };
                if let Some(why) = why {
                    eprintln!("load: stopped before the end of the fault: {why}");
                    out.lock().expect("report").cut_short = Some(why);
                    break;
                }
                let permit = permits.clone().acquire_owned().await.expect("semaphore");
                let kind = kinds[(n % kinds.len() as u64) as usize].clone();
                n += 1;
                out.lock().expect("report").sent += 1;
                let (client, url, target, out) = (client.clone(), url.clone(), target.clone(), out.clone());
                tokio::spawn(async move {
                    let sent = Instant::now();
                    let result = request(&client, &url, &target, &kind).await;
                    let latency = sent.elapsed();
                    let mut report = out.lock().expect("report");
                    report.record(&kind, sent, latency, result);
                    report.by_kind.entry(kind.name.clone()).or_default().sent += 1;
                    drop(report);
                    drop(permit);
                });
            }
            let sending = started.elapsed();
            // Every request in flight ends within its timeout.
            let _ = permits.acquire_many(limits.max_in_flight as u32).await;
            let mut report = out.lock().expect("report");
            report.sending = sending;
            report.elapsed = started.elapsed();
        };
        let (done, finished) = tokio::sync::oneshot::channel();
        std::thread::Builder::new()
            .name("load".into())
            .spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("load generator runtime");
                runtime.block_on(generate);
                let _ = done.send(());
            })
            .expect("load generator thread");
        Load {
            stop,
            done: Some(finished),
            report,
            started,
        }
    }

    /// Stops sending, waits for the requests in flight and returns the counts.
    pub async fn stop(mut self) -> Report {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(done) = self.done.take() {
            done.await.expect("the load generator failed");
        }
        self.report.lock().expect("report").clone()
    }
}

impl Drop for Load {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

/// One request; the pod that answered it 2xx, or what went wrong.
async fn request(
    client: &reqwest::Client,
    url: &str,
    target: &Target,
    kind: &Kind,
) -> Result<String, String> {
    let mut req = client.get(url).header(reqwest::header::HOST, &target.host);
    if let Some(lane) = &kind.lane {
        req = req.header(target.header.as_str(), lane);
    }
    let response = req.send().await.map_err(|e| describe(&e))?;
    let status = response.status();
    let pod = response
        .headers()
        .get("x-pod")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let body = response
        .bytes()
        .await
        .map_err(|e| format!("reading the body: {}", describe(&e)))?;
    let body = String::from_utf8_lossy(&body);
    let body: String = body.trim().chars().take(200).collect();
    if !status.is_success() {
        return Err(format!("HTTP {}: {body}", status.as_u16()));
    }
    pod.ok_or_else(|| format!("HTTP {} without X-Pod: {body}", status.as_u16()))
}

/// What kind of failure `what` (as [`request`] describes it) is: its first words.
fn cause(what: &str) -> String {
    if let Some(status) = what.strip_prefix("HTTP ") {
        let code: String = status.chars().take_while(char::is_ascii_digit).collect();
        return format!("HTTP {code}");
    }
    what.split(':').next().unwrap_or(what).to_owned()
}

/// The error and its causes, on one line.
fn describe(e: &reqwest::Error) -> String {
    let what = if e.is_timeout() {
        "timed out"
    } else if e.is_connect() {
        "could not connect"
    } else {
        "failed"
    };
    let mut causes = Vec::new();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        causes.push(s.to_string());
        source = s.source();
    }
    format!("{what}: {e} ({})", causes.join(": "))
}

/// Sends each kind until `in_a_row` answers in a row came from its pods; panics after `limit`.
pub async fn wait_until_served(target: &Target, kinds: &[Kind], in_a_row: usize, limit: Duration) {
    assert!(inside_test_netns(target.addr.ip()));
    let client = reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(2))
        .build()
        .expect("HTTP client");
    let url = format!("http://{}/", target.addr);
    let deadline = Instant::now() + limit;
    for kind in kinds {
        let mut streak = 0;
        while streak < in_a_row {
            let last = request(&client, &url, target, kind).await;
            match &last {
                Ok(pod) if kind.pods.contains(pod) => streak += 1,
                _ => streak = 0,
            }
            assert!(
                Instant::now() < deadline,
                "the gateway did not serve {} requests from {:?} within {limit:?}; last: {last:?}",
                kind.name,
                kind.pods
            );
            if streak == 0 {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

#[test]
fn the_load_stays_in_the_namespace_and_counts_each_miss_once() {
    assert!(inside_test_netns("127.0.0.1".parse().unwrap()));
    assert!(inside_test_netns("198.18.0.40".parse().unwrap()));
    assert!(!inside_test_netns("198.19.0.2".parse().unwrap()));
    assert!(!inside_test_netns("10.0.0.1".parse().unwrap()));
    let origin = Instant::now();
    let mut r = Report::new(origin);
    let alice = Kind::tagged("dev-alice", &["web-alice"]);
    let plain = Kind::untagged(&["web-0", "web-1"]);
    r.record(&alice, origin, Duration::from_millis(3), Ok("web-alice".into()));
    r.record(&alice, origin, Duration::from_millis(3), Ok("web-0".into()));
    r.record(
        &plain,
        origin + Duration::from_millis(1500),
        Duration::from_millis(2000),
        Err("timed out".into()),
    );
    r.record(
        &plain,
        origin,
        Duration::from_millis(1),
        Err("HTTP 503: no available server".into()),
    );
    assert_eq!((r.failed, r.wrong_tier), (2, 1));
    assert_eq!(
        r.failure_causes(origin),
        "1 HTTP 503, 1 timed out, sent from +0.000 s to +1.500 s"
    );
    assert_eq!(r.by_kind["dev-alice"].wrong_tier, 1);
    assert_eq!(r.by_kind["untagged"].failed, 2);
    assert_eq!(
        r.misses(origin + Duration::from_secs(1)),
        [
            "+0.500 s untagged: timed out (after 2000 ms)",
            "-1.000 s untagged: HTTP 503: no available server (after 1 ms)",
            "-1.000 s dev-alice: answered by web-0, not by web-alice (after 3 ms)"
        ]
    );
}
