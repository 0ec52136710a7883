//! Gateway API v1 types: HTTPRoute (written), Gateway and GatewayClass (read). Generated with
//! kopium from the v1.4.1 Standard CRDs (`make gateway-types`), because no maintained crate
//! fits kube 5 and k8s-openapi 0.29 (the `gateway-api` crate, 0.22, builds on kube 4 and
//! k8s-openapi 0.28, and two k8s-openapi versions cannot share a client).

#[allow(clippy::all, dead_code)]
mod gateway;
#[allow(clippy::all, dead_code)]
mod gatewayclass;
#[allow(clippy::all, dead_code)]
mod httproute;

pub use gateway::Gateway;
pub use gatewayclass::GatewayClass;
pub use httproute::*;

/// The Gateway API group.
pub const GROUP: &str = "gateway.networking.k8s.io";

/// GatewayClass feature: `filters` on a backendRef, setting a request header.
pub const BACKEND_HEADER_FEATURE: &str = "HTTPRouteBackendRequestHeaderModification";
