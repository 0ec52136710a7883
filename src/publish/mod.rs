//! Publishing Dubbo tag-router rules and entry documents to config centres: one small trait, one implementation
//! per centre, and one task per centre so that a centre that is down never holds up the others.
//! Every write goes through the lease fence; every key is read back and repaired periodically.

mod configmap;
pub mod marks;
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
pub use nacos::{NacosApi, NacosCentre, NacosRegistry, NacosSettings};
pub use zookeeper::ZooKeeperCentre;

use crate::lanes::{DubboRule, EntryRules, MessageRules, ENTRY_SUFFIX, MESSAGES_SUFFIX};
use crate::leader::{Fence, Fenced};
use crate::metrics::Metrics;

/// A failure talking to a config centre. The message never holds a credential: every centre
/// builds it with [`PublishError::redacted`].
#[derive(Debug, thiserror::Error)]
#[error("{centre}: {message}")]
pub struct PublishError {
    pub centre: &'static str,
    pub message: String,
    /// The centre refused this content (it would refuse it again): not retried until the
    /// content changes or the next read-back.
    pub refused: bool,
}

impl PublishError {
    /// An error whose text has every one of `secrets` replaced by `[redacted]`.
    pub fn redacted(centre: &'static str, message: impl ToString, secrets: &[&str]) -> Self {
        PublishError {
            centre,
            message: redact(&message.to_string(), secrets),
            refused: false,
        }
    }

    pub fn refused(mut self) -> Self {
        self.refused = true;
        self
    }
}

/// `text` with each non-empty secret replaced by `[redacted]`.
pub fn redact(text: &str, secrets: &[&str]) -> String {
    secrets
        .iter()
        .filter(|s| !s.is_empty())
        .fold(text.to_owned(), |t, s| t.replace(s, "[redacted]"))
}

/// A config centre that stores documents under keys (`<application>.tag-router`,
/// `<application>.laneway-entry`, `<application>.laneway-messages`).
pub trait ConfigCentre: Send + Sync {
    /// `configmap`, `zookeeper` or `nacos`.
    fn name(&self) -> &'static str;
    /// The document stored under `key`, if any.
    fn get<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Option<String>, PublishError>>;
    fn put<'a>(&'a self, key: &'a str, content: &'a str) -> BoxFuture<'a, Result<(), PublishError>>;
    /// Removes `key`; succeeds when it is already absent.
    fn delete<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<(), PublishError>>;
    /// Makes sure only laneway can change `key` (where the centre has access control); true
    /// when something had to change. Called after a read showed the right content.
    fn protect<'a>(&'a self, _key: &'a str) -> BoxFuture<'a, Result<bool, PublishError>> {
        Box::pin(async { Ok(false) })
    }
    /// How long after a write a read may still answer what the key held before it. Within
    /// that time laneway trusts its own write over a read: reading `A` back just after
    /// writing `B` must not make it skip writing `A` again.
    fn settle(&self) -> Duration {
        Duration::ZERO
    }
}

/// A document to publish: a Dubbo tag-router rule or an entry document.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Wanted {
    pub content: String,
    /// Lowercase hex SHA-256 of `content`.
    pub content_hash: String,
}

impl From<&DubboRule> for Wanted {
    fn from(rule: &DubboRule) -> Self {
        Wanted {
            content: rule.content.clone(),
            content_hash: rule.content_hash.clone(),
        }
    }
}

impl From<&EntryRules> for Wanted {
    fn from(rules: &EntryRules) -> Self {
        Wanted {
            content: rules.content.clone(),
            content_hash: rules.content_hash.clone(),
        }
    }
}

impl From<&MessageRules> for Wanted {
    fn from(rules: &MessageRules) -> Self {
        Wanted {
            content: rules.content.clone(),
            content_hash: rules.content_hash.clone(),
        }
    }
}

impl Wanted {
    /// What `key` holds while it is retired: a tag-router rule switched off, an entry document
    /// that draws nothing, or a message ownership document in which baseline owns everything.
    fn retired(key: &str) -> Self {
        if let Some(name) = key.strip_suffix(ENTRY_SUFFIX) {
            Wanted::from(&EntryRules::disabled(name))
        } else if let Some(name) = key.strip_suffix(MESSAGES_SUFFIX) {
            Wanted::from(&MessageRules::disabled(name))
        } else {
            Wanted::from(&DubboRule::disabled(
                key.strip_suffix(".tag-router").unwrap_or(key),
            ))
        }
    }
}

