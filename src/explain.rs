//! `laneway explain` (also `kubectl laneway explain`): which pods serve a lane, where they come
//! from and why, read from the live cluster or offline from YAML files.

use std::path::PathBuf;

use anyhow::Context;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Pod, PodCondition, PodIP, PodStatus, Service};
use k8s_openapi::jiff::Timestamp;
use kube::api::ListParams;
use kube::{Api, Client, ResourceExt};

use crate::api::{EntryLaneStatus, EntryRule, LaneEntry, LaneRoute, RouteMatch, TagRule, DEFAULT_LANE_LABEL};
use crate::kind::Kind;
use crate::lanes::{Config, Desired, EntryReport, Explanation, Index, LanePlan, PodInfo, ServiceInfo};

/// Explain how a lane resolves, or where an HTTP request goes.
#[derive(clap::Args, Debug, Clone)]
pub struct ExplainArgs {
    /// The lane (not needed to explain a request).
    #[arg(required_unless_present_any = ["host", "path", "header"])]
    pub lane: Option<String>,
    /// Explain a request to this host (at the LaneEntries' gateways).
    #[arg(long)]
    pub host: Option<String>,
    /// Explain a request for this path (`/` when not given), with its query (`/?lane=gray`).
    #[arg(long)]
    pub path: Option<String>,
    /// Explain a request carrying this header, `name=value` (repeatable).
    #[arg(long = "header", short = 'H')]
    pub header: Vec<String>,
    /// Only this service, with every tier that was tried.
    #[arg(long, short = 's')]
    pub service: Option<String>,
    /// Namespace of the lane.
    #[arg(long, short = 'n', default_value = "default")]
    pub namespace: String,
    /// Read these manifests (files or directories) instead of the cluster; Deployments count
    /// as ready pods.
    #[arg(long = "filename", short = 'f')]
    pub files: Vec<PathBuf>,
    /// Pod label that carries an instance's static lane.
    #[arg(long, env = "LANEWAY_LANE_LABEL", default_value = DEFAULT_LANE_LABEL)]
    pub lane_label: String,
}

/// Runs `explain` and returns what it prints.
pub async fn run(args: &ExplainArgs) -> anyhow::Result<String> {
    let config = Config {
        lane_label: args.lane_label.clone(),
    };
    let index = if args.files.is_empty() {
        let client = Client::try_default()
            .await
            .context("no Kubernetes configuration (KUBECONFIG)")?;
        live(client, &args.namespace, config).await?
    } else {
        offline(&args.files, config)?
    };
    let now = Timestamp::now();
    let lane = args.lane.clone().unwrap_or_default();
    if args.host.is_some() || args.path.is_some() || !args.header.is_empty() {
        let headers: Vec<(String, String)> = args
            .header
            .iter()
            .map(|h| {
                // `name=value` or `name: value`, whichever separator comes first (a cookie's
                // value holds `=`).
                let at = h.find(['=', ':']).unwrap_or(h.len());
                let (n, v) = (&h[..at], h.get(at + 1..).unwrap_or_default());
                (n.trim().to_ascii_lowercase(), v.trim().to_owned())
            })
            .collect();
        let request = Request {
            host: args.host.clone(),
            path: args.path.clone().unwrap_or_else(|| "/".into()),
            headers,
        };
        return Ok(render_request(&index, &args.namespace, &request, now));
    }
    Ok(match &args.service {
        Some(service) => render_service(
            &index.explain(&args.namespace, service, &lane, now),
            &args.namespace,
        ),
        None => render_lane(&index, &args.namespace, &lane, now),
    })
}

async fn live(client: Client, ns: &str, config: Config) -> anyhow::Result<Index> {
    let lp = ListParams::default();
    let pods = Api::<Pod>::namespaced(client.clone(), ns)
        .list(&lp)
        .await
        .context("listing pods")?;
    let services = Api::<Service>::namespaced(client.clone(), ns)
        .list(&lp)
        .await
        .context("listing services")?;
    let routes = Api::<LaneRoute>::namespaced(client.clone(), ns)
        .list(&lp)
        .await
        .context("listing LaneRoutes")?;
    let rules = Api::<TagRule>::namespaced(client.clone(), ns)
        .list(&lp)
        .await
        .context("listing TagRules")?;
    let entries = Api::<LaneEntry>::namespaced(client, ns)
        .list(&lp)
        .await
        .context("listing LaneEntries")?;
    let mut index = Index::from_objects(
        config,
        pods.items.iter().filter_map(PodInfo::from_pod),
        services.items.iter().filter_map(ServiceInfo::from_service),
        routes.items,
        rules.items,
    );
    for entry in entries.items {
        index.apply(entry);
    }
    Ok(index)
}

