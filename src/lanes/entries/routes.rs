//! Building a LaneEntry's HTTPRoutes from the typed Gateway API structs (`src/gateway`): edge
//! routes at the gateways of its `parentRefs`, mesh routes at each of its Services. A value of
//! the entry that an HTTPRoute cannot hold (a match type it does not know) is a problem on the
//! entry, and that rule is left out; nothing is dropped unreported. Pure: no client, no clock.

use std::collections::BTreeMap;

use kube::ResourceExt;

use super::context::{EntryContext, EntryReport, ValidRule};
use super::links::{no_lane_filter, Link};
use super::route_parts::*;
use crate::api::{EntryLaneStatus, EntryMode, EntryRule, LaneRoute, ParentRef, RouteMatch, SubsetSource};
use crate::gateway::{
    HttpRoute, HttpRouteParentRefs, HttpRouteRules, HttpRouteRulesBackendRefs, HttpRouteRulesMatches,
    HttpRouteSpec,
};
use crate::lanes::model::{ParentKey, ServiceInfo};
use crate::lanes::naming;
use crate::lanes::problem::{Kind, ObjectKey, Problem};
use crate::lanes::resolution::mesh_services;

/// The shares of requests in no lane that an edge entry's routes give each weighted lane, and
/// what stays on baseline (none for a mesh entry).
#[derive(Default)]
struct Shares<'a> {
    lanes: BTreeMap<&'a str, i32>,
    baseline: Option<i32>,
    /// The preview hostnames of each lane.
    preview_hosts: BTreeMap<String, Vec<String>>,
}

/// The weights of an entry's lanes, when they add up to more than 100.
fn weights_over_100(entry: &ObjectKey, shares: &Shares) -> Option<Problem> {
    let total: i32 = shares.lanes.values().sum();
    (total > 100).then(|| Problem::WeightsOver100 {
        entry: entry.clone(),
        weights: shares.lanes.iter().map(|(l, w)| ((*l).to_owned(), *w)).collect(),
    })
}

impl<'a> EntryContext<'a> {
    /// The routes and report of an entry at the gateways of its `parentRefs`.
    pub fn edge_routes(&self, problems: &mut Vec<Problem>) -> (Vec<HttpRoute>, EntryReport) {
        let mut valid = Vec::new();
        for (i, rule) in self.entry.spec.rules.iter().flatten().enumerate() {
            valid.extend(self.valid_rule(i, rule, problems));
        }
        let mut rules = Vec::new();
        let mut shares = Shares::default();
        for rule in &valid {
            self.edge_rule(rule, (&mut rules, &mut shares), problems);
        }
        let refs = self.entry.spec.parent_refs.iter().flatten();
        let parents: Vec<ParentKey> = refs.map(|p| parent_key(&self.key.namespace, p)).collect();
        problems.extend(weights_over_100(self.key, &shares));
        let mut routes: Vec<HttpRoute> = Vec::new();
        if let Some(hostnames) = self.unclaimed_hostnames(problems) {
            let spec = HttpRouteSpec {
                parent_refs: Some(self.parent_refs()),
                hostnames: Some(hostnames),
                rules: None,
            };
            routes.extend(split(rules).into_iter().enumerate().map(|(part, chunk)| {
                let name = naming::route_name(&self.key.name, &part.to_string());
                self.route(&name, spec.clone(), chunk)
            }));
        }
        let (previews, preview_hosts) = self.preview_routes(&valid, problems);
        routes.extend(previews);
        shares.preview_hosts = preview_hosts;
        let report = self.report(EntryMode::Edge, &routes, parents, &shares);
        (routes, report)
    }

    /// The entry's hostnames that no older claim holds (an empty list: every hostname), each
    /// held one reported; `None` when an older claim holds them all.
    fn unclaimed_hostnames(&self, problems: &mut Vec<Problem>) -> Option<Vec<String>> {
        let hostnames = self.entry.spec.hostnames.clone().unwrap_or_default();
        let contested = self.claims.contested(&self.key.namespace, self.entry);
        let held: Vec<String> = contested.iter().filter_map(|c| c.hostname.clone()).collect();
        let every_held = contested.iter().any(|c| c.hostname.is_none());
        problems.extend(contested.into_iter().map(|c| Problem::HostnameConflict {
            entry: self.key.clone(),
            hostname: c.hostname,
            lane: None,
            holder: c.holder,
            path: Some(c.path),
        }));
        let kept: Vec<String> = hostnames
            .iter()
            .filter(|h| !held.iter().any(|c| h.eq_ignore_ascii_case(c)))
            .cloned()
            .collect();
        let every_hostname = hostnames.is_empty() && !every_held;
        (every_hostname || !kept.is_empty()).then_some(kept)
    }

