use std::fmt;
use std::str::FromStr;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::core::Duration;
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::Condition;

/// A traffic lane through a set of services: which instances serve it, how requests enter
/// it and where it falls back when a service has no instance in the lane.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "laneway.io",
    version = "v1alpha1",
    kind = "LaneRoute",
    doc = "A traffic lane through a set of services, how requests enter it and where it falls back.",
    namespaced,
    status = "LaneRouteStatus",
    derive = "PartialEq",
    shortname = "lr",
    category = "laneway",
    printcolumn(name = "Lane", type_ = "string", json_path = ".status.lane", description = "The lane this route declares"),
    printcolumn(name = "Services", type_ = "integer", json_path = ".status.serviceCount", description = "Services in the lane"),
    printcolumn(name = "Fallback", type_ = "integer", json_path = ".status.fallbackCount", description = "Services served by a fallback lane or baseline"),
    printcolumn(name = "Ready", type_ = "string", json_path = ".status.conditions[?(@.type==\"Ready\")].status", description = "Whether every service of the lane has a subset"),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp"),
    validation = Rule::new("has(self.spec.lane) || (size(self.metadata.name) <= 63 && self.metadata.name.matches('^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$'))").message("metadata.name is not a valid lane name; set spec.lane").field_path(".spec.lane"),
    validation = Rule::new(format!("has(self.spec.lane) || {}", super::not_baseline("self.metadata.name"))).message("metadata.name is the lane's name, and a lane must not be named baseline (the mark of untagged instances); set spec.lane").field_path(".spec.lane"),
    validation = Rule::new("!has(self.spec.fallback) || !self.spec.fallback.exists(f, f == (has(self.spec.lane) ? self.spec.lane : self.metadata.name))").message("spec.fallback must not list the lane itself").field_path(".spec.fallback"),
)]
#[x_kube(validation = Rule::new("has(self.services) != has(self.serviceSelector)").message("exactly one of spec.services and spec.serviceSelector must be set"))]
#[serde(rename_all = "camelCase")]
pub struct LaneRouteSpec {
    /// Name of the lane (the tag its instances carry). Defaults to `metadata.name`. Not
    /// `baseline`, the mark of untagged instances.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 63))]
    #[x_kube(
        validation = Rule::new(super::LANE_NAME_RULE).message(super::LANE_NAME_MESSAGE),
        validation = Rule::new(super::not_baseline("self")).message(super::BASELINE_MESSAGE)
    )]
    pub lane: Option<String>,

    /// Names of the Kubernetes Services (in this namespace) that take part in the lane.
    /// Mutually exclusive with `serviceSelector`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(min = 1, max = 256),
        inner(length(max = 63), regex(pattern = r"^[a-z]([-a-z0-9]*[a-z0-9])?$"))
    )]
    #[x_kube(merge_strategy = ListMerge::Set)]
    pub services: Option<Vec<String>>,

    /// Label selector over the Services of this namespace that take part in the lane.
    /// Mutually exclusive with `services`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_selector: Option<LabelSelector>,

    /// Lanes tried in order, before baseline, for a service that has no ready instance in
    /// this lane. A fallback lane's own fallbacks follow it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16), inner(length(max = 63)))]
    #[x_kube(
        merge_strategy = ListMerge::Set,
        validation = Rule::new("self.all(f, f.matches('^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$'))").message("every fallback lane must be a valid label value (alphanumerics, '-', '_' or '.'; no '|')"),
        validation = Rule::new(format!("self.all(f, {})", super::not_baseline("f"))).message("a fallback lane must not be named baseline: requests fall back to baseline anyway, after the fallback lanes")
    )]
    pub fallback: Vec<String>,

    /// When true, a service with no ready instance in the lane (or its fallback lanes) gets
    /// an empty subset instead of falling back to baseline.
    #[serde(default)]
    pub strict: bool,

    /// How edge requests enter the lane.
    #[serde(default, rename = "match", skip_serializing_if = "Option::is_none")]
    pub match_: Option<LaneMatch>,

    /// Percentage (0-100) of untagged edge traffic sent into the lane.
    #[serde(default)]
    #[schemars(range(min = 0, max = 100))]
    pub weight: i32,

    /// How calls enter the lane at an RPC entry: the first Dubbo or Spring Cloud call made
    /// outside any request being served (a scheduled job, a message consumer, a service that is
    /// called by no laneway-aware client). Without it, `weight` applies there too.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rpc_entry: Option<RpcEntry>,

    /// How long the lane lives after creation (Go duration, e.g. `72h`). When it has passed,
    /// the lane's outputs are removed and its status says `Expired`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^([0-9]{1,9}(\.[0-9]{1,9})?(ns|us|µs|ms|s|m|h)){1,8}$"))]
    pub ttl: Option<Duration>,
}

