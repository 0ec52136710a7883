//! Entry rules: which lanes a call in no lane may be drawn into at an RPC entry (the first Dubbo
//! or Spring Cloud call made outside any request being served), per application.
//!
//! An application's document lists the lanes whose LaneRoutes include a Service of its pods,
//! with the weight, conditions and sticky key each draws by. A lane is listed only while it or
//! one of its fallback lanes has a ready instance in the namespace: a call drawn into it is then
//! served by the lane where it has instances and falls back at every other hop, as a tagged call
//! does. A lane with neither a weight that applies nor a condition draws nothing and is left out.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use crate::api::{RpcCondition, StickyKey};
use crate::lanes::index::{Namespace, PodEntry};
use crate::lanes::naming;
use crate::lanes::resolution::LanePlan;

/// What follows the application (or Nacos service) name in an entry document's key.
pub const ENTRY_SUFFIX: &str = ".laneway-entry";

/// One lane a call in no lane may be drawn into.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct EntryLane {
    pub name: String,
    /// Percentage (0-100) of calls in no lane drawn into the lane.
    pub weight: i32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sticky: Option<StickyKey>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<RpcCondition>,
}

/// The rendered entry document of one application.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EntryRules {
    /// `<application>.laneway-entry`: the ZooKeeper node name, Nacos dataId and ConfigMap key.
    pub key: String,
    /// The JSON document (which SnakeYAML, in Dubbo and Spring Boot, reads as YAML).
    pub content: String,
    /// Lowercase hex SHA-256 of `content`.
    pub content_hash: String,
}

#[derive(Serialize)]
struct Document<'a> {
    key: &'a str,
    lanes: &'a [EntryLane],
}

impl EntryRules {
    pub fn new(name: &str, lanes: &[EntryLane]) -> Self {
        let document = Document { key: name, lanes };
        let content = serde_json::to_string_pretty(&document)
            .expect("a document of strings and integers always serialises")
            + "\n";
        EntryRules {
            key: entry_key(name),
            content_hash: naming::digest(&[&content]),
            content,
        }
    }

    /// The document that draws nothing, published before the key is deleted.
    pub fn disabled(name: &str) -> Self {
        EntryRules::new(name, &[])
    }
}

/// The key of `name`'s entry document.
pub fn entry_key(name: &str) -> String {
    format!("{name}{ENTRY_SUFFIX}")
}

/// The lanes a call in no lane to the `governed` pods may be drawn into, in lane name order.
pub(super) fn entry_lanes(ns: &Namespace, governed: &[&PodEntry], plan: &LanePlan) -> Vec<EntryLane> {
    let services: BTreeSet<&str> = governed
        .iter()
        .flat_map(|p| ns.services_selecting(&p.info.labels))
        .collect();
    let ready: BTreeSet<&str> = ns
        .pods
        .values()
        .filter(|p| p.info.is_ready())
        .flat_map(|p| p.tags.iter().map(|(t, _)| t.as_str()))
        .collect();
    let lanes: BTreeMap<&str, &str> = services
        .iter()
        .flat_map(|s| plan.lanes_of(s))
        .filter(|l| ready.contains(l.lane.as_str()) || l.chain.iter().any(|f| ready.contains(f.as_str())))
        .map(|l| (l.lane.as_str(), l.route.name.as_str()))
        .collect();
    lanes
        .into_iter()
        .filter_map(|(lane, route)| {
            let spec = &ns.routes.get(route)?.spec;
            let rpc = spec.rpc_entry.clone().unwrap_or_default();
            let weight = if rpc.apply_weight { spec.weight } else { 0 };
            (weight > 0 || !rpc.conditions.is_empty()).then(|| EntryLane {
                name: lane.to_owned(),
                weight,
                sticky: rpc.sticky,
                conditions: rpc.conditions,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_lanes_with_their_draws() {
        let lanes = [EntryLane {
            name: "gray".into(),
            weight: 10,
            sticky: Some(StickyKey {
                attachment: Some("user_id".into()),
                header: None,
            }),
            conditions: vec![RpcCondition {
                attachment: Some("user_id".into()),
                values: "1~100".into(),
                ..Default::default()
            }],
        }];
        let rules = EntryRules::new("order-service", &lanes);
        assert_eq!(rules.key, "order-service.laneway-entry");
        assert_eq!(
            rules.content,
            r#"{
  "key": "order-service",
  "lanes": [
    {
      "name": "gray",
      "weight": 10,
      "sticky": {
        "attachment": "user_id"
      },
      "conditions": [
        {
          "attachment": "user_id",
          "values": "1~100"
        }
      ]
    }
  ]
}
"#
        );
        assert_eq!(
            EntryRules::disabled("pay").content,
            "{\n  \"key\": \"pay\",\n  \"lanes\": []\n}\n"
        );
    }
}
