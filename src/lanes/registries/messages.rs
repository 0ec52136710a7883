//! Message ownership: which tier's consumers handle the messages of each lane, per consumer
//! application, so that every message is handled once, by the tier that owns it.
//!
//! Lane T's consumers own the messages of lane T and of the lanes that fall back to T (a lane
//! whose consumers are not ready falls back, as its requests do); baseline owns untagged
//! messages and those of every lane without consumers of its own in its chain. Messages are
//! never parked: a strict lane without consumers is owned by baseline.
//!
//! Every tier's consumers read every message and decide it by its born time against the same
//! history of ownership: a change takes effect for messages born at or after the time laneway
//! decided it plus [`MESSAGE_GRACE_MS`], so consumers that learn of it a little late still
//! agree on every message. A superseded epoch is dropped once its successor has been in effect
//! for [`MESSAGE_RETAIN_MS`].

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::jiff::Timestamp;
use serde::{Deserialize, Serialize};

use super::governed::RuleInputs;
use crate::lanes::naming;
use crate::lanes::resolution::LanePlan;

/// What follows the application (or Nacos service) name in a message ownership document's key.
pub const MESSAGES_SUFFIX: &str = ".laneway-messages";

/// How long after laneway decides an ownership change it takes effect (milliseconds): the time
/// a document has to reach every consumer, and the clock skew between producers and laneway.
pub const MESSAGE_GRACE_MS: i64 = 5_000;

/// How long a superseded epoch is kept after its successor took effect (milliseconds): a
/// consumer lagging further behind decides older messages by the oldest epoch kept.
pub const MESSAGE_RETAIN_MS: i64 = 600_000;

/// Which lanes' messages each tier's consumers handle, by tier (a lane). Baseline is never
/// listed: it owns untagged messages and every lane no tier lists.
pub type Owners = BTreeMap<String, BTreeSet<String>>;

/// The ownership in effect for messages born at or after `from`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Epoch {
    /// Milliseconds since the Unix epoch.
    pub from: i64,
    pub owners: Owners,
}

/// What consumers handled before any document: baseline owned every message.
fn initial() -> Epoch {
    Epoch {
        from: 0,
        owners: Owners::new(),
    }
}

/// The current ownership of one application's messages (no history yet).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MessageOwners {
    /// The Dubbo application or Nacos service the document is named after.
    pub name: String,
    pub owners: Owners,
}

/// The rendered message ownership document of one application.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MessageRules {
    /// `<application>.laneway-messages`: the ZooKeeper node name, Nacos dataId and ConfigMap key.
    pub key: String,
    pub epochs: Vec<Epoch>,
    /// The JSON document.
    pub content: String,
    /// Lowercase hex SHA-256 of `content`.
    pub content_hash: String,
}

#[derive(Serialize)]
struct Document<'a> {
    key: &'a str,
    epochs: &'a [Epoch],
}

#[derive(Deserialize)]
struct Parsed {
    epochs: Vec<Epoch>,
}

impl MessageRules {
    fn new(name: &str, epochs: Vec<Epoch>) -> Self {
        let document = Document {
            key: name,
            epochs: &epochs,
        };
        let content = serde_json::to_string_pretty(&document)
            .expect("a document of strings and integers always serialises")
            + "\n";
        MessageRules {
            key: messages_key(name),
            content_hash: naming::digest(&[&content]),
            content,
            epochs,
        }
    }

    /// The document that follows `previous` (the one published last, if any) when `current`
    /// owns the messages at `now`: the history kept, with a new epoch from `now` plus the grace
    /// when the owners changed. `None` when nothing but baseline has owned anything for the
    /// retention time: the key is then retired.
    pub fn next(previous: Option<&[Epoch]>, current: &MessageOwners, now: Timestamp) -> Option<Self> {
        let now = now.as_millisecond();
        let mut epochs = previous
            .filter(|p| !p.is_empty())
            .map_or_else(|| vec![initial()], <[Epoch]>::to_vec);
        let last = epochs.last().expect("never empty");
        if last.owners != current.owners {
            let from = (now + MESSAGE_GRACE_MS).max(last.from + 1);
            epochs.push(Epoch {
                from,
                owners: current.owners.clone(),
            });
        }
        while epochs.len() > 1 && epochs[1].from <= now - MESSAGE_RETAIN_MS {
            epochs.remove(0);
        }
        let idle = epochs.len() == 1 && epochs[0].owners.is_empty();
        (!idle).then(|| MessageRules::new(&current.name, epochs))
    }

    /// The epochs of a published document, if it is one.
    pub fn parse(content: &str) -> Option<Vec<Epoch>> {
        serde_json::from_str::<Parsed>(content).ok().map(|p| p.epochs)
    }

