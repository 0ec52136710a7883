//! What laneway sets of each of its outputs, so that an output's content can be compared with
//! what laneway wants, as the built-in EndpointSlice controller compares its own fields: what
//! the API server adds (a Service's cluster IPs and default policies, the Gateway API's
//! defaults, metadata it keeps) is no difference, anything else is.

use k8s_openapi::api::core::v1::{Service, ServicePort, ServiceSpec};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::naming;
use crate::gateway::{
    HttpRoute, HttpRouteRules, HttpRouteRulesMatches, HttpRouteRulesMatchesHeadersType,
    HttpRouteRulesMatchesPath, HttpRouteRulesMatchesPathType, HttpRouteRulesMatchesQueryParamsType,
    HttpRouteSpec,
};

/// An output in the form laneway's content hash is taken of.
pub trait Content: serde::Serialize + Sized {
    /// The fields laneway sets, with what the API server fills in on its own brought to the
    /// form laneway writes. The outputs laneway builds are in this form already (but routes,
    /// which leave the Gateway API's defaults out).
    fn canonical(&self) -> Self;

    /// The hash of the canonical form: equal for an output as laneway wrote it and as the API
    /// server gives it back, different once a field laneway sets was changed.
    fn content_hash(&self) -> String {
        naming::content_hash(&self.canonical())
    }
}

/// The metadata laneway sets: name, namespace, labels and owner references.
fn own_meta(meta: &ObjectMeta) -> ObjectMeta {
    ObjectMeta {
        name: meta.name.clone(),
        namespace: meta.namespace.clone(),
        labels: meta.labels.clone(),
        owner_references: meta.owner_references.clone(),
        ..Default::default()
    }
}

impl Content for Service {
    /// Without the cluster IPs (but `None`, headless), `sessionAffinity: None`,
    /// `internalTrafficPolicy: Cluster` and ports' `targetPort` (which the API server sets, and
    /// which a Service without a selector does not use), and without status.
    fn canonical(&self) -> Self {
        let spec = self.spec.as_ref().map(|s| ServiceSpec {
            cluster_ip: s.cluster_ip.clone().filter(|ip| ip == "None"),
            cluster_ips: None,
            session_affinity: s.session_affinity.clone().filter(|a| a != "None"),
            internal_traffic_policy: s.internal_traffic_policy.clone().filter(|p| p != "Cluster"),
            ports: s.ports.as_ref().map(|ports| {
                ports
                    .iter()
                    .map(|p| ServicePort {
                        target_port: None,
                        ..p.clone()
                    })
                    .collect()
            }),
            ..s.clone()
        });
        Service {
            metadata: own_meta(&self.metadata),
            spec,
            status: None,
        }
    }
}

impl Content for EndpointSlice {
    /// Its address type, endpoints and ports (no list of ports and an empty one alike).
    fn canonical(&self) -> Self {
        EndpointSlice {
            metadata: own_meta(&self.metadata),
            address_type: self.address_type.clone(),
            endpoints: self.endpoints.clone(),
            ports: self.ports.clone().filter(|p| !p.is_empty()),
        }
    }
}

impl Content for HttpRoute {
    /// Its spec with the Gateway API's defaults filled in, without status.
    fn canonical(&self) -> Self {
        let mut spec = self.spec.clone();
        route_defaults(&mut spec);
        HttpRoute {
            metadata: own_meta(&self.metadata),
            spec,
            status: None,
        }
    }
}

/// The defaults of the HTTPRoute CRD for what laneway writes: parent and backend groups and
/// kinds, a backend's weight, a rule's match and a match's path, header and query types.
fn route_defaults(spec: &mut HttpRouteSpec) {
    for parent in spec.parent_refs.iter_mut().flatten() {
        parent
            .group
            .get_or_insert_with(|| "gateway.networking.k8s.io".into());
        parent.kind.get_or_insert_with(|| "Gateway".into());
    }
    let rules = spec.rules.get_or_insert_with(|| vec![HttpRouteRules::default()]);
    for rule in rules {
        for backend in rule.backend_refs.iter_mut().flatten() {
            backend.group.get_or_insert_with(String::new);
            backend.kind.get_or_insert_with(|| "Service".into());
            backend.weight.get_or_insert(1);
        }
        let matches = rule
            .matches
            .get_or_insert_with(|| vec![HttpRouteRulesMatches::default()]);
        for m in matches {
            let path = m.path.get_or_insert_with(HttpRouteRulesMatchesPath::default);
            path.r#type
                .get_or_insert(HttpRouteRulesMatchesPathType::PathPrefix);
            path.value.get_or_insert_with(|| "/".into());
            for h in m.headers.iter_mut().flatten() {
                h.r#type.get_or_insert(HttpRouteRulesMatchesHeadersType::Exact);
            }
            for q in m.query_params.iter_mut().flatten() {
                q.r#type
                    .get_or_insert(HttpRouteRulesMatchesQueryParamsType::Exact);
            }
        }
    }
}

#[cfg(test)]
#[path = "drift_tests.rs"]
mod tests;
