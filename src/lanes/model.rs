//! Plain snapshots of the cluster objects routing depends on, trimmed to what routing uses.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Pod, Service, ServicePort};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

/// Label on every object laneway writes.
pub const MANAGED_BY_LABEL: &str = "app.kubernetes.io/managed-by";
pub const MANAGED_BY_VALUE: &str = "laneway";

/// The owner references include a LaneRoute (`laneway.io`).
pub fn owned_by_lane_route(owners: Option<&[OwnerReference]>) -> bool {
    owners
        .unwrap_or_default()
        .iter()
        .any(|o| o.kind == "LaneRoute" && o.api_version.split('/').next() == Some(crate::api::GROUP))
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
    /// `spec.selector`; `None` for a selectorless Service.
    pub selector: Option<BTreeMap<String, String>>,
    pub ports: Vec<ServicePort>,
    pub ip_families: Vec<String>,
    pub ip_family_policy: Option<String>,
    pub publish_not_ready_addresses: bool,
    pub external_name: bool,
    /// `spec.clusterIP: None`.
    pub headless: bool,
    /// Has an owner reference to a LaneRoute.
    pub owned_by_lane_route: bool,
}

impl ServiceInfo {
    /// Written by laneway itself (a lane or baseline Service): labelled as laneway's AND owned
    /// by a LaneRoute. A label alone, which anyone can set, never makes a Service laneway's.
    pub fn is_managed(&self) -> bool {
        self.owned_by_lane_route
            && self.labels.get(MANAGED_BY_LABEL).map(String::as_str) == Some(MANAGED_BY_VALUE)
    }

    pub fn from_service(svc: &Service) -> Option<ServiceInfo> {
        let meta = &svc.metadata;
        let spec = svc.spec.clone().unwrap_or_default();
        Some(ServiceInfo {
            namespace: meta.namespace.clone()?,
            name: meta.name.clone()?,
            uid: meta.uid.clone().unwrap_or_default(),
            labels: meta.labels.clone().unwrap_or_default(),
            selector: spec.selector.filter(|s| !s.is_empty()),
            ports: spec.ports.unwrap_or_default(),
            ip_families: spec.ip_families.unwrap_or_default(),
            ip_family_policy: spec.ip_family_policy,
            publish_not_ready_addresses: spec.publish_not_ready_addresses.unwrap_or(false),
            external_name: spec.type_.as_deref() == Some("ExternalName"),
            headless: spec.cluster_ip.as_deref() == Some("None"),
            owned_by_lane_route: owned_by_lane_route(meta.owner_references.as_deref()),
        })
    }
}
