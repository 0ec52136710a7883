//! Publishing Dubbo tag-router rules to config centres: one small trait, one implementation
//! per centre, and one task per centre so that a centre that is down never holds up the others.

mod configmap;
mod nacos;
mod zookeeper;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use k8s_openapi::jiff::Timestamp;
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;
use tracing::{info, warn};

pub use configmap::ConfigMapCentre;
pub use nacos::{NacosCentre, NacosSettings};
pub use zookeeper::ZooKeeperCentre;

use crate::lanes::{DubboRule, ObjectKey};
use crate::metrics::Metrics;

/// A failure talking to a config centre.
#[derive(Debug, thiserror::Error)]
#[error("{centre}: {message}")]
pub struct PublishError {
    pub centre: &'static str,
    pub message: String,
}

impl PublishError {
    pub fn new(centre: &'static str, message: impl ToString) -> Self {
        PublishError {
            centre,
            message: message.to_string(),
        }
    }
}

/// A config centre that stores documents under keys (`<application>.tag-router`).
pub trait ConfigCentre: Send + Sync {
    /// `configmap`, `zookeeper` or `nacos`.
    fn name(&self) -> &'static str;
    /// The document stored under `key`, if any.
    fn get<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Option<String>, PublishError>>;
    fn put<'a>(&'a self, key: &'a str, content: &'a str) -> BoxFuture<'a, Result<(), PublishError>>;
    /// Removes `key`; succeeds when it is already absent.
    fn delete<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<(), PublishError>>;
}

/// A rule to publish, and the TagRule it comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Wanted {
    pub rule: DubboRule,
    pub owner: ObjectKey,
}

/// What every centre should hold.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RuleSet {
    pub rules: BTreeMap<String, Wanted>,
    /// Keys laneway published before (found at start-up), retired if no longer wanted.
    pub owned: BTreeSet<String>,
    /// Only the leader publishes.
    pub leading: bool,
}

/// What happened in one centre.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    Published {
        centre: &'static str,
        key: String,
        hash: String,
        at: Timestamp,
    },
    Failed {
        centre: &'static str,
        key: String,
        error: String,
    },
    Removed {
        centre: &'static str,
        key: String,
    },
}

/// How centres are retried and rules retired.
#[derive(Clone, Copy, Debug)]
pub struct Timing {
    /// How long a removed rule stays published as `enabled: false` before it is deleted
    /// (running dubbo-go consumers do not see deletions).
    pub grace: Duration,
    /// Longest wait between retries of a failing centre.
    pub max_backoff: Duration,
    /// How often every rule is checked again even without a change.
    pub resync: Duration,
}

impl Default for Timing {
    fn default() -> Self {
        Timing {
            grace: Duration::from_secs(30),
            max_backoff: Duration::from_secs(30),
            resync: Duration::from_secs(300),
        }
    }
}

/// Starts one task per centre; each follows `wanted` and reports on `outcomes`.
pub fn spawn(
    centres: Vec<Arc<dyn ConfigCentre>>,
    wanted: watch::Receiver<RuleSet>,
    outcomes: mpsc::UnboundedSender<Outcome>,
    timing: Timing,
    metrics: Arc<Metrics>,
) -> Vec<tokio::task::JoinHandle<()>> {
    centres
        .into_iter()
        .map(|centre| {
            let worker = Worker {
                centre,
                outcomes: outcomes.clone(),
                timing,
                metrics: metrics.clone(),
                published: BTreeMap::new(),
                retiring: BTreeMap::new(),
                removed: BTreeSet::new(),
                failures: 0,
            };
            tokio::spawn(worker.run(wanted.clone()))
        })
        .collect()
}

struct Worker {
    centre: Arc<dyn ConfigCentre>,
    outcomes: mpsc::UnboundedSender<Outcome>,
    timing: Timing,
    metrics: Arc<Metrics>,
    /// Hash of what this centre holds, per key, as far as laneway knows.
    published: BTreeMap<String, String>,
    /// Keys published as disabled, and when.
    retiring: BTreeMap<String, Instant>,
    /// Keys this worker deleted, so that keys laneway owned at start-up are retired once.
    removed: BTreeSet<String>,
    failures: u32,
}