/// What every centre should hold.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RuleSet {
    pub rules: BTreeMap<String, Wanted>,
    /// Keys laneway published (or whose TagRule is being deleted) that no rule wants any
    /// more: each centre retires them (disabled first, deleted after the grace period) and
    /// reports them removed once it holds nothing under them.
    pub retire: BTreeSet<String>,
    /// Keys the in-cluster ConfigMap keeps (disabled) while another centre still holds them:
    /// the ConfigMap is the record of what laneway owns, so it lets go last.
    pub hold: BTreeSet<String>,
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
    /// The centre holds nothing under `key` (checked by reading it back).
    Removed { centre: &'static str, key: String },
}

/// How centres are retried, read back and rules retired.
#[derive(Clone, Copy, Debug)]
pub struct Timing {
    /// How long a removed rule stays published as `enabled: false` before it is deleted
    /// (running dubbo-go consumers do not see deletions).
    pub grace: Duration,
    /// Longest wait between retries of a failing centre: short, so that a centre that comes
    /// back gets the current rules within about a second (a retry is one connection attempt).
    pub max_backoff: Duration,
    /// How often every key is read back and repaired, whatever else is changing.
    pub audit: Duration,
}

impl Default for Timing {
    fn default() -> Self {
        Timing {
            grace: Duration::from_secs(30),
            max_backoff: Duration::from_secs(1),
            audit: Duration::from_secs(60),
        }
    }
}

/// Longest wait for a centre to answer a read.
const READ_TIMEOUT: Duration = Duration::from_secs(3);

/// What every centre's task shares: the fence its writes go through, its timing, the metrics.
pub struct Publisher {
    pub fence: Fence,
    pub timing: Timing,
    pub metrics: Arc<Metrics>,
}

impl Publisher {
    /// Starts one task per centre; each follows `wanted` and reports on `outcomes`.
    pub fn spawn(
        self,
        centres: Vec<Arc<dyn ConfigCentre>>,
        wanted: watch::Receiver<RuleSet>,
        outcomes: mpsc::UnboundedSender<Outcome>,
    ) -> Vec<tokio::task::JoinHandle<()>> {
        centres
            .into_iter()
            .map(|centre| {
                self.metrics.centre(centre.name());
                drop(self.metrics.repairs.get_or_create(&crate::metrics::CentreLabels {
                    centre: centre.name(),
                }));
                let worker = Worker {
                    centre,
                    fence: self.fence.clone(),
                    outcomes: outcomes.clone(),
                    timing: self.timing,
                    metrics: self.metrics.clone(),
                    published: BTreeMap::new(),
                    retiring: BTreeMap::new(),
                    removed: BTreeSet::new(),
                    refused: BTreeMap::new(),
                    written: BTreeMap::new(),
                    failures: 0,
                };
                tokio::spawn(worker.run(wanted.clone()))
            })
            .collect()
    }
}

struct Worker {
    centre: Arc<dyn ConfigCentre>,
    fence: Fence,
    outcomes: mpsc::UnboundedSender<Outcome>,
    timing: Timing,
    metrics: Arc<Metrics>,
    /// Hash of what this centre holds, per key, as last written or read.
    published: BTreeMap<String, String>,
    /// Keys published as disabled, and when.
    retiring: BTreeMap<String, Instant>,
    /// Keys this worker found or made empty, so that they are not retired again.
    removed: BTreeSet<String>,
    /// Content (hash) the centre refused, per key: not sent again until it changes.
    refused: BTreeMap<String, String>,
    /// What this worker last wrote under each key (`None`: deleted), and when, for a centre
    /// whose reads trail its writes; trusted over a read for [`ConfigCentre::settle`].
    written: BTreeMap<String, (Option<String>, Instant)>,
    failures: u32,
}