    /// The document in which baseline owns every message, published before the key is deleted.
    pub fn disabled(name: &str) -> Self {
        MessageRules::new(name, vec![initial()])
    }
}

/// The key of `name`'s message ownership document.
pub fn messages_key(name: &str) -> String {
    format!("{name}{MESSAGES_SUFFIX}")
}

/// Which tier owns each lane's messages at the rule's pods: the lane itself where a ready pod
/// carries it, else the first lane of its fallback chain that one carries, else baseline.
pub(super) fn message_owners(rule: &RuleInputs, plan: &LanePlan) -> Owners {
    let ready: Vec<_> = rule
        .governed
        .iter()
        .copied()
        .filter(|p| p.info.is_ready())
        .collect();
    let tiers: BTreeSet<&str> = ready
        .iter()
        .flat_map(|p| p.tags.iter().map(|(t, _)| t.as_str()))
        .collect();
    let mut owners = Owners::new();
    for lane in rule.lanes(plan, ready.iter().copied()) {
        let tier = std::iter::once(lane)
            .chain(plan.chain(lane).iter().map(String::as_str))
            .find(|t| tiers.contains(t));
        if let Some(tier) = tier {
            owners.entry(tier.to_owned()).or_default().insert(lane.to_owned());
        }
    }
    owners
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owners(pairs: &[(&str, &[&str])]) -> MessageOwners {
        MessageOwners {
            name: "order-service".into(),
            owners: pairs
                .iter()
                .map(|(t, lanes)| (t.to_string(), lanes.iter().map(|l| l.to_string()).collect()))
                .collect(),
        }
    }

    fn at(ms: i64) -> Timestamp {
        Timestamp::from_millisecond(ms).expect("in range")
    }

    #[test]
    fn renders_the_history_of_owners() {
        let alice = owners(&[("dev-alice", &["dev-alice", "dev-carol"])]);
        let rules = MessageRules::next(None, &alice, at(1_000_000)).expect("published");
        assert_eq!(rules.key, "order-service.laneway-messages");
        assert_eq!(
            rules.content,
            r#"{
  "key": "order-service",
  "epochs": [
    {
      "from": 0,
      "owners": {}
    },
    {
      "from": 1005000,
      "owners": {
        "dev-alice": [
          "dev-alice",
          "dev-carol"
        ]
      }
    }
  ]
}
"#
        );
        assert_eq!(MessageRules::parse(&rules.content), Some(rules.epochs));
        assert_eq!(MessageRules::parse("tags: []"), None);
    }

    #[test]
    fn unchanged_owners_keep_the_document_byte_for_byte() {
        let alice = owners(&[("dev-alice", &["dev-alice"])]);
        let first = MessageRules::next(None, &alice, at(1_000_000)).expect("published");
        let again = MessageRules::next(Some(&first.epochs), &alice, at(1_060_000)).expect("published");
        assert_eq!(again, first);
    }

    #[test]
    fn a_change_takes_effect_after_the_grace_and_never_rewrites_the_past() {
        let alice = owners(&[("dev-alice", &["dev-alice"])]);
        let first = MessageRules::next(None, &alice, at(1_000_000)).expect("published");
        // relabelled out before the first switch took effect: appended, never replacing it
        let gone = MessageRules::next(Some(&first.epochs), &owners(&[]), at(1_001_000)).expect("kept");
        let froms: Vec<i64> = gone.epochs.iter().map(|e| e.from).collect();
        assert_eq!(froms, [0, 1_005_000, 1_006_000]);
        assert_eq!(gone.epochs[..2], first.epochs[..]);
        // back again within the same millisecond of effect: still strictly later
        let back = MessageRules::next(Some(&gone.epochs), &alice, at(1_000_500)).expect("kept");
        assert_eq!(back.epochs.last().map(|e| e.from), Some(1_006_001));
    }

    #[test]
    fn superseded_epochs_are_dropped_after_the_retention_and_an_idle_history_is_retired() {
        let alice = owners(&[("dev-alice", &["dev-alice"])]);
        let first = MessageRules::next(None, &alice, at(1_000_000)).expect("published");
        let gone = MessageRules::next(Some(&first.epochs), &owners(&[]), at(2_000_000)).expect("kept");
        assert_eq!(gone.epochs.len(), 2, "the first switch is past the retention");
        assert_eq!(gone.epochs[0].from, 1_005_000);
        let later = 2_005_000 + MESSAGE_RETAIN_MS;
        assert_eq!(
            MessageRules::next(Some(&gone.epochs), &owners(&[]), at(later)),
            None
        );
        assert_eq!(MessageRules::next(None, &owners(&[]), at(later)), None);
        assert_eq!(
            MessageRules::parse(&MessageRules::disabled("pay").content),
            Some(vec![initial()])
        );
    }
}