/// Request attributes that put an edge request into the lane.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct LaneMatch {
    /// Headers that must all be present with the given values; names unique (case-insensitive).
    /// At most 8: a LaneEntry's rule adds these to its own header matches (at most 7) and, for a
    /// browser that has a lane cookie, one `Cookie` match, and the Gateway API allows 16 per match.
    #[serde(default)]
    #[schemars(length(max = 8))]
    #[x_kube(validation = Rule::new(super::UNIQUE_HEADERS_RULE).message(super::UNIQUE_HEADERS_MESSAGE))]
    pub headers: Vec<HeaderMatch>,
}

/// Who enters the lane at an RPC entry. A call meets the lane's `conditions` (any one of
/// them) or is drawn by `weight`; a call already in a lane is never drawn.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RpcEntry {
    /// Whether `weight` also draws calls in no lane at RPC entries (default true); when false,
    /// only `conditions` let calls in there.
    #[serde(default = "applies")]
    pub apply_weight: bool,
    /// Calls that enter the lane whatever the weight: one that meets any of these. A Dubbo
    /// client looks at the `attachment` and `argument` conditions, a Spring Cloud client at the
    /// `header` ones.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16))]
    pub conditions: Vec<RpcCondition>,
    /// Draw by a hash of this key instead of per call: a call enters when
    /// `crc32(value) % 100 < weight`, so every call with the same value (one user) is in or out
    /// of the lane on every call and every service. A call without the key is not drawn.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sticky: Option<StickyKey>,
}

fn applies() -> bool {
    true
}

impl Default for RpcEntry {
    fn default() -> Self {
        RpcEntry {
            apply_weight: true,
            conditions: Vec::new(),
            sticky: None,
        }
    }
}

/// One condition on a call: exactly one of `attachment`, `argument` and `header`, and the
/// values that meet it.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[x_kube(validation = Rule::new("[has(self.attachment), has(self.argument), has(self.header)].filter(x, x).size() == 1").message("exactly one of attachment, argument and header must be set"))]
#[serde(rename_all = "camelCase")]
pub struct RpcCondition {
    /// A Dubbo attachment key, e.g. `user_id`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 64))]
    #[x_kube(validation = Rule::new(super::RPC_KEY_RULE).message(super::RPC_KEY_MESSAGE))]
    pub attachment: Option<String>,
    /// A Dubbo method argument, by position (0 is the first), compared as text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 254))]
    pub argument: Option<i32>,
    /// A Spring Cloud request header, e.g. `x-user-id` (case-insensitive).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 256))]
    #[x_kube(validation = Rule::new(super::RPC_HEADER_RULE).message(super::RPC_HEADER_MESSAGE))]
    pub header: Option<String>,
    /// The values that meet the condition, in Dubbo's condition syntax: a comma-separated list
    /// of exact values, values with `*` wildcards (`vip-*`) and inclusive integer ranges
    /// (`1~100`).
    #[schemars(length(min = 1, max = 256))]
    #[x_kube(
        validation = Rule::new(super::RPC_VALUES_RULE).message(super::RPC_VALUES_MESSAGE),
        validation = Rule::new(super::RPC_RANGES_RULE).message(super::RPC_RANGES_MESSAGE)
    )]
    pub values: String,
}

/// The key a sticky draw hashes: a Dubbo attachment, a Spring Cloud header, or both (each
/// client uses its own).
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[x_kube(validation = Rule::new("has(self.attachment) || has(self.header)").message("sticky needs an attachment or a header"))]
#[serde(rename_all = "camelCase")]
pub struct StickyKey {
    /// The Dubbo attachment whose value is hashed, e.g. `user_id`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 64))]
    #[x_kube(validation = Rule::new(super::RPC_KEY_RULE).message(super::RPC_KEY_MESSAGE))]
    pub attachment: Option<String>,
    /// The Spring Cloud request header whose value is hashed, e.g. `x-user-id`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 256))]
    #[x_kube(validation = Rule::new(super::RPC_HEADER_RULE).message(super::RPC_HEADER_MESSAGE))]
    pub header: Option<String>,
}

/// An exact HTTP header match.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct HeaderMatch {
    /// Header name, e.g. `x-lane`. Not a header proxies consume or rewrite (`Host`, hop-by-hop,
    /// `Forwarded`, `X-Forwarded-*`), nor `Authorization`, `Cookie` or `Set-Cookie`.
    #[schemars(
        length(min = 1, max = 256),
        regex(pattern = r"^[A-Za-z0-9!#$%&'*+\-.^_`|~]+$")
    )]
    #[x_kube(validation = Rule::new(super::LANE_HEADER_RULE).message(super::LANE_HEADER_MESSAGE))]
    pub name: String,
    /// Exact header value, without control characters but horizontal tab.
    #[schemars(length(min = 1, max = 4096), regex(pattern = r"^[^\x00-\x08\x0A-\x1F\x7F]*$"))]
    pub value: String,
}

