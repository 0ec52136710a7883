//! What a namespace's plan reads, cut by who reads it: the namespace as it is ([`Snapshot`]),
//! what the controller knows beyond it ([`Outside`]), the route grace and the clocks. What
//! the status steps rest on besides is theirs ([`StatusContext`](super::StatusContext)).

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::jiff::Timestamp;
use tokio::time::Instant;

use super::super::gateways::Gateways;
use super::super::publishing::Publishing;
use super::super::schedule::Retries;
use super::outputs::LiveObjects;
use crate::api::TagRule;
use crate::lanes::{Desired, Index, ObjectKey, TagRules};
use crate::writer::{OwnKind, Target, WriteError};

/// The namespace as the plan finds it: what it should hold, what it holds, and what the
/// watches know of its objects.
#[derive(Clone, Copy)]
pub(crate) struct Snapshot<'a> {
    pub ns: &'a str,
    pub desired: &'a Desired,
    pub live: &'a LiveObjects,
    pub index: &'a Index,
    /// The last failed write of each output.
    pub failed: &'a BTreeMap<Target, WriteError>,
    /// When each output whose write failed is tried again.
    pub retries: &'a Retries<Target>,
    /// LaneRoutes and TagRules of this namespace being deleted, waiting for their finalizer.
    pub deleting: &'a BTreeMap<(OwnKind, ObjectKey), Option<TagRule>>,
    /// When laneway saw the earliest pod change of each user Service that this plan carries
    /// out, for the slices' trigger-time annotation.
    pub triggers: &'a BTreeMap<String, Timestamp>,
}

/// What the controller knows beyond the namespace, read only: every TagRule's rule and what
/// the config centres reported of it, and the gateways.
#[derive(Clone, Copy)]
pub(crate) struct Outside<'a> {
    pub rules: &'a TagRules,
    pub publishing: &'a Publishing,
    pub gateways: &'a Gateways,
}

impl Outside<'_> {
    /// The API server serves HTTPRoutes: laneway's routes may be written and deleted.
    pub fn routes_served(&self) -> bool {
        self.gateways.api == Some(true)
    }
}

/// Services laneway's routes stopped naming, kept until `hold_until` so that no gateway is left
/// with a route to a Service that is gone.
#[derive(Clone, Copy)]
pub(crate) struct RouteGrace<'a> {
    pub released: &'a BTreeSet<String>,
    pub hold_until: Option<Instant>,
}

/// The plan's two clocks: the monotonic one for waits, the wall clock for times it writes.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Clock {
    pub instant: Instant,
    pub now: Timestamp,
}
