//! What the controller reports instead of failing: each problem names the objects it concerns
//! and the field at fault.

use std::fmt;

use crate::api::Reason;

/// Namespace and name of an object.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ObjectKey {
    pub namespace: String,
    pub name: String,
}

impl ObjectKey {
    pub fn new(namespace: &str, name: &str) -> Self {
        ObjectKey {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
        }
    }
}

impl fmt::Display for ObjectKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// Problems are reported on laneway's own kinds (LaneRoute, TagRule, LaneEntry), and a guard
/// problem on its Service too.
pub use crate::kind::Kind;

/// A problem with user input that the controller reports in status and Events.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Problem {
    /// A LaneRoute names a Service that does not exist.
    UnknownService { route: ObjectKey, service: String },
    /// A LaneRoute names a Service without a pod selector (or of type ExternalName).
    ServiceWithoutSelector { route: ObjectKey, service: String },
    /// A user Service already has the name of a Service laneway would write.
    NameTaken {
        route: ObjectKey,
        service: String,
        name: String,
    },
    /// Fallback lanes form a cycle across LaneRoutes; the chain is cut where it repeats.
    FallbackCycle {
        routes: Vec<ObjectKey>,
        lanes: Vec<String>,
    },
    /// Two LaneRoutes in one namespace declare the same lane; the first by name wins.
    DuplicateLane {
        route: ObjectKey,
        lane: String,
        declared_by: String,
    },
    /// A label selector that cannot be evaluated.
    InvalidSelector {
        kind: Kind,
        object: ObjectKey,
        field: String,
        error: String,
    },
    /// A pod ends up with more than one lane.
    ConflictingTags {
        pod: String,
        namespace: String,
        tags: Vec<(String, String)>,
        rules: Vec<ObjectKey>,
    },
    /// A Service's named targetPort that a selected pod does not expose.
    UnresolvedTargetPort {
        routes: Vec<ObjectKey>,
        service: String,
        port: String,
        pod: String,
    },
    /// A governed pod does not expose the Dubbo `portName`.
    DubboPortMissing {
        rule: ObjectKey,
        port: String,
        pod: String,
    },
    /// A governed pod does not expose the Nacos `portName`.
    NacosPortMissing {
        rule: ObjectKey,
        port: String,
        pod: String,
    },
    /// Two TagRules mark the same Nacos service; the one created first (then the first by
    /// namespace/name) keeps it.
    DuplicateNacosService {
        rule: ObjectKey,
        service: String,
        declared_by: ObjectKey,
    },
    /// A TagRule asks for Nacos marks, and laneway has no Nacos server to write them to.
    NacosNotConfigured { rule: ObjectKey },
    /// Two TagRules publish the same Dubbo application; the one created first (then the first by
    /// namespace/name) keeps it.
    DuplicateApplication {
        rule: ObjectKey,
        application: String,
        declared_by: ObjectKey,
    },
    /// The API server refused to write an output of these LaneRoutes or LaneEntries;
    /// `message` is the server's, naming the field.
    WriteRejected {
        owners: Vec<(Kind, ObjectKey)>,
        object: String,
        message: String,
    },
    /// The API server refused a LaneEntry's route with this lane in it, and accepts it
    /// without: the lane is left out of the entry's routes, the entry's other lanes are
    /// written; `message` is the server's.
    LaneRefused {
        entry: ObjectKey,
        route: ObjectKey,
        lane: String,
        message: String,
    },
    /// A LaneEntry names a Service that does not exist (yet).
    EntryUnknownService {
        entry: ObjectKey,
        field: String,
        service: String,
    },
    /// A LaneEntry names a Service or port that cannot take lanes.
    EntryBackend {
        entry: ObjectKey,
        field: String,
        message: String,
    },
    /// A LaneEntry rule's match holds a value an HTTPRoute match cannot (a type it does not
    /// know); the rule is not routed.
    EntryMatch {
        entry: ObjectKey,
        field: String,
        message: String,
    },
    /// A LaneEntry rule matches on the lane header itself.
    LaneHeaderInMatch {
        entry: ObjectKey,
        field: String,
        header: String,
    },
    /// Two lanes exposed by one LaneEntry are entered by the same headers.
    DuplicateLaneMatch {
        entry: ObjectKey,
        lane: String,
        other: String,
        headers: String,
    },
    /// A lane exposed by a LaneEntry gets no hostname from one of its preview templates.
    PreviewHostname {
        entry: ObjectKey,
        lane: String,
        template: String,
        reason: String,
    },
    /// A Service's `laneway.io/selector` annotation guards nothing (invalid, or beside a
    /// `spec.selector`); reported on the Service and the LaneRoutes that include it.
    InvalidGuard {
        service: ObjectKey,
        routes: Vec<ObjectKey>,
        error: String,
        /// The Service has a `spec.selector` too.
        beside_selector: bool,
    },
    /// A hostname of the entry, or a lane's preview hostname, that an older claim (another
    /// entry or HTTPRoute on a shared parent) holds: the entry writes no route for it.
    HostnameConflict {
        entry: ObjectKey,
        /// `None`: every hostname (an entry without hostnames).
        hostname: Option<String>,
        /// The lane whose preview hostname it is.
        lane: Option<String>,
        holder: (Kind, ObjectKey),
        /// The path match both would serve; none for a preview hostname.
        path: Option<String>,
    },
    /// The weights of the lanes a LaneEntry sends requests in no lane to add up to more than
    /// 100: the gateway takes them as relative, so each lane gets less than it asks for and
    /// baseline nothing. `weights`: each lane and its `spec.weight`.
    WeightsOver100 {
        entry: ObjectKey,
        weights: Vec<(String, i32)>,
    },
    /// Every ready pod of a Service that a LaneEntry sends requests in no lane to is tagged, so
    /// its baseline is empty and those requests are refused; reported on the entry, the
    /// LaneRoutes of those lanes and the TagRules that gave the tags.
    BaselineEmpty {
        entry: ObjectKey,
        service: String,
        lanes: Vec<String>,
        routes: Vec<ObjectKey>,
        rules: Vec<ObjectKey>,
    },
}

