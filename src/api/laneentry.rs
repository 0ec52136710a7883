use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{Condition, ConditionStatus};

/// Default request header that names a request's lane.
pub const DEFAULT_LANE_HEADER: &str = "x-lane";

/// Where requests enter lanes. laneway writes the Gateway API HTTPRoutes of the entry: at a
/// gateway (`parentRefs` and `rules`), or in a mesh (`mesh`: one route per selected Service
/// and HTTP port, attached to the Service, as GAMMA does).
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "laneway.io",
    version = "v1alpha1",
    kind = "LaneEntry",
    doc = "Where requests enter lanes: the Gateway API HTTPRoutes laneway writes for a gateway or a mesh.",
    namespaced,
    status = "LaneEntryStatus",
    derive = "PartialEq",
    shortname = "le",
    category = "laneway",
    printcolumn(name = "Mode", type_ = "string", json_path = ".status.mode", description = "edge (a gateway) or mesh"),
    printcolumn(name = "Routes", type_ = "integer", json_path = ".status.routeCount", description = "HTTPRoutes written"),
    printcolumn(name = "Lanes", type_ = "integer", json_path = ".status.laneCount", description = "Lanes routed"),
    printcolumn(name = "Ready", type_ = "string", json_path = ".status.conditions[?(@.type==\"Ready\")].status", description = "Whether every route is written and accepted"),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp"),
    validation = Rule::new("has(self.spec.mesh) != has(self.spec.parentRefs)").message("exactly one of spec.parentRefs (a gateway) and spec.mesh must be set").field_path(".spec.parentRefs"),
    validation = Rule::new("has(self.spec.parentRefs) == has(self.spec.rules)").message("spec.rules are required with spec.parentRefs, and only with them").field_path(".spec.rules"),
    validation = Rule::new("!has(self.spec.mesh) || !has(self.spec.hostnames)").message("spec.hostnames apply to a gateway only, not to spec.mesh").field_path(".spec.hostnames"),
    validation = Rule::new("!has(self.spec.mesh) || !has(self.spec.applyWeights)").message("spec.applyWeights applies to a gateway only: a mesh never splits by weight").field_path(".spec.applyWeights"),
    validation = Rule::new("!has(self.spec.previewHostnames) || (has(self.spec.hostnames) && size(self.spec.hostnames) > 0)").message("spec.previewHostnames need spec.hostnames, which must not cover them: an entry on every hostname would take the preview hostnames' requests too").field_path(".spec.previewHostnames"),
    validation = Rule::new("!has(self.spec.mesh) || !has(self.spec.stickyGray)").message("spec.stickyGray applies to a gateway only: a mesh never splits by weight").field_path(".spec.stickyGray"),
    validation = Rule::new("!has(self.spec.mesh) || !has(self.spec.laneQuery)").message("spec.laneQuery applies to a gateway only: lane links are for browsers").field_path(".spec.laneQuery"),
    validation = Rule::new(LANE_QUERY_UNUSED_RULE).message("a rule must not match on the lane link's query parameter (spec.laneQuery, lane when not set): laneway adds that match to each rule itself").field_path(".spec.rules"),
)]
#[serde(rename_all = "camelCase")]
pub struct LaneEntrySpec {
    /// The Gateways (or listeners of them) whose requests enter lanes here, as Gateway API
    /// `parentRefs`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 32))]
    pub parent_refs: Option<Vec<ParentRef>>,

