//! What building one LaneEntry's routes reads, and what the entry amounts to: shared by its
//! edge, mesh, link and preview routes.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::ResourceExt;

use super::claims::Claims;
use super::route_parts::parent_ref;
use crate::api::{EntryLaneStatus, EntryMode, EntryRule, LaneEntry, LaneRoute};
use crate::gateway::{HttpRoute, HttpRouteParentRefs, HttpRouteRules, HttpRouteRulesMatches, HttpRouteSpec};
use crate::lanes::index::{Namespace, TagSource};
use crate::lanes::labels::{ENTRY_LABEL, MANAGED_BY_LABEL, MANAGED_BY_VALUE};
use crate::lanes::model::ParentKey;
use crate::lanes::problem::{Kind, ObjectKey, Problem};
use crate::lanes::resolution::{owner_references, Owner, Served};

/// What one LaneEntry amounts to.
#[derive(Clone, Debug, PartialEq)]
pub struct EntryReport {
    pub mode: EntryMode,
    pub lanes: Vec<EntryLaneStatus>,
    /// Share of requests in no lane that stay on baseline (at a gateway).
    pub baseline_weight: Option<i32>,
    /// The HTTPRoutes written for the entry, by name.
    pub routes: Vec<String>,
    /// The parents of the edge routes.
    pub parents: Vec<ParentKey>,
}

/// A lane as an entry sees it.
pub(super) struct EntryLane<'a> {
    pub lane: &'a str,
    pub route: &'a LaneRoute,
    /// Header (name, value) pairs that put a request into the lane.
    pub headers: Vec<(String, String)>,
}

/// What building one LaneEntry's routes reads: the namespace, its lanes and the outputs
/// resolved so far, the entry and the lanes it lets requests into.
pub(super) struct EntryContext<'a> {
    pub ns: &'a Namespace,
    pub served: Served<'a>,
    pub entry: &'a LaneEntry,
    pub key: &'a ObjectKey,
    pub lanes: &'a [EntryLane<'a>],
    /// What every entry and HTTPRoute claims on the gateways.
    pub claims: &'a Claims,
}

/// One of the entry's rules that can be routed: its position, the rule, its matches as an
/// HTTPRoute holds them (every request when it has none), and whether they use the lane header.
pub(super) struct ValidRule<'r> {
    pub i: usize,
    pub rule: &'r EntryRule,
    pub typed: Vec<HttpRouteRulesMatches>,
    pub uses_header: bool,
}

impl EntryContext<'_> {
    /// The entry's routes and report, at its gateways or in the mesh.
    pub(super) fn routes(&self, problems: &mut Vec<Problem>) -> (Vec<HttpRoute>, EntryReport) {
        match &self.entry.spec.mesh {
            Some(_) => self.mesh_routes(problems),
            None => self.edge_routes(problems),
        }
    }

    pub(super) fn parent_refs(&self) -> Vec<HttpRouteParentRefs> {
        self.entry
            .spec
            .parent_refs
            .iter()
            .flatten()
            .map(parent_ref)
            .collect()
    }

    /// An HTTPRoute of the entry with `rules`: labelled and owned as laneway's.
    pub(super) fn route(&self, name: &str, mut spec: HttpRouteSpec, rules: Vec<HttpRouteRules>) -> HttpRoute {
        spec.rules = Some(rules);
        let owner = Owner {
            kind: Kind::LaneEntry,
            name: self.entry.name_any(),
            uid: self.entry.uid().unwrap_or_default(),
        };
        HttpRoute {
            metadata: ObjectMeta {
                name: Some(name.to_owned()),
                namespace: self.entry.namespace(),
                labels: Some(BTreeMap::from([
                    (MANAGED_BY_LABEL.to_owned(), MANAGED_BY_VALUE.to_owned()),
                    (ENTRY_LABEL.to_owned(), self.entry.name_any()),
                ])),
                owner_references: Some(owner_references(&[owner])),
                ..Default::default()
            },
            spec,
            status: None,
        }
    }

    /// Where a request in `lane` (or in none) goes at `service`: [`Served::served_by`].
    pub(super) fn target(&self, service: &str, lane: Option<&str>) -> Option<String> {
        self.served.served_by(service, lane)
    }

    /// The problem, if requests in no lane sent to `service` find its baseline empty because
    /// every ready pod of it is tagged (a Service with no ready pod at all is an outage, not
    /// this).
    pub(super) fn baseline_empty(&self, service: &str) -> Option<Problem> {
        let selector = self.ns.services.get(service)?.selector.as_ref()?;
        let ready: Vec<_> = self
            .ns
            .pods_selected(selector)
            .filter(|p| p.info.is_ready())
            .collect();
        if ready.is_empty() || ready.iter().any(|p| !p.is_tagged()) {
            return None;
        }
        let mut lanes = BTreeSet::new();
        let mut rules = BTreeSet::new();
        for (tag, source) in ready.iter().flat_map(|p| &p.tags) {
            lanes.insert(tag.clone());
            if let TagSource::Rule(rule) = source {
                rules.insert(ObjectKey::new(&self.key.namespace, rule));
            }
        }
        let routes = self
            .ns
            .routes
            .values()
            .filter(|r| lanes.contains(r.lane()))
            .map(|r| ObjectKey::new(&self.key.namespace, &r.name_any()))
            .collect();
        Some(Problem::BaselineEmpty {
            entry: self.key.clone(),
            service: service.to_owned(),
            lanes: lanes.into_iter().collect(),
            routes,
            rules: rules.into_iter().collect(),
        })
    }
}