/// An index from manifests; each Deployment stands for `replicas` ready pods.
pub fn offline(files: &[PathBuf], config: Config) -> anyhow::Result<Index> {
    let (mut pods, mut services, mut routes, mut rules) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut entries = Vec::new();
    let mut expanded = Vec::new();
    for path in files {
        if path.is_dir() {
            let mut entries: Vec<PathBuf> = std::fs::read_dir(path)
                .with_context(|| format!("reading {}", path.display()))?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|x| x == "yaml" || x == "yml"))
                .collect();
            entries.sort();
            expanded.extend(entries);
        } else {
            expanded.push(path.clone());
        }
    }
    for file in &expanded {
        let text = std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
        let docs: Vec<serde_json::Value> =
            serde_saphyr::from_multiple(&text).with_context(|| format!("parsing {}", file.display()))?;
        for value in docs {
            let field = |name: &str| {
                value
                    .get(name)
                    .and_then(|k| k.as_str())
                    .unwrap_or_default()
                    .to_owned()
            };
            let (api_version, kind) = (field("apiVersion"), field("kind"));
            let parse = || format!("{kind} in {}", file.display());
            match Kind::of_api(&api_version, &kind) {
                Some(Kind::Deployment) => pods.extend(deployment_pods(
                    &serde_json::from_value(value).with_context(parse)?,
                )),
                Some(Kind::Pod) => pods.extend(PodInfo::from_pod(
                    &serde_json::from_value(value).with_context(parse)?,
                )),
                Some(Kind::Service) => services.extend(ServiceInfo::from_service(
                    &serde_json::from_value(value).with_context(parse)?,
                )),
                Some(Kind::LaneRoute) => routes.push(serde_json::from_value(value).with_context(parse)?),
                Some(Kind::TagRule) => rules.push(serde_json::from_value(value).with_context(parse)?),
                Some(Kind::LaneEntry) => {
                    entries.push(serde_json::from_value::<LaneEntry>(value).with_context(parse)?)
                }
                // Everything else in the files (Gateways, ConfigMaps, ...) plays no part.
                _ => {}
            }
        }
    }
    let mut index = Index::from_objects(config, pods, services, routes, rules);
    for entry in entries {
        index.apply(entry);
    }
    Ok(index)
}

/// The pods a Deployment asks for, as running and ready.
fn deployment_pods(d: &Deployment) -> Vec<PodInfo> {
    let Some(spec) = &d.spec else { return Vec::new() };
    (0..spec.replicas.unwrap_or(1))
        .filter_map(|i| {
            let mut meta = spec.template.metadata.clone().unwrap_or_default();
            meta.name = Some(format!("{}-{i}", d.name_any()));
            meta.namespace = d.namespace().or(Some("default".into()));
            let pod = Pod {
                metadata: meta,
                spec: spec.template.spec.clone(),
                status: Some(PodStatus {
                    pod_ips: Some(vec![PodIP { ip: "-".into() }]),
                    conditions: Some(vec![PodCondition {
                        type_: "Ready".into(),
                        status: "True".into(),
                        ..Default::default()
                    }]),
                    ..Default::default()
                }),
            };
            PodInfo::from_pod(&pod)
        })
        .collect()
}

fn table(rows: &[Vec<String>]) -> String {
    let widths: Vec<usize> = (0..rows[0].len())
        .map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for row in rows {
        let cells: Vec<String> = row
            .iter()
            .zip(&widths)
            .map(|(cell, w)| format!("{cell:<w$}"))
            .collect();
        out.push_str(cells.join("  ").trim_end());
        out.push('\n');
    }
    out
}

