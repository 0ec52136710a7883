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

impl Condition {
    pub fn new(type_: ConditionType, status: bool, reason: &str, message: impl Into<String>) -> Self {
        Condition {
            type_,
            status: if status {
                ConditionStatus::True
            } else {
                ConditionStatus::False
            },
            reason: reason.to_owned(),
            message: message.into(),
            last_transition_time: None,
            observed_generation: None,
        }
    }
}