impl Problem {
    /// The CamelCase reason used in conditions and Events.
    pub fn reason(&self) -> Reason {
        match self {
            Problem::UnknownService { .. } => Reason::UnknownService,
            Problem::ServiceWithoutSelector { .. } => Reason::ServiceWithoutSelector,
            Problem::NameTaken { .. } => Reason::NameTaken,
            Problem::FallbackCycle { .. } => Reason::FallbackCycle,
            Problem::DuplicateLane { .. } => Reason::DuplicateLane,
            Problem::InvalidSelector { .. } => Reason::InvalidSelector,
            Problem::ConflictingTags { .. } => Reason::ConflictingTags,
            Problem::UnresolvedTargetPort { .. } => Reason::UnresolvedTargetPort,
            Problem::DubboPortMissing { .. } => Reason::DubboPortMissing,
            Problem::DuplicateApplication { .. } => Reason::DuplicateApplication,
            Problem::NacosPortMissing { .. } => Reason::NacosPortMissing,
            Problem::DuplicateNacosService { .. } => Reason::DuplicateNacosService,
            Problem::NacosNotConfigured { .. } => Reason::NacosNotConfigured,
            Problem::WriteRejected { .. } | Problem::LaneRefused { .. } => Reason::WriteRejected,
            Problem::EntryUnknownService { .. } => Reason::UnknownService,
            Problem::EntryBackend { .. } => Reason::InvalidBackend,
            Problem::EntryMatch { .. } => Reason::InvalidMatch,
            Problem::LaneHeaderInMatch { .. } => Reason::LaneHeaderInMatch,
            Problem::DuplicateLaneMatch { .. } => Reason::DuplicateLaneMatch,
            Problem::PreviewHostname { .. } => Reason::PreviewHostname,
            Problem::HostnameConflict { .. } => Reason::HostnameConflict,
            Problem::WeightsOver100 { .. } => Reason::WeightsOver100,
            Problem::BaselineEmpty { .. } => Reason::BaselineEmpty,
            Problem::InvalidGuard {
                beside_selector: true,
                ..
            } => Reason::GuardWithSelector,
            Problem::InvalidGuard { .. } => Reason::InvalidGuard,
        }
    }