fn header(e: &Explanation, ns: &str) -> String {
    let mut chain: Vec<String> = e
        .tiers
        .iter()
        .skip(1)
        .map(|t| t.lane.clone().unwrap_or("baseline".into()))
        .collect();
    if chain.is_empty() {
        chain.push("none".into());
    }
    match &e.route {
        Some(route) => format!(
            "Lane {} in namespace {ns} (LaneRoute {route}{}; falls back to: {})\n",
            e.lane,
            if e.strict { ", strict" } else { "" },
            chain.join(", ")
        ),
        None => format!(
            "Lane {} in namespace {ns} (no LaneRoute declares it; falls back to: {})\n",
            e.lane,
            chain.join(", ")
        ),
    }
}

fn pods_of(e: &Explanation) -> String {
    match e.chosen() {
        Some(t) => t
            .ready
            .iter()
            .map(|(name, _)| name.as_str())
            .collect::<Vec<_>>()
            .join(", "),
        None => "-".into(),
    }
}

/// Every service of the lane: where its subset comes from and which pods serve.
pub fn render_lane(index: &Index, ns: &str, lane: &str, now: Timestamp) -> String {
    let plan = index.plan(ns, now);
    let services: Vec<String> = plan
        .lanes
        .get(lane)
        .map(|l| l.services.clone())
        .unwrap_or_default();
    if services.is_empty() {
        return format!("No LaneRoute in namespace {ns} declares lane {lane}.\n");
    }
    let explanations: Vec<Explanation> = services.iter().map(|s| index.explain(ns, s, lane, now)).collect();
    let mut rows = vec![vec![
        "SERVICE".into(),
        "SOURCE".into(),
        "READY".into(),
        "PODS".into(),
    ]];
    let mut sorted: Vec<&Explanation> = explanations.iter().collect();
    sorted.sort_by(|a, b| a.service.cmp(&b.service));
    for e in sorted {
        let (source, ready) = match &e.missing {
            Some(_) => ("Missing".to_owned(), "-".to_owned()),
            None => (
                e.source.to_string(),
                e.chosen().map_or(0, |t| t.ready.len()).to_string(),
            ),
        };
        rows.push(vec![e.service.clone(), source, ready, pods_of(e)]);
    }
    format!("{}\n{}", header(&explanations[0], ns), table(&rows))
}

/// One service in one lane, with every tier that was tried.
pub fn render_service(e: &Explanation, ns: &str) -> String {
    let mut out = header(e, ns);
    out.push_str(&format!("Service {}: ", e.service));
    if let Some(missing) = &e.missing {
        out.push_str(&format!("no subset: {missing}\n"));
        return out;
    }
    out.push_str(&format!("source {}, served by {}\n", e.source, pods_of(e)));
    let chosen = e.tiers.iter().position(|t| !t.ready.is_empty());
    for (i, t) in e.tiers.iter().enumerate() {
        let name = t
            .lane
            .as_ref()
            .map_or("baseline".to_owned(), |l| format!("lane {l}"));
        let ready: Vec<&str> = t.ready.iter().map(|(n, _)| n.as_str()).collect();
        let mut line = format!("  {}. {name}: {} ready", i + 1, ready.len());
        if !ready.is_empty() {
            line.push_str(&format!(" ({})", ready.join(", ")));
        }
        if !t.not_ready.is_empty() {
            line.push_str(&format!(", not ready: {}", t.not_ready.join(", ")));
        }
        match chosen {
            Some(c) if c == i => line.push_str("  <- serves"),
            Some(c) if i > c => line.push_str("  (not needed)"),
            _ => {}
        }
        out.push_str(&line);
        out.push('\n');
    }
    if chosen.is_none() {
        out.push_str(if e.strict {
            "  No tier has a ready pod and the lane is strict: requests in this lane get no endpoint.\n"
        } else {
            "  No tier has a ready pod: requests in this lane get no endpoint.\n"
        });
    }
    out
}

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
    let plan = index.plan(ns, now);
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
    let first = index.explain(ns, service, &lane.lane, now);
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
                let e = self.index.explain(self.ns, s, l, self.now);
                (e.source.to_string(), pods_of(&e))
            }
            None => {
                let e = self.index.explain(self.ns, s, "", self.now);
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
