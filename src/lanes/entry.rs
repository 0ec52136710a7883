//! The HTTPRoutes of LaneEntries: where requests enter lanes, over HTTP.
//!
//! At Service S, a request whose lane header names lane L goes to the lane Service of the first
//! lane in [L, L's fallback chain] that includes S, else to S's baseline Service. A request that
//! names no lane goes to the baseline Service, except for the share each lane with a `weight`
//! takes (at a gateway only: in a mesh a new draw at every hop would split one request's
//! chain); such requests get the lane's header set on the way, so that later hops keep them in
//! the lane. Pure: no client, no clock.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::core::{Selector, SelectorExt};
use kube::ResourceExt;
use serde_json::json;

use super::index::{Index, Namespace};
use super::model::{ParentKey, ServiceInfo, MANAGED_BY_LABEL, MANAGED_BY_VALUE};
use super::naming;
use super::plan::{LanePlan, Owner, Stamp};
use super::problem::{Kind, ObjectKey, Problem};
use super::resolve::{owner_references, Desired};
use crate::api::{EntryLaneStatus, LaneEntry, LaneRoute, RouteMatch, SubsetSource};
use crate::gateway::{HttpRoute, GROUP};

/// Label naming the LaneEntry on each of its HTTPRoutes.
pub const ENTRY_LABEL: &str = "laneway.io/entry";
/// Gateway API limits: rules per HTTPRoute, and matches across its rules.
const MAX_RULES: usize = 16;
const MAX_MATCHES: usize = 128;

/// What one LaneEntry amounts to.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct EntryReport {
    /// `edge` or `mesh`.
    pub mode: String,
    pub lanes: Vec<EntryLaneStatus>,
    /// Share of requests in no lane that stay on baseline (at a gateway).
    pub baseline_weight: Option<i32>,
    /// The HTTPRoutes written for the entry, by name.
    pub routes: Vec<String>,
    /// The parents of the edge routes.
    pub parents: Vec<ParentKey>,
}

/// A lane as an entry sees it.
struct EntryLane<'a> {
    lane: &'a str,
    route: &'a LaneRoute,
    /// Header (name, value) pairs that put a request into the lane.
    headers: Vec<(String, String)>,
}

fn is_http_port(port: &k8s_openapi::api::core::v1::ServicePort) -> bool {
    match port.app_protocol.as_deref() {
        Some(p) => matches!(p, "http" | "kubernetes.io/h2c" | "kubernetes.io/ws"),
        None => port
            .name
            .as_deref()
            .is_some_and(|n| n == "http" || n == "web" || n.starts_with("http-")),
    }
}

fn parent_key(entry_ns: &str, p: &crate::api::ParentRef) -> ParentKey {
    ParentKey {
        group: p.group.clone().unwrap_or_else(|| GROUP.to_owned()),
        kind: p.kind.clone().unwrap_or_else(|| "Gateway".to_owned()),
        namespace: p.namespace.clone().unwrap_or_else(|| entry_ns.to_owned()),
        name: p.name.clone(),
        section: p.section_name.clone(),
        port: p.port,
    }
}

/// The Services a mesh entry selects.
fn mesh_services(
    ns: &Namespace,
    entry: &LaneEntry,
    key: &ObjectKey,
    problems: &mut Vec<Problem>,
) -> Vec<String> {
    let Some(mesh) = &entry.spec.mesh else {
        return Vec::new();
    };
    let field = "spec.mesh.serviceSelector";
    ns.listed_or_selected(
        mesh.services.as_ref(),
        mesh.service_selector.as_ref(),
        (Kind::LaneEntry, key, field),
        problems,
    )
}

