//! The pure core: from snapshots of pods, Services, TagRules and LaneRoutes to the desired
//! lane Services, EndpointSlices, Dubbo rules and statuses. No client, no clock, no I/O.

mod dubbo;
mod entry;
mod explain;
mod guard;
mod index;
mod links;
mod marks;
mod model;
pub mod naming;
mod plan;
mod problem;
mod resolve;
mod route_parts;
mod routes;
mod service_output;
mod slices;

pub use dubbo::{DubboRule, TagRuleReport, TagRules, NOT_READY_TAG};
pub use entry::{EntryReport, ENTRY_LABEL};
pub use explain::{Explanation, Tier};
pub use guard::{Guard, GUARD_ANNOTATION};
pub use index::{Affected, ClusterIp, Config, Index, Indexed, TagSource};
pub use marks::{InstanceAddr, MarkTarget, Marks, NacosMarks, BASELINE, LANES_KEY};
pub use model::{
    owned_by_laneway, slice_owned_by_laneway, ContainerPortInfo, ParentKey, ParentVerdict, PodInfo,
    RouteInfo, ServiceInfo, MANAGED_BY_LABEL, MANAGED_BY_VALUE,
};
pub use plan::{expiry, LaneDef, LanePlan, Owner, RouteReport, Stamp};
pub use problem::{Kind, ObjectKey, Problem};
pub use resolve::{
    Desired, Hashed, ServiceOutput, FOR_LANE_LABEL, FOR_SERVICE_LABEL, LIFETIME_LABEL, LIFETIME_LANE,
    MAX_ENDPOINTS_PER_SLICE, ROLE_LABEL, SERVICE_NAME_LABEL, SLICE_MANAGED_BY_LABEL, SLICE_MANAGER,
    TRIGGER_TIME_ANNOTATION,
};

use crate::api::{LaneRoute, TagRule};

impl Index {
    /// An index holding every object given, in any order.
    pub fn from_objects(
        config: Config,
        pods: impl IntoIterator<Item = PodInfo>,
        services: impl IntoIterator<Item = ServiceInfo>,
        routes: impl IntoIterator<Item = LaneRoute>,
        rules: impl IntoIterator<Item = TagRule>,
    ) -> Index {
        let mut index = Index::new(config);
        for rule in rules {
            index.apply(rule);
        }
        for svc in services {
            index.apply(svc);
        }
        for route in routes {
            index.apply(route);
        }
        for pod in pods {
            index.insert_pod(pod);
        }
        index
    }
}
