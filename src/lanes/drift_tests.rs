use k8s_openapi::api::core::v1::{ObjectReference, Service, ServicePort, ServiceSpec, ServiceStatus};
use k8s_openapi::api::discovery::v1::{Endpoint, EndpointConditions, EndpointPort, EndpointSlice};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde_json::json;

use super::Content;
use crate::gateway::HttpRoute;

fn meta(name: &str) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.into()),
        namespace: Some("shop".into()),
        labels: Some([("laneway.io/managed-by".to_owned(), "laneway".to_owned())].into()),
        owner_references: Some(vec![OwnerReference {
            api_version: "laneway.io/v1alpha1".into(),
            kind: "LaneRoute".into(),
            name: "gray".into(),
            uid: "u1".into(),
            controller: Some(true),
            block_owner_deletion: None,
        }]),
        ..Default::default()
    }
}

/// Metadata as the API server gives it back: version, uid, time, laneway's annotations.
fn served_meta(name: &str) -> ObjectMeta {
    ObjectMeta {
        resource_version: Some("812".into()),
        uid: Some("f00".into()),
        generation: Some(1),
        annotations: Some(
            [
                ("laneway.io/applied-hash".to_owned(), "abc".to_owned()),
                (
                    "endpoints.kubernetes.io/last-change-trigger-time".to_owned(),
                    "2026-01-01T00:00:00Z".to_owned(),
                ),
            ]
            .into(),
        ),
        ..meta(name)
    }
}

/// A baseline Service as laneway writes it.
fn service() -> Service {
    Service {
        metadata: meta("order--baseline"),
        spec: Some(ServiceSpec {
            type_: Some("ClusterIP".into()),
            ports: Some(vec![ServicePort {
                name: Some("http".into()),
                port: 80,
                protocol: Some("TCP".into()),
                ..Default::default()
            }]),
            ip_families: Some(vec!["IPv4".into()]),
            ip_family_policy: Some("SingleStack".into()),
            ..Default::default()
        }),
        status: None,
    }
}

/// The same Service as the API server gives it back, with the fields it fills in.
fn served_service() -> Service {
    let mut svc = service();
    svc.metadata = served_meta("order--baseline");
    let spec = svc.spec.as_mut().expect("spec");
    spec.cluster_ip = Some("10.96.0.12".into());
    spec.cluster_ips = Some(vec!["10.96.0.12".into()]);
    spec.session_affinity = Some("None".into());
    spec.internal_traffic_policy = Some("Cluster".into());
    for p in spec.ports.iter_mut().flatten() {
        p.target_port = Some(IntOrString::Int(80));
    }
    svc.status = Some(ServiceStatus::default());
    svc
}

