//! The pure core: from snapshots of pods, Services, TagRules and LaneRoutes to the desired
//! lane Services, EndpointSlices, Dubbo rules and statuses. No client, no clock, no I/O.
//!
//! Dependencies point one way, so that each concern reads on its own: `labels`, `naming` and
//! `problem` depend on no other part, `model` on `labels` alone; the `index` the shell feeds on
//! those;
//! `resolution` reads the index; `entries` and `registries` build on resolution, never on each
//! other; `desired` gathers resolution and entries into what a namespace should hold.

mod desired;
mod drift;
mod entries;
mod index;
mod labels;
mod model;
pub mod naming;
mod problem;
mod registries;
mod resolution;

pub use desired::Desired;
pub use drift::Content;
pub use entries::EntryReport;
pub use index::{Affected, ClusterIp, Config, Index, Indexed, TagSource};
pub use labels::{
    BASELINE, ENTRY_LABEL, FOR_LANE_LABEL, FOR_SERVICE_LABEL, GUARD_ANNOTATION, LANES_KEY, MANAGED_BY_LABEL,
    MANAGED_BY_VALUE, ROLE_LABEL, SERVICE_NAME_LABEL, SLICE_MANAGED_BY_LABEL, SLICE_MANAGER,
    TRIGGER_TIME_ANNOTATION,
};
pub use model::{
    owned_by_laneway, slice_owned_by_laneway, ContainerPortInfo, Guard, ParentKey, ParentVerdict, PodInfo,
    RouteInfo, ServiceInfo,
};
pub use problem::{Kind, ObjectKey, Problem};
pub use registries::{
    entry_key, messages_key, tag_rules, DubboRule, EntryLane, EntryRules, Epoch, InstanceAddr, MarkTarget,
    Marks, MessageOwners, MessageRules, NacosMarks, Owners, TagRuleReport, TagRules, ENTRY_SUFFIX,
    MESSAGES_SUFFIX, MESSAGE_GRACE_MS, MESSAGE_RETAIN_MS, NOT_READY_TAG,
};
pub use resolution::{
    expiry, explain, lane_plan, service_output, Explanation, Hashed, LaneDef, LanePlan, Owner, RouteReport,
    ServiceOutput, Stamp, Tier, MAX_ENDPOINTS_PER_SLICE,
};

use std::collections::BTreeSet;

use k8s_openapi::jiff::Timestamp;

/// The resolver's entry points as methods of the index, as the shell calls them.
impl Index {
    /// Everything laneway wants in `namespace` at time `now`.
    pub fn desired(&self, namespace: &str, now: Timestamp) -> Desired {
        desired::desired(self, namespace, now)
    }

    /// Brings `desired` (an earlier result of [`Index::desired`] for `namespace`) up to date
    /// after changes that touched only `services` (pods, not LaneRoutes, LaneEntries or
    /// Services), recomputing nothing else. The result is what `desired` would return now.
    pub fn refresh(
        &self,
        desired: &mut Desired,
        namespace: &str,
        services: &BTreeSet<String>,
        now: Timestamp,
    ) {
        desired::refresh(self, desired, namespace, services, now)
    }

    /// Status and Dubbo rule of every TagRule at time `now`: [`tag_rules`].
    pub fn tag_rules(&self, now: Timestamp) -> TagRules {
        registries::tag_rules(self, now)
    }
}
