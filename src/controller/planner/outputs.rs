//! What laneway wants of each output, what exists of it and what became of its writes: the
//! owners an output names, which outputs differ from what exists, the problems of writes the
//! API server refused, and which failures still matter.

use std::collections::{BTreeMap, BTreeSet};

use kube::{Resource, ResourceExt};
use tokio::time::Instant;

use super::input::Snapshot;
use crate::lanes::{Content, Desired, Kind, ObjectKey, Problem, SERVICE_NAME_LABEL};
use crate::writer::{OutputKind, OwnKind, Target, WriteError};

/// The LaneRoutes and LaneEntries that own an object, from its owner references.
pub(crate) fn owners<K: Resource>(obj: &K) -> Vec<(OwnKind, String)> {
    obj.owner_references()
        .iter()
        .filter_map(|o| match Kind::of_api(&o.api_version, &o.kind)? {
            Kind::LaneRoute => Some((OwnKind::LaneRoute, o.name.clone())),
            Kind::LaneEntry => Some((OwnKind::LaneEntry, o.name.clone())),
            _ => None,
        })
        .collect()
}

/// Problems caused by writes the API server refused (not worth retrying as they are).
pub(crate) fn rejected(ns: &str, desired: &Desired, failed: &BTreeMap<Target, WriteError>) -> Vec<Problem> {
    failed
        .iter()
        .filter(|(_, e)| !e.is_transient())
        .filter_map(|(target, e)| {
            let owners = output_owners(desired, target)?;
            Some(Problem::WriteRejected {
                owners: owners
                    .into_iter()
                    .map(|(kind, name)| (kind.into(), ObjectKey::new(ns, &name)))
                    .collect(),
                object: target.to_string(),
                message: e.to_string(),
            })
        })
        .collect()
}

pub(crate) fn output_owners(desired: &Desired, target: &Target) -> Option<Vec<(OwnKind, String)>> {
    match target.kind {
        OutputKind::Service => desired.services.get(&target.key.name).map(|s| owners(&*s.object)),
        OutputKind::EndpointSlice => desired.slices.get(&target.key.name).map(|s| owners(&*s.object)),
        OutputKind::HttpRoute => desired.http_routes.get(&target.key.name).map(owners),
    }
}

/// Forgets failures of outputs that need no write any more: applied since (by this replica or
/// seen applied) and not changed by hand since, or neither wanted nor present.
pub(crate) fn prune_failed(failed: &mut BTreeMap<Target, WriteError>, desired: &Desired, live: &LiveObjects) {
    failed.retain(
        |target, _| match (desired_hash(desired, target), live.get(target)) {
            (Some(hash), Some(live)) => !live.is_as_written(&hash),
            (Some(_), None) => true,
            (None, present) => present.is_some(),
        },
    );
}

/// Desired content of an output.
pub(crate) fn desired_hash(desired: &Desired, target: &Target) -> Option<String> {
    match target.kind {
        OutputKind::Service => desired.services.get(&target.key.name).map(|s| s.hash.clone()),
        OutputKind::EndpointSlice => desired.slices.get(&target.key.name).map(|s| s.hash.clone()),
        OutputKind::HttpRoute => desired
            .http_routes
            .get(&target.key.name)
            .map(Content::content_hash),
    }
}

/// The outputs that exist in one namespace.
pub(crate) type LiveObjects = BTreeMap<Target, Live>;

/// What the watches, or laneway's own last write, show of one of its outputs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Live {
    /// The content hash it was written with.
    pub hash: Option<String>,
    /// Its `resourceVersion`.
    pub version: Option<String>,
    /// A field laneway sets was changed since it was written with `hash` (by hand).
    pub drifted: bool,
    /// A slice laneway did not write, owned by this Service: laneway's only while the Service
    /// is guarded.
    pub guarded_by: Option<String>,
}

impl Live {
    #[cfg(test)]
    pub fn hashed(hash: Option<String>) -> Self {
        Live {
            hash,
            ..Live::default()
        }
    }

    /// Written with `hash`, and unchanged since.
    fn is_as_written(&self, hash: &str) -> bool {
        self.hash.as_deref() == Some(hash) && !self.drifted
    }
}