/// What laneway resolved for a LaneRoute.
///
/// A new object reads with `observedGeneration: 0` until laneway first writes its status, so
/// that GitOps tools (kstatus, Argo CD) see it in progress rather than done.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("default" = {"observedGeneration": 0}))]
pub struct LaneRouteStatus {
    /// The `metadata.generation` this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// The resolved lane name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lane: Option<String>,
    /// `Ready`, `FallbackActive` and `Degraded`.
    #[serde(default)]
    pub conditions: Vec<Condition>,
    /// One entry per service of the lane.
    #[serde(default)]
    pub services: Vec<ServiceLaneStatus>,
    /// Number of services in the lane.
    #[serde(default)]
    pub service_count: i32,
    /// Number of services whose subset comes from a fallback lane or baseline.
    #[serde(default)]
    pub fallback_count: i32,
    /// When the lane expires (RFC 3339), if it has a `ttl`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<String>,
}

/// The subset laneway resolved for one service of a lane.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ServiceLaneStatus {
    /// The Kubernetes Service that takes part in the lane.
    pub name: String,
    /// The Service with the lane's own instances of this service, while it has any (or, for
    /// a strict lane without any instance in its chain, the empty Service that answers 503).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lane_service: Option<String>,
    /// The Service that holds only the untagged (baseline) instances.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub baseline_service: Option<String>,
    /// The Service laneway's routes send the lane's requests for this service to: the lane
    /// Service, the Service of the fallback lane that serves, or the baseline Service.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub served_by: Option<String>,
    /// Ready endpoints of the lane's own instances here, while the lane serves itself (or is
    /// strict and has none). Absent where a fallback lane or baseline serves it: that tier's
    /// endpoints are those of the Service in `servedBy`, so a pod event there changes this
    /// status not at all. A change of this count alone is written at most every 10 s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoints: Option<i32>,
    /// Where the subset comes from: `Lane`, `Fallback:<lane>`, `Baseline` or `Empty`.
    pub source: SubsetSource,
}

impl ServiceLaneStatus {
    /// Equal but for the endpoint count.
    pub fn same_but_endpoints(&self, other: &Self) -> bool {
        let ServiceLaneStatus {
            name,
            lane_service,
            baseline_service,
            served_by,
            endpoints: _,
            source,
        } = self;
        *name == other.name
            && *lane_service == other.lane_service
            && *baseline_service == other.baseline_service
            && *served_by == other.served_by
            && *source == other.source
    }
}

/// Where the instances of a lane Service come from.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum SubsetSource {
    /// Ready instances tagged with the lane itself.
    Lane,
    /// Ready instances of a fallback lane.
    Fallback(String),
    /// Ready untagged instances.
    Baseline,
    /// No ready instance anywhere in the chain.
    #[default]
    Empty,
}

impl SubsetSource {
    pub fn is_fallback(&self) -> bool {
        matches!(self, SubsetSource::Fallback(_) | SubsetSource::Baseline)
    }
}

impl fmt::Display for SubsetSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SubsetSource::Lane => f.write_str("Lane"),
            SubsetSource::Fallback(lane) => write!(f, "Fallback:{lane}"),
            SubsetSource::Baseline => f.write_str("Baseline"),
            SubsetSource::Empty => f.write_str("Empty"),
        }
    }
}

impl FromStr for SubsetSource {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "Lane" => Ok(SubsetSource::Lane),
            "Baseline" => Ok(SubsetSource::Baseline),
            "Empty" => Ok(SubsetSource::Empty),
            _ => match s.strip_prefix("Fallback:") {
                Some(lane) if !lane.is_empty() => Ok(SubsetSource::Fallback(lane.to_owned())),
                _ => Err(format!("unknown subset source {s:?}")),
            },
        }
    }
}

impl Serialize for SubsetSource {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for SubsetSource {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

impl JsonSchema for SubsetSource {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "SubsetSource".into()
    }
    fn inline_schema() -> bool {
        true
    }
    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({"type": "string"})
    }
}

impl LaneRoute {
    /// The lane this route declares: `spec.lane`, else the object's name.
    pub fn lane(&self) -> &str {
        self.spec
            .lane
            .as_deref()
            .or(self.metadata.name.as_deref())
            .unwrap_or_default()
    }
}