    /// The entry's rule `i`, if it can be routed; `None` with the problem if not.
    fn valid_rule<'r>(
        &self,
        i: usize,
        rule: &'r EntryRule,
        problems: &mut Vec<Problem>,
    ) -> Option<ValidRule<'r>> {
        let field = format!("spec.rules[{i}].backend");
        let (service, port) = (&rule.backend.service, rule.backend.port);
        self.backend(&field, service, Some(port), problems)?;
        let every = [RouteMatch::default()];
        let matches = if rule.matches.is_empty() {
            &every[..]
        } else {
            &rule.matches
        };
        let typed = match typed_matches(matches, &format!("spec.rules[{i}].matches")) {
            Ok(typed) => typed,
            Err((field, message)) => {
                problems.push(Problem::EntryMatch {
                    entry: self.key.clone(),
                    field,
                    message,
                });
                return None;
            }
        };
        let header = self.entry.header();
        let uses_header = matches
            .iter()
            .any(|m| m.headers.iter().any(|h| h.name.eq_ignore_ascii_case(header)));
        Some(ValidRule {
            i,
            rule,
            typed,
            uses_header,
        })
    }

    /// The rules of one of the entry's rules: per lane, its matches plus the lane's headers to
    /// the Service that serves the lane, and the lane's link and cookie rules ([`Link`]); the
    /// link's clearing (and, with sticky gray, the rule of the cookie of a draw into no lane);
    /// then one for requests in no lane (to baseline and the weighted lanes).
    fn edge_rule(
        &self,
        valid: &ValidRule,
        (rules, shares): (&mut Vec<HttpRouteRules>, &mut Shares<'a>),
        problems: &mut Vec<Problem>,
    ) {
        let ValidRule {
            i,
            rule,
            ref typed,
            uses_header,
        } = *valid;
        let (service, port) = (&rule.backend.service, rule.backend.port);
        let link = Link::of(self.entry);
        if uses_header {
            problems.push(Problem::LaneHeaderInMatch {
                entry: self.key.clone(),
                field: format!("spec.rules[{i}].matches"),
                header: self.entry.header().to_ascii_lowercase(),
            });
        } else {
            for lane in self.lanes {
                let Some(target) = self.target(service, Some(lane.lane)) else {
                    continue;
                };
                rules.push(HttpRouteRules {
                    matches: Some(
                        typed
                            .iter()
                            .map(|m| with_lane_headers(m, &lane.headers))
                            .collect(),
                    ),
                    backend_refs: Some(vec![backend_ref(&target, port)]),
                    ..Default::default()
                });
                rules.extend(link.lane_rules(typed, lane, backend_ref(&target, port)));
            }
        }
        let Some(baseline) = self.target(service, None) else {
            let field = format!("spec.rules[{i}].backend.service");
            problems.push(baseline_taken(self.key, &field, service));
            return;
        };
        problems.extend(self.baseline_empty(service));
        if !uses_header {
            rules.extend(link.clear_rules(typed, backend_ref(&baseline, port)));
            if self.entry.spec.sticky_gray.is_some() {
                rules.push(link.drawn_to_baseline_rule(typed, backend_ref(&baseline, port)));
            }
        }
        let refs = self.no_lane_refs((service, port), &baseline, !uses_header, shares);
        rules.push(HttpRouteRules {
            matches: Some(typed.clone()),
            filters: (!uses_header).then(|| vec![no_lane_filter(self.entry.header())]),
            backend_refs: Some(refs),
            ..Default::default()
        });
    }

    /// Where requests in no lane go at `service`: baseline, and each weighted lane's share
    /// (setting the lane's headers on the way) when the entry applies weights.
    fn no_lane_refs(
        &self,
        (service, port): (&str, i32),
        baseline: &str,
        weighted: bool,
        shares: &mut Shares<'a>,
    ) -> Vec<HttpRouteRulesBackendRefs> {
        let mut refs = Vec::new();
        let mut total = 0;
        let sticky = self
            .entry
            .spec
            .sticky_gray
            .is_some()
            .then(|| Link::of(self.entry));
        let lanes = self.lanes.iter().filter(|l| l.route.spec.weight > 0);
        for lane in lanes.filter(|_| weighted && self.entry.applies_weights()) {
            if self.empty_strict(lane.route, service) {
                continue;
            }
            let Some(target) = self.target(service, Some(lane.lane)) else {
                continue;
            };
            let weight = lane.route.spec.weight;
            total += weight;
            shares.lanes.insert(lane.lane, weight);
            let mut filters = vec![set_headers(&lane.headers)];
            filters.extend(sticky.as_ref().map(|l| l.drawn(Some(lane.lane))));
            refs.push(HttpRouteRulesBackendRefs {
                weight: Some(weight),
                filters: Some(filters),
                ..backend_ref(&target, port)
            });
        }
        let base = (100 - total).max(0);
        shares.baseline = Some(base);
        if refs.is_empty() {
            refs.push(backend_ref(baseline, port));
        } else {
            refs.insert(
                0,
                HttpRouteRulesBackendRefs {
                    weight: Some(base),
                    filters: sticky.as_ref().map(|l| vec![l.drawn(None)]),
                    ..backend_ref(baseline, port)
                },
            );
        }
        refs
    }

    /// The routes and report of a mesh entry: per HTTP port of each Service, one route with a
    /// rule per lane and one to baseline.
    pub fn mesh_routes(&self, problems: &mut Vec<Problem>) -> (Vec<HttpRoute>, EntryReport) {
        let mut routes = Vec::new();
        let mut ignored = Vec::new();
        for service in mesh_services(self.ns, self.entry, self.key, &mut Vec::new()) {
            let Some(svc) = self.backend("spec.mesh.services", &service, None, problems) else {
                continue;
            };
            let Some(baseline) = self.target(&service, None) else {
                problems.push(baseline_taken(self.key, "spec.mesh.services", &service));
                continue;
            };
            problems.extend(self.baseline_empty(&service));
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
                routes.extend(self.mesh_port_routes(&service, port, &baseline));
            }
        }
        if !ignored.is_empty() {
            problems.push(Problem::EntryBackend {
                entry: self.key.clone(),
                field: "spec.mesh".into(),
                message: format!(
                    "no HTTP port (appProtocol http, or a port named http, http-* or web) on {}: not routed",
                    ignored.join(", ")
                ),
            });
        }
        let report = self.report(EntryMode::Mesh, &routes, Vec::new(), &Shares::default());
        (routes, report)
    }

    /// The routes of one port of a Service in the mesh.
    fn mesh_port_routes(&self, service: &str, port: i32, baseline: &str) -> Vec<HttpRoute> {
        let mut rules: Vec<HttpRouteRules> = self
            .lanes
            .iter()
            .filter_map(|lane| {
                let target = self.target(service, Some(lane.lane))?;
                let headers = lane
                    .headers
                    .iter()
                    .map(|(n, v)| header_match(n, v, None))
                    .collect();
                Some(HttpRouteRules {
                    matches: Some(vec![HttpRouteRulesMatches {
                        headers: Some(headers),
                        ..Default::default()
                    }]),
                    backend_refs: Some(vec![backend_ref(&target, port)]),
                    ..Default::default()
                })
            })
            .collect();
        rules.push(HttpRouteRules {
            backend_refs: Some(vec![backend_ref(baseline, port)]),
            ..Default::default()
        });
        let parent = HttpRouteParentRefs {
            group: Some(Kind::Service.group().into_owned()),
            kind: Some(Kind::Service.name().into_owned()),
            name: service.to_owned(),
            port: Some(port),
            ..Default::default()
        };
        let spec = HttpRouteSpec {
            parent_refs: Some(vec![parent]),
            ..Default::default()
        };
        split(rules)
            .into_iter()
            .enumerate()
            .map(|(part, chunk)| {
                let name = naming::route_name(&self.key.name, &format!("{service}-{port}-{part}"));
                self.route(&name, spec.clone(), chunk)
            })
            .collect()
    }

    /// What the entry amounts to, for its status: the same for both modes.
    fn report(
        &self,
        mode: EntryMode,
        routes: &[HttpRoute],
        parents: Vec<ParentKey>,
        shares: &Shares,
    ) -> EntryReport {
        EntryReport {
            mode,
            lanes: self
                .lanes
                .iter()
                .map(|l| EntryLaneStatus {
                    lane: l.lane.to_owned(),
                    headers: l.headers.iter().map(|(n, v)| format!("{n}: {v}")).collect(),
                    weight: shares.lanes.get(l.lane).copied().unwrap_or(0),
                    link: (mode == EntryMode::Edge).then(|| Link::of(self.entry).query_for(l.lane)),
                    preview_hostnames: shares.preview_hosts.get(l.lane).cloned().unwrap_or_default(),
                })
                .collect(),
            baseline_weight: shares.baseline,
            routes: routes.iter().map(|r| r.name_any()).collect(),
            parents,
        }
    }

    /// The user Service `service`, if it can take lanes; a problem naming `field` otherwise.
    fn backend(
        &self,
        field: &str,
        service: &str,
        port: Option<i32>,
        problems: &mut Vec<Problem>,
    ) -> Option<&'a ServiceInfo> {
        let invalid = |field: String, message: String| Problem::EntryBackend {
            entry: self.key.clone(),
            field,
            message,
        };
        let Some(svc) = self.ns.services.get(service).filter(|s| !s.is_managed()) else {
            problems.push(Problem::EntryUnknownService {
                entry: self.key.clone(),
                field: format!("{field}.service"),
                service: service.to_owned(),
            });
            return None;
        };
        if svc.selector.is_none() || svc.external_name {
            problems.push(invalid(
                format!("{field}.service"),
                format!(
                    "Service {service:?} has no pod selector, so its instances cannot be split into lanes"
                ),
            ));
            return None;
        }
        if let Some(port) = port.filter(|p| !svc.ports.iter().any(|sp| sp.port == *p)) {
            problems.push(invalid(
                format!("{field}.port"),
                format!("Service {service:?} has no port {port}"),
            ));
            return None;
        }
        Some(svc)
    }

    /// The lane's subset at `service` is Empty and the lane is strict: it takes no share.
    fn empty_strict(&self, route: &LaneRoute, service: &str) -> bool {
        let strict = self.served.plan.lanes.get(route.lane()).is_some_and(|d| d.strict);
        strict
            && self.served.routes.get(&route.name_any()).is_some_and(|r| {
                r.services
                    .iter()
                    .any(|s| s.name == service && s.source == SubsetSource::Empty)
            })
    }
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

