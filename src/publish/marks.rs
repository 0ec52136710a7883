//! Marking Nacos instances with the lanes they serve: one task that follows the wanted marks,
//! reads each service's instances back (an instance that registers again comes back with only
//! its own metadata), and writes, through the lease fence, only the keys that differ.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use k8s_openapi::jiff::Timestamp;
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;
use tracing::{info, warn};

use super::{Outcome, PublishError};
use crate::lanes::{InstanceAddr, MarkTarget, NacosMarks, LANES_KEY};
use crate::leader::{Fence, Fenced};
use crate::metrics::Metrics;

/// The centre name marks are reported under, in status, logs and metrics.
pub const MARKS: &str = "nacos-naming";

/// An instance registered in Nacos.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Instance {
    pub ip: String,
    pub port: u16,
    pub cluster: String,
    pub metadata: BTreeMap<String, String>,
}

/// Where instances are registered: Nacos naming.
pub trait Registry: Send + Sync {
    /// The instances of a service (none when the service does not exist).
    fn instances<'a>(&'a self, target: &'a MarkTarget) -> BoxFuture<'a, Result<Vec<Instance>, PublishError>>;
    /// Sets `metadata` on each of `instances`, leaving their other keys as they are.
    fn set<'a>(
        &'a self,
        target: &'a MarkTarget,
        instances: &'a [Instance],
        metadata: &'a BTreeMap<String, String>,
    ) -> BoxFuture<'a, Result<(), PublishError>>;
    /// Removes `keys` from each of `instances`, leaving their other keys as they are.
    fn remove<'a>(
        &'a self,
        target: &'a MarkTarget,
        instances: &'a [Instance],
        keys: &'a [String],
    ) -> BoxFuture<'a, Result<(), PublishError>>;
}

/// The writes that bring a service's instances to the wanted marks, batched (one per distinct
/// set of values, one per distinct set of keys to remove) and made before they break: first
/// `grow`, where each instance gets the lanes it gains and keeps those it loses, then `set`,
/// then `remove`. A lane that moves from one instance to another is never served by none.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Changes {
    pub grow: BTreeMap<BTreeMap<String, String>, Vec<Instance>>,
    pub set: BTreeMap<BTreeMap<String, String>, Vec<Instance>>,
    pub remove: BTreeMap<Vec<String>, Vec<Instance>>,
    /// Wanted instances that are not registered (yet).
    pub missing: usize,
}

impl Changes {
    pub fn is_empty(&self) -> bool {
        self.grow.is_empty() && self.set.is_empty() && self.remove.is_empty()
    }

    /// Each batch in the order it is written.
    fn batches(&self) -> impl Iterator<Item = Batch<'_>> {
        let sets = self.grow.iter().chain(&self.set).map(|(m, i)| Batch::Set(m, i));
        sets.chain(self.remove.iter().map(|(k, i)| Batch::Remove(k, i)))
    }
}

enum Batch<'a> {
    Set(&'a BTreeMap<String, String>, &'a [Instance]),
    Remove(&'a [String], &'a [Instance]),
}

/// The lanes in a [`LANES_KEY`] value.
fn lane_list(value: &str) -> BTreeSet<&str> {
    value.split(',').filter(|l| !l.is_empty()).collect()
}

