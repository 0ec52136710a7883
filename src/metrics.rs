//! Prometheus metrics of the operator.

use std::sync::atomic::AtomicU64;
use std::sync::Mutex;
use std::time::Instant;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

use crate::kind::Kind;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabels {
    pub result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StepLabels {
    pub step: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WriteLabels {
    pub kind: Kind,
    pub op: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabels {
    pub kind: Kind,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SourceLabels {
    pub source: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PublishLabels {
    pub centre: &'static str,
    pub result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CentreLabels {
    pub centre: &'static str,
}

/// The steps [`Metrics::error`] counts: each is exported from the start, at zero.
pub const ERROR_STEPS: [&str; 6] = ["apply", "status", "finalizer", "event", "probe", "publish"];

/// Every metric laneway exports, registered under the `laneway` prefix. Series with a known
/// label set are exported at zero before their first event, so that rates and alerts see them.
pub struct Metrics {
    pub registry: Registry,
    /// Namespace reconciles by result (`ok`, `error`).
    pub reconciles: Family<ResultLabels, Counter>,
    pub reconcile_duration: Histogram,
    /// Errors by the step that failed.
    pub errors: Family<StepLabels, Counter>,
    /// API writes by object kind and operation (`create`, `replace`, `apply`, `recreate`, `delete`,
    /// `status`, `finalizer`).
    pub writes: Family<WriteLabels, Counter>,
    /// Lane subsets by source (`lane`, `fallback`, `baseline`, `empty`).
    pub subsets: Family<SourceLabels, Gauge>,
    /// 1 while this replica holds the leader Lease.
    pub leader: Gauge,
    /// Config-centre writes by centre and result (`ok`, `error`, `deleted`).
    pub publishes: Family<PublishLabels, Counter>,
    pub publish_duration: Family<CentreLabels, Histogram>,
    /// Config-centre keys found differing from what laneway published, and rewritten.
    pub repairs: Family<CentreLabels, Counter>,
    /// Outputs found changed by hand, and written back, by kind.
    pub output_repairs: Family<KindLabels, Counter>,
    /// Writes not sent because this replica was not (or no longer) allowed to write.
    pub fenced_writes: Counter,
    /// Namespaces laneway keeps state for.
    pub namespaces: Gauge,
    /// Resident memory of this process, read at each scrape: to alert before the pod's limit.
    pub resident_memory: Gauge,
    /// How long a routine LaneRoute status write that comes due now waits for its turn in the
    /// shared budget, read at each scrape from [`Metrics::status_budget_paid_until`].
    status_wait: Gauge<f64, AtomicU64>,
    status_paid_until: Mutex<Option<Instant>>,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("laneway");
        let reconciles = Family::<ResultLabels, Counter>::default();
        let reconcile_duration = Histogram::new(exponential_buckets(0.001, 2.0, 14));
        let errors = Family::<StepLabels, Counter>::default();
        let writes = Family::<WriteLabels, Counter>::default();
        let subsets = Family::<SourceLabels, Gauge>::default();
        let leader = Gauge::default();
        let publishes = Family::<PublishLabels, Counter>::default();
        let publish_duration = Family::<CentreLabels, Histogram>::new_with_constructor(|| {
            Histogram::new(exponential_buckets(0.0005, 2.0, 16))
        });
        let repairs = Family::<CentreLabels, Counter>::default();
        let output_repairs = Family::<KindLabels, Counter>::default();
        let fenced_writes = Counter::default();
        let namespaces = Gauge::default();
        let (resident_memory, status_wait) = read_at_scrape(&mut registry);
        registry.register(
            "namespaces",
            "Namespaces laneway keeps state for",
            namespaces.clone(),
        );
        registry.register("reconciles", "Namespace reconciles by result", reconciles.clone());
        registry.register(
            "reconcile_duration_seconds",
            "Time to reconcile one namespace",
            reconcile_duration.clone(),
        );
        registry.register("errors", "Errors by the step that failed", errors.clone());
        registry.register("writes", "API writes by kind and operation", writes.clone());
        registry.register("subsets", "Lane subsets by source", subsets.clone());
        registry.register("leader", "1 while this replica is the leader", leader.clone());
        registry.register(
            "publishes",
            "Config-centre writes by centre and result",
            publishes.clone(),
        );
        registry.register(
            "publish_duration_seconds",
            "Time to write a rule to a config centre",
            publish_duration.clone(),
        );
        registry.register(
            "centre_repairs",
            "Config-centre keys found changed behind laneway's back and repaired",
            repairs.clone(),
        );
        registry.register(
            "repairs",
            "Services, EndpointSlices and HTTPRoutes found changed by hand and written back, by kind",
            output_repairs.clone(),
        );
        registry.register(
            "fenced_writes",
            "Writes not sent because this replica did not hold the lease",
            fenced_writes.clone(),
        );
        at_zero(&errors, &output_repairs);
        Metrics {
            registry,
            reconciles,
            reconcile_duration,
            errors,
            writes,
            subsets,
            leader,
            publishes,
            publish_duration,
            repairs,
            output_repairs,
            fenced_writes,
            namespaces,
            resident_memory,
            status_wait,
            status_paid_until: Mutex::new(None),
        }
    }
}

impl Metrics {
    pub fn write(&self, kind: Kind, op: &'static str) {
        self.writes.get_or_create(&WriteLabels { kind, op }).inc();
    }

    /// Exports a config centre's writes at zero, before its first write.
    pub fn centre(&self, centre: &'static str) {
        for result in ["ok", "error"] {
            drop(self.publishes.get_or_create(&PublishLabels { centre, result }));
        }
    }

    pub fn publish(&self, centre: &'static str, result: &'static str, took: std::time::Duration) {
        self.publishes
            .get_or_create(&PublishLabels { centre, result })
            .inc();
        if result == "ok" {
            self.publish_duration
                .get_or_create(&CentreLabels { centre })
                .observe(took.as_secs_f64());
        }
    }

    pub fn repaired(&self, kind: Kind) {
        self.output_repairs.get_or_create(&KindLabels { kind }).inc();
    }

    pub fn error(&self, step: &'static str) {
        debug_assert!(ERROR_STEPS.contains(&step), "unknown step {step}");
        self.errors.get_or_create(&StepLabels { step }).inc();
    }

    /// Until when the routine LaneRoute status writes given a turn so far use the budget.
    pub fn status_budget_paid_until(&self, at: Option<Instant>) {
        if let Ok(mut until) = self.status_paid_until.lock() {
            *until = at;
        }
    }

    /// The text exposition format.
    pub fn encode(&self) -> String {
        if let Some(bytes) = resident_memory() {
            self.resident_memory.set(bytes);
        }
        let until = self.status_paid_until.lock().ok().and_then(|u| *u);
        self.status_wait
            .set(until.map_or(0.0, |t| t.saturating_duration_since(Instant::now()).as_secs_f64()));
        let mut out = String::new();
        if prometheus_client::encoding::text::encode(&mut out, &self.registry).is_err() {
            out.clear();
        }
        out
    }
}

/// Exports every error step and every repaired kind before the first one happens.
fn at_zero(errors: &Family<StepLabels, Counter>, output_repairs: &Family<KindLabels, Counter>) {
    for step in ERROR_STEPS {
        drop(errors.get_or_create(&StepLabels { step }));
    }
    for kind in [Kind::Service, Kind::EndpointSlice, Kind::HttpRoute] {
        drop(output_repairs.get_or_create(&KindLabels { kind }));
    }
}

/// The gauges [`Metrics::encode`] sets at each scrape.
fn read_at_scrape(registry: &mut Registry) -> (Gauge, Gauge<f64, AtomicU64>) {
    let resident_memory = Gauge::default();
    let status_wait = Gauge::<f64, AtomicU64>::default();
    registry.register(
        "lane_route_status_wait_seconds",
        "How long a LaneRoute status write of endpoint counts or sources that comes due now \
         waits for its turn (all LaneRoutes share one budget of service entries a second)",
        status_wait.clone(),
    );
    registry.register(
        "resident_memory_bytes",
        "Resident memory of the operator process (VmRSS), read at each scrape",
        resident_memory.clone(),
    );
    (resident_memory, status_wait)
}

/// VmRSS of this process, from `/proc/self/status` (Linux only).
fn resident_memory() -> Option<i64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let kb = status.lines().find_map(|l| l.strip_prefix("VmRSS:"))?;
    let kb: i64 = kb.trim().trim_end_matches("kB").trim().parse().ok()?;
    Some(kb * 1024)
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::Metrics;

    fn status_wait(m: &Metrics) -> f64 {
        let text = m.encode();
        let line = text
            .lines()
            .find(|l| l.starts_with("laneway_lane_route_status_wait_seconds "))
            .expect("the gauge is exported");
        line.rsplit(' ').next().unwrap().parse().unwrap()
    }

    #[test]
    fn the_status_wait_counts_down_to_the_end_of_the_budget_granted() {
        let m = Metrics::default();
        assert_eq!(status_wait(&m), 0.0, "nothing granted yet");
        m.status_budget_paid_until(Some(Instant::now() + Duration::from_secs(20)));
        let wait = status_wait(&m);
        assert!(
            wait > 19.0 && wait <= 20.0,
            "20 s of turns granted, {wait} s shown"
        );
        let past = Instant::now().checked_sub(Duration::from_secs(1));
        m.status_budget_paid_until(past);
        assert_eq!(status_wait(&m), 0.0, "the turns granted have gone out");
    }

    #[test]
    fn error_steps_and_output_repairs_are_exported_at_zero_before_any_happens() {
        let text = Metrics::default().encode();
        for step in super::ERROR_STEPS {
            let line = format!("laneway_errors_total{{step=\"{step}\"}} 0");
            assert!(text.contains(&line), "{line} missing from\n{text}");
        }
        for kind in ["Service", "EndpointSlice", "HTTPRoute"] {
            let line = format!("laneway_repairs_total{{kind=\"{kind}\"}} 0");
            assert!(text.contains(&line), "{line} missing from\n{text}");
        }
    }
}
