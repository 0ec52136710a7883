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
use crate::lanes::{ObjectKey, TagRules};
use crate::publish::{ConfigMapCentre, Outcome, RuleSet, Wanted};

/// Annotation on a TagRule that lets it go without waiting for every config centre to remove
/// its rule (for a centre that is gone for good).
pub const SKIP_CLEANUP_ANNOTATION: &str = "laneway.io/skip-centre-cleanup";

pub(super) struct Publishing {
    pub configmap: Arc<ConfigMapCentre>,
    pub centres: Vec<&'static str>,
    pub wanted: watch::Sender<RuleSet>,
    pub outcomes: mpsc::UnboundedReceiver<Outcome>,
    /// The latest state of each key in each centre.
    publications: BTreeMap<(String, &'static str), Publication>,
    /// Centres that hold nothing under each key.
    removed: BTreeMap<String, BTreeSet<&'static str>>,
    /// Keys found in the ConfigMap when this replica started leading; `None` until read.
    pub owned: Option<BTreeSet<String>>,
    pub reading_owned: bool,
    /// After a failed read, when to try again.
    pub read_not_before: Option<tokio::time::Instant>,
}

/// The Dubbo rule key a TagRule publishes, if any.
pub(super) fn rule_key(rule: &TagRule) -> Option<String> {
    rule.spec
        .dubbo
        .as_ref()
        .map(|d| format!("{}.tag-router", d.application))
}

impl Publishing {
    pub fn new(
        configmap: Arc<ConfigMapCentre>,
        centres: Vec<&'static str>,
        wanted: watch::Sender<RuleSet>,
        outcomes: mpsc::UnboundedReceiver<Outcome>,
    ) -> Self {
        Publishing {
            configmap,
            centres,
            wanted,
            outcomes,
            publications: BTreeMap::new(),
            removed: BTreeMap::new(),
            owned: None,
            reading_owned: false,
            read_not_before: None,
        }
    }

    /// Stops publishing; the next leader reads everything again.
    pub fn stand_down(&mut self) {
        self.owned = None;
        self.reading_owned = false;
        self.wanted.send_modify(|w| w.leading = false);
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

    /// Hands the rules every centre should hold to the centre tasks. `deleting` are the keys
    /// of TagRules being deleted. Does nothing until the owned keys are known.
    pub fn publish(&mut self, rules: &TagRules, deleting: &BTreeSet<String>) {
        let Some(owned) = &self.owned else { return };
        let mut set = RuleSet {
            leading: true,
            ..Default::default()
        };
        for report in rules.reports.values() {
            if let Some(rule) = &report.dubbo {
                set.rules.insert(rule.key.clone(), Wanted { rule: rule.clone() });
            }
        }
        set.retire = owned
            .iter()
            .chain(deleting)
            .chain(self.publications.keys().map(|(k, _)| k))
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
    }

    /// A TagRule being deleted may go: its rule is gone from every centre, another TagRule
    /// publishes the same application now, it never published one, or the user said to skip.
    pub fn may_release(&self, rule: &TagRule, key: &ObjectKey, rules: &TagRules) -> bool {
        let skip = rule
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(SKIP_CLEANUP_ANNOTATION))
            .is_some_and(|v| v == "true");
        let Some(dubbo) = rule_key(rule) else { return true };
        let taken_over = rules
            .reports
            .iter()
            .any(|(owner, r)| owner != key && r.dubbo.as_ref().is_some_and(|d| d.key == dubbo));
        skip || taken_over || self.removed_everywhere(&dubbo)
    }
}