impl Worker {
    async fn run(mut self, mut wanted: watch::Receiver<RuleSet>) {
        let mut leading = self.fence.subscribe();
        let mut audit_at = Instant::now();
        loop {
            let set = wanted.borrow_and_update().clone();
            let mut next = audit_at;
            if set.leading && self.fence.is_open() {
                let audit = Instant::now() >= audit_at;
                if audit {
                    // Read every key back, whatever else is changing: edits made behind
                    // laneway's back are undone within one period.
                    audit_at = Instant::now() + self.timing.audit;
                    next = audit_at;
                }
                let ok = self.sync(&set, audit).await;
                let recovered = ok && self.failures > 0;
                self.failures = if ok { 0 } else { self.failures + 1 };
                if recovered && !audit {
                    // A centre that failed may have come back without what it held (a lost
                    // volume, a restore): read every key back now, not at the next audit.
                    audit_at = Instant::now();
                    next = audit_at;
                }
                if !ok {
                    let backoff = Duration::from_millis(250u64.saturating_mul(1 << self.failures.min(10)));
                    next = next.min(Instant::now() + backoff.min(self.timing.max_backoff));
                }
                if let Some(since) = self.retiring.values().min() {
                    next = next.min(*since + self.timing.grace);
                }
            } else {
                // A replica that does not lead forgets what it knew: the next leader reads.
                self.published.clear();
                self.retiring.clear();
                self.removed.clear();
                self.refused.clear();
                self.written.clear();
                audit_at = Instant::now();
                next = Instant::now() + self.timing.audit;
            }
            tokio::select! {
                changed = wanted.changed() => if changed.is_err() { return },
                _ = leading.changed() => {}
                _ = tokio::time::sleep_until(next) => {}
            }
        }
    }

    /// One pass over every key; false if anything failed.
    async fn sync(&mut self, set: &RuleSet, audit: bool) -> bool {
        let mut ok = true;
        for (key, w) in &set.rules {
            self.retiring.remove(key);
            self.removed.remove(key);
            let hash = Some(&w.content_hash);
            if !audit && (self.published.get(key) == hash || self.refused.get(key) == hash) {
                continue;
            }
            ok &= self.ensure(key, &w.content, &w.content_hash).await;
        }
        let stale: BTreeSet<String> = self
            .published
            .keys()
            .chain(set.retire.iter())
            .filter(|k| !set.rules.contains_key(*k) && !self.removed.contains(*k))
            .cloned()
            .collect();
        let hold = self.centre.name() == configmap::NAME;
        for key in stale {
            ok &= self.retire(&key, hold && set.hold.contains(&key)).await;
        }
        ok
    }