fn endpoint(ip: &str, pod: &str) -> Endpoint {
    Endpoint {
        addresses: vec![ip.into()],
        conditions: Some(EndpointConditions {
            ready: Some(true),
            serving: Some(true),
            terminating: Some(false),
        }),
        target_ref: Some(ObjectReference {
            kind: Some("Pod".into()),
            namespace: Some("shop".into()),
            name: Some(pod.into()),
            uid: Some(format!("uid-{pod}")),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// A baseline slice as laneway writes it.
fn slice() -> EndpointSlice {
    EndpointSlice {
        metadata: meta("order--baseline-ipv4-0-0"),
        address_type: "IPv4".into(),
        endpoints: vec![endpoint("10.0.0.1", "order-1")],
        ports: Some(vec![EndpointPort {
            name: Some("http".into()),
            port: Some(8080),
            protocol: Some("TCP".into()),
            app_protocol: None,
        }]),
    }
}

/// A route as laneway builds it: the Gateway API's defaults left out.
fn route() -> HttpRoute {
    serde_json::from_value(json!({
        "apiVersion": "gateway.networking.k8s.io/v1",
        "kind": "HTTPRoute",
        "metadata": {"name": "shop-web", "namespace": "shop"},
        "spec": {
            "parentRefs": [{"name": "public", "sectionName": "http"}],
            "rules": [
                {"matches": [{"headers": [{"name": "x-lane", "value": "gray"}]}],
                 "backendRefs": [{"name": "order--gray", "port": 80}]},
                {"backendRefs": [{"name": "order--baseline", "port": 80}]}
            ]
        }
    }))
    .expect("route")
}

/// The same route as the API server gives it back: every default filled in, and a status.
fn served_route() -> HttpRoute {
    let gateway = json!({"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": "public"});
    serde_json::from_value(json!({
        "apiVersion": "gateway.networking.k8s.io/v1",
        "kind": "HTTPRoute",
        "metadata": {"name": "shop-web", "namespace": "shop", "resourceVersion": "9", "generation": 2,
            "annotations": {"laneway.io/applied-hash": "abc"}},
        "spec": {
            "parentRefs": [{"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": "public", "sectionName": "http"}],
            "rules": [
                {"matches": [{"path": {"type": "PathPrefix", "value": "/"},
                              "headers": [{"name": "x-lane", "type": "Exact", "value": "gray"}]}],
                 "backendRefs": [{"group": "", "kind": "Service", "name": "order--gray", "port": 80, "weight": 1}]},
                {"matches": [{"path": {"type": "PathPrefix", "value": "/"}}],
                 "backendRefs": [{"group": "", "kind": "Service", "name": "order--baseline", "port": 80, "weight": 1}]}
            ]
        },
        "status": {"parents": [{"controllerName": "traefik.io/gateway-controller", "conditions": [],
            "parentRef": gateway}]}
    }))
    .expect("route")
}

#[test]
fn what_the_api_server_fills_in_is_no_difference() {
    assert_eq!(service().content_hash(), served_service().content_hash());
    let mut served_slice = slice();
    served_slice.metadata = served_meta("order--baseline-ipv4-0-0");
    assert_eq!(slice().content_hash(), served_slice.content_hash());
    assert_eq!(route().content_hash(), served_route().content_hash());
}

#[test]
fn services_and_slices_as_laneway_builds_them_are_compared_as_they_are() {
    assert_eq!(service().canonical(), service());
    assert_eq!(slice().canonical(), slice());
    // A slice with no port is written without the list, as the API server gives it back.
    let portless = EndpointSlice {
        ports: None,
        ..slice()
    };
    assert_eq!(portless.canonical(), portless);
    let empty = EndpointSlice {
        ports: Some(Vec::new()),
        ..slice()
    };
    assert_eq!(empty.content_hash(), portless.content_hash());
}

#[test]
fn a_hand_edit_of_a_service_is_a_difference() {
    let written = service().content_hash();
    let mut with_selector = served_service();
    with_selector.spec.as_mut().expect("spec").selector =
        Some([("app".to_owned(), "order".to_owned())].into());
    assert_ne!(with_selector.content_hash(), written, "a selector added");
    let mut port = served_service();
    port.spec.as_mut().expect("spec").ports.as_mut().expect("ports")[0].port = 8081;
    assert_ne!(port.content_hash(), written, "a port changed");
    let mut label = served_service();
    label.metadata.labels = None;
    assert_ne!(label.content_hash(), written, "laneway's labels removed");
    let mut affinity = served_service();
    affinity.spec.as_mut().expect("spec").session_affinity = Some("ClientIP".into());
    assert_ne!(affinity.content_hash(), written, "a session affinity set");
}

#[test]
fn a_hand_edit_of_a_slice_is_a_difference() {
    let written = slice().content_hash();
    let mut tagged = slice();
    tagged.endpoints.push(endpoint("10.0.0.2", "order-gray"));
    assert_ne!(tagged.content_hash(), written, "a tagged pod added");
    let mut not_ready = slice();
    not_ready.endpoints[0]
        .conditions
        .as_mut()
        .expect("conditions")
        .ready = Some(false);
    assert_ne!(not_ready.content_hash(), written, "a condition changed");
    let mut port = slice();
    port.ports.as_mut().expect("ports")[0].port = Some(9090);
    assert_ne!(port.content_hash(), written, "a port changed");
}

#[test]
fn a_hand_edit_of_a_route_is_a_difference() {
    let written = route().content_hash();
    let mut redirected = served_route();
    redirected.spec.rules.as_mut().expect("rules")[1]
        .backend_refs
        .as_mut()
        .expect("backends")[0]
        .name = "order--gray".into();
    assert_ne!(redirected.content_hash(), written, "a backend redirected");
    let mut weighted = served_route();
    weighted.spec.rules.as_mut().expect("rules")[1]
        .backend_refs
        .as_mut()
        .expect("backends")[0]
        .weight = Some(0);
    assert_ne!(weighted.content_hash(), written, "a weight changed");
    let mut hostnames = served_route();
    hostnames.spec.hostnames = Some(vec!["shop.example.com".into()]);
    assert_ne!(hostnames.content_hash(), written, "a hostname added");
}
