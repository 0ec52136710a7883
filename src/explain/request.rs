//! Where an HTTP request goes: the LaneEntry rule and the lane a gateway would pick for it
//! (by a preview hostname, the lane header, the lane link or the lane cookie), and the Service
//! and pods that serve it at each service of the lane.

use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;

use super::{header, pods_of, table};
use crate::api::{EntryLaneStatus, EntryRule, LaneEntry, RouteMatch};
use crate::lanes::{self, Desired, EntryReport, Index, LanePlan};

/// An HTTP request, as far as routing looks at it.
pub struct Request {
    pub host: Option<String>,
    pub path: String,
    /// Header names in lower case.
    pub headers: Vec<(String, String)>,
}

impl Request {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The path without its query.
    fn path_only(&self) -> &str {
        self.path.split_once('?').map_or(self.path.as_str(), |(p, _)| p)
    }

    /// The value of query parameter `name` (empty when it has none).
    fn query(&self, name: &str) -> Option<&str> {
        let (_, query) = self.path.split_once('?')?;
        query.split('&').find_map(|kv| {
            let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
            (k == name).then_some(v)
        })
    }

    /// The value of cookie `name`.
    fn cookie(&self, name: &str) -> Option<&str> {
        self.header("cookie")?.split(';').find_map(|c| {
            let (k, v) = c.trim().split_once('=')?;
            (k == name).then_some(v)
        })
    }

    /// The request passes a LaneEntry rule's match (exact and prefix paths, exact headers).
    fn matches(&self, m: &RouteMatch) -> bool {
        let path = self.path_only();
        let path_ok = match &m.path {
            None => true,
            Some(p) => match p.type_.as_str() {
                "Exact" => path == p.value,
                "PathPrefix" => {
                    let prefix = p.value.trim_end_matches('/');
                    path == prefix || path.starts_with(&format!("{prefix}/")) || prefix.is_empty()
                }
                _ => false,
            },
        };
        path_ok
            && m.headers.iter().all(|h| {
                h.type_.as_deref().unwrap_or("Exact") == "Exact"
                    && self.header(&h.name) == Some(h.value.as_str())
            })
            && m.query_params.is_empty()
            && m.method.is_none()
    }
}

/// How a gateway ranks a match: exact path, path length, number of headers.
fn precedence(m: &RouteMatch) -> (bool, usize, usize) {
    let (exact, len) = match &m.path {
        Some(p) => (p.type_ == "Exact", p.value.len()),
        None => (false, 1),
    };
    (exact, len, m.headers.len())
}

/// Where a request goes: the LaneEntry rule it enters by, its lane, and for each service of the
/// lane which Service and pods serve it.
pub fn render_request(index: &Index, ns: &str, request: &Request, now: Timestamp) -> String {
    let mut out = format!(
        "A request to {}{}",
        request.host.as_deref().unwrap_or("any host"),
        request.path
    );
    if !request.headers.is_empty() {
        let shown: Vec<String> = request.headers.iter().map(|(n, v)| format!("{n}: {v}")).collect();
        out.push_str(&format!(" with {}", shown.join(", ")));
    }
    out.push_str(&format!(" (namespace {ns})\n"));
    let desired = index.desired(ns, now);
    let Some((entry, i, rule)) = entered_rule(index, ns, request, &desired) else {
        out.push_str("No LaneEntry of the namespace takes it.\n");
        return out;
    };
    let service = &rule.backend.service;
    out.push_str(&format!(
        "enters at LaneEntry {}, rule {} -> {}:{}\n",
        entry.name_any(),
        i + 1,
        service,
        rule.backend.port
    ));
    let report = desired.entries.get(&entry.name_any());
    let (lane, how) = match report.map(|r| entered_lane(entry, r, request)) {
        Some(Entered::Lane(lane, how)) => (lane, how),
        Some(Entered::Cleared) => {
            out.push_str("in no lane: its Services' baseline; the lane link's clearing answers it with the lane cookie removed.\n");
            return out;
        }
        _ => {
            out.push_str(&in_no_lane(report));
            return out;
        }
    };
    if let Some(how) = how {
        out.push_str(how);
        out.push('\n');
    }
    let plan = lanes::lane_plan(index, ns, now);
    let mut services: Vec<String> = plan
        .lanes
        .get(&lane.lane)
        .map(|l| l.services.clone())
        .unwrap_or_default();
    if !services.contains(service) {
        services.push(service.clone());
    }
    services.sort();
    let mut rows = vec![vec![
        "SERVICE".into(),
        "ADDRESSED".into(),
        "SOURCE".into(),
        "PODS".into(),
    ]];
    let lookup = Lookup {
        index,
        ns,
        now,
        desired: &desired,
        plan: &plan,
    };
    rows.extend(services.iter().map(|s| lookup.service_row(s, &lane.lane)));
    let first = lanes::explain(index, ns, service, &lane.lane, now);
    out.push_str("in ");
    out.push_str(&header(&first, ns).replacen("Lane ", "lane ", 1));
    out.push('\n');
    out.push_str(&table(&rows));
    out
}

/// How a request enters lanes at an entry.
enum Entered<'a> {
    /// In this lane; how, unless by the lane header.
    Lane(&'a EntryLaneStatus, Option<&'static str>),
    /// In no lane, by the lane link's clearing (`?lane=`).
    Cleared,
    None,
}

