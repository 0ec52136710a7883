//! Support for fault-injection tests: a private control plane that records every write in an
//! audit log and knows one identity (bearer token) per replica, a TCP proxy per replica that
//! can cut or partition its connections, a reader of the audit log that checks leadership
//! (no write by a replica that is not the Lease holder, or past its renew deadline), and a load
//! generator counting the requests through a gateway that fail or reach the wrong tier.
//!
//! Include it from a test file with `mod faults;`, next to `mod cluster;`.
#![allow(dead_code)]

pub mod audit;
pub mod checker;
mod control_plane;
pub mod load;
mod proxy;

// Not every test file uses every item.
#[allow(unused_imports)]
pub use control_plane::{client_from, ControlPlane, ADMIN, AUDIT_POLICY, CHECKER, REPLICAS};
#[allow(unused_imports)]
pub use proxy::{Proxy, ProxyStats};

impl ControlPlane {
    /// Every complete record of the audit log so far.
    pub fn audit(&self) -> Vec<audit::Record> {
        audit::read(&self.audit_log_path()).expect("audit log")
    }
}
