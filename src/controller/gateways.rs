//! What laneway knows of the Gateway API in the cluster: whether it is installed, and which
//! features each gateway's class says it supports.

use std::collections::BTreeMap;

use crate::gateway::BACKEND_HEADER_FEATURE;
use crate::kind::Kind;
use crate::lanes::{ObjectKey, ParentKey};

#[derive(Debug, Default)]
pub(super) struct Gateways {
    /// The API server serves HTTPRoutes (`None` until known).
    pub api: Option<bool>,
    /// The class of each Gateway (`None` once the Gateway is gone).
    pub classes_of: BTreeMap<ObjectKey, Option<String>>,
    /// The features each GatewayClass lists (`None`: it lists none).
    pub features: BTreeMap<String, Option<Vec<String>>>,
}

impl Gateways {
    /// Whether the gateway behind `parent` sets headers from a backendRef's filters: `None`
    /// when its class does not say (or laneway may not read it).
    pub fn backend_header_filters(&self, parent: &ParentKey) -> Option<bool> {
        if Kind::of(&parent.group, &parent.kind) != Some(Kind::Gateway) {
            return None;
        }
        let key = ObjectKey::new(&parent.namespace, &parent.name);
        let class = self.classes_of.get(&key)?.as_ref()?;
        let features = self.features.get(class)?.as_ref()?;
        Some(features.iter().any(|f| f == BACKEND_HEADER_FEATURE))
    }
}
