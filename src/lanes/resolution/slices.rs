//! A Service's EndpointSlices in the built-in controller's shape, from the pods of one lane or
//! baseline subset.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::discovery::v1::{Endpoint, EndpointConditions, EndpointPort, EndpointSlice};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use crate::kind::Kind;
use crate::lanes::index::PodEntry;
use crate::lanes::labels::{SERVICE_NAME_LABEL, SLICE_MANAGED_BY_LABEL, SLICE_MANAGER};
use crate::lanes::model::{PodInfo, ServiceInfo};
use crate::lanes::naming;

/// Most endpoints per slice, as the built-in controller uses by default.
pub const MAX_ENDPOINTS_PER_SLICE: usize = 100;

fn family_of(ip: &str) -> &'static str {
    if ip.contains(':') {
        "IPv6"
    } else {
        "IPv4"
    }
}

/// The ports a Service's endpoints have on one pod (target ports resolve per pod), with the
/// signature that orders the slices holding them.
pub(super) struct PortSet {
    ports: Vec<EndpointPort>,
    signature: String,
}

/// An endpoint pod of a Service with its endpoints, built once however many of the lane and
/// baseline slices hold it.
pub(super) struct Member<'p> {
    pub pod: &'p PodEntry,
    /// Its resolved ports: an index into the Service's port sets.
    ports: usize,
    /// One endpoint per address family the Service carries and the pod has an address in.
    endpoints: Vec<(&'static str, Endpoint)>,
    /// Named target ports the pod does not have.
    pub unresolved: Vec<String>,
}

/// The endpoint pods among `pods` as members of `svc`, and the distinct port sets they
/// resolve to.
pub(super) fn members<'p>(
    svc: &ServiceInfo,
    pods: impl Iterator<Item = &'p PodEntry>,
) -> (Vec<PortSet>, Vec<Member<'p>>) {
    let families: Vec<&'static str> = if svc.ip_families.is_empty() {
        vec!["IPv4", "IPv6"]
    } else {
        ["IPv4", "IPv6"]
            .into_iter()
            .filter(|f| svc.ip_families.iter().any(|g| g == f))
            .collect()
    };
    let mut sets: Vec<PortSet> = Vec::new();
    let mut out = Vec::new();
    for pod in pods.filter(|p| p.info.is_endpoint()) {
        let (ports, unresolved) = pod_ports(svc, &pod.info);
        let set = match sets.iter().position(|s| s.ports == ports) {
            Some(i) => i,
            None => {
                let signature = port_signature(&ports);
                sets.push(PortSet { ports, signature });
                sets.len() - 1
            }
        };
        out.push(Member {
            pod,
            ports: set,
            endpoints: endpoints(svc, &pod.info, &families),
            unresolved,
        });
    }
    (sets, out)
}

/// The ports of `svc` as `pod` resolves them, and the named target ports it does not have.
fn pod_ports(svc: &ServiceInfo, info: &PodInfo) -> (Vec<EndpointPort>, Vec<String>) {
    let mut ports = Vec::with_capacity(svc.ports.len());
    let mut unresolved = Vec::new();
    for sp in &svc.ports {
        let protocol = sp.protocol.as_deref().unwrap_or("TCP");
        let port = match &sp.target_port {
            None => Some(sp.port),
            Some(IntOrString::Int(n)) => Some(*n),
            Some(IntOrString::String(name)) => match name.parse::<i32>() {
                Ok(n) => Some(n),
                Err(_) => info.named_port(name, protocol).or_else(|| {
                    unresolved.push(name.clone());
                    None
                }),
            },
        };
        if let Some(port) = port {
            ports.push(EndpointPort {
                name: Some(sp.name.clone().unwrap_or_default()),
                port: Some(port),
                protocol: Some(protocol.to_owned()),
                app_protocol: sp.app_protocol.clone(),
            });
        }
    }
    (ports, unresolved)
}