    /// The laneway objects the problem is reported on.
    pub fn subjects(&self) -> Vec<(Kind, ObjectKey)> {
        match self {
            Problem::UnknownService { route, .. }
            | Problem::ServiceWithoutSelector { route, .. }
            | Problem::NameTaken { route, .. }
            | Problem::DuplicateLane { route, .. } => vec![(Kind::LaneRoute, route.clone())],
            Problem::WriteRejected { owners, .. } => owners.clone(),
            Problem::LaneRefused { entry, route, .. } => {
                vec![(Kind::LaneRoute, route.clone()), (Kind::LaneEntry, entry.clone())]
            }
            Problem::FallbackCycle { routes, .. } | Problem::UnresolvedTargetPort { routes, .. } => {
                routes.iter().map(|r| (Kind::LaneRoute, r.clone())).collect()
            }
            Problem::InvalidSelector { kind, object, .. } => vec![(*kind, object.clone())],
            Problem::ConflictingTags { rules, .. } => {
                rules.iter().map(|r| (Kind::TagRule, r.clone())).collect()
            }
            Problem::DubboPortMissing { rule, .. }
            | Problem::DuplicateApplication { rule, .. }
            | Problem::NacosPortMissing { rule, .. }
            | Problem::DuplicateNacosService { rule, .. }
            | Problem::NacosNotConfigured { rule } => {
                vec![(Kind::TagRule, rule.clone())]
            }
            Problem::EntryUnknownService { entry, .. }
            | Problem::EntryBackend { entry, .. }
            | Problem::EntryMatch { entry, .. }
            | Problem::LaneHeaderInMatch { entry, .. }
            | Problem::DuplicateLaneMatch { entry, .. }
            | Problem::PreviewHostname { entry, .. }
            | Problem::HostnameConflict { entry, .. }
            | Problem::WeightsOver100 { entry, .. } => vec![(Kind::LaneEntry, entry.clone())],
            Problem::BaselineEmpty {
                entry, routes, rules, ..
            } => std::iter::once((Kind::LaneEntry, entry.clone()))
                .chain(routes.iter().map(|r| (Kind::LaneRoute, r.clone())))
                .chain(rules.iter().map(|r| (Kind::TagRule, r.clone())))
                .collect(),
            Problem::InvalidGuard { service, routes, .. } => {
                std::iter::once((Kind::Service, service.clone()))
                    .chain(routes.iter().map(|r| (Kind::LaneRoute, r.clone())))
                    .collect()
            }
        }
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Problem::UnknownService { service, .. } => {
                write!(f, "spec.services: Service {service:?} does not exist in this namespace")
            }
            Problem::ServiceWithoutSelector { service, .. } => write!(
                f,
                "spec.services: Service {service:?} has no pod selector, so its instances cannot be split into lanes"
            ),
            Problem::NameTaken { service, name, .. } => write!(
                f,
                "spec.services: Service {name:?} (for {service:?}) already exists and is not managed by laneway"
            ),
            Problem::FallbackCycle { lanes, .. } => write!(
                f,
                "spec.fallback: lanes fall back to each other in a cycle ({}); the chain stops where it repeats",
                lanes.join(" -> ")
            ),
            Problem::DuplicateLane { lane, declared_by, .. } => write!(
                f,
                "spec.lane: lane {lane:?} is already declared by LaneRoute {declared_by:?}; this route is ignored"
            ),
            Problem::InvalidSelector { field, error, .. } => write!(f, "{field}: {error}"),
            Problem::ConflictingTags { pod, tags, .. } => {
                let given: Vec<String> = tags.iter().map(|(t, src)| format!("{t} (from {src})")).collect();
                write!(
                    f,
                    "spec.tags: pod {pod:?} is given more than one lane: {}; it serves each of them and never baseline",
                    given.join(", ")
                )
            }
            Problem::UnresolvedTargetPort { service, port, pod, .. } => write!(
                f,
                "Service {service:?} targetPort {port:?} is not a container port of pod {pod:?}; that port is left out for the pod"
            ),
            Problem::DubboPortMissing { .. }
            | Problem::DuplicateApplication { .. }
            | Problem::NacosPortMissing { .. }
            | Problem::DuplicateNacosService { .. }
            | Problem::NacosNotConfigured { .. } => self.fmt_output(f),
            Problem::WriteRejected { object, message, .. } => {
                write!(f, "{object} could not be written: {message}")
            }
            Problem::LaneRefused {
                entry, lane, message, ..
            } => write!(
                f,
                "lane {lane:?} is left out of the routes of LaneEntry {}: the API server refused them with it: {message}",
                entry.name
            ),
            Problem::EntryUnknownService { .. }
            | Problem::EntryBackend { .. }
            | Problem::EntryMatch { .. }
            | Problem::LaneHeaderInMatch { .. }
            | Problem::DuplicateLaneMatch { .. }
            | Problem::PreviewHostname { .. } => self.fmt_entry(f),
            Problem::InvalidGuard { service, error, .. } => write!(f, "Service {:?}: {error}", service.name),
            Problem::HostnameConflict { .. } => self.fmt_claim(f),
            Problem::WeightsOver100 { weights, .. } => fmt_weights(f, weights),
            Problem::BaselineEmpty { service, lanes, .. } => write!(
                f,
                "Service {service:?}: every ready pod is in a lane ({}), so its baseline is empty and the requests in no lane that a LaneEntry sends to it are refused (503)",
                lanes.join(", ")
            ),
        }
    }
}

