use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::Condition;

/// Which instances carry which tags, without restarting or relabelling pods; optionally
/// published as a Dubbo tag-router rule.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "laneway.io",
    version = "v1alpha1",
    kind = "TagRule",
    doc = "Which instances carry which tags, and the Dubbo tag-router rule published from them.",
    namespaced,
    status = "TagRuleStatus",
    derive = "PartialEq",
    shortname = "tr",
    category = "laneway",
    printcolumn(
        name = "Application",
        type_ = "string",
        json_path = ".spec.dubbo.application",
        description = "Dubbo application whose tag-router rule is published"
    ),
    printcolumn(
        name = "Tags",
        type_ = "integer",
        json_path = ".status.tagCount",
        description = "Tags this rule gives"
    ),
    printcolumn(
        name = "Pods",
        type_ = "integer",
        json_path = ".status.taggedPods",
        description = "Pods carrying a tag from this rule"
    ),
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status"
    ),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
)]
#[serde(rename_all = "camelCase")]
pub struct TagRuleSpec {
    /// The instances (pods of this namespace) this rule governs. For Dubbo, these are the
    /// providers of `dubbo.application`.
    pub selector: LabelSelector,

    /// Dynamic tags: each gives its name to the governed pods its `podSelector` matches.
    #[serde(default)]
    #[schemars(length(max = 64))]
    #[x_kube(
        merge_strategy = ListMerge::Map(vec!["name".into()]),
        validation = Rule::new("self.all(t, self.exists_one(u, u.name == t.name))").message("tag names must be unique within a TagRule")
    )]
    pub tags: Vec<TagSpec>,

    /// Publish this rule's tags as a Dubbo tag-router rule for one application.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dubbo: Option<DubboSpec>,

    /// Mark the Nacos instances the governed pods registered (Spring Cloud, or any Nacos
    /// discovery client) with the lanes each serves.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nacos: Option<NacosNamingSpec>,

    /// When true, a tagged call whose tag has no instance fails instead of falling back to
    /// untagged instances (in the Dubbo rule and the Nacos marks).
    #[serde(default)]
    pub force: bool,

    /// When true, publish `<name>.laneway-messages` beside this rule's Dubbo rule and under its
    /// Nacos service: which tier's consumers of these instances handle each lane's messages
    /// (read by laneway's Kafka and RocketMQ client libraries).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub messages: bool,
}

/// One dynamic tag.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct TagSpec {
    /// The tag (lane) name; not `baseline`, the mark of untagged instances.
    #[schemars(length(max = 63))]
    #[x_kube(
        validation = Rule::new(super::LANE_NAME_RULE).message(super::LANE_NAME_MESSAGE),
        validation = Rule::new(super::not_baseline("self")).message(super::BASELINE_MESSAGE)
    )]
    pub name: String,
    /// Governed pods that carry the tag.
    pub pod_selector: LabelSelector,
}

/// Where and how the Dubbo tag-router rule is published.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[x_kube(validation = Rule::new("has(self.port) != has(self.portName)").message("exactly one of dubbo.port and dubbo.portName must be set"))]
#[serde(rename_all = "camelCase")]
pub struct DubboSpec {
    /// Dubbo application name; the rule key is `<application>.tag-router`.
    #[schemars(length(min = 1, max = 200), regex(pattern = r"^[A-Za-z0-9][A-Za-z0-9._-]*$"))]
    pub application: String,
    /// Dubbo protocol port of the providers, used in `podIP:port` addresses.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 65535))]
    pub port: Option<i32>,
    /// Name of the container port that serves Dubbo, resolved per pod.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 15))]
    pub port_name: Option<String>,
}

/// Which Nacos instances laneway marks, and under which keys.
///
/// Each instance registered at a governed pod's IP (and port, when one is given) gets
/// `laneway.lanes`: the lanes it serves, comma-separated, with `baseline` on untagged
/// instances (plus every lane that falls back to them), empty on a pod that is not ready;
/// and `laneKey`: its own lane, absent on baseline instances. Other keys are left alone.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[x_kube(validation = Rule::new("!(has(self.port) && has(self.portName))").message("at most one of nacos.port and nacos.portName may be set"))]
#[serde(rename_all = "camelCase")]
pub struct NacosNamingSpec {
    /// The Nacos service name the pods register as (`spring.application.name`).
    #[schemars(length(min = 1, max = 255), regex(pattern = r"^[A-Za-z0-9][A-Za-z0-9._:-]*$"))]
    pub service: String,
    /// The Nacos group the service is registered in.
    #[serde(default = "default_group")]
    #[schemars(length(min = 1, max = 128), regex(pattern = r"^[A-Za-z0-9][A-Za-z0-9._:-]*$"))]
    pub group: String,
    /// The port the instances register with; without it (or `portName`), every instance at
    /// a governed pod's IP is marked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 65535))]
    pub port: Option<i32>,
    /// Name of the container port the instances register with, resolved per pod.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 15))]
    pub port_name: Option<String>,
    /// The metadata key that holds the instance's own lane (for clients that match one key,
    /// as the common `request-tag` recipe does).
    #[serde(default = "default_lane_key")]
    #[schemars(length(min = 1, max = 128), regex(pattern = r"^[A-Za-z0-9][A-Za-z0-9._-]*$"))]
    #[x_kube(validation = Rule::new("self != 'laneway.lanes'").message("nacos.laneKey must differ from laneway.lanes"))]
    pub lane_key: String,
}

fn default_group() -> String {
    "DEFAULT_GROUP".to_owned()
}

fn default_lane_key() -> String {
    "laneway.lane".to_owned()
}

/// What laneway resolved and published for a TagRule.
///
/// A new object reads with `observedGeneration: 0` until laneway first writes its status, so
/// that GitOps tools (kstatus, Argo CD) see it in progress rather than done.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("default" = {"observedGeneration": 0}))]
pub struct TagRuleStatus {
    /// The `metadata.generation` this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// `Ready` and `Degraded`.
    #[serde(default)]
    pub conditions: Vec<Condition>,
    /// Pods matched per tag.
    #[serde(default)]
    pub tags: Vec<TagStatus>,
    /// Number of tags.
    #[serde(default)]
    pub tag_count: i32,
    /// Number of pods carrying at least one tag from this rule.
    #[serde(default)]
    pub tagged_pods: i32,
    /// What was published to each config centre, and marked on the Nacos instances.
    #[serde(default)]
    pub publications: Vec<Publication>,
}

/// The pods one tag matched.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TagStatus {
    /// The tag.
    pub name: String,
    /// How many pods carry it.
    pub pods: i32,
    /// The first pods (by name) that carry it.
    #[serde(default)]
    pub pod_names: Vec<String>,
}

/// The state of the rule in one config centre.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Publication {
    /// The config centre: `configmap`, `zookeeper` or `nacos` for the Dubbo rule;
    /// `nacos-naming` for the marks on the Nacos instances.
    pub centre: String,
    /// The key written, e.g. `order-service.tag-router`; for the marks, the Nacos service
    /// (`DEFAULT_GROUP@@order-service`).
    pub key: String,
    /// SHA-256 of the published content.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content_hash: Option<String>,
    /// When the content was last written (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub published_at: Option<String>,
    /// The last error from this centre, cleared by a successful write.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
}
