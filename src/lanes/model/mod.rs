//! Plain snapshots of the cluster objects routing depends on, trimmed to what routing uses
//! (with what a Service's guard annotation makes of it, in `guard`).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Pod, Service, ServicePort};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

use guard::parse_selector;
pub use guard::Guard;

use crate::api::ConditionStatus;
use crate::kind::Kind;
use crate::lanes::labels::{GUARD_ANNOTATION, MANAGED_BY_LABEL, MANAGED_BY_VALUE};

mod guard;

/// The owner references include a LaneRoute or a LaneEntry (`laneway.io`).
pub fn owned_by_laneway(owners: Option<&[OwnerReference]>) -> bool {
    owners.unwrap_or_default().iter().any(|o| {
        matches!(
            Kind::of_api(&o.api_version, &o.kind),
            Some(Kind::LaneRoute | Kind::LaneEntry)
        )
    })
}

/// An EndpointSlice with laneway's manager label is laneway's when it is of a lane or baseline
/// Service (owned by a LaneRoute or LaneEntry) or of a guarded Service (owned by the Service).
pub fn slice_owned_by_laneway(owners: Option<&[OwnerReference]>) -> bool {
    owned_by_laneway(owners)
        || owners
            .unwrap_or_default()
            .iter()
            .any(|o| Kind::of_api(&o.api_version, &o.kind) == Some(Kind::Service))
}

/// A named container port of a pod.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ContainerPortInfo {
    pub name: Option<String>,
    pub port: i32,
    pub protocol: String,
}

/// What routing needs to know about a pod.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PodInfo {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub labels: BTreeMap<String, String>,
    /// `status.podIPs`, primary first.
    pub ips: Vec<String>,
    /// The `Ready` condition is `True`.
    pub ready: bool,
    /// `metadata.deletionTimestamp` is set.
    pub terminating: bool,
    /// The pod has finished (`Succeeded` or `Failed`) and never serves again.
    pub terminal: bool,
    pub node_name: Option<String>,
    pub ports: Vec<ContainerPortInfo>,
}

impl PodInfo {
    /// A pod that can appear in an EndpointSlice at all (as the built-in controller decides).
    pub fn is_endpoint(&self) -> bool {
        !self.terminal && !self.ips.is_empty()
    }

    /// Ready to receive new connections.
    pub fn is_ready(&self) -> bool {
        self.ready && !self.terminating && self.is_endpoint()
    }

    /// The container port called `name` for `protocol`.
    pub fn named_port(&self, name: &str, protocol: &str) -> Option<i32> {
        self.ports
            .iter()
            .find(|p| p.name.as_deref() == Some(name) && p.protocol == protocol)
            .map(|p| p.port)
    }

    /// The TCP port an output names by number or by container port name: `Ok(None)` when it
    /// names neither, `Err(name)` when the pod has no port of that name.
    pub fn tcp_port<'a>(&self, port: Option<i32>, name: Option<&'a str>) -> Result<Option<i32>, &'a str> {
        match (port, name) {
            (Some(port), _) => Ok(Some(port)),
            (None, Some(name)) => self.named_port(name, "TCP").map(Some).ok_or(name),
            (None, None) => Ok(None),
        }
    }

    /// Trims a Kubernetes pod to what routing uses; `None` for a pod without name or namespace.
    pub fn from_pod(pod: &Pod) -> Option<PodInfo> {
        let meta = &pod.metadata;
        let status = pod.status.as_ref();
        let spec = pod.spec.as_ref();
        let mut ips: Vec<String> = status
            .and_then(|s| s.pod_ips.as_ref())
            .map(|ips| {
                ips.iter()
                    .map(|ip| ip.ip.clone())
                    .filter(|ip| !ip.is_empty())
                    .collect()
            })
            .unwrap_or_default();
        if ips.is_empty() {
            if let Some(ip) = status.and_then(|s| s.pod_ip.clone()).filter(|ip| !ip.is_empty()) {
                ips.push(ip);
            }
        }
        let ready = status
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
        let terminal = matches!(
            status.and_then(|s| s.phase.as_deref()),
            Some("Succeeded") | Some("Failed")
        );
        let ports = spec
            .map(|s| {
                s.containers
                    .iter()
                    .flat_map(|c| c.ports.iter().flatten())
                    .map(|p| ContainerPortInfo {
                        name: p.name.clone(),
                        port: p.container_port,
                        protocol: p.protocol.clone().unwrap_or_else(|| "TCP".into()),
                    })
                    .collect()
            })
            .unwrap_or_default();
        Some(PodInfo {
            namespace: meta.namespace.clone()?,
            name: meta.name.clone()?,
            uid: meta.uid.clone().unwrap_or_default(),
            labels: meta.labels.clone().unwrap_or_default(),
            ips,
            ready,
            terminating: meta.deletion_timestamp.is_some(),
            terminal,
            node_name: spec.and_then(|s| s.node_name.clone()),
            ports,
        })
    }
}