impl Problem {
    /// The message of a problem with a LaneEntry's rules or lanes.
    fn fmt_entry(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Problem::EntryUnknownService { field, service, .. } => {
                write!(f, "{field}: Service {service:?} does not exist in this namespace")
            }
            Problem::EntryBackend { field, message, .. } => write!(f, "{field}: {message}"),
            Problem::EntryMatch { field, message, .. } => {
                write!(f, "{field}: {message}; requests of this rule are not routed")
            }
            Problem::LaneHeaderInMatch { field, header, .. } => write!(
                f,
                "{field}: a match uses the lane header {header:?}; requests of this rule are not sent into lanes"
            ),
            Problem::DuplicateLaneMatch { lane, other, headers, .. } => write!(
                f,
                "spec.laneSelector: lanes {lane:?} and {other:?} are entered by the same headers ({headers}); {other:?} is not routed"
            ),
            Problem::PreviewHostname {
                lane, template, reason, ..
            } => write!(
                f,
                "spec.previewHostnames: {template:?} gives lane {lane:?} no hostname: {reason}"
            ),
            other => write!(f, "{other:?}"),
        }
    }
}

/// What weights over 100 in total amount to: the share of requests in no lane that each lane
/// actually gets, and none for baseline.
fn fmt_weights(f: &mut fmt::Formatter<'_>, weights: &[(String, i32)]) -> fmt::Result {
    let total: i32 = weights.iter().map(|(_, w)| w).sum();
    let asked: Vec<String> = weights.iter().map(|(l, w)| format!("{l} ({w})")).collect();
    let shares: Vec<String> = weights
        .iter()
        .map(|(l, w)| format!("{l} {:.0}%", f64::from(*w) * 100.0 / f64::from(total.max(1))))
        .collect();
    write!(
        f,
        "spec.weight of the lanes' LaneRoutes: {} add up to {total}, over 100; requests in no lane go to {} and none to baseline",
        asked.join(", "),
        shares.join(", ")
    )
}

impl Problem {
    /// A claim an older one holds.
    fn fmt_claim(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Problem::HostnameConflict {
            hostname,
            lane,
            holder: (kind, holder),
            path,
            ..
        } = self
        else {
            return write!(f, "{self:?}");
        };
        let host = hostname
            .as_ref()
            .map_or("every hostname".to_owned(), |h| format!("{h:?}"));
        match (lane, path) {
            (Some(lane), _) => write!(
                f,
                "spec.previewHostnames: {host} is already served by {} {holder}; lane {lane:?} gets no preview hostname there",
                kind.name()
            ),
            (None, path) => write!(
                f,
                "spec.hostnames: {host} ({}) is already served by {} {holder}, which claimed it first; this entry writes no route for it",
                path.as_deref().unwrap_or_default(),
                kind.name()
            ),
        }
    }

    /// The problems with a TagRule's outputs: its Dubbo rule and its Nacos marks.
    fn fmt_output(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Problem::DubboPortMissing { port, pod, .. } => write!(
                f,
                "spec.dubbo.portName: pod {pod:?} has no container port named {port:?}; it is left out of the Dubbo rule"
            ),
            Problem::DuplicateApplication { application, declared_by, .. } => write!(
                f,
                "spec.dubbo.application: application {application:?} is already published by TagRule {declared_by}; this rule is not published"
            ),
            Problem::NacosPortMissing { port, pod, .. } => write!(
                f,
                "spec.nacos.portName: pod {pod:?} has no container port named {port:?}; its Nacos instance is not marked"
            ),
            Problem::DuplicateNacosService { service, declared_by, .. } => write!(
                f,
                "spec.nacos.service: Nacos service {service:?} is already marked by TagRule {declared_by}; this rule marks nothing"
            ),
            Problem::NacosNotConfigured { .. } => write!(
                f,
                "spec.nacos: laneway has no Nacos server to mark instances in (set nacos.address in the chart, --nacos-addr)"
            ),
            other => write!(f, "{other:?}"),
        }
    }
}