    /// Hostnames the routes match, as in an HTTPRoute; all when empty.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(max = 16),
        inner(
            length(min = 1, max = 253),
            regex(pattern = r"^(\*\.)?[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
        )
    )]
    #[x_kube(merge_strategy = ListMerge::Set)]
    pub hostnames: Option<Vec<String>>,

    /// The request header that names a request's lane (`x-lane` when not set). A LaneRoute
    /// with `match.headers` is entered by those headers instead. A request in no lane loses
    /// this header at the entry, and the lane cookie is named as it, so it is not a header
    /// proxies consume or rewrite (`Host`, hop-by-hop, `Forwarded`, `X-Forwarded-*`), nor
    /// `Authorization`, `Cookie` or `Set-Cookie`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(min = 1, max = 256),
        regex(pattern = r"^[A-Za-z0-9!#$%&'*+\-.^_`|~]+$")
    )]
    #[x_kube(validation = Rule::new(super::LANE_HEADER_RULE).message(super::LANE_HEADER_MESSAGE))]
    pub header: Option<String>,

    /// Hostnames that put every request into one lane, for browsers and links: a template with
    /// `{lane}` once (`{lane}.preview.shop.example.com`), filled in with each lane the entry lets
    /// requests into. Each gets the entry's rules, sending every request to the lane (its
    /// fallbacks at each service) and setting the lane's headers for the next hops, over any
    /// lane header the client sent. A lane whose name is not a DNS label (or makes the hostname
    /// longer than 253 characters) gets none, and the entry's status says so. The gateway needs
    /// a listener for them (a wildcard, `*.preview.shop.example.com`), and DNS a record.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(min = 1, max = 8),
        inner(length(min = 8, max = 253), regex(pattern = r"^([-a-z0-9.]|\{lane\})+$"))
    )]
    #[x_kube(
        merge_strategy = ListMerge::Set,
        validation = Rule::new(PREVIEW_HOSTNAME_RULE).message("each preview hostname must hold {lane} exactly once and be a valid hostname once it is filled in (no wildcard)")
    )]
    pub preview_hostnames: Option<Vec<String>>,

    /// The query parameter of lane links (`lane` when not set). At the entry's hostnames a
    /// request with `?lane=gray` goes to lane `gray` and is answered with a cookie named as
    /// the lane header (`x-lane=gray; Path=/; HttpOnly; SameSite=Lax`) that keeps the
    /// browser's later requests in the lane; `?lane=` with no value goes to baseline and
    /// clears the cookie. The lane header comes first, then this parameter, then the cookie.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(min = 1, max = 256),
        regex(pattern = r"^[A-Za-z0-9!#$%&'*+\-.^_`|~]+$")
    )]
    pub lane_query: Option<String>,

    /// How a request drawn into a lane by weight keeps it. `cookie`: the draw sets the lane
    /// cookie (the lane's name, or `-` for baseline), which the entry's routes follow from then
    /// on, so a browser stays in the lane it was drawn into, and one drawn into baseline stays
    /// there. Not set: every request is drawn anew. The gateway sets the cookie with a
    /// backendRef filter; where it ignores those (Traefik 3.6), the instance must: laneway's
    /// Java `LaneFilter` with `sticky-cookie` does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sticky_gray: Option<StickyGray>,

    /// Which lanes this entry lets requests into: LaneRoutes of this namespace whose labels
    /// match. Every lane when not set. A public gateway should expose only the lanes meant
    /// for the public, or anyone can reach a developer's build by setting a header.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lane_selector: Option<LabelSelector>,

    /// Whether the lanes' `weight` sends a share of this entry's requests in no lane into the
    /// lanes (true when not set). Set false where requests come from other services rather than
    /// from users (an internal gateway between services): a request is drawn into a lane once,
    /// where it first enters, and a new draw at every hop would split its chain.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub apply_weights: Option<bool>,

    /// The gateway's rules: which requests, to which Service. For each, laneway writes one
    /// rule per lane (these matches and the lane's header) and one for requests in no lane
    /// (baseline, and the lanes' weights).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 16))]
    pub rules: Option<Vec<EntryRule>>,

    /// The mesh form: lanes inside the cluster, one route per selected Service and HTTP port.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mesh: Option<MeshEntry>,
}

/// How a request drawn into a lane by weight keeps it.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum StickyGray {
    /// The draw sets the lane cookie.
    Cookie,
}

/// Exactly one `{lane}`, and a valid hostname once it is filled in.
const PREVIEW_HOSTNAME_RULE: &str = "self.all(h, h.indexOf('{lane}') >= 0 && h.indexOf('{lane}') == h.lastIndexOf('{lane}') \
     && h.replace('{lane}', 'lane').matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$'))";

/// No rule's match uses the lane link's query parameter, which laneway adds to each.
const LANE_QUERY_UNUSED_RULE: &str = "!has(self.spec.rules) || self.spec.rules.all(r, !has(r.matches) \
     || r.matches.all(m, !has(m.queryParams) || m.queryParams.all(q, \
     q.name != (has(self.spec.laneQuery) ? self.spec.laneQuery : 'lane'))))";

