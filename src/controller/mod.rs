//! The operator's shell. Watches feed the index; a namespace with changes is resolved by the
//! core, compared with what exists, and handed to the [`Writer`] as a plan; the writer's report
//! comes back as a message. The event loop never waits for a write, each namespace has its own
//! backoff, and only the leader plans.

mod changes;
mod events;
mod gateways;
mod health;
mod lenient;
mod planner;
mod probes;
mod publishing;
mod reports;
mod schedule;
mod space;
mod watch;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use tokio::sync::{mpsc, watch as signal};
use tokio::time::Instant;
use tracing::{debug, warn};

use crate::api::TagRule;
use crate::lanes::{Config, Index, ObjectKey, TagRules};
use crate::metrics::{Metrics, ResultLabels, SourceLabels};
use crate::publish::PublishError;
use crate::writer::{OwnKind, Report, Writer};
use planner::LiveObjects;
use publishing::Publishing;
pub use publishing::{Centres, SKIP_CLEANUP_ANNOTATION};
use space::{Space, SubsetCounts};
use watch::Streams;

pub use health::{Health, HEARTBEAT, STALL_AFTER};
pub use planner::COUNT_BUDGET;
/// How the controller runs.
#[derive(Clone, Debug)]
pub struct Settings {
    pub config: Config,
    /// Namespaces to watch; empty for the whole cluster.
    pub namespaces: Vec<String>,
    /// Shortest time between two resolutions of one namespace; the first change after a quiet
    /// period is acted on at once.
    pub debounce: Duration,
    /// How long a Service stays after laneway's routes stopped naming it (and the gateways
    /// reported the change): at least the gateways' reload interval.
    pub route_grace: Duration,
    /// Service entries a second that the LaneRoute status writes of the lanes' own endpoint
    /// counts share, over all namespaces.
    pub status_entries_per_second: u32,
}

/// Most watched changes taken in at once before the loop looks at anything else.
const DRAIN: usize = 1000;

/// The operator's state between events.
pub struct Controller {
    client: Client,
    settings: Settings,
    metrics: Arc<Metrics>,
    writer: Writer,
    index: Index,
    /// Outputs that exist, per namespace, with the hash they were applied with.
    live: BTreeMap<String, LiveObjects>,
    spaces: BTreeMap<String, Space>,
    /// The routine LaneRoute status writes of every namespace share it.
    count_budget: planner::CountBudget,
    /// LaneRoutes and TagRules being deleted, until their finalizer comes off (with the
    /// TagRule, whose spec names the Dubbo rule to remove).
    deleting: BTreeMap<(OwnKind, ObjectKey), Option<TagRule>>,
    rules: TagRules,
    rules_dirty: bool,
    publishing: Publishing,
    gateways: gateways::Gateways,
    leading: bool,
    reports: mpsc::UnboundedSender<(Report, Duration)>,
    report_rx: Option<mpsc::UnboundedReceiver<(Report, Duration)>>,
    owned_tx: mpsc::UnboundedSender<Result<BTreeMap<String, String>, PublishError>>,
    owned_rx: Option<mpsc::UnboundedReceiver<Result<BTreeMap<String, String>, PublishError>>>,
    health: Arc<Health>,
}

impl Controller {
    /// Counts in `writer`'s metrics; publishes to `centres` through `writer`'s fence.
    pub fn new(
        client: Client,
        settings: Settings,
        centres: Centres,
        writer: Writer,
        health: Arc<Health>,
    ) -> Self {
        let metrics = writer.metrics().clone();
        let publishing = Publishing::start(centres, writer.fence(), &metrics);
        let (reports, report_rx) = mpsc::unbounded_channel();
        let (owned_tx, owned_rx) = mpsc::unbounded_channel();
        let budget = settings.status_entries_per_second;
        Controller {
            index: Index::new(settings.config.clone()),
            client,
            settings,
            metrics,
            writer,
            live: BTreeMap::new(),
            spaces: BTreeMap::new(),
            count_budget: planner::CountBudget::new(budget),
            deleting: BTreeMap::new(),
            rules: TagRules::default(),
            rules_dirty: false,
            gateways: gateways::Gateways::default(),
            publishing,
            leading: false,
            reports,
            report_rx: Some(report_rx),
            owned_tx,
            owned_rx: Some(owned_rx),
            health,
        }
    }

