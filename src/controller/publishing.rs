//! What the controller knows of the config centres: the rule set it hands to the centre tasks,
//! what each centre reported, and whether a deleted TagRule's rule is gone from all of them.
//!
//! Nothing here lives only in memory that a new leader would need: the keys laneway owns are
//! the keys of the in-cluster ConfigMap (which lets go of a key last), and the key of a TagRule
//! being deleted comes from its spec, which the API server keeps while the finalizer holds it.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use tokio::sync::{mpsc, watch};

use crate::api::{Publication, TagRule};
use k8s_openapi::jiff::Timestamp;

use crate::lanes::{
    entry_key, messages_key, Epoch, MarkTarget, MessageRules, ObjectKey, TagRules, MESSAGES_SUFFIX,
};
use crate::leader::Fence;
use crate::metrics::Metrics;
use crate::publish::marks::{self, MarkSet, MarkTiming, Registry, MARKS};
use crate::publish::{ConfigCentre, ConfigMapCentre, Outcome, Publisher, RuleSet, Timing, Wanted};

/// The config centres Dubbo rules go to.
pub struct Centres {
    /// The in-cluster ConfigMap, always on; it also records which keys laneway owns.
    pub configmap: Arc<ConfigMapCentre>,
    /// Every centre, the ConfigMap included.
    pub all: Vec<Arc<dyn ConfigCentre>>,
    pub timing: Timing,
    /// Where instances are marked with their lanes (Nacos naming), when configured.
    pub registry: Option<Arc<dyn Registry>>,
    pub mark_timing: MarkTiming,
}

/// Annotation on a TagRule that lets it go without waiting for every config centre to remove
/// its rule (for a centre that is gone for good).
pub const SKIP_CLEANUP_ANNOTATION: &str = "laneway.io/skip-centre-cleanup";

pub(super) struct Publishing {
    pub configmap: Arc<ConfigMapCentre>,
    pub centres: Vec<&'static str>,
    pub wanted: watch::Sender<RuleSet>,
    /// The Nacos instance marks, when a Nacos server is configured.
    pub marks: Option<watch::Sender<MarkSet>>,
    /// Every Nacos service this replica marked, so that one no TagRule marks any more is
    /// cleared.
    marked: BTreeMap<String, MarkTarget>,
    pub outcomes: mpsc::UnboundedReceiver<Outcome>,
    /// The latest state of each key in each centre.
    publications: BTreeMap<(String, &'static str), Publication>,
    /// Centres that hold nothing under each key.
    removed: BTreeMap<String, BTreeSet<&'static str>>,
    /// Keys found in the ConfigMap when this replica started leading; `None` until read.
    pub owned: Option<BTreeSet<String>>,
    /// The history of each message ownership document, as last handed to the centres (first
    /// as the ConfigMap held it), so that a change never rewrites what consumers decided.
    histories: BTreeMap<String, Vec<Epoch>>,
    pub reading_owned: bool,
    /// After a failed read, when to try again.
    pub read_not_before: Option<tokio::time::Instant>,
}

/// The keys a TagRule may publish to the config centres: its Dubbo rule's, and the entry
/// documents (and, with `messages`, the message ownership documents) of its Dubbo application
/// and its Nacos service.
pub(super) fn rule_keys(rule: &TagRule) -> BTreeSet<String> {
    let dubbo = rule.spec.dubbo.as_ref().map(|d| d.application.as_str());
    let nacos = rule.spec.nacos.as_ref().map(|n| n.service.as_str());
    let names = || dubbo.into_iter().chain(nacos);
    let messages = names().filter(|_| rule.spec.messages).map(messages_key);
    dubbo
        .map(|a| format!("{a}.tag-router"))
        .into_iter()
        .chain(names().map(entry_key))
        .chain(messages)
        .collect()
}

/// The Nacos service a TagRule marks, if any.
pub(super) fn mark_target(rule: &TagRule) -> Option<MarkTarget> {
    rule.spec.nacos.as_ref().map(MarkTarget::new)
}

/// Every key a TagRule's outputs go under: its centre documents' and its Nacos service's.
pub(super) fn output_keys(rule: &TagRule) -> impl Iterator<Item = String> {
    rule_keys(rule)
        .into_iter()
        .chain(mark_target(rule).map(|t| t.key()))
}

impl Publishing {
    /// Starts one task per centre, and the marking task when a registry is configured, all
    /// writing through `fence`.
    pub fn start(centres: Centres, fence: &Fence, metrics: &Arc<Metrics>) -> Self {
        let (wanted, wanted_rx) = watch::channel(RuleSet::default());
        let (outcomes_tx, outcomes) = mpsc::unbounded_channel();
        let names = centres.all.iter().map(|c| c.name()).collect();
        let marks = centres.registry.map(|registry| {
            let timing = centres.mark_timing;
            marks::spawn(
                registry,
                fence.clone(),
                timing,
                metrics.clone(),
                outcomes_tx.clone(),
            )
        });
        let publisher = Publisher {
            fence: fence.clone(),
            timing: centres.timing,
            metrics: metrics.clone(),
        };
        publisher.spawn(centres.all, wanted_rx, outcomes_tx);
        Publishing::new(centres.configmap, names, wanted, marks, outcomes)
    }