/// The lane a request enters at `entry`, as a gateway picks it: by a preview hostname, the lane
/// header, the lane link, then the lane cookie.
fn entered_lane<'a>(entry: &LaneEntry, report: &'a EntryReport, request: &Request) -> Entered<'a> {
    let lanes = &report.lanes;
    let host = request.host.as_ref();
    if let Some(l) = host.and_then(|h| lanes.iter().find(|l| l.preview_hostnames.contains(h))) {
        return Entered::Lane(
            l,
            Some("by its preview hostname (the lane header is set for the next hops)"),
        );
    }
    let by_header = lanes.iter().find(|l| {
        l.headers.iter().all(|h| {
            let (n, v) = h.split_once(": ").unwrap_or((h, ""));
            request.header(n) == Some(v)
        })
    });
    if let Some(l) = by_header {
        return Entered::Lane(l, None);
    }
    let named = |lane: Option<&str>| lanes.iter().find(|l| Some(l.lane.as_str()) == lane);
    let link = request.query(entry.lane_query());
    if link == Some("") {
        return Entered::Cleared;
    }
    if let Some(l) = named(link) {
        return Entered::Lane(l, Some("by its lane link (answered with the lane cookie)"));
    }
    match named(request.cookie(entry.header())) {
        Some(l) => Entered::Lane(l, Some("by its lane cookie")),
        None => Entered::None,
    }
}

/// The first edge LaneEntry whose hostnames (or preview hostnames) take the request, with its
/// rule that a gateway would pick (and that rule's position).
fn entered_rule<'a>(
    index: &'a Index,
    ns: &str,
    request: &Request,
    desired: &Desired,
) -> Option<(&'a LaneEntry, usize, &'a EntryRule)> {
    index
        .lane_entries(ns)
        .filter(|e| e.spec.mesh.is_none())
        .find_map(|e| {
            let hosts = e.spec.hostnames.clone().unwrap_or_default();
            let preview = |h: &String| {
                desired
                    .entries
                    .get(&e.name_any())
                    .is_some_and(|r| r.lanes.iter().any(|l| l.preview_hostnames.contains(h)))
            };
            let host_ok = hosts.is_empty()
                || request
                    .host
                    .as_ref()
                    .is_some_and(|h| hosts.contains(h) || preview(h));
            if !host_ok {
                return None;
            }
            // As a gateway ranks matches: an exact path, then the longest prefix, then more
            // headers; the first rule among equals.
            let (_, i, rule) = e
                .spec
                .rules
                .iter()
                .flatten()
                .enumerate()
                .filter_map(|(i, r)| {
                    let default = [RouteMatch::default()];
                    let matches = if r.matches.is_empty() {
                        &default[..]
                    } else {
                        &r.matches[..]
                    };
                    let best = matches
                        .iter()
                        .filter(|m| request.matches(m))
                        .map(precedence)
                        .max()?;
                    Some((best, i, r))
                })
                .max_by_key(|(p, i, _)| (*p, std::cmp::Reverse(*i)))?;
            Some((e, i, rule))
        })
}

/// Where a request in no lane goes: the baseline, or a lane's weighted share.
fn in_no_lane(report: Option<&EntryReport>) -> String {
    let mut out = "in no lane: its Services' baseline".to_owned();
    if let Some(r) = report.filter(|r| r.lanes.iter().any(|l| l.weight > 0)) {
        let shares: Vec<String> = r
            .lanes
            .iter()
            .filter(|l| l.weight > 0)
            .map(|l| format!("{} {}%", l.lane, l.weight))
            .collect();
        out.push_str(&format!(
            " ({}% of such requests), or by weight: {}",
            r.baseline_weight.unwrap_or(100),
            shares.join(", ")
        ));
    }
    out.push_str(".\n");
    out
}

/// What a request's services resolve to in one namespace at one time.
struct Lookup<'a> {
    index: &'a Index,
    ns: &'a str,
    now: Timestamp,
    desired: &'a Desired,
    plan: &'a LanePlan,
}

impl Lookup<'_> {
    /// Service `s` for a request in `lane`: the Service addressed (the one that serves the
    /// first lane of [lane, its fallbacks] that includes `s`, else the baseline), its source
    /// and its pods.
    fn service_row(&self, s: &str, lane: &str) -> Vec<String> {
        let chain = std::iter::once(lane).chain(self.plan.chain(lane).iter().map(String::as_str));
        let mut serving = chain.filter(|l| self.plan.lanes_of(s).any(|d| d.lane == *l));
        let addressed = self
            .desired
            .served_by(self.plan, s, Some(lane))
            .unwrap_or_else(|| "-".to_owned());
        let (source, pods) = match serving.next() {
            Some(l) => {
                let e = lanes::explain(self.index, self.ns, s, l, self.now);
                (e.source.to_string(), pods_of(&e))
            }
            None => {
                let e = lanes::explain(self.index, self.ns, s, "", self.now);
                let baseline = e.tiers.last().map(|t| {
                    t.ready
                        .iter()
                        .map(|(n, _)| n.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                });
                (
                    "Baseline".to_owned(),
                    baseline.filter(|p| !p.is_empty()).unwrap_or_else(|| "-".into()),
                )
            }
        };
        vec![s.to_owned(), addressed, source, pods]
    }
}