impl Index {
    /// Notes, in `plan`, the Services the namespace's LaneEntries send requests to.
    pub(crate) fn plan_entries(&self, ns: &Namespace, namespace: &str, plan: &mut LanePlan) {
        for (name, entry) in &ns.entries {
            let key = ObjectKey::new(namespace, name);
            let owner = Owner {
                kind: "LaneEntry",
                name: name.clone(),
                uid: entry.uid().unwrap_or_default(),
            };
            let mut services: BTreeSet<String> = entry
                .spec
                .rules
                .iter()
                .flatten()
                .map(|r| r.backend.service.clone())
                .collect();
            services.extend(mesh_services(ns, entry, &key, &mut plan.problems));
            for service in services {
                let owners = plan.entry_services.entry(service).or_default();
                if !owners.contains(&owner) {
                    owners.push(owner.clone());
                }
            }
        }
    }

    /// The lanes `entry` lets requests into (declared, live, selected), with their headers.
    fn entry_lanes<'a>(
        &self,
        ns: &'a Namespace,
        plan: &'a LanePlan,
        entry: &LaneEntry,
        key: &ObjectKey,
        problems: &mut Vec<Problem>,
    ) -> Vec<EntryLane<'a>> {
        let selector = match entry.spec.lane_selector.clone().map(Selector::try_from) {
            None => None,
            Some(Ok(sel)) => Some(sel),
            Some(Err(e)) => {
                problems.push(Problem::InvalidSelector {
                    kind: Kind::LaneEntry,
                    object: key.clone(),
                    field: "spec.laneSelector".into(),
                    error: e.to_string(),
                });
                return Vec::new();
            }
        };
        let header = entry.header();
        let mut lanes: Vec<EntryLane> = Vec::new();
        for def in plan.lanes.values() {
            let Some(route) = ns.routes.get(&def.route.name) else {
                continue;
            };
            if selector.as_ref().is_some_and(|s| !s.matches(route.labels())) {
                continue;
            }
            let mut headers: Vec<(String, String)> = match &route.spec.match_ {
                Some(m) if !m.headers.is_empty() => m
                    .headers
                    .iter()
                    .map(|h| (h.name.to_ascii_lowercase(), h.value.clone()))
                    .collect(),
                _ => vec![(header.to_ascii_lowercase(), def.lane.clone())],
            };
            headers.sort();
            headers.dedup();
            if let Some(other) = lanes.iter().find(|l| l.headers == headers) {
                problems.push(Problem::DuplicateLaneMatch {
                    entry: key.clone(),
                    lane: other.lane.to_owned(),
                    other: def.lane.clone(),
                    headers: headers
                        .iter()
                        .map(|(n, v)| format!("{n}: {v}"))
                        .collect::<Vec<_>>()
                        .join(", "),
                });
                continue;
            }
            lanes.push(EntryLane {
                lane: &def.lane,
                route,
                headers,
            });
        }
        lanes
    }

    /// The HTTPRoutes and reports of every LaneEntry of `namespace`, into `desired`; marks the
    /// lanes each entry routes in the LaneRoutes' reports.
    pub(crate) fn entry_outputs(&self, namespace: &str, plan: &LanePlan, desired: &mut Desired) {
        desired.http_routes.clear();
        desired.entries.clear();
        let before: Vec<Vec<String>> = desired
            .routes
            .values_mut()
            .map(|r| std::mem::take(&mut r.entries))
            .collect();
        self.entries_into(namespace, plan, desired);
        for (report, before) in desired.routes.values_mut().zip(before) {
            if report.entries != before {
                report.stamp = Stamp::fresh();
            }
        }
    }

    fn entries_into(&self, namespace: &str, plan: &LanePlan, desired: &mut Desired) {
        let Some(ns) = self.ns(namespace) else { return };
        for (name, entry) in &ns.entries {
            let key = ObjectKey::new(namespace, name);
            let mut problems = Vec::new();
            let lanes = self.entry_lanes(ns, plan, entry, &key, &mut problems);
            let (routes, report) = match &entry.spec.mesh {
                Some(_) => self.mesh_routes(ns, plan, desired, entry, &key, &lanes, &mut problems),
                None => self.edge_routes(ns, plan, desired, entry, &key, &lanes, &mut problems),
            };
            for lane in &lanes {
                if let Some(r) = desired.routes.get_mut(&lane.route.name_any()) {
                    r.entries.push(name.clone());
                }
            }
            desired
                .http_routes
                .extend(routes.into_iter().map(|r| (r.name_any(), r)));
            desired.entries.insert(name.clone(), report);
            desired.problems.extend(problems);
        }
    }

    /// The user Service `service`, if it can take lanes; a problem naming `field` otherwise.
    fn entry_backend<'a>(
        &self,
        ns: &'a Namespace,
        key: &ObjectKey,
        field: &str,
        service: &str,
        port: Option<i32>,
        problems: &mut Vec<Problem>,
    ) -> Option<&'a ServiceInfo> {
        let Some(svc) = ns.services.get(service).filter(|s| !s.is_managed()) else {
            problems.push(Problem::EntryUnknownService {
                entry: key.clone(),
                field: format!("{field}.service"),
                service: service.to_owned(),
            });
            return None;
        };
        if svc.selector.is_none() || svc.external_name {
            problems.push(Problem::EntryBackend {
                entry: key.clone(),
                field: format!("{field}.service"),
                message: format!(
                    "Service {service:?} has no pod selector, so its instances cannot be split into lanes"
                ),
            });
            return None;
        }
        if let Some(port) = port.filter(|p| !svc.ports.iter().any(|sp| sp.port == *p)) {
            problems.push(Problem::EntryBackend {
                entry: key.clone(),
                field: format!("{field}.port"),
                message: format!("Service {service:?} has no port {port}"),
            });
            return None;
        }
        Some(svc)
    }

    /// Where a request in `lane` goes at `service`: the lane Service of the first lane in
    /// [lane, its fallbacks] that includes the service, else the baseline Service; `None` when
    /// that Service is not produced (its name is taken by someone else's Service).
    fn target(
        &self,
        plan: &LanePlan,
        desired: &Desired,
        service: &str,
        lane: Option<&str>,
    ) -> Option<String> {
        if let Some(lane) = lane {
            let chain = std::iter::once(lane).chain(plan.chain(lane).iter().map(String::as_str));
            for l in chain {
                let name = naming::lane_service_name(service, l);
                if desired.services.contains_key(&name) {
                    return Some(name);
                }
            }
        }
        let baseline = naming::baseline_service_name(service);
        desired.services.contains_key(&baseline).then_some(baseline)
    }

    /// The lane's subset at `service` is Empty and the lane is strict: it takes no share.
    fn empty_strict(&self, plan: &LanePlan, desired: &Desired, route: &LaneRoute, service: &str) -> bool {
        let strict = plan.lanes.get(route.lane()).is_some_and(|d| d.strict);
        strict
            && desired.routes.get(&route.name_any()).is_some_and(|r| {
                r.services
                    .iter()
                    .any(|s| s.name == service && s.source == SubsetSource::Empty)
            })
    }

    #[allow(clippy::too_many_arguments)]
    fn edge_routes(
        &self,
        ns: &Namespace,
        plan: &LanePlan,
        desired: &Desired,
        entry: &LaneEntry,
        key: &ObjectKey,
        lanes: &[EntryLane],
        problems: &mut Vec<Problem>,
    ) -> (Vec<HttpRoute>, EntryReport) {
        let header = entry.header().to_ascii_lowercase();
        let mut rules: Vec<serde_json::Value> = Vec::new();
        let mut shares: BTreeMap<&str, i32> = BTreeMap::new();
        let mut baseline_share = None;
        for (i, rule) in entry.spec.rules.iter().flatten().enumerate() {
            let field = format!("spec.rules[{i}].backend");
            let service = &rule.backend.service;
            let port = rule.backend.port;
            if self
                .entry_backend(ns, key, &field, service, Some(port), problems)
                .is_none()
            {
                continue;
            }
            let matches: Vec<RouteMatch> = if rule.matches.is_empty() {
                vec![RouteMatch::default()]
            } else {
                rule.matches.clone()
            };
            let uses_header = matches
                .iter()
                .any(|m| m.headers.iter().any(|h| h.name.eq_ignore_ascii_case(&header)));
            if uses_header {
                problems.push(Problem::LaneHeaderInMatch {
                    entry: key.clone(),
                    field: format!("spec.rules[{i}].matches"),
                    header: header.clone(),
                });
            } else {
                for lane in lanes {
                    let Some(target) = self.target(plan, desired, service, Some(lane.lane)) else {
                        continue;
                    };
                    let matches: Vec<serde_json::Value> =
                        matches.iter().map(|m| route_match(m, &lane.headers)).collect();
                    rules.push(json!({
                        "matches": matches,
                        "backendRefs": [{"name": target, "port": port}],
                    }));
                }
            }
            // Requests in no lane: baseline, and the weighted lanes' shares.
            let Some(baseline) = self.target(plan, desired, service, None) else {
                problems.push(baseline_taken(key, &format!("{field}.service"), service));
                continue;
            };
            let mut refs = Vec::new();
            let mut total = 0;
            if !uses_header && entry.applies_weights() {
                for lane in lanes.iter().filter(|l| l.route.spec.weight > 0) {
                    if self.empty_strict(plan, desired, lane.route, service) {
                        continue;
                    }
                    let Some(target) = self.target(plan, desired, service, Some(lane.lane)) else {
                        continue;
                    };
                    let weight = lane.route.spec.weight;
                    total += weight;
                    shares.insert(lane.lane, weight);
                    let set: Vec<serde_json::Value> = lane
                        .headers
                        .iter()
                        .map(|(n, v)| json!({"name": n, "value": v}))
                        .collect();
                    refs.push(json!({
                        "name": target, "port": port, "weight": weight,
                        "filters": [{"type": "RequestHeaderModifier", "requestHeaderModifier": {"set": set}}],
                    }));
                }
            }
            let base = (100 - total).max(0);
            baseline_share = Some(base);
            if refs.is_empty() {
                refs.push(json!({"name": baseline, "port": port}));
            } else {
                refs.insert(0, json!({"name": baseline, "port": port, "weight": base}));
            }
            let matches: Vec<serde_json::Value> = matches.iter().map(|m| route_match(m, &[])).collect();
            rules.push(json!({"matches": matches, "backendRefs": refs}));
        }
        let ns_name = &key.namespace;
        let parents: Vec<ParentKey> = entry
            .spec
            .parent_refs
            .iter()
            .flatten()
            .map(|p| parent_key(ns_name, p))
            .collect();
        self.report_conflicts(entry, key, &parents, problems);
        let parent_refs: Vec<serde_json::Value> = entry
            .spec
            .parent_refs
            .iter()
            .flatten()
            .map(|p| serde_json::to_value(p).unwrap_or_default())
            .collect();
        let mut routes = Vec::new();
        for (part, chunk) in split(rules).into_iter().enumerate() {
            let name = naming::route_name(&key.name, &part.to_string());
            let spec = json!({
                "parentRefs": parent_refs,
                "hostnames": entry.spec.hostnames.clone().unwrap_or_default(),
                "rules": chunk,
            });
            routes.extend(http_route(entry, &name, spec));
        }
        let report = EntryReport {
            mode: "edge".into(),
            lanes: lanes
                .iter()
                .map(|l| EntryLaneStatus {
                    lane: l.lane.to_owned(),
                    headers: l.headers.iter().map(|(n, v)| format!("{n}: {v}")).collect(),
                    weight: shares.get(l.lane).copied().unwrap_or(0),
                })
                .collect(),
            baseline_weight: baseline_share,
            routes: routes.iter().map(|r| r.name_any()).collect(),
            parents,
        };
        (routes, report)
    }

    #[allow(clippy::too_many_arguments)]
    fn mesh_routes(
        &self,
        ns: &Namespace,
        plan: &LanePlan,
        desired: &Desired,
        entry: &LaneEntry,
        key: &ObjectKey,
        lanes: &[EntryLane],
        problems: &mut Vec<Problem>,
    ) -> (Vec<HttpRoute>, EntryReport) {
        let mut routes = Vec::new();
        let mut ignored = Vec::new();
        for service in mesh_services(ns, entry, key, &mut Vec::new()) {
            let Some(svc) = self.entry_backend(ns, key, "spec.mesh.services", &service, None, problems)
            else {
                continue;
            };
            let Some(baseline) = self.target(plan, desired, &service, None) else {
                problems.push(baseline_taken(key, "spec.mesh.services", &service));
                continue;
            };
            let http: Vec<i32> = svc
                .ports
                .iter()
                .filter(|p| is_http_port(p))
                .map(|p| p.port)
                .collect();
            if http.is_empty() {
                ignored.push(service.clone());
            }
            for port in http {
                let mut rules: Vec<serde_json::Value> = lanes
                    .iter()
                    .filter_map(|lane| {
                        let target = self.target(plan, desired, &service, Some(lane.lane))?;
                        let headers: Vec<serde_json::Value> = lane
                            .headers
                            .iter()
                            .map(|(n, v)| json!({"name": n, "value": v}))
                            .collect();
                        Some(json!({
                            "matches": [{"headers": headers}],
                            "backendRefs": [{"name": target, "port": port}],
                        }))
                    })
                    .collect();
                rules.push(json!({"backendRefs": [{"name": baseline, "port": port}]}));
                let parent = json!({"group": "", "kind": "Service", "name": service, "port": port});
                for (part, chunk) in split(rules).into_iter().enumerate() {
                    let name = naming::route_name(&key.name, &format!("{service}-{port}-{part}"));
                    let spec = json!({"parentRefs": [parent], "rules": chunk});
                    routes.extend(http_route(entry, &name, spec));
                }
            }
        }
        if !ignored.is_empty() {
            problems.push(Problem::EntryBackend {
                entry: key.clone(),
                field: "spec.mesh".into(),
                message: format!(
                    "no HTTP port (appProtocol http, or a port named http, http-* or web) on {}: not routed",
                    ignored.join(", ")
                ),
            });
        }
        let report = EntryReport {
            mode: "mesh".into(),
            lanes: lanes
                .iter()
                .map(|l| EntryLaneStatus {
                    lane: l.lane.to_owned(),
                    headers: l.headers.iter().map(|(n, v)| format!("{n}: {v}")).collect(),
                    weight: 0,
                })
                .collect(),
            baseline_weight: None,
            routes: routes.iter().map(|r| r.name_any()).collect(),
            parents: Vec::new(),
        };
        (routes, report)
    }

    /// Someone else's HTTPRoute on the same parent and hostname with a rule that matches only
    /// on one of the entry's paths ties with the entry's rule for requests in no lane.
    fn report_conflicts(
        &self,
        entry: &LaneEntry,
        key: &ObjectKey,
        parents: &[ParentKey],
        problems: &mut Vec<Problem>,
    ) {
        let hostnames = entry.spec.hostnames.clone().unwrap_or_default();
        let paths: BTreeSet<(String, String)> = entry
            .spec
            .rules
            .iter()
            .flatten()
            .flat_map(|r| {
                if r.matches.is_empty() {
                    vec![("PathPrefix".to_owned(), "/".to_owned())]
                } else {
                    r.matches
                        .iter()
                        .map(|m| {
                            m.path
                                .as_ref()
                                .map(|p| (p.type_.clone(), p.value.clone()))
                                .unwrap_or_else(|| ("PathPrefix".to_owned(), "/".to_owned()))
                        })
                        .collect()
                }
            })
            .collect();
        for other in self.all_http_routes().filter(|r| !r.ours) {
            let Some(parent) = other
                .parents
                .iter()
                .find(|p| parents.iter().any(|q| q.overlaps(p)))
            else {
                continue;
            };
            let shares_host = hostnames.is_empty()
                || other.hostnames.is_empty()
                || other.hostnames.iter().any(|h| hostnames.contains(h));
            if !shares_host {
                continue;
            }
            if let Some((kind, value)) = other.plain_paths.iter().find(|p| paths.contains(*p)) {
                problems.push(Problem::RouteConflict {
                    entry: key.clone(),
                    route: ObjectKey::new(&other.namespace, &other.name),
                    parent: parent.display(),
                    path: format!("{kind} {value}"),
                });
            }
        }
    }
}