/// `pod`'s endpoint in each of `families` it has an address of.
fn endpoints(svc: &ServiceInfo, info: &PodInfo, families: &[&'static str]) -> Vec<(&'static str, Endpoint)> {
    let serving = svc.publish_not_ready_addresses || info.ready;
    let ready = svc.publish_not_ready_addresses || (info.ready && !info.terminating);
    families
        .iter()
        .filter_map(|family| {
            let ip = info.ips.iter().find(|ip| family_of(ip) == *family)?;
            let endpoint = Endpoint {
                addresses: vec![ip.clone()],
                conditions: Some(EndpointConditions {
                    ready: Some(ready),
                    serving: Some(serving),
                    terminating: Some(info.terminating),
                }),
                node_name: info.node_name.clone(),
                target_ref: Some(ObjectReference {
                    kind: Some(Kind::Pod.name().into_owned()),
                    namespace: Some(info.namespace.clone()),
                    name: Some(info.name.clone()),
                    uid: Some(info.uid.clone()),
                    ..Default::default()
                }),
                ..Default::default()
            };
            Some((*family, endpoint))
        })
        .collect()
}

/// The built-in controller's shape: endpoints grouped by address family and resolved port
/// set, sorted by address, at most 100 per slice; an empty placeholder when there are none.
pub(super) fn slices(
    svc: &ServiceInfo,
    service_name: &str,
    members: &[&Member],
    port_sets: &[PortSet],
    owners: Vec<OwnerReference>,
) -> Vec<EndpointSlice> {
    let placeholder_family = if svc.ip_families.is_empty() {
        members
            .iter()
            .flat_map(|m| m.pod.info.ips.iter().map(|ip| family_of(ip)))
            .min()
    } else {
        svc.ip_families.first().map(String::as_str)
    };
    let mut groups: BTreeMap<(&str, &str), (usize, Vec<Endpoint>)> = BTreeMap::new();
    for m in members {
        for (family, endpoint) in &m.endpoints {
            groups
                .entry((family, &port_sets[m.ports].signature))
                .or_insert_with(|| (m.ports, Vec::new()))
                .1
                .push(endpoint.clone());
        }
    }
    let slice = |family: &str, set: &str, ports: Option<Vec<EndpointPort>>, endpoints, chunk| EndpointSlice {
        metadata: ObjectMeta {
            name: Some(naming::slice_name(service_name, family, set, chunk)),
            namespace: Some(svc.namespace.clone()),
            labels: Some(BTreeMap::from([
                (SERVICE_NAME_LABEL.to_owned(), service_name.to_owned()),
                (SLICE_MANAGED_BY_LABEL.to_owned(), SLICE_MANAGER.to_owned()),
            ])),
            owner_references: Some(owners.clone()),
            ..Default::default()
        },
        address_type: family.to_owned(),
        endpoints,
        ports,
    };
    let mut sets_of: BTreeMap<&str, usize> = BTreeMap::new();
    for (family, _) in groups.keys() {
        *sets_of.entry(family).or_default() += 1;
    }
    let mut out = Vec::new();
    for ((family, signature), (set, mut endpoints)) in groups {
        let id = if sets_of[family] == 1 { "0" } else { signature };
        endpoints.sort_by(|a, b| {
            a.addresses
                .cmp(&b.addresses)
                .then_with(|| target_name(a).cmp(target_name(b)))
        });
        let mut chunk = 0;
        while !endpoints.is_empty() {
            let rest = endpoints.split_off(endpoints.len().min(MAX_ENDPOINTS_PER_SLICE));
            let ports = Some(port_sets[set].ports.clone()).filter(|p| !p.is_empty());
            out.push(slice(family, id, ports, endpoints, chunk));
            endpoints = rest;
            chunk += 1;
        }
    }
    if out.is_empty() {
        out.push(slice(
            placeholder_family.unwrap_or("IPv4"),
            "0",
            None,
            Vec::new(),
            0,
        ));
    }
    out
}

fn port_signature(ports: &[EndpointPort]) -> String {
    let parts: Vec<String> = ports
        .iter()
        .map(|p| {
            format!(
                "{}/{}/{}/{}",
                p.name.as_deref().unwrap_or_default(),
                p.port.unwrap_or_default(),
                p.protocol.as_deref().unwrap_or_default(),
                p.app_protocol.as_deref().unwrap_or_default()
            )
        })
        .collect();
    parts.join(",")
}

fn target_name(e: &Endpoint) -> &str {
    e.target_ref
        .as_ref()
        .and_then(|r| r.name.as_deref())
        .unwrap_or_default()
}