/// What to write so that `current` carries `wanted` (`None`: remove laneway's keys from every
/// instance, for a TagRule that is gone). Only `target.keys` are ever written or removed; an
/// instance that no governed pod matches loses laneway's keys, if it has any.
pub fn changes(target: &MarkTarget, wanted: Option<&NacosMarks>, current: &[Instance]) -> Changes {
    let mut out = Changes::default();
    let empty = BTreeMap::new();
    let wanted = wanted.map_or(&empty, |w| &w.instances);
    let mut matched: BTreeSet<&InstanceAddr> = BTreeSet::new();
    for instance in current {
        let marks = wanted
            .iter()
            .find(|(a, _)| a.matches(&instance.ip, instance.port));
        if let Some((addr, _)) = marks {
            matched.insert(addr);
        }
        let mut set = BTreeMap::new();
        let mut remove = Vec::new();
        for key in &target.keys {
            let want = marks.and_then(|(_, m)| m.get(key)).cloned().flatten();
            match (want, instance.metadata.get(key)) {
                (Some(v), Some(have)) if v == *have => {}
                (Some(v), _) => {
                    set.insert(key.clone(), v);
                }
                (None, Some(_)) => remove.push(key.clone()),
                (None, None) => {}
            }
        }
        if !set.is_empty() {
            let have = lane_list(instance.metadata.get(LANES_KEY).map_or("", String::as_str));
            let want = set.get(LANES_KEY).map(|w| lane_list(w));
            match want {
                Some(want) if !have.is_subset(&want) && !want.is_subset(&have) => {
                    let both = have.union(&want).copied().collect::<Vec<_>>().join(",");
                    let grow = BTreeMap::from([(LANES_KEY.to_owned(), both)]);
                    out.grow.entry(grow).or_default().push(instance.clone());
                    out.set.entry(set).or_default().push(instance.clone());
                }
                Some(want) if !have.is_subset(&want) => {
                    out.set.entry(set).or_default().push(instance.clone())
                }
                _ => out.grow.entry(set).or_default().push(instance.clone()),
            }
        }
        if !remove.is_empty() {
            out.remove.entry(remove).or_default().push(instance.clone());
        }
    }
    out.missing = wanted.len() - matched.len();
    out
}

/// The marks every Nacos service should carry.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MarkSet {
    pub services: BTreeMap<String, NacosMarks>,
    /// Services whose TagRule is gone (or marks another service now): laneway's keys come off
    /// all their instances, and the key is reported removed once none carries them.
    pub retire: BTreeMap<String, MarkTarget>,
    /// Only the leader writes.
    pub leading: bool,
}

/// How often marks are read back, and how soon after a change a missing instance is looked
/// for again.
#[derive(Clone, Copy, Debug)]
pub struct MarkTiming {
    /// Every service's instances are read back this often: an instance that registered again
    /// (and so lost laneway's keys) is marked again within this time.
    pub resync: Duration,
    /// Longest wait between retries of a failing server.
    pub max_backoff: Duration,
}

impl Default for MarkTiming {
    fn default() -> Self {
        MarkTiming {
            resync: Duration::from_secs(5),
            max_backoff: Duration::from_secs(1),
        }
    }
}

/// Soonest re-read of a service some of whose wanted instances have not registered yet.
const MISSING_RECHECK: Duration = Duration::from_secs(2);
/// How long after a write Nacos' instance list may still show what the instances held before
/// it (measured against Nacos 3.1: about 0.5 s). Within it, a change of marks is worked out
/// from what laneway wrote rather than from a read.
const SETTLE: Duration = Duration::from_secs(2);

/// `current` once `wanted` is written: laneway's keys as wanted (absent, with no marks or for
/// an instance no governed pod matches), every other key as it was.
fn after(target: &MarkTarget, wanted: Option<&NacosMarks>, current: &[Instance]) -> Vec<Instance> {
    let mut out = current.to_vec();
    for instance in &mut out {
        let marks = wanted.and_then(|w| {
            w.instances
                .iter()
                .find(|(a, _)| a.matches(&instance.ip, instance.port))
                .map(|(_, m)| m)
        });
        for key in &target.keys {
            match marks.and_then(|m| m.get(key)).cloned().flatten() {
                Some(v) => instance.metadata.insert(key.clone(), v),
                None => instance.metadata.remove(key),
            };
        }
    }
    out
}

/// Starts the task that keeps `registry`'s instances marked as the returned sender says.
pub fn spawn(
    registry: Arc<dyn Registry>,
    fence: Fence,
    timing: MarkTiming,
    metrics: Arc<Metrics>,
    outcomes: mpsc::UnboundedSender<Outcome>,
) -> watch::Sender<MarkSet> {
    let (sender, wanted) = watch::channel(MarkSet::default());
    metrics.centre(MARKS);
    let marker = Marker {
        registry,
        fence,
        timing,
        metrics,
        outcomes,
        checked: BTreeMap::new(),
        written: BTreeMap::new(),
        removed: BTreeSet::new(),
        failures: 0,
    };
    tokio::spawn(marker.run(wanted));
    sender
}

