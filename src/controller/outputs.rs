//! What laneway wants of each output and what became of its writes: the owners an output
//! names, the problems of writes the API server refused, and which failures still matter.

use std::collections::BTreeMap;

use kube::{Resource, ResourceExt};

use super::plan::{Live, LiveObjects};
use crate::lanes::{naming, Desired, Kind, ObjectKey, Problem};
use crate::writer::{Target, WriteError};

/// The LaneRoutes and LaneEntries that own an object, from its owner references.
pub(super) fn owners<K: Resource>(obj: &K) -> Vec<(Kind, String)> {
    obj.owner_references()
        .iter()
        .filter_map(|o| match Kind::of_api(&o.api_version, &o.kind)? {
            kind @ (Kind::LaneRoute | Kind::LaneEntry) => Some((kind, o.name.clone())),
            _ => None,
        })
        .collect()
}

/// Problems caused by writes the API server refused (not worth retrying as they are).
pub(super) fn rejected(ns: &str, desired: &Desired, failed: &BTreeMap<Target, WriteError>) -> Vec<Problem> {
    failed
        .iter()
        .filter(|(_, e)| !e.is_transient())
        .filter_map(|(target, e)| {
            let owners = output_owners(desired, target)?;
            Some(Problem::WriteRejected {
                owners: owners
                    .into_iter()
                    .map(|(kind, name)| (kind, ObjectKey::new(ns, &name)))
                    .collect(),
                object: target.to_string(),
                message: e.to_string(),
            })
        })
        .collect()
}

pub(super) fn output_owners(desired: &Desired, target: &Target) -> Option<Vec<(Kind, String)>> {
    match target.kind {
        Kind::Service => desired.services.get(&target.key.name).map(|s| owners(&*s.object)),
        Kind::EndpointSlice => desired.slices.get(&target.key.name).map(|s| owners(&*s.object)),
        Kind::HttpRoute => desired.http_routes.get(&target.key.name).map(owners),
        // Not an output: nothing laneway wants of that kind.
        _ => None,
    }
}

/// Forgets failures of outputs that need no write any more: applied since (by this replica or
/// seen applied), or neither wanted nor present.
pub(super) fn prune_failed(failed: &mut BTreeMap<Target, WriteError>, desired: &Desired, live: &LiveObjects) {
    failed.retain(
        |target, _| match (desired_hash(desired, target), live.get(target)) {
            (Some(hash), Some(Live { hash: Some(live), .. })) => hash != *live,
            (Some(_), _) => true,
            (None, present) => present.is_some(),
        },
    );
}

/// Desired content of an output.
fn desired_hash(desired: &Desired, target: &Target) -> Option<String> {
    match target.kind {
        Kind::Service => desired.services.get(&target.key.name).map(|s| s.hash.clone()),
        Kind::EndpointSlice => desired.slices.get(&target.key.name).map(|s| s.hash.clone()),
        Kind::HttpRoute => desired
            .http_routes
            .get(&target.key.name)
            .map(naming::content_hash),
        _ => None,
    }
}