/// The outputs to apply (missing, applied with another hash or changed by hand since), by
/// kind, those changed by hand, and those nobody wants.
pub(crate) struct Compared<'a> {
    pub(crate) services: Vec<&'a String>,
    pub(crate) slices: Vec<&'a String>,
    /// HTTPRoutes to apply, with their content hash.
    pub(crate) routes: Vec<(&'a String, String)>,
    /// Outputs written with the content laneway wants and changed by hand since.
    pub(crate) repairs: Vec<&'a Target>,
    pub(crate) unwanted: Vec<&'a Target>,
    /// Services that are (or whose slices are) left out by [`Compared::hold_back`]: no route
    /// may name them before they are written.
    pub(crate) waiting: BTreeSet<String>,
}

impl<'a> Compared<'a> {
    pub fn new(desired: &'a Desired, live: &'a LiveObjects) -> Self {
        let mut found = Found::default();
        let service_hashes = desired.services.iter().map(|(n, s)| (n, s.hash.as_str()));
        let services = compare(service_hashes, live, OutputKind::Service, &mut found);
        let slice_hashes = desired.slices.iter().map(|(n, s)| (n, s.hash.as_str()));
        let slices = compare(slice_hashes, live, OutputKind::EndpointSlice, &mut found);
        let route_hashes: BTreeMap<&String, String> = desired
            .http_routes
            .iter()
            .map(|(n, r)| (n, r.content_hash()))
            .collect();
        let routes = compare(
            route_hashes.iter().map(|(n, h)| (*n, h.as_str())),
            live,
            OutputKind::HttpRoute,
            &mut found,
        );
        let routes = routes.into_iter().map(|n| (n, route_hashes[n].clone())).collect();
        Compared {
            services,
            slices,
            routes,
            repairs: found.repairs,
            unwanted: found.unwanted,
            waiting: BTreeSet::new(),
        }
    }

    /// Leaves out the outputs whose last write (or deletion) failed with the content they still
    /// have and whose back-off has not ended at `now`.
    pub fn hold_back(&mut self, space: &Snapshot, now: Instant) {
        let desired = space.desired;
        let waits = |kind, name: &String, hash: &str| {
            let target = Target {
                kind,
                key: ObjectKey::new(space.ns, name),
            };
            space.retries.waits(&target, Some(hash), now)
        };
        let mut waiting = BTreeSet::new();
        self.services.retain(|n| {
            let held = waits(OutputKind::Service, n, &desired.services[*n].hash);
            if held {
                waiting.insert((*n).clone());
            }
            !held
        });
        self.slices.retain(|n| {
            let slice = &desired.slices[*n];
            let held = waits(OutputKind::EndpointSlice, n, &slice.hash);
            if held {
                waiting.extend(slice.labels().get(SERVICE_NAME_LABEL).cloned());
            }
            !held
        });
        self.routes
            .retain(|(n, hash)| !waits(OutputKind::HttpRoute, n, hash));
        self.unwanted.retain(|t| !space.retries.waits(t, None, now));
        self.waiting = waiting;
    }
}

/// Existing outputs that [`compare`] found changed by hand, or wanted by nobody.
#[derive(Default)]
struct Found<'a> {
    repairs: Vec<&'a Target>,
    unwanted: Vec<&'a Target>,
}

/// Walks the wanted outputs of one kind (name and content hash, in name order) beside those
/// that exist (`live` is in kind, then name order): the names to apply (missing, applied with
/// another hash, or changed by hand since), and in `found` the ones changed by hand and the
/// existing ones nobody wants.
fn compare<'a, 'h>(
    wanted: impl Iterator<Item = (&'a String, &'h str)>,
    live: &'a LiveObjects,
    kind: OutputKind,
    found: &mut Found<'a>,
) -> Vec<&'a String> {
    let mut changed = Vec::new();
    let mut existing = live.iter().filter(|(t, _)| t.kind == kind).peekable();
    for (name, hash) in wanted {
        while let Some((t, _)) = existing.next_if(|(t, _)| t.key.name < *name) {
            found.unwanted.push(t);
        }
        match existing.next_if(|(t, _)| t.key.name == *name) {
            Some((_, applied)) if applied.is_as_written(hash) => {}
            Some((t, applied)) if applied.hash.as_deref() == Some(hash) => {
                found.repairs.push(t);
                changed.push(name);
            }
            _ => changed.push(name),
        }
    }
    found.unwanted.extend(existing.map(|(t, _)| t));
    changed
}
