//! `laneway explain` (also `kubectl laneway explain`): which pods serve a lane, where they come
//! from and why, read from the live cluster or offline from YAML files.

use std::path::PathBuf;

use anyhow::Context;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Pod, PodCondition, PodIP, PodStatus, Service};
use k8s_openapi::jiff::Timestamp;
use kube::api::ListParams;
use kube::{Api, Client, ResourceExt};

use crate::api::{LaneEntry, LaneRoute, TagRule, DEFAULT_LANE_LABEL};
use crate::kind::Kind;

mod request;
use crate::lanes::{self, Config, Explanation, Index, PodInfo, ServiceInfo};
pub use request::{render_request, Request};

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
        nacos_marks: true,
        ..Config::default()
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
            &lanes::explain(&index, &args.namespace, service, &lane, now),
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

pub(crate) fn table(rows: &[Vec<String>]) -> String {
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
    let plan = lanes::lane_plan(index, ns, now);
    let services: Vec<String> = plan
        .lanes
        .get(lane)
        .map(|l| l.services.clone())
        .unwrap_or_default();
    if services.is_empty() {
        return format!("No LaneRoute in namespace {ns} declares lane {lane}.\n");
    }
    let explanations: Vec<Explanation> = services
        .iter()
        .map(|s| lanes::explain(index, ns, s, lane, now))
        .collect();
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