/// The name of `service`'s baseline Service is held by a Service that is not laneway's.
fn baseline_taken(key: &ObjectKey, field: &str, service: &str) -> Problem {
    Problem::EntryBackend {
        entry: key.clone(),
        field: field.to_owned(),
        message: format!(
            "Service {:?}, where requests for {service:?} in no lane go, exists and is not laneway's",
            naming::baseline_service_name(service)
        ),
    }
}

/// One HTTPRoute match: the entry's match plus the lane's headers.
fn route_match(m: &RouteMatch, lane_headers: &[(String, String)]) -> serde_json::Value {
    let mut out = serde_json::Map::new();
    let path = m
        .path
        .clone()
        .map(|p| (p.type_, p.value))
        .unwrap_or_else(|| ("PathPrefix".into(), "/".into()));
    out.insert("path".into(), json!({"type": path.0, "value": path.1}));
    let mut headers: Vec<serde_json::Value> = m
        .headers
        .iter()
        .map(|h| json!({"type": h.type_.clone().unwrap_or_else(|| "Exact".into()), "name": h.name, "value": h.value}))
        .collect();
    headers.extend(
        lane_headers
            .iter()
            .map(|(n, v)| json!({"type": "Exact", "name": n, "value": v})),
    );
    if !headers.is_empty() {
        out.insert("headers".into(), json!(headers));
    }
    if !m.query_params.is_empty() {
        let q: Vec<serde_json::Value> = m
            .query_params
            .iter()
            .map(|q| json!({"type": q.type_.clone().unwrap_or_else(|| "Exact".into()), "name": q.name, "value": q.value}))
            .collect();
        out.insert("queryParams".into(), json!(q));
    }
    if let Some(method) = &m.method {
        out.insert("method".into(), json!(method));
    }
    serde_json::Value::Object(out)
}