struct Marker {
    registry: Arc<dyn Registry>,
    fence: Fence,
    timing: MarkTiming,
    metrics: Arc<Metrics>,
    outcomes: mpsc::UnboundedSender<Outcome>,
    /// Per service: the hash it was last found or made to carry, and when to read it again.
    checked: BTreeMap<String, (String, Instant)>,
    /// Per service: what its instances hold since laneway last wrote there, and when it did.
    written: BTreeMap<String, (Vec<Instance>, Instant)>,
    /// Retired services found carrying none of laneway's keys.
    removed: BTreeSet<String>,
    failures: u32,
}

impl Marker {
    async fn run(mut self, mut wanted: watch::Receiver<MarkSet>) {
        let mut leading = self.fence.subscribe();
        loop {
            let set = wanted.borrow_and_update().clone();
            let mut next = Instant::now() + self.timing.resync;
            if set.leading && self.fence.is_open() {
                let ok = self.sync(&set).await;
                self.failures = if ok { 0 } else { self.failures + 1 };
                if let Some(soonest) = self.checked.values().map(|(_, at)| *at).min() {
                    next = next.min(soonest);
                }
                if !ok {
                    let backoff = Duration::from_millis(250u64.saturating_mul(1 << self.failures.min(10)));
                    next = next.min(Instant::now() + backoff.min(self.timing.max_backoff));
                }
            } else {
                // A replica that does not lead forgets what it knew: the next leader reads.
                self.checked.clear();
                self.written.clear();
                self.removed.clear();
            }
            tokio::select! {
                changed = wanted.changed() => if changed.is_err() { return },
                _ = leading.changed() => {}
                _ = tokio::time::sleep_until(next) => {}
            }
        }
    }

    /// One pass: every service whose marks changed or that is due to be read back; false if
    /// anything failed.
    async fn sync(&mut self, set: &MarkSet) -> bool {
        let now = Instant::now();
        let mut ok = true;
        for (key, marks) in &set.services {
            self.removed.remove(key);
            let (changed, due) = match self.checked.get(key) {
                Some((hash, at)) => (*hash != marks.hash, *at <= now),
                None => (true, true),
            };
            if changed || due {
                ok &= self.mark(key, &marks.target, Some(marks), !due).await;
            }
        }
        self.checked
            .retain(|k, _| set.services.contains_key(k) || set.retire.contains_key(k));
        self.written
            .retain(|k, _| set.services.contains_key(k) || set.retire.contains_key(k));
        for (key, target) in &set.retire {
            if set.services.contains_key(key) || self.removed.contains(key) {
                continue;
            }
            ok &= self.mark(key, target, None, false).await;
        }
        ok
    }

    /// Reads one service's instances and writes what differs; true unless something failed.
    /// With `changed_only` (the marks changed, no read-back is due), what laneway wrote less
    /// than [`SETTLE`] ago stands in for a read, which could still show the state before it.
    async fn mark(
        &mut self,
        key: &str,
        target: &MarkTarget,
        wanted: Option<&NacosMarks>,
        changed_only: bool,
    ) -> bool {
        let started = std::time::Instant::now();
        let recent = self
            .written
            .get(key)
            .filter(|(_, at)| changed_only && at.elapsed() < SETTLE)
            .map(|(held, _)| held.clone());
        let current = match recent {
            Some(held) => held,
            None => match self.registry.instances(target).await {
                Ok(current) => current,
                Err(e) => return self.failed(key, Fenced::Failed(e)),
            },
        };
        let changes = changes(target, wanted, &current);
        let hash = wanted.map(|w| w.hash.clone()).unwrap_or_default();
        if wanted.is_none() && changes.is_empty() {
            self.removed.insert(key.to_owned());
            self.checked.remove(key);
            let _ = self.outcomes.send(Outcome::Removed {
                centre: MARKS,
                key: key.to_owned(),
            });
            return true;
        }
        if !changes.is_empty() {
            if self.checked.get(key).is_some_and(|(h, _)| *h == hash) {
                warn!(
                    centre = MARKS,
                    key, "instances lost laneway's marks (registered again, or edited); repairing"
                );
                self.metrics
                    .repairs
                    .get_or_create(&crate::metrics::CentreLabels { centre: MARKS })
                    .inc();
            }
            if let Err(e) = self.write(target, &changes).await {
                return self.failed(key, e);
            }
            self.written
                .insert(key.to_owned(), (after(target, wanted, &current), Instant::now()));
            self.metrics.publish(MARKS, "ok", started.elapsed());
            let set: usize = changes
                .grow
                .values()
                .chain(changes.set.values())
                .map(Vec::len)
                .sum();
            let removed: usize = changes.remove.values().map(Vec::len).sum();
            info!(centre = MARKS, key, hash = %&hash[..hash.len().min(12)], set, removed, "marked");
        }
        let recheck = if changes.missing > 0 || wanted.is_none() {
            MISSING_RECHECK
        } else {
            self.timing.resync
        };
        self.checked
            .insert(key.to_owned(), (hash.clone(), Instant::now() + recheck));
        if wanted.is_some() {
            let _ = self.outcomes.send(Outcome::Published {
                centre: MARKS,
                key: key.to_owned(),
                hash,
                at: Timestamp::now(),
            });
        }
        true
    }

