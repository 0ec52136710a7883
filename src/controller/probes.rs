//! Finding the lanes the API server refuses in a LaneEntry's routes. When it refuses one of an
//! entry's routes, the entry's routes are tried in a dry run (nothing is written) with each of
//! its lanes alone and with none: a lane refused alone is left out of the entry's routes and
//! reported, so that every other lane's routes are written; unless the routes are refused with
//! no lane at all (the entry itself is at fault). A lane left out is tried again the same way
//! with back-off, and at once when what its routes would be changes.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::jiff::Timestamp;
use tokio::time::Instant;

use super::schedule::Retries;
use crate::lanes::{naming, Desired, Index, ObjectKey};
use crate::writer::{Op, Step, WriteError};

/// (LaneEntry, lane) to the API server's message: the lanes left out of the entries' routes.
pub(super) type LeftOut = BTreeMap<(String, String), String>;

/// What is being found out about one namespace's refused routes.
#[derive(Debug, Default)]
pub(super) struct Probes {
    /// Entries whose refused route the next plan looks into.
    due: BTreeSet<String>,
    /// The content of each route looked into: refused again as it was, it is not looked into
    /// again.
    looked_into: BTreeMap<String, Option<String>>,
    /// When each lane left out is tried again.
    retries: Retries<(String, String)>,
}

/// What one dry run found: the LaneEntry, the lane tried alone (`None`: no lane), and whether
/// the API server would take the routes.
pub(super) type Tried = (String, Option<String>, Result<(), WriteError>);

impl Probes {
    /// The API server refused `route` of `entry`, with content `hash`.
    pub(super) fn refused(&mut self, entry: &str, route: &str, hash: Option<String>) {
        if self.looked_into.get(route) != Some(&hash) {
            self.looked_into.insert(route.to_owned(), hash);
            self.due.insert(entry.to_owned());
        }
    }

    /// Forgets the routes `refused` says are no longer refused.
    pub(super) fn retain_routes(&mut self, refused: impl Fn(&str) -> bool) {
        self.looked_into.retain(|route, _| refused(route));
    }

    /// The dry runs of the next plan: each lane, and no lane, of the entries whose route was
    /// refused; and the lanes left out whose back-off has passed or whose routes changed.
    pub(super) fn steps(&mut self, index: &Index, ns: &str, desired: &Desired, now: Instant) -> Vec<Step> {
        let mut tries: Vec<(String, Option<String>)> = Vec::new();
        for entry in std::mem::take(&mut self.due) {
            let lanes = desired.routes.values().filter(|r| r.entries.contains(&entry));
            let lanes: Vec<Option<String>> = lanes.map(|r| Some(r.lane.clone())).collect();
            tries.extend(std::iter::once(None).chain(lanes).map(|l| (entry.clone(), l)));
        }
        for (entry, lane) in index.left_out(ns).into_keys() {
            let hash = routes_hash(index, ns, desired, (&entry, &lane));
            if !self
                .retries
                .waits(&(entry.clone(), lane.clone()), Some(&hash), now)
            {
                tries.push((entry, Some(lane)));
            }
        }
        tries
            .into_iter()
            .map(|(entry, lane)| {
                let routes = desired.probe_routes(index, (ns, Timestamp::now()), &entry, lane.as_deref());
                Step::from(Op::Probe {
                    entry: ObjectKey::new(ns, &entry),
                    lane,
                    routes,
                })
            })
            .collect()
    }

    /// When the first lane left out is due to be tried again.
    pub(super) fn next_due(&self, now: Instant) -> Option<Instant> {
        self.retries.next_due(now)
    }

    /// What the dry runs found, applied to the lanes left out: a lane refused alone is left
    /// out, one taken alone comes back, and none of an entry refused with no lane is left out.
    pub(super) fn tried(
        &mut self,
        tried: Vec<Tried>,
        now: Instant,
        hashes: impl Fn(&str, &str) -> String,
        left_out: &mut LeftOut,
    ) {
        let mut entry_at_fault = BTreeSet::new();
        for (entry, lane, result) in tried {
            if result.as_ref().is_err_and(WriteError::is_transient) {
                // Found out nothing: looked into again with the next plan.
                self.due.insert(entry);
                continue;
            }
            let Some(lane) = lane else {
                if result.is_err() {
                    entry_at_fault.insert(entry);
                }
                continue;
            };
            let key = (entry, lane);
            match result {
                Ok(()) => {
                    left_out.remove(&key);
                    self.retries.succeeded(&key);
                }
                Err(e) => {
                    left_out.insert(key.clone(), e.to_string());
                    let hash = hashes(&key.0, &key.1);
                    self.retries.failed(key, Some(hash), now, e.retry_after());
                }
            }
        }
        left_out.retain(|(entry, _), _| !entry_at_fault.contains(entry));
        self.retries.retain(now, |key| left_out.contains_key(key));
    }
}

/// The content of the routes LaneEntry `entry` would have with `lane` alone.
pub(super) fn routes_hash(index: &Index, ns: &str, desired: &Desired, (entry, lane): (&str, &str)) -> String {
    let routes = desired.probe_routes(index, (ns, Timestamp::now()), entry, Some(lane));
    let hashes: Vec<String> = routes.iter().map(naming::content_hash).collect();
    hashes.join(",")
}

#[cfg(test)]
#[path = "probes_tests.rs"]
mod tests;