impl Worker {
    async fn run(mut self, mut wanted: watch::Receiver<RuleSet>) {
        loop {
            let set = wanted.borrow_and_update().clone();
            let resync_at = Instant::now() + self.timing.resync;
            let mut next = resync_at;
            if set.leading {
                let ok = self.sync(&set).await;
                self.failures = if ok { 0 } else { self.failures + 1 };
                if !ok {
                    let backoff = Duration::from_millis(250u64.saturating_mul(1 << self.failures.min(10)));
                    next = next.min(Instant::now() + backoff.min(self.timing.max_backoff));
                }
                if let Some(since) = self.retiring.values().min() {
                    next = next.min(*since + self.timing.grace);
                }
            } else {
                // A replica that stops leading forgets what it knew: the next leader checks.
                self.published.clear();
                self.retiring.clear();
                self.removed.clear();
            }
            tokio::select! {
                changed = wanted.changed() => if changed.is_err() { return },
                _ = tokio::time::sleep_until(next) => {
                    // After a quiet period every key is read again, so that edits made behind
                    // laneway's back are undone.
                    if Instant::now() >= resync_at {
                        self.published.clear();
                    }
                }
            }
        }
    }

    /// One pass over every key; false if any write failed.
    async fn sync(&mut self, set: &RuleSet) -> bool {
        let mut ok = true;
        for (key, w) in &set.rules {
            self.retiring.remove(key);
            self.removed.remove(key);
            if self.published.get(key) == Some(&w.rule.content_hash) {
                continue;
            }
            ok &= self.ensure(key, &w.rule.content, &w.rule.content_hash).await;
        }
        let stale: Vec<String> = self
            .published
            .keys()
            .chain(set.owned.iter())
            .filter(|k| !set.rules.contains_key(*k) && !self.removed.contains(*k))
            .cloned()
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        for key in stale {
            ok &= self.retire(&key).await;
        }
        ok
    }

    /// Makes the centre hold `content` under `key`, writing only when it holds something else.
    async fn ensure(&mut self, key: &str, content: &str, hash: &str) -> bool {
        let name = self.centre.name();
        let started = std::time::Instant::now();
        let result = match self.centre.get(key).await {
            Ok(Some(current)) if current == content => Ok(false),
            Ok(_) => self.centre.put(key, content).await.map(|_| true),
            Err(e) => Err(e),
        };
        match result {
            Ok(wrote) => {
                if wrote {
                    self.metrics.publish(name, "ok", started.elapsed());
                    info!(centre = name, key, hash = &hash[..12], "published");
                }
                self.published.insert(key.to_owned(), hash.to_owned());
                let _ = self.outcomes.send(Outcome::Published {
                    centre: name,
                    key: key.to_owned(),
                    hash: hash.to_owned(),
                    at: Timestamp::now(),
                });
                true
            }
            Err(e) => {
                self.metrics.publish(name, "error", started.elapsed());
                warn!(centre = name, key, error = %e, "publish failed; the centre keeps its last rule");
                let _ = self.outcomes.send(Outcome::Failed {
                    centre: name,
                    key: key.to_owned(),
                    error: e.message,
                });
                false
            }
        }
    }

    /// Publishes the disabled rule, then deletes the key once the grace period has passed.
    async fn retire(&mut self, key: &str) -> bool {
        let name = self.centre.name();
        match self.retiring.get(key) {
            None => {
                let application = key.strip_suffix(".tag-router").unwrap_or(key);
                let disabled = DubboRule::disabled(application);
                if !self.ensure(key, &disabled.content, &disabled.content_hash).await {
                    return false;
                }
                self.retiring.insert(key.to_owned(), Instant::now());
                true
            }
            Some(since) if since.elapsed() < self.timing.grace => true,
            Some(_) => match self.centre.delete(key).await {
                Ok(()) => {
                    info!(centre = name, key, "deleted");
                    self.metrics.publish(name, "deleted", Duration::ZERO);
                    self.published.remove(key);
                    self.retiring.remove(key);
                    self.removed.insert(key.to_owned());
                    let _ = self.outcomes.send(Outcome::Removed {
                        centre: name,
                        key: key.to_owned(),
                    });
                    true
                }
                Err(e) => {
                    warn!(centre = name, key, error = %e, "delete failed");
                    let _ = self.outcomes.send(Outcome::Failed {
                        centre: name,
                        key: key.to_owned(),
                        error: e.message,
                    });
                    false
                }
            },
        }
    }
}