/// Default query parameter of lane links.
pub const DEFAULT_LANE_QUERY: &str = "lane";

/// A Gateway API parent reference (a Gateway, or a listener of it).
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
#[serde(rename_all = "camelCase")]
pub struct ParentRef {
    /// API group of the parent; `gateway.networking.k8s.io` when not set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 253))]
    pub group: Option<String>,
    /// Kind of the parent; `Gateway` when not set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63))]
    pub kind: Option<String>,
    /// Namespace of the parent; this entry's namespace when not set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63))]
    pub namespace: Option<String>,
    /// Name of the parent.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
    /// A listener of the parent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub section_name: Option<String>,
    /// A port of the parent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 65535))]
    pub port: Option<i32>,
}

/// Requests that enter at the gateway, and the Service they are for.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct EntryRule {
    /// Gateway API HTTPRoute matches (path, headers, query parameters, method); every request
    /// when empty. A match must not use the lane header itself.
    #[serde(default)]
    #[schemars(length(max = 8))]
    pub matches: Vec<RouteMatch>,
    /// The Service the requests are for; laneway sends them to its lane or baseline Service.
    pub backend: Backend,
}

/// One Gateway API HTTPRoute match.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RouteMatch {
    /// The request path.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<PathMatch>,
    /// Headers that must all match; names unique (case-insensitive), and not `Cookie`, which
    /// the lane cookie's rules match. At most 7: laneway adds a lane's headers (a LaneRoute's
    /// `match.headers`, at most 8) and the lane cookie's match, and the Gateway API allows 16.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 7))]
    #[x_kube(
        validation = Rule::new(super::UNIQUE_HEADERS_RULE).message(super::UNIQUE_HEADERS_MESSAGE),
        validation = Rule::new("self.all(h, h.name.lowerAscii() != 'cookie')").message("a rule must not match on Cookie: laneway adds its own Cookie match (the lane cookie) to each rule")
    )]
    pub headers: Vec<ValueMatch>,
    /// Query parameters that must all match; names unique (exact: query names are
    /// case-sensitive), and not the lane link's (`spec.laneQuery`). At most 15: laneway adds
    /// the lane link's, and the Gateway API allows 16.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 15))]
    #[x_kube(validation = Rule::new("self.all(q, self.exists_one(p, p.name == q.name))").message("query parameter names must be unique"))]
    pub query_params: Vec<ValueMatch>,
    /// The HTTP method.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^(GET|HEAD|POST|PUT|DELETE|CONNECT|OPTIONS|TRACE|PATCH)$"))]
    pub method: Option<String>,
}

/// A path match, as in an HTTPRoute.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PathMatch {
    /// `Exact`, `PathPrefix` (the default) or `RegularExpression`.
    #[serde(default = "path_prefix", rename = "type")]
    #[schemars(regex(pattern = r"^(Exact|PathPrefix|RegularExpression)$"))]
    pub type_: String,
    /// The path, starting with `/`.
    #[serde(default = "slash")]
    #[schemars(length(min = 1, max = 1024))]
    #[x_kube(validation = Rule::new("self.startsWith('/')").message("a path must start with '/'"))]
    pub value: String,
}

fn path_prefix() -> String {
    "PathPrefix".into()
}

fn slash() -> String {
    "/".into()
}

/// A header or query parameter match.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ValueMatch {
    /// `Exact` (the default) or `RegularExpression`.
    #[serde(default, rename = "type", skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^(Exact|RegularExpression)$"))]
    pub type_: Option<String>,
    #[schemars(
        length(min = 1, max = 256),
        regex(pattern = r"^[A-Za-z0-9!#$%&'*+\-.^_`|~]+$")
    )]
    pub name: String,
    /// No control characters but horizontal tab.
    #[schemars(length(min = 1, max = 4096), regex(pattern = r"^[^\x00-\x08\x0A-\x1F\x7F]*$"))]
    pub value: String,
}