    async fn write(&self, target: &MarkTarget, changes: &Changes) -> Result<(), Fenced<PublishError>> {
        for batch in changes.batches() {
            let write = match batch {
                Batch::Set(metadata, instances) => self.registry.set(target, instances, metadata),
                Batch::Remove(keys, instances) => self.registry.remove(target, instances, keys),
            };
            self.fence.write(write).await?;
        }
        Ok(())
    }

    fn failed(&mut self, key: &str, e: Fenced<PublishError>) -> bool {
        let error = match e {
            Fenced::NotLeader => return false,
            Fenced::TimedOut(d) => format!("no answer within {d:?}"),
            Fenced::Failed(e) => e.message,
        };
        self.checked.remove(key);
        self.written.remove(key);
        self.metrics.publish(MARKS, "error", Duration::ZERO);
        warn!(
            centre = MARKS,
            key, error, "marking failed; the instances keep their last marks"
        );
        let _ = self.outcomes.send(Outcome::Failed {
            centre: MARKS,
            key: key.to_owned(),
            error,
        });
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lanes::Marks;

    fn target() -> MarkTarget {
        MarkTarget {
            group: "DEFAULT_GROUP".into(),
            service: "order-service".into(),
            keys: vec!["laneway.lanes".into(), "laneway.lane".into()],
        }
    }

    fn instance(ip: &str, metadata: &[(&str, &str)]) -> Instance {
        Instance {
            ip: ip.into(),
            port: 8080,
            cluster: "DEFAULT".into(),
            metadata: metadata
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        }
    }

    fn wanted(marks: &[(&str, &str, Option<&str>)]) -> NacosMarks {
        let instances = marks
            .iter()
            .map(|(ip, lanes, own)| {
                let m = Marks::from([
                    ("laneway.lanes".to_string(), Some(lanes.to_string())),
                    ("laneway.lane".to_string(), own.map(str::to_owned)),
                ]);
                (
                    InstanceAddr {
                        ip: ip.to_string(),
                        port: None,
                    },
                    m,
                )
            })
            .collect();
        NacosMarks {
            target: target(),
            instances,
            hash: "h".into(),
        }
    }

    #[test]
    fn only_differing_keys_are_written_batched_by_value_and_other_keys_are_left_alone() {
        let want = wanted(&[
            ("10.0.0.1", "baseline", None),
            ("10.0.0.2", "baseline", None),
            ("10.0.0.3", "dev-alice", Some("dev-alice")),
            ("10.0.0.9", "baseline", None),
        ]);
        let current = [
            instance("10.0.0.1", &[("app", "v1")]),
            instance("10.0.0.2", &[("laneway.lanes", "gray"), ("laneway.lane", "gray")]),
            instance(
                "10.0.0.3",
                &[("laneway.lanes", "dev-alice"), ("laneway.lane", "dev-alice")],
            ),
            instance("10.0.0.7", &[("laneway.lanes", "baseline"), ("app", "v1")]),
            instance("10.0.0.8", &[("app", "v1")]),
        ];
        let c = changes(&target(), Some(&want), &current);
        let baseline = BTreeMap::from([("laneway.lanes".to_string(), "baseline".to_string())]);
        let ips = |v: &Vec<Instance>| v.iter().map(|i| i.ip.clone()).collect::<Vec<_>>();
        assert_eq!(c.grow.len(), 2);
        assert_eq!(ips(&c.grow[&baseline]), ["10.0.0.1"]);
        let both = BTreeMap::from([("laneway.lanes".to_string(), "baseline,gray".to_string())]);
        assert_eq!(
            ips(&c.grow[&both]),
            ["10.0.0.2"],
            "gray is kept until baseline is there"
        );
        assert_eq!(ips(&c.set[&baseline]), ["10.0.0.2"]);
        let removals: Vec<(Vec<String>, Vec<String>)> =
            c.remove.iter().map(|(k, v)| (k.clone(), ips(v))).collect();
        assert_eq!(
            removals,
            [
                (vec!["laneway.lane".to_string()], vec!["10.0.0.2".to_string()]),
                (vec!["laneway.lanes".to_string()], vec!["10.0.0.7".to_string()]),
            ]
        );
        assert_eq!(c.missing, 1, "10.0.0.9 has not registered");
    }

    #[test]
    fn a_lane_that_moves_is_added_where_it_goes_before_it_is_taken_from_where_it_was() {
        let want = wanted(&[
            ("10.0.0.1", "baseline", None),
            ("10.0.0.2", "baseline,dev-alice", None),
        ]);
        let current = [
            instance(
                "10.0.0.1",
                &[("laneway.lanes", "dev-alice"), ("laneway.lane", "dev-alice")],
            ),
            instance("10.0.0.2", &[("laneway.lanes", "baseline")]),
        ];
        let c = changes(&target(), Some(&want), &current);
        let ips = |i: &[Instance]| i.iter().map(|i| i.ip.as_str()).collect::<Vec<_>>().join(" ");
        let order: Vec<String> = c
            .batches()
            .map(|b| match b {
                Batch::Set(m, i) => format!("{} {m:?}", ips(i)),
                Batch::Remove(k, i) => format!("{} -{k:?}", ips(i)),
            })
            .collect();
        assert_eq!(
            order,
            [
                r#"10.0.0.1 10.0.0.2 {"laneway.lanes": "baseline,dev-alice"}"#,
                r#"10.0.0.1 {"laneway.lanes": "baseline"}"#,
                r#"10.0.0.1 -["laneway.lane"]"#,
            ]
        );
    }

    #[test]
    fn what_a_write_leaves_needs_no_further_change() {
        let want = wanted(&[
            ("10.0.0.1", "baseline", None),
            ("10.0.0.2", "dev-alice", Some("dev-alice")),
        ]);
        let current = [
            instance("10.0.0.1", &[("laneway.lane", "gray"), ("app", "v1")]),
            instance("10.0.0.2", &[("laneway.lanes", "baseline")]),
            instance("10.0.0.3", &[("laneway.lanes", "baseline"), ("app", "v1")]),
        ];
        let held = after(&target(), Some(&want), &current);
        assert!(changes(&target(), Some(&want), &held).is_empty());
        assert_eq!(held[0].metadata["app"], "v1");
        assert_eq!(held[2].metadata.len(), 1, "{:?}", held[2]);
        assert!(changes(&target(), None, &after(&target(), None, &current)).is_empty());
    }

    #[test]
    fn a_gone_rule_takes_only_its_keys_off_and_then_has_nothing_to_do() {
        let current = [
            instance("10.0.0.1", &[("laneway.lanes", "baseline"), ("app", "v1")]),
            instance("10.0.0.2", &[("app", "v1")]),
        ];
        let c = changes(&target(), None, &current);
        assert!(c.set.is_empty());
        assert_eq!(c.remove.len(), 1);
        assert_eq!(c.remove[&vec!["laneway.lanes".to_string()]][0].ip, "10.0.0.1");
        let after = [
            instance("10.0.0.1", &[("app", "v1")]),
            instance("10.0.0.2", &[("app", "v1")]),
        ];
        assert!(changes(&target(), None, &after).is_empty());
    }

    #[test]
    fn a_port_in_the_marks_picks_one_of_the_instances_at_an_ip() {
        let mut want = wanted(&[("10.0.0.1", "baseline", None)]);
        let (addr, m) = want.instances.pop_first().expect("one");
        want.instances.insert(
            InstanceAddr {
                port: Some(9090),
                ..addr
            },
            m,
        );
        let mut other = instance("10.0.0.1", &[]);
        other.port = 9090;
        let c = changes(&target(), Some(&want), &[instance("10.0.0.1", &[]), other]);
        let set: Vec<u16> = c
            .grow
            .values()
            .chain(c.set.values())
            .flatten()
            .map(|i| i.port)
            .collect();
        assert_eq!(set, [9090]);
    }
}