    pub fn new(
        configmap: Arc<ConfigMapCentre>,
        centres: Vec<&'static str>,
        wanted: watch::Sender<RuleSet>,
        marks: Option<watch::Sender<MarkSet>>,
        outcomes: mpsc::UnboundedReceiver<Outcome>,
    ) -> Self {
        Publishing {
            configmap,
            centres,
            wanted,
            marks,
            marked: BTreeMap::new(),
            outcomes,
            publications: BTreeMap::new(),
            removed: BTreeMap::new(),
            owned: None,
            histories: BTreeMap::new(),
            reading_owned: false,
            read_not_before: None,
        }
    }

    /// What the ConfigMap held when this replica started leading: the keys laneway owns, and
    /// the histories of the message ownership documents.
    pub fn owned_from(&mut self, published: BTreeMap<String, String>) {
        self.histories = published
            .iter()
            .filter(|(k, _)| k.ends_with(MESSAGES_SUFFIX))
            .filter_map(|(k, content)| Some((k.clone(), MessageRules::parse(content)?)))
            .collect();
        self.owned = Some(published.into_keys().collect());
    }

    /// Stops publishing; the next leader reads everything again.
    pub fn stand_down(&mut self) {
        self.owned = None;
        self.histories.clear();
        self.reading_owned = false;
        self.wanted.send_modify(|w| w.leading = false);
        if let Some(marks) = &self.marks {
            marks.send_modify(|m| m.leading = false);
        }
        self.marked.clear();
    }

    /// Notes what a centre did; returns the key it concerns if anything changed.
    pub fn record(&mut self, outcome: Outcome) -> Option<String> {
        match outcome {
            Outcome::Published {
                centre,
                key,
                hash,
                at,
            } => {
                if let Some(r) = self.removed.get_mut(&key) {
                    r.remove(centre);
                }
                let entry = self.entry(&key, centre);
                let fresh =
                    entry.content_hash.as_deref() != Some(hash.as_str()) || entry.last_error.is_some();
                if fresh {
                    entry.content_hash = Some(hash);
                    entry.published_at = Some(at.to_string());
                    entry.last_error = None;
                }
                fresh.then_some(key)
            }
            Outcome::Failed { centre, key, error } => {
                let entry = self.entry(&key, centre);
                let fresh = entry.last_error.as_deref() != Some(error.as_str());
                entry.last_error = Some(error);
                fresh.then_some(key)
            }
            Outcome::Removed { centre, key } => {
                if centre == MARKS {
                    self.marked.remove(&key);
                }
                self.publications.remove(&(key.clone(), centre));
                self.removed.entry(key.clone()).or_default().insert(centre);
                Some(key)
            }
        }
    }

    fn entry(&mut self, key: &str, centre: &'static str) -> &mut Publication {
        self.publications
            .entry((key.to_owned(), centre))
            .or_insert_with(|| Publication {
                centre: centre.to_owned(),
                key: key.to_owned(),
                ..Default::default()
            })
    }

