//! API traffic per controller, as the API server's audit log records it (one line per request
//! of an audited identity; see `audit_requests_of` in tests/faults/control_plane.rs for the
//! policy).

use std::collections::BTreeMap;
use std::path::Path;

use k8s_openapi::jiff::Timestamp;
use serde::{Deserialize, Serialize};
use serde_json::Value;

const WRITE_VERBS: [&str; 5] = ["create", "update", "patch", "delete", "deletecollection"];

pub struct Request {
    user: String,
    verb: String,
    resource: String,
    received: Timestamp,
}

/// Every complete record of the log.
pub fn read(path: &Path) -> Vec<Request> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    text.lines()
        .filter_map(|line| {
            let v: Value = serde_json::from_str(line).ok()?;
            let s = |v: &Value| v.as_str().unwrap_or_default().to_owned();
            let mut resource = s(&v["objectRef"]["resource"]);
            let sub = s(&v["objectRef"]["subresource"]);
            if !sub.is_empty() {
                resource = format!("{resource}/{sub}");
            }
            Some(Request {
                user: s(&v["user"]["username"]),
                verb: s(&v["verb"]),
                resource,
                received: v["requestReceivedTimestamp"].as_str()?.parse().ok()?,
            })
        })
        .collect()
}

/// One identity's requests received in one window.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Traffic {
    pub requests: u64,
    /// Writes, Lease renewals left out (the built-in controller runs without leader election
    /// here, and they do not depend on the work).
    pub writes: u64,
    pub lease_writes: u64,
    /// Writes by resource (`endpointslices`, `services`, `laneroutes/status`, `events`, ...).
    pub writes_by_resource: BTreeMap<String, u64>,
}

pub fn traffic(log: &[Request], user: &str, from: Timestamp, to: Timestamp) -> Traffic {
    let mut t = Traffic::default();
    for r in log
        .iter()
        .filter(|r| r.user == user && r.received >= from && r.received < to)
    {
        t.requests += 1;
        if !WRITE_VERBS.contains(&r.verb.as_str()) {
            continue;
        }
        if r.resource == "leases" {
            t.lease_writes += 1;
        } else {
            t.writes += 1;
            *t.writes_by_resource.entry(r.resource.clone()).or_default() += 1;
        }
    }
    t
}
