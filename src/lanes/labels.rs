//! Every label, annotation and metadata key (and fixed value) that laneway writes or reads on
//! objects: one place to look up what a key on a cluster object means.

/// Label on every object laneway writes.
pub const MANAGED_BY_LABEL: &str = "app.kubernetes.io/managed-by";
pub const MANAGED_BY_VALUE: &str = "laneway";

/// Label the built-in controllers and kube-proxy use to find a Service's slices.
pub const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";
/// When the change that a slice's last write carried out happened (set by the shell as it
/// writes, outside the content hash), for kube-proxy's network programming latency.
pub const TRIGGER_TIME_ANNOTATION: &str = "endpoints.kubernetes.io/last-change-trigger-time";
/// Label that tells the built-in EndpointSlice controller the slice is not its own (a label
/// value, so it cannot contain a slash).
pub const SLICE_MANAGED_BY_LABEL: &str = "endpointslice.kubernetes.io/managed-by";
pub const SLICE_MANAGER: &str = "controller.laneway.io";

/// Labels on lane and baseline Services.
pub const FOR_SERVICE_LABEL: &str = "laneway.io/service";
pub const ROLE_LABEL: &str = "laneway.io/role";
/// The roles: a lane's Service stays as long as its lane includes the service (without
/// endpoints while the lane has no pods there), so that the lane's pods coming back need no
/// new Service.
pub const ROLE_LANE: &str = "lane";
pub const ROLE_BASELINE: &str = "baseline";
pub const FOR_LANE_LABEL: &str = "laneway.io/for-lane";

/// The annotation that guards a Service: its pod selector, as `key=value` pairs.
pub const GUARD_ANNOTATION: &str = "laneway.io/selector";

/// Label naming the LaneEntry on each of its HTTPRoutes.
pub const ENTRY_LABEL: &str = "laneway.io/entry";

/// The Nacos instance metadata key that lists the lanes an instance serves.
pub const LANES_KEY: &str = "laneway.lanes";
/// What [`LANES_KEY`] lists for the requests in no lane: the lane name the API refuses.
pub const BASELINE: &str = crate::api::BASELINE_LANE;