/// A Service and port of this namespace.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Backend {
    /// Name of the Service (the user's Service; laneway picks its lane or baseline Service).
    #[schemars(length(min = 1, max = 63), regex(pattern = r"^[a-z]([-a-z0-9]*[a-z0-9])?$"))]
    pub service: String,
    /// A port of that Service.
    #[schemars(range(min = 1, max = 65535))]
    pub port: i32,
}

/// The Services whose in-mesh requests follow lanes.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[x_kube(validation = Rule::new("has(self.services) != has(self.serviceSelector)").message("exactly one of mesh.services and mesh.serviceSelector must be set"))]
#[serde(rename_all = "camelCase")]
pub struct MeshEntry {
    /// Names of Services of this namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(min = 1, max = 256),
        inner(length(max = 63), regex(pattern = r"^[a-z]([-a-z0-9]*[a-z0-9])?$"))
    )]
    #[x_kube(merge_strategy = ListMerge::Set)]
    pub services: Option<Vec<String>>,
    /// Label selector over the Services of this namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_selector: Option<LabelSelector>,
}

/// Where a LaneEntry lets requests into lanes: `edge`, at the gateways of its `parentRefs`, or
/// `mesh`, at every hop between its Services.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum EntryMode {
    Edge,
    Mesh,
}

/// What laneway wrote for a LaneEntry, and what the gateway made of it.
///
/// A new object reads with `observedGeneration: 0` until laneway first writes its status, so
/// that GitOps tools (kstatus, Argo CD) see it in progress rather than done.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("default" = {"observedGeneration": 0}))]
pub struct LaneEntryStatus {
    /// The `metadata.generation` this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// `edge` or `mesh`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<EntryMode>,
    /// `Ready`, `Reconciling`, `Stalled` and `Degraded`.
    #[serde(default)]
    pub conditions: Vec<Condition>,
    /// The HTTPRoutes written and, per parent, the verdict of the controller that serves it.
    #[serde(default)]
    pub routes: Vec<EntryRouteStatus>,
    /// The lanes requests can enter here, how, and their share of requests in no lane.
    #[serde(default)]
    pub lanes: Vec<EntryLaneStatus>,
    /// Share (percent) of requests in no lane that stay on baseline.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub baseline_weight: Option<i32>,
    /// Number of HTTPRoutes.
    #[serde(default)]
    pub route_count: i32,
    /// Number of lanes.
    #[serde(default)]
    pub lane_count: i32,
}

/// One HTTPRoute of the entry.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EntryRouteStatus {
    pub name: String,
    /// Per parent, `Accepted` and `ResolvedRefs` as the gateway's controller reported them.
    #[serde(default)]
    pub parents: Vec<EntryParentStatus>,
}

/// What a gateway controller said of a route at one parent.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EntryParentStatus {
    /// The parent, `namespace/name` (with `/section` or `:port`).
    pub parent: String,
    /// The controller that reported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub controller: Option<String>,
    /// The controller's `Accepted` condition: `True`, `False` or `Unknown`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub accepted: Option<ConditionStatus>,
    /// The controller's `ResolvedRefs` condition.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resolved_refs: Option<ConditionStatus>,
    /// The controller's message where a condition is not `True`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// How requests enter one lane here.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EntryLaneStatus {
    pub lane: String,
    /// The header match that enters the lane, e.g. `x-lane: gray`.
    pub headers: Vec<String>,
    /// Share (percent) of requests in no lane sent into it (at a gateway).
    #[serde(default)]
    pub weight: i32,
    /// The query that enters the lane at the entry's hostnames and sets its cookie, e.g.
    /// `?lane=gray` (at a gateway).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub link: Option<String>,
    /// The hostnames at which every request is in the lane.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub preview_hostnames: Vec<String>,
}

impl LaneEntry {
    /// The request header naming the lane.
    pub fn header(&self) -> &str {
        self.spec.header.as_deref().unwrap_or(DEFAULT_LANE_HEADER)
    }

    /// The query parameter of lane links.
    pub fn lane_query(&self) -> &str {
        self.spec.lane_query.as_deref().unwrap_or(DEFAULT_LANE_QUERY)
    }

    /// Whether lanes' weights split this entry's requests in no lane.
    pub fn applies_weights(&self) -> bool {
        self.spec.mesh.is_none() && self.spec.apply_weights.unwrap_or(true)
    }
}