/// Rules in chunks that stay within the Gateway API limits per HTTPRoute.
fn split(rules: Vec<serde_json::Value>) -> Vec<Vec<serde_json::Value>> {
    let mut out: Vec<Vec<serde_json::Value>> = Vec::new();
    let mut matches = 0;
    for rule in rules {
        let n = rule["matches"].as_array().map_or(1, Vec::len).max(1);
        let full = out
            .last()
            .is_none_or(|c| c.len() >= MAX_RULES || matches + n > MAX_MATCHES);
        if full {
            out.push(Vec::new());
            matches = 0;
        }
        matches += n;
        if let Some(chunk) = out.last_mut() {
            chunk.push(rule);
        }
    }
    out
}

/// An HTTPRoute of `entry`: labelled and owned as laneway's.
fn http_route(entry: &LaneEntry, name: &str, spec: serde_json::Value) -> Option<HttpRoute> {
    let spec: crate::gateway::HttpRouteSpec = serde_json::from_value(spec).ok()?;
    let owner = Owner {
        kind: "LaneEntry",
        name: entry.name_any(),
        uid: entry.uid().unwrap_or_default(),
    };
    Some(HttpRoute {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            namespace: entry.namespace(),
            labels: Some(BTreeMap::from([
                (MANAGED_BY_LABEL.to_owned(), MANAGED_BY_VALUE.to_owned()),
                (ENTRY_LABEL.to_owned(), entry.name_any()),
            ])),
            owner_references: Some(owner_references(&[owner])),
            ..Default::default()
        },
        spec,
        status: None,
    })
}
