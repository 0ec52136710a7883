//! laneway: declarative traffic lanes and tag routing for Kubernetes.

pub mod api;
pub mod controller;
pub mod dashboard;
pub mod explain;
pub mod gateway;
pub mod http;
pub mod kind;
pub mod lanes;
pub mod leader;
pub mod metrics;
pub mod probe;
pub mod publish;
pub mod status;
pub mod writer;