/// What routing needs to know about a Kubernetes Service.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ServiceInfo {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub labels: BTreeMap<String, String>,
    /// `spec.selector`, or a guarded Service's annotation; `None` for a selectorless Service.
    pub selector: Option<BTreeMap<String, String>>,
    /// What the `laneway.io/selector` annotation makes of the Service.
    pub guard: Guard,
    pub ports: Vec<ServicePort>,
    pub ip_families: Vec<String>,
    pub ip_family_policy: Option<String>,
    pub publish_not_ready_addresses: bool,
    pub external_name: bool,
    /// `spec.clusterIP: None`.
    pub headless: bool,
    /// Has an owner reference to a LaneRoute or LaneEntry.
    pub owned_by_laneway: bool,
}

impl ServiceInfo {
    /// Written by laneway itself (a lane or baseline Service): labelled as laneway's AND owned
    /// by a LaneRoute or LaneEntry. A label alone, which anyone can set, never makes a Service
    /// laneway's.
    pub fn is_managed(&self) -> bool {
        self.owned_by_laneway
            && self.labels.get(MANAGED_BY_LABEL).map(String::as_str) == Some(MANAGED_BY_VALUE)
    }

    pub fn from_service(svc: &Service) -> Option<ServiceInfo> {
        let meta = &svc.metadata;
        let spec = svc.spec.clone().unwrap_or_default();
        let external_name = spec.type_.as_deref() == Some("ExternalName");
        let annotation = meta.annotations.as_ref().and_then(|a| a.get(GUARD_ANNOTATION));
        let (selector, guard) = match (spec.selector.filter(|s| !s.is_empty()), annotation) {
            (selector, None) => (selector, Guard::None),
            (Some(selector), Some(_)) => (Some(selector), Guard::WithSelector),
            (None, Some(_)) if external_name => (
                None,
                Guard::Invalid(format!(
                    "{GUARD_ANNOTATION}: an ExternalName Service has no endpoints"
                )),
            ),
            (None, Some(text)) => match parse_selector(text) {
                Ok(selector) => (Some(selector), Guard::Guarded),
                Err(e) => (None, Guard::Invalid(e)),
            },
        };
        Some(ServiceInfo {
            namespace: meta.namespace.clone()?,
            name: meta.name.clone()?,
            uid: meta.uid.clone().unwrap_or_default(),
            labels: meta.labels.clone().unwrap_or_default(),
            selector,
            guard,
            ports: spec.ports.unwrap_or_default(),
            ip_families: spec.ip_families.unwrap_or_default(),
            ip_family_policy: spec.ip_family_policy,
            publish_not_ready_addresses: spec.publish_not_ready_addresses.unwrap_or(false),
            external_name,
            headless: spec.cluster_ip.as_deref() == Some("None"),
            owned_by_laneway: owned_by_laneway(meta.owner_references.as_deref()),
        })
    }
}

/// A Gateway API parent, with the defaults filled in, for comparing parent references.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ParentKey {
    pub group: String,
    pub kind: String,
    pub namespace: String,
    pub name: String,
    pub section: Option<String>,
    pub port: Option<i32>,
}

/// The [`ParentKey`] of any of the Gateway API's parent references (an HTTPRoute's spec or
/// status, a LaneEntry's): group, kind and namespace default as the Gateway API says, the
/// namespace to the route's own `$ns`.
macro_rules! parent_key {
    ($p:expr, $ns:expr) => {{
        let p = $p;
        $crate::lanes::model::ParentKey {
            group: p
                .group
                .clone()
                .unwrap_or_else(|| $crate::gateway::GROUP.to_owned()),
            kind: p
                .kind
                .clone()
                .unwrap_or_else(|| $crate::kind::Kind::Gateway.name().into_owned()),
            namespace: p.namespace.clone().unwrap_or_else(|| $ns.to_owned()),
            name: p.name.clone(),
            section: p.section_name.clone(),
            port: p.port,
        }
    }};
}
pub(crate) use parent_key;

impl ParentKey {
    /// `namespace/name`, with `/section` or `:port` where given.
    pub fn display(&self) -> String {
        let mut s = format!("{}/{}", self.namespace, self.name);
        if let Some(section) = &self.section {
            s.push('/');
            s.push_str(section);
        }
        if let Some(port) = self.port {
            s.push_str(&format!(":{port}"));
        }
        s
    }

    /// Both refer to the same parent, or one to a part of the other (no section or port).
    pub fn overlaps(&self, other: &ParentKey) -> bool {
        fn same<T: PartialEq>(a: &Option<T>, b: &Option<T>) -> bool {
            a.is_none() || b.is_none() || a == b
        }
        self.group == other.group
            && self.kind == other.kind
            && self.namespace == other.namespace
            && self.name == other.name
            && same(&self.section, &other.section)
            && same(&self.port, &other.port)
    }
}

/// What a controller said of a route at one parent.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ParentVerdict {
    pub parent: ParentKey,
    pub controller: String,
    /// (status, observedGeneration, message) of `Accepted` and `ResolvedRefs`.
    pub accepted: Option<(ConditionStatus, Option<i64>, String)>,
    pub resolved_refs: Option<(ConditionStatus, Option<i64>, String)>,
}