    /// What each centre holds of `key`.
    pub fn publications(&self, key: &str) -> Vec<Publication> {
        self.publications
            .iter()
            .filter(|((k, _), _)| k == key)
            .map(|(_, p)| p.clone())
            .collect()
    }

    /// Every centre holds nothing under `key`.
    pub fn removed_everywhere(&self, key: &str) -> bool {
        let removed = self.removed.get(key);
        self.centres
            .iter()
            .all(|c| removed.is_some_and(|r| r.contains(c)))
    }

    /// No instance of the Nacos service `key` carries laneway's marks (or nothing marks).
    fn unmarked(&self, key: &str) -> bool {
        self.marks.is_none() || self.removed.get(key).is_some_and(|r| r.contains(MARKS))
    }

    /// Hands the marks every Nacos service should carry to the marking task. `deleting` are
    /// the services of TagRules being deleted.
    fn publish_marks(&mut self, rules: &TagRules, deleting: Vec<MarkTarget>) {
        let Some(sender) = &self.marks else { return };
        let mut set = MarkSet {
            leading: true,
            ..Default::default()
        };
        for marks in rules.reports.values().filter_map(|r| r.nacos.as_ref()) {
            set.services.insert(marks.target.key(), marks.clone());
        }
        for target in deleting {
            self.marked.insert(target.key(), target);
        }
        for (key, target) in &self.marked {
            if !set.services.contains_key(key) {
                set.retire.insert(key.clone(), target.clone());
            }
        }
        for (key, marks) in &set.services {
            self.marked.insert(key.clone(), marks.target.clone());
        }
        sender.send_if_modified(|current| {
            let changed = *current != set;
            *current = set;
            changed
        });
    }

    /// The message ownership documents of `rules` at `now`, each following the history last
    /// handed out under its key; the histories are kept for the next call.
    fn message_rules(&mut self, rules: &TagRules, now: Timestamp) -> Vec<MessageRules> {
        let mut histories = BTreeMap::new();
        let mut out = Vec::new();
        for owners in rules.reports.values().flat_map(|r| &r.messages) {
            let key = messages_key(&owners.name);
            if histories.contains_key(&key) {
                continue;
            }
            let previous = self.histories.get(&key).map(Vec::as_slice);
            if let Some(next) = MessageRules::next(previous, owners, now) {
                histories.insert(key, next.epochs.clone());
                out.push(next);
            }
        }
        self.histories = histories;
        out
    }

    /// Hands the rules every centre should hold to the centre tasks, and the marks to the
    /// marking task. `deleting` are the TagRules being deleted. Does nothing until the owned
    /// keys are known.
    pub fn publish<'a>(
        &mut self,
        rules: &TagRules,
        deleting: impl Iterator<Item = &'a TagRule> + Clone,
        now: Timestamp,
    ) {
        if self.owned.is_none() {
            return;
        }
        let messages = self.message_rules(rules, now);
        let Some(owned) = &self.owned else { return };
        let deleting_keys: BTreeSet<String> = deleting.clone().flat_map(rule_keys).collect();
        let mut set = RuleSet {
            leading: true,
            ..Default::default()
        };
        for report in rules.reports.values() {
            if let Some(rule) = &report.dubbo {
                set.rules.insert(rule.key.clone(), Wanted::from(rule));
            }
            for entry in &report.entries {
                set.rules
                    .entry(entry.key.clone())
                    .or_insert_with(|| Wanted::from(entry));
            }
        }
        for rules in &messages {
            set.rules.insert(rules.key.clone(), Wanted::from(rules));
        }
        set.retire = owned
            .iter()
            .chain(&deleting_keys)
            .chain(
                self.publications
                    .iter()
                    .filter(|(_, p)| p.centre != MARKS)
                    .map(|((k, _), _)| k),
            )
            .filter(|k| !set.rules.contains_key(*k))
            .cloned()
            .collect();
        let others: Vec<&&str> = self.centres.iter().filter(|c| **c != "configmap").collect();
        set.hold = set
            .retire
            .iter()
            .filter(|k| {
                let removed = self.removed.get(*k);
                !others.iter().all(|c| removed.is_some_and(|r| r.contains(**c)))
            })
            .cloned()
            .collect();
        self.wanted.send_if_modified(|current| {
            let changed = *current != set;
            *current = set;
            changed
        });
        self.publish_marks(rules, deleting.filter_map(mark_target).collect());
    }

