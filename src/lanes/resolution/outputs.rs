//! The resolved outputs of a namespace as those who route to them read them: each object with
//! its content hash, and where a request in a lane (or in none) goes at each Service.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Service;

use super::chains::{LanePlan, RouteReport};
use crate::lanes::naming;

/// An output with the hash of its content, taken once when it is computed: comparing what
/// exists with what should costs no serialization for outputs that did not change.
#[derive(Clone, Debug, PartialEq)]
pub struct Hashed<T> {
    /// Shared with the writes under way, so that a plan holds no copy of what it applies.
    pub object: std::sync::Arc<T>,
    pub hash: String,
}

impl<T: serde::Serialize> Hashed<T> {
    pub fn new(object: T) -> Self {
        let hash = naming::content_hash(&object);
        Hashed {
            object: std::sync::Arc::new(object),
            hash,
        }
    }
}

impl<T> std::ops::Deref for Hashed<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.object
    }
}

/// The lane Services of a namespace as resolved from `plan`: the Services laneway writes and
/// what each LaneRoute amounts to at each service.
#[derive(Clone, Copy)]
pub struct Served<'a> {
    pub plan: &'a LanePlan,
    pub services: &'a BTreeMap<String, Hashed<Service>>,
    pub routes: &'a BTreeMap<String, RouteReport>,
}

impl Served<'_> {
    /// Where a request in `lane` (or in none) goes at `service`: the Service that serves the
    /// first lane of [lane, its fallbacks] that includes the service, else the baseline Service
    /// (a guarded Service is its own); `None` when that Service is not produced (its name is
    /// taken by someone else's Service).
    pub fn served_by(&self, service: &str, lane: Option<&str>) -> Option<String> {
        let plan = self.plan;
        let tried = lane
            .into_iter()
            .flat_map(|l| std::iter::once(l).chain(plan.chain(l).iter().map(String::as_str)));
        for l in tried {
            let status = plan
                .lanes
                .get(l)
                .and_then(|d| self.routes.get(&d.route.name))
                .and_then(|r| r.entry(service));
            if let Some(by) = status.and_then(|s| s.served_by.clone()) {
                return Some(by);
            }
        }
        let baseline = plan.baseline_of(service);
        (plan.guarded.contains(service) || self.services.contains_key(&baseline)).then_some(baseline)
    }
}