    /// Watches and writes until `stop` fires. `ready` turns true once every watch has listed
    /// its objects; nothing is written before that, so a cold cache never empties a lane.
    pub async fn run(mut self, ready: Arc<AtomicBool>, mut stop: signal::Receiver<bool>) {
        let mut streams = Streams::new(&self.client, &self.settings.namespaces);
        let mut leading = self.writer.fence().subscribe();
        // Leadership may have been won before this subscription.
        if *leading.borrow_and_update() {
            self.leading = true;
            self.mark_all();
        }
        let mut reports = self.report_rx.take().expect("run once");
        let mut owned = self.owned_rx.take().expect("run once");
        let mut heartbeat = tokio::time::interval(HEARTBEAT);
        loop {
            self.health.beat();
            let synced = streams.synced();
            if self.leading && synced && self.publishing.owned.is_none() {
                self.read_owned();
            }
            let due = if self.leading && synced {
                self.next_due()
            } else {
                None
            };
            let expiry = self.next_expiry();
            tokio::select! {
                change = streams.next() => {
                    let Some(change) = change else { break };
                    self.handle(change);
                    // What already arrived with it (a pod's deletion is two events) goes into
                    // the same plan.
                    for _ in 0..DRAIN {
                        let Some(Some(change)) = streams.next().now_or_never() else { break };
                        self.handle(change);
                    }
                    ready.store(streams.synced(), Ordering::Relaxed);
                }
                _ = leading.changed() => {
                    self.leading = *leading.borrow_and_update();
                    if self.leading {
                        self.mark_all();
                    } else {
                        self.publishing.stand_down();
                    }
                }
                Some((report, took)) = reports.recv() => self.reported(report, took),
                Some(outcome) = self.publishing.outcomes.recv() => {
                    if let Some(key) = self.publishing.record(outcome) {
                        self.rule_changed(&key);
                    }
                }
                Some(result) = owned.recv() => {
                    self.publishing.reading_owned = false;
                    match result {
                        Ok(published) if self.leading => {
                            self.publishing.owned_from(published);
                            self.rules_dirty = true;
                        }
                        Ok(_) => {}
                        Err(e) => {
                            self.publishing.read_not_before = Some(Instant::now() + Duration::from_secs(1));
                            warn!(error = %e, "could not read the rules laneway published; will retry");
                            self.metrics.error("publish");
                        }
                    }
                }
                _ = sleep_until(due) => self.start_due(),
                _ = sleep_until(expiry) => self.expire(),
                _ = heartbeat.tick() => {}
                _ = stop.changed() => break,
            }
        }
    }

    /// The soonest time a namespace or the rules are due.
    fn next_due(&self) -> Option<Instant> {
        let now = Instant::now();
        let spaces = self.spaces.values().filter_map(|s| s.schedule.due_at(now));
        let rules = (self.rules_dirty && self.publishing.owned.is_some()).then_some(now);
        spaces.chain(rules).min()
    }

    fn next_expiry(&self) -> Option<Instant> {
        let soonest = self.spaces.values().filter_map(|s| s.schedule.expiry()).min()?;
        let wait = Duration::try_from(soonest.duration_since(Timestamp::now())).unwrap_or(Duration::ZERO);
        Some(Instant::now() + wait + Duration::from_millis(50))
    }

    fn expire(&mut self) {
        let now = Timestamp::now();
        for space in self.spaces.values_mut() {
            space.schedule.expire(now);
        }
    }

    fn space(&mut self, ns: &str) -> &mut Space {
        self.spaces.entry(ns.to_owned()).or_default()
    }

    fn mark(&mut self, ns: &str, services: Option<&BTreeSet<String>>) {
        self.space(ns).schedule.changed(services);
        self.rules_dirty = true;
    }

    /// Compare again without recomputing (statuses, retries).
    fn recheck(&mut self, ns: &str) {
        self.space(ns).schedule.recheck();
    }

    fn mark_all(&mut self) {
        let namespaces: BTreeSet<String> = self
            .index
            .namespaces()
            .map(str::to_owned)
            .chain(self.live.keys().cloned())
            .chain(self.deleting.keys().map(|(_, k)| k.namespace.clone()))
            .collect();
        for ns in namespaces {
            self.mark(&ns, None);
        }
        self.rules_dirty = true;
    }

    fn read_owned(&mut self) {
        let p = &self.publishing;
        if p.reading_owned || p.read_not_before.is_some_and(|t| Instant::now() < t) {
            return;
        }
        self.publishing.reading_owned = true;
        let configmap = self.publishing.configmap.clone();
        let tx = self.owned_tx.clone();
        tokio::spawn(async move {
            let _ = tx.send(configmap.contents().await);
        });
    }