    /// A TagRule being deleted may go once each of its outputs is gone (its Dubbo rule and
    /// entry documents from every centre, its marks from every instance) or taken over by another TagRule, or when
    /// the user said to skip.
    pub fn may_release(&self, rule: &TagRule, key: &ObjectKey, rules: &TagRules) -> bool {
        let skip = rule
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(SKIP_CLEANUP_ANNOTATION))
            .is_some_and(|v| v == "true");
        let others = || {
            rules
                .reports
                .iter()
                .filter(|(owner, _)| *owner != key)
                .map(|(_, r)| r)
        };
        let dubbo = rule_keys(rule).iter().all(|k| {
            others().any(|r| {
                r.dubbo.as_ref().is_some_and(|d| d.key == *k)
                    || r.entries.iter().any(|e| e.key == *k)
                    || r.messages.iter().any(|m| messages_key(&m.name) == *k)
            }) || self.removed_everywhere(k)
        });
        let marks = mark_target(rule).is_none_or(|target| {
            let service = target.key();
            others().any(|r| r.nacos.as_ref().is_some_and(|n| n.target.key() == service))
                || self.unmarked(&service)
        });
        skip || (dubbo && marks)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lanes::{MessageOwners, Owners, TagRuleReport, MESSAGE_GRACE_MS};

    fn publishing() -> (Publishing, watch::Receiver<RuleSet>) {
        let client = kube::Client::try_from(kube::Config::new("http://127.0.0.1:9".parse().expect("url")))
            .expect("client");
        let configmap = Arc::new(ConfigMapCentre::new(client, "laneway", "rules"));
        let (wanted, rx) = watch::channel(RuleSet::default());
        let publishing = Publishing::new(
            configmap,
            vec!["configmap"],
            wanted,
            None,
            mpsc::unbounded_channel().1,
        );
        (publishing, rx)
    }

    fn consumers_of(tier: &str) -> TagRules {
        let owners: Owners = [(tier.to_owned(), [tier.to_owned()].into())].into();
        let report = TagRuleReport {
            messages: vec![MessageOwners {
                name: "order-service".into(),
                owners,
            }],
            ..Default::default()
        };
        TagRules {
            reports: [(ObjectKey::new("shop", "order"), report)].into(),
            problems: Vec::new(),
        }
    }

    fn epochs(rx: &watch::Receiver<RuleSet>) -> Vec<Epoch> {
        let set = rx.borrow();
        let wanted = &set.rules["order-service.laneway-messages"];
        MessageRules::parse(&wanted.content).expect("a message ownership document")
    }

    #[tokio::test]
    async fn a_new_leader_continues_the_history_the_configmap_holds() {
        let (mut publishing, rx) = publishing();
        let at = |ms| Timestamp::from_millisecond(ms).expect("in range");
        let earlier = MessageRules::next(
            None,
            &consumers_of("dev-alice").reports[&ObjectKey::new("shop", "order")].messages[0],
            at(1_000_000),
        )
        .expect("published");
        publishing.owned_from([(earlier.key.clone(), earlier.content.clone())].into());
        // same owners a minute later: the switch decided before is kept as it was
        publishing.publish(&consumers_of("dev-alice"), std::iter::empty(), at(1_060_000));
        assert_eq!(epochs(&rx), earlier.epochs);
        // the owners change: appended after the grace, the past untouched
        publishing.publish(&consumers_of("gray"), std::iter::empty(), at(1_120_000));
        let now = epochs(&rx);
        assert_eq!(now[..2], earlier.epochs[..]);
        assert_eq!(now[2].from, 1_120_000 + MESSAGE_GRACE_MS);
        // a TagRule that stops asking: the key is retired
        publishing.publish(&TagRules::default(), std::iter::empty(), at(1_180_000));
        assert!(rx.borrow().retire.contains("order-service.laneway-messages"));
    }
}