fn parent_key(entry_ns: &str, p: &ParentRef) -> ParentKey {
    crate::lanes::model::parent_key!(p, entry_ns)
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

#[cfg(test)]
mod tests {
    use super::{typed_match, RouteMatch};
    use crate::gateway::{HttpRouteRulesMatchesMethod, HttpRouteRulesMatchesPathType};

    fn route_match(value: serde_json::Value) -> RouteMatch {
        serde_json::from_value(value).expect("match")
    }

    #[test]
    fn a_match_is_built_typed_with_the_gateway_api_defaults() {
        let m =
            route_match(serde_json::json!({"headers": [{"name": "x-user", "value": "a"}], "method": "GET"}));
        let typed = typed_match(&m, "spec.rules[0].matches[0]").expect("typed");
        let path = typed.path.expect("path");
        assert_eq!(path.r#type, Some(HttpRouteRulesMatchesPathType::PathPrefix));
        assert_eq!(path.value.as_deref(), Some("/"));
        assert_eq!(typed.method, Some(HttpRouteRulesMatchesMethod::Get));
        assert_eq!(typed.headers.expect("headers").len(), 1);
        assert_eq!(typed.query_params, None);
    }

    #[test]
    fn a_value_an_httproute_cannot_hold_names_its_field() {
        let mut m = route_match(serde_json::json!({"path": {"value": "/orders"}}));
        m.path.as_mut().expect("path").type_ = "Prefix".into();
        let (field, message) = typed_match(&m, "spec.rules[1].matches[0]").expect_err("not representable");
        assert_eq!(field, "spec.rules[1].matches[0].path.type");
        assert!(
            message.contains("Prefix") && message.contains("PathPrefix"),
            "{message}"
        );
    }
}