    /// Resolves every namespace that is due and hands its plan to the writer.
    fn start_due(&mut self) {
        let now = Timestamp::now();
        if self.rules_dirty && self.publishing.owned.is_some() {
            self.rules_dirty = false;
            self.rules = self.index.tag_rules(now);
            self.publishing
                .publish(&self.rules, self.deleting.values().flatten(), now);
            let namespaces: BTreeSet<String> =
                self.rules.reports.keys().map(|k| k.namespace.clone()).collect();
            for ns in namespaces {
                self.recheck(&ns);
            }
        }
        let instant = Instant::now();
        let due: Vec<String> = self
            .spaces
            .iter_mut()
            .filter_map(|(ns, s)| s.schedule.is_due(instant).then(|| ns.clone()))
            .collect();
        for ns in due {
            self.start(&ns, now);
        }
        self.update_subset_gauges();
        self.metrics.namespaces.set(self.spaces.len() as i64);
    }

    /// Resolves the namespace (again, or only the Services marked), plans what differs and
    /// hands the plan to the writer.
    fn start(&mut self, ns: &str, now: Timestamp) {
        let Some(space) = self.spaces.get_mut(ns) else {
            return;
        };
        let start = space.schedule.start();
        let desired = space.resolve(&self.index, ns, start.dirty, now);
        let empty = LiveObjects::new();
        let live = self.live.get(ns).unwrap_or(&empty);
        let probes = space.prune_failed(&self.index, ns, (&desired, live));
        let triggers = std::mem::take(&mut space.triggers);
        let events = if start.with_tail {
            std::mem::take(&mut space.events)
        } else {
            Vec::new()
        };
        let hold_until = space.grace.hold(self.settings.route_grace);
        let input = planner::Input {
            space: planner::Snapshot {
                ns,
                desired: &desired,
                live,
                index: &self.index,
                failed: &space.failed,
                retries: &space.retries,
                deleting: &self.deleting,
                triggers: &triggers,
            },
            outside: planner::Outside {
                rules: &self.rules,
                publishing: &self.publishing,
                gateways: &self.gateways,
            },
            statuses: planner::StatusContext {
                book: planner::StatusBook {
                    verify: start.verify,
                    written: &space.book.written,
                    memo: &space.book.memo,
                    budget: self.count_budget,
                },
                clock: planner::Clock {
                    instant: Instant::now(),
                    now,
                },
            },
            grace: planner::RouteGrace {
                released: &space.grace.released,
                hold_until,
            },
            tail_busy: !start.with_tail,
        };
        let built = planner::build(&input, &mut space.told, events);
        if let Some(budget) = built.budget {
            self.count_budget = budget;
            self.metrics
                .status_budget_paid_until(budget.paid_until().map(Instant::into_std));
        }
        space.subsets = SubsetCounts::of(&desired);
        space.desired = Some(desired);
        let plan = space.record(built, probes, self.settings.debounce);
        if plan.is_empty() {
            let ok = ResultLabels { result: "ok" };
            self.metrics.reconciles.get_or_create(&ok).inc();
            self.forget_if_gone(ns);
            return;
        }
        debug!(namespace = ns, writes = plan.len(), "writing");
        let writer = self.writer.clone();
        let reports = self.reports.clone();
        tokio::spawn(async move {
            let started = Instant::now();
            writer
                .execute(plan, |report| {
                    let _ = reports.send((report, started.elapsed()));
                })
                .await;
        });
    }

    /// Drops everything kept for a namespace that holds nothing any more (deleted).
    fn forget_if_gone(&mut self, ns: &str) {
        let gone = self.index.namespaces().all(|n| n != ns)
            && !self.live.contains_key(ns)
            && !self.deleting.keys().any(|(_, k)| k.namespace == ns);
        if gone && self.spaces.get(ns).is_some_and(|s| s.schedule.idle()) {
            self.spaces.remove(ns);
        }
    }

    /// `laneway_subsets`: the namespaces' counts summed, each brought up to date by its plans,
    /// so that an event does not walk every LaneRoute's services in every namespace.
    fn update_subset_gauges(&self) {
        let mut total = [0; 4];
        for space in self.spaces.values() {
            for (t, n) in total.iter_mut().zip(space.subsets.0) {
                *t += n;
            }
        }
        for (source, n) in SubsetCounts::LABELS.into_iter().zip(total) {
            self.metrics
                .subsets
                .get_or_create(&SourceLabels { source })
                .set(n);
        }
    }
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        // Due already: at once, not at the timer's next millisecond.
        Some(d) if d <= Instant::now() => {}
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}