/// What routing needs to know about an HTTPRoute: laneway's own or anyone else's.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RouteInfo {
    pub namespace: String,
    pub name: String,
    /// Written by laneway (labelled as its own and owned by a LaneEntry).
    pub ours: bool,
    pub generation: Option<i64>,
    pub parents: Vec<ParentKey>,
    pub hostnames: Vec<String>,
    /// Path matches (type, value) of rules that match on nothing else: requests laneway's
    /// rule for requests in no lane would tie with.
    pub plain_paths: Vec<(String, String)>,
    /// Services of this namespace the route sends requests to.
    pub backends: std::collections::BTreeSet<String>,
    pub verdicts: Vec<ParentVerdict>,
}

impl RouteInfo {
    /// Every controller that reported on the route has seen its current generation.
    pub fn settled(&self) -> bool {
        self.verdicts.iter().all(|v| {
            v.accepted
                .as_ref()
                .is_some_and(|(_, observed, _)| observed.is_some() && *observed >= self.generation)
        })
    }

    pub fn from_route(route: &crate::gateway::HttpRoute) -> Option<RouteInfo> {
        let meta = &route.metadata;
        let namespace = meta.namespace.clone()?;
        let spec = &route.spec;
        let parents = spec
            .parent_refs
            .iter()
            .flatten()
            .map(|p| parent_key!(p, namespace))
            .collect();
        let rules = spec.rules.iter().flatten();
        let plain_paths = rules.clone().flat_map(plain_paths).collect();
        let backends = rules.flat_map(|r| local_services(r, &namespace)).collect();
        let verdicts = verdicts(route, &namespace);
        let ours = meta
            .labels
            .as_ref()
            .and_then(|l| l.get(MANAGED_BY_LABEL))
            .map(String::as_str)
            == Some(MANAGED_BY_VALUE)
            && meta
                .owner_references
                .iter()
                .flatten()
                .any(|o| Kind::of_api(&o.api_version, &o.kind) == Some(Kind::LaneEntry));
        Some(RouteInfo {
            namespace,
            name: meta.name.clone()?,
            ours,
            generation: meta.generation,
            parents,
            hostnames: spec.hostnames.clone().unwrap_or_default(),
            plain_paths,
            backends,
            verdicts,
        })
    }
}

/// The paths of `rule`'s matches that test nothing but the path (a rule without matches
/// matches every path), as (match type, value).
fn plain_paths(rule: &crate::gateway::HttpRouteRules) -> Vec<(String, String)> {
    let every = || ("PathPrefix".to_owned(), "/".to_owned());
    let Some(matches) = rule.matches.as_ref().filter(|m| !m.is_empty()) else {
        return vec![every()];
    };
    matches
        .iter()
        .filter(|m| {
            m.headers.as_ref().is_none_or(Vec::is_empty)
                && m.query_params.as_ref().is_none_or(Vec::is_empty)
                && m.method.is_none()
        })
        .map(|m| match &m.path {
            Some(p) => (
                p.r#type
                    .as_ref()
                    .and_then(|t| serde_json::to_value(t).ok())
                    .and_then(|v| v.as_str().map(str::to_owned))
                    .unwrap_or_else(|| "PathPrefix".to_owned()),
                p.value.clone().unwrap_or_else(|| "/".to_owned()),
            ),
            None => every(),
        })
        .collect()
}

/// The Services in `namespace` that `rule` sends requests to.
fn local_services<'r>(
    rule: &'r crate::gateway::HttpRouteRules,
    namespace: &'r str,
) -> impl Iterator<Item = String> + 'r {
    rule.backend_refs.iter().flatten().filter_map(move |b| {
        // A backend is a core Service unless it says otherwise.
        let kind = Kind::of(
            b.group.as_deref().unwrap_or_default(),
            b.kind.as_deref().unwrap_or(&Kind::Service.name()),
        );
        let here = b.namespace.as_deref().is_none_or(|n| n == namespace);
        (kind == Some(Kind::Service) && here).then(|| b.name.clone())
    })
}

/// What each controller that reported on `route` said of it, per parent (the parent's
/// namespace defaulting to the route's).
fn verdicts(route: &crate::gateway::HttpRoute, namespace: &str) -> Vec<ParentVerdict> {
    let condition = |conditions: &[k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition], t: &str| {
        conditions.iter().find(|c| c.type_ == t).map(|c| {
            (
                ConditionStatus::from_api(&c.status),
                c.observed_generation,
                c.message.clone(),
            )
        })
    };
    route
        .status
        .iter()
        .flat_map(|s| s.parents.iter())
        .map(|p| ParentVerdict {
            parent: parent_key!(&p.parent_ref, namespace),
            controller: p.controller_name.clone(),
            accepted: condition(&p.conditions, "Accepted"),
            resolved_refs: condition(&p.conditions, "ResolvedRefs"),
        })
        .collect()
}
