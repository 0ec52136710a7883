use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Status of a condition, as in `metav1.Condition`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum ConditionStatus {
    True,
    False,
    #[default]
    Unknown,
}

impl ConditionStatus {
    /// The status another API's condition gives as a string (a Gateway's `Accepted`);
    /// anything but `True` or `False` is `Unknown`, as `metav1.Condition` allows no other.
    pub fn from_api(status: &str) -> Self {
        match status {
            "True" => ConditionStatus::True,
            "False" => ConditionStatus::False,
            _ => ConditionStatus::Unknown,
        }
    }
}

/// The conditions laneway sets on its objects.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum ConditionType {
    /// Everything the spec asks for is in place.
    Ready,
    /// A LaneRoute's lane falls back to another lane or baseline at some service.
    FallbackActive,
    /// Something is wrong that laneway works around.
    Degraded,
    /// Still working toward the spec (kstatus and Argo CD: in progress).
    Reconciling,
    /// Only the user can resolve what holds the object up.
    Stalled,
    /// A LaneEntry lets requests into the lane.
    Routed,
}

impl ConditionType {
    /// The name the condition has in the API (`Ready`).
    pub fn as_str(self) -> &'static str {
        match self {
            ConditionType::Ready => "Ready",
            ConditionType::FallbackActive => "FallbackActive",
            ConditionType::Degraded => "Degraded",
            ConditionType::Reconciling => "Reconciling",
            ConditionType::Stalled => "Stalled",
            ConditionType::Routed => "Routed",
        }
    }
}

/// A standard Kubernetes condition (`metav1.Condition`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    /// Type of the condition.
    #[serde(rename = "type")]
    pub type_: ConditionType,
    /// Whether the condition holds: `True`, `False` or `Unknown`.
    pub status: ConditionStatus,
    /// Machine-readable reason in CamelCase.
    pub reason: String,
    /// Human-readable explanation, naming the field or object at fault.
    #[serde(default)]
    pub message: String,
    /// When the status last changed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<Time>,
    /// The `metadata.generation` this condition was computed from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

macro_rules! reasons {
    ($($(#[$doc:meta])* $reason:ident),* $(,)?) => {
        /// Every reason laneway gives in a condition or an Event: the API spells each as its
        /// variant's name.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub enum Reason {
            $($(#[$doc])* $reason),*
        }

        impl Reason {
            pub const ALL: &'static [Reason] = &[$(Reason::$reason),*];

            /// The reason as the API carries it (`EmptySubset`).
            pub fn as_str(self) -> &'static str {
                match self {
                    $(Reason::$reason => stringify!($reason)),*
                }
            }
        }
    };
}

reasons! {
    // Ready, Reconciling and Stalled when all is well.
    /// Everything the spec names is resolved.
    Resolved,
    /// Nothing is under way.
    Reconciled,
    /// Nothing only the user can fix holds the object up.
    Progressing,
    /// No problem to report.
    NoProblems,
    // Under way.
    /// A write of the object's outputs failed and is being retried.
    Retrying,
    /// A Service the object names does not exist yet.
    WaitingForService,
    /// A TagRule's rule is not yet in every config centre.
    Publishing,
    /// The Gateway API CRDs are not installed yet.
    WaitingForGatewayAPI,
    /// No gateway controller has reported on the routes yet.
    WaitingForGateway,
    // LaneRoutes.
    /// The status lists only the first of the lane's services: all of them would not fit.
    StatusTruncated,
    /// Every service of the lane is served by the lane itself.
    AllInLane,
    /// Some service of the lane is served by a fallback lane or baseline.
    FallingBack,
    /// A service has no ready instance in the lane, its fallbacks or baseline.
    EmptySubset,
    /// The lane's ttl has passed.
    Expired,
    /// No LaneEntry lets requests into the lane.
    NoLaneEntry,
    /// A LaneEntry lets requests into the lane.
    Routed,
    // LaneEntries.
    /// The Gateway API CRDs are not installed.
    GatewayAPIMissing,
    /// A gateway refused a route.
    NotAccepted,
    /// The routes are written and no controller reports on them.
    Written,
    /// Every gateway accepted the routes.
    Accepted,
    /// A gateway cannot set headers from a backendRef's filters.
    BackendFiltersUnsupported,
    // Problems with the user's objects.
    UnknownService,
    ServiceWithoutSelector,
    NameTaken,
    FallbackCycle,
    DuplicateLane,
    InvalidSelector,
    ConflictingTags,
    UnresolvedTargetPort,
    DubboPortMissing,
    DuplicateApplication,
    NacosPortMissing,
    DuplicateNacosService,
    NacosNotConfigured,
    WriteRejected,
    InvalidBackend,
    InvalidMatch,
    LaneHeaderInMatch,
    DuplicateLaneMatch,
    PreviewHostname,
    HostnameConflict,
    GuardWithSelector,
    InvalidGuard,
    /// The weights of an entry's lanes add up to more than 100.
    WeightsOver100,
    /// Every ready pod of a Service that requests in no lane are sent to is in a lane.
    BaselineEmpty,
    // Events only.
    /// An output was deleted and created again because a field that cannot change changed.
    Recreated,
    /// The API server refused to write an object's status.
    StatusRejected,
    /// A LaneRoute, TagRule or LaneEntry cannot be read (deserialized).
    Unreadable,
    /// An output changed by hand was written back as laneway wants it.
    Repaired,
}

/// A reason as the API spells it, so that what is read back compares with what is written.
impl PartialEq<&str> for Reason {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl std::fmt::Display for Reason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Condition {
    pub fn new(type_: ConditionType, status: bool, reason: Reason, message: impl Into<String>) -> Self {
        Condition {
            type_,
            status: if status {
                ConditionStatus::True
            } else {
                ConditionStatus::False
            },
            reason: reason.as_str().to_owned(),
            message: message.into(),
            last_transition_time: None,
            observed_generation: None,
        }
    }
}