    /// Makes the centre hold `content` under `key`, writing only when it holds something else.
    async fn ensure(&mut self, key: &str, content: &str, hash: &str) -> bool {
        let name = self.centre.name();
        let started = std::time::Instant::now();
        let result = match self.holds(key).await {
            Ok(Some(current)) if current == content => match self.fence.write(self.centre.protect(key)).await
            {
                Ok(changed) => {
                    if changed {
                        self.repaired(key, "access control");
                    }
                    Ok(false)
                }
                Err(e) => Err(e),
            },
            Ok(_) => {
                // What laneway last wrote here was changed or removed by someone else.
                if self.published.get(key).map(String::as_str) == Some(hash) {
                    self.repaired(key, "content");
                }
                let written = self.fence.write(self.centre.put(key, content)).await;
                if written.is_ok() {
                    self.wrote(key, Some(content));
                }
                written.map(|_| true)
            }
            Err(e) => Err(Fenced::Failed(e)),
        };
        match result {
            Ok(wrote) => {
                self.refused.remove(key);
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
            Err(Fenced::Failed(e)) if e.refused => {
                self.refused.insert(key.to_owned(), hash.to_owned());
                self.failed(key, Fenced::Failed(e));
                true
            }
            Err(e) => {
                self.failed(key, e);
                false
            }
        }
    }

    /// Remembers a write for the centre's settle time; a centre whose reads never trail its
    /// writes needs no copy.
    fn wrote(&mut self, key: &str, content: Option<&str>) {
        if !self.centre.settle().is_zero() {
            let content = content.map(str::to_owned);
            self.written.insert(key.to_owned(), (content, Instant::now()));
        }
    }

    /// What the centre holds under `key`: what this worker wrote there, if that was less than
    /// the centre's settle time ago, else a read.
    async fn holds(&self, key: &str) -> Result<Option<String>, PublishError> {
        match self.written.get(key) {
            Some((content, at)) if at.elapsed() < self.centre.settle() => Ok(content.clone()),
            _ => self.read(key).await,
        }
    }

    /// What the centre holds under `key`, waiting at most [`READ_TIMEOUT`].
    async fn read(&self, key: &str) -> Result<Option<String>, PublishError> {
        match tokio::time::timeout(READ_TIMEOUT, self.centre.get(key)).await {
            Ok(result) => result,
            Err(_) => Err(PublishError::redacted(
                self.centre.name(),
                format!("no answer within {READ_TIMEOUT:?}"),
                &[],
            )),
        }
    }

    /// The centre holds nothing under `key` (just read back).
    fn gone(&mut self, key: &str) {
        self.removed.insert(key.to_owned());
        self.published.remove(key);
        self.retiring.remove(key);
        let _ = self.outcomes.send(Outcome::Removed {
            centre: self.centre.name(),
            key: key.to_owned(),
        });
    }

    fn repaired(&self, key: &str, what: &str) {
        let centre = self.centre.name();
        warn!(
            centre,
            key, what, "the centre was changed behind laneway's back; repairing"
        );
        self.metrics
            .repairs
            .get_or_create(&crate::metrics::CentreLabels { centre })
            .inc();
    }

    fn failed(&self, key: &str, e: Fenced<PublishError>) {
        let name = self.centre.name();
        let error = match e {
            Fenced::NotLeader => return,
            Fenced::TimedOut(d) => format!("no answer within {d:?}"),
            Fenced::Failed(e) => e.message,
        };
        self.metrics.publish(name, "error", Duration::ZERO);
        warn!(
            centre = name,
            key, error, "publish failed; the centre keeps its last rule"
        );
        let _ = self.outcomes.send(Outcome::Failed {
            centre: name,
            key: key.to_owned(),
            error,
        });
    }

    /// Publishes the disabled rule, deletes the key once the grace period has passed, and
    /// reports the key removed once the centre holds nothing under it. With `hold`, the
    /// disabled rule stays until another centre has let go.
    async fn retire(&mut self, key: &str, hold: bool) -> bool {
        let name = self.centre.name();
        let disabled = Wanted::retired(key);
        let current = match self.holds(key).await {
            Ok(current) => current,
            Err(e) => {
                self.failed(key, Fenced::Failed(e));
                return false;
            }
        };
        let Some(current) = current else {
            self.gone(key);
            return true;
        };
        if current != disabled.content {
            if !self.ensure(key, &disabled.content, &disabled.content_hash).await {
                return false;
            }
            self.retiring.insert(key.to_owned(), Instant::now());
            return true;
        }
        let since = *self.retiring.entry(key.to_owned()).or_insert_with(Instant::now);
        if hold || since.elapsed() < self.timing.grace {
            return true;
        }
        match self.fence.write(self.centre.delete(key)).await {
            Ok(()) => {
                info!(centre = name, key, "deleted");
                self.metrics.publish(name, "deleted", Duration::ZERO);
                self.wrote(key, None);
                match self.holds(key).await {
                    Ok(None) => {
                        self.gone(key);
                        true
                    }
                    Ok(Some(_)) => false,
                    Err(e) => {
                        self.failed(key, Fenced::Failed(e));
                        false
                    }
                }
            }
            Err(e) => {
                self.failed(key, e);
                false
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_retired_key_holds_what_draws_or_routes_nothing() {
        let entry = Wanted::retired("order-service.laneway-entry");
        assert_eq!(
            entry.content,
            "{\n  \"key\": \"order-service\",\n  \"lanes\": []\n}\n"
        );
        let rule = Wanted::retired("order-service.tag-router");
        assert_eq!(rule.content, DubboRule::disabled("order-service").content);
        assert_eq!(
            rule.content_hash,
            DubboRule::disabled("order-service").content_hash
        );
        let messages = Wanted::retired("order-service.laneway-messages");
        assert_eq!(
            messages.content,
            "{\n  \"key\": \"order-service\",\n  \"epochs\": [\n    {\n      \"from\": 0,\n      \"owners\": {}\n    }\n  ]\n}\n"
        );
    }

    #[test]
    fn secrets_never_survive_redaction() {
        let text =
            "error sending request to http://nacos:8848/x?accessToken=tok123 (user admin, password hunter2)";
        let clean = redact(text, &["tok123", "hunter2", ""]);
        assert!(!clean.contains("tok123") && !clean.contains("hunter2"), "{clean}");
        assert!(clean.contains("[redacted]"));
    }
}
