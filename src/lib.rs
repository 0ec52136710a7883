//! laneway: declarative traffic lanes and tag routing for Kubernetes.

pub mod api;
pub mod lanes;
