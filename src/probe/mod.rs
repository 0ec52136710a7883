//! `kubectl laneway probe`: sends one request into a lane at a LaneEntry, with a probe mark that
//! makes every hop running laneway's Java libraries answer with a record of itself (pod, the lane
//! it carried, how it learnt it, its own lane); then compares the hops with the tier laneway
//! expected at each service (the LaneRoute's status) and names the first hop where the lane was
//! lost, the tier differs, or the chain stopped short. The result is saved per lane for
//! `kubectl laneway dashboard`.

mod verdict;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::Context;
use k8s_openapi::api::core::v1::{Pod, Service};
use k8s_openapi::jiff::Timestamp;
use kube::{Api, Client, ResourceExt};
use serde::{Deserialize, Serialize};

use crate::api::{LaneEntry, LaneRoute};
pub use verdict::{judge, render, Expected, Finding, Hop, Verdict};

/// The request header that carries the probe mark (the Java libraries' `Probe.MARK`).
pub const MARK_HEADER: &str = "laneway-probe";
/// The response header that carries the hop records back (`Probe.HOPS`).
pub const HOPS_HEADER: &str = "laneway-hops";

/// Send a request into a lane and show the hops it reached.
#[derive(clap::Args, Debug, Clone)]
pub struct ProbeArgs {
    /// The lane.
    pub lane: String,
    /// The LaneEntry to enter at: its lane header carries the lane, its first hostname is the
    /// request's host.
    #[arg(long, required_unless_present = "gateway")]
    pub entry: Option<String>,
    /// The request's path.
    #[arg(long, default_value = "/")]
    pub path: String,
    /// Where to send the request (default `http://<the entry's first hostname>`); without
    /// `--entry`, any HTTP entry that takes the lane in `--header` (a Spring Cloud Gateway).
    #[arg(long)]
    pub gateway: Option<String>,
    /// The lane header, without `--entry`.
    #[arg(long, default_value = crate::api::DEFAULT_LANE_HEADER, conflicts_with = "entry")]
    pub header: String,
    /// The services the request should reach with the lane, in order (default: the LaneRoute's).
    #[arg(long, value_delimiter = ',')]
    pub expect: Vec<String>,
    /// Namespace of the lane.
    #[arg(long, short = 'n', default_value = "default")]
    pub namespace: String,
    /// Pod label that carries an instance's static lane.
    #[arg(long, env = "LANEWAY_LANE_LABEL", default_value = crate::api::DEFAULT_LANE_LABEL)]
    pub lane_label: String,
}

/// What `probe` saves of its last run per lane, and the dashboard shows.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct LastProbe {
    /// When it ran (RFC 3339).
    pub at: String,
    /// Where the request entered: the LaneEntry, or the `--gateway` URL.
    pub entry: String,
    /// The sentence naming the first fault, or saying the chain is clean.
    pub summary: String,
    pub verdict: Verdict,
}

/// Runs the probe; returns what it prints and whether the chain was clean.
pub async fn run(args: &ProbeArgs) -> anyhow::Result<(String, bool)> {
    let client = Client::try_default()
        .await
        .context("no Kubernetes configuration (KUBECONFIG)")?;
    let ns = &args.namespace;
    let entry = match &args.entry {
        Some(name) => Some(
            Api::<LaneEntry>::namespaced(client.clone(), ns)
                .get(name)
                .await
                .with_context(|| format!("reading LaneEntry {ns}/{name}"))?,
        ),
        None => None,
    };
    let expected = expected(&client, ns, &args.lane, &args.expect).await?;
    let mark = mark();
    let (at, mut hops) = send(args, entry.as_ref(), &mark).await?;
    from_cluster(&client, args, &expected, &mut hops).await?;
    let verdict = judge(&args.lane, &expected, hops);
    let text = render(&verdict);
    let clean = verdict.is_clean();
    let last = LastProbe {
        at: Timestamp::now().to_string(),
        entry: at.clone(),
        summary: text.lines().last().unwrap_or_default().to_owned(),
        verdict,
    };
    match probes_dir() {
        Some(dir) => {
            if let Err(e) = save(&dir, ns, &args.lane, &last) {
                eprintln!("laneway probe: not saved: {e:#}");
            }
        }
        None => eprintln!("laneway probe: not saved: no HOME or XDG_STATE_HOME"),
    }
    let head = format!("probe {mark} into lane {} at {at}\n", args.lane);
    Ok((head + &text, clean))
}

/// The lane's services in the order the user expects them (else the LaneRoute's), each with the
/// tier its status says serves the lane there.
async fn expected(client: &Client, ns: &str, lane: &str, expect: &[String]) -> anyhow::Result<Vec<Expected>> {
    let routes = Api::<LaneRoute>::namespaced(client.clone(), ns)
        .list(&Default::default())
        .await
        .context("listing LaneRoutes")?;
    let route = routes
        .items
        .into_iter()
        .find(|r| r.status.as_ref().and_then(|s| s.lane.as_deref()) == Some(lane) || r.name_any() == lane)
        .with_context(|| format!("no LaneRoute for lane {lane} in {ns}"))?;
    let statuses = route.status.map(|s| s.services).unwrap_or_default();
    let names: Vec<String> = if expect.is_empty() {
        statuses.iter().map(|s| s.name.clone()).collect()
    } else {
        expect.to_vec()
    };
    Ok(names
        .into_iter()
        .map(|service| Expected {
            source: statuses
                .iter()
                .find(|s| s.name == service)
                .map(|s| s.source.clone()),
            service,
        })
        .collect())
}

/// A fresh probe mark: letters, digits and dashes, as the Java libraries accept.
fn mark() -> String {
    let nanos = Timestamp::now().as_nanosecond();
    format!("{:x}-{:x}", nanos, std::process::id())
}

/// Sends the probed request the way the entry expects a lane; returns where it entered and the
/// hops it answered with.
async fn send(args: &ProbeArgs, entry: Option<&LaneEntry>, mark: &str) -> anyhow::Result<(String, Vec<Hop>)> {
    let host = entry.and_then(|e| e.spec.hostnames.iter().flatten().next().cloned());
    let base = match (&args.gateway, &host) {
        (Some(gateway), _) => gateway.trim_end_matches('/').to_owned(),
        (None, Some(host)) => format!("http://{host}"),
        (None, None) => anyhow::bail!("the LaneEntry has no hostname: give --gateway"),
    };
    let url = format!("{base}{}", args.path);
    let header = entry.map_or(args.header.as_str(), |e| e.header());
    let mut request = reqwest::Client::new()
        .get(&url)
        .header(header, &args.lane)
        .header(MARK_HEADER, mark)
        .timeout(std::time::Duration::from_secs(30));
    if let Some(host) = host {
        request = request.header(reqwest::header::HOST, host);
    }
    let at = match entry {
        Some(e) => format!("LaneEntry {}/{}", args.namespace, e.name_any()),
        None => url.clone(),
    };
    let response = request
        .send()
        .await
        .with_context(|| format!("sending the probe to {url}"))?;
    let Some(hops) = response.headers().get(HOPS_HEADER) else {
        return Ok((at, Vec::new()));
    };
    let hops = serde_json::from_slice(hops.as_bytes())
        .with_context(|| format!("reading the {HOPS_HEADER} header"))?;
    Ok((at, hops))
}

/// Fills in, for each hop whose pod is in the cluster, the lane's service it belongs to (the
/// first expected Service that selects it) and its own lane as its label says.
async fn from_cluster(
    client: &Client,
    args: &ProbeArgs,
    expected: &[Expected],
    hops: &mut [Hop],
) -> anyhow::Result<()> {
    let services = Api::<Service>::namespaced(client.clone(), &args.namespace);
    let mut selectors: Vec<(String, BTreeMap<String, String>)> = Vec::new();
    for e in expected {
        if let Some(svc) = services.get_opt(&e.service).await.context("reading Services")? {
            let selector = svc.spec.and_then(|s| s.selector).unwrap_or_default();
            selectors.push((e.service.clone(), selector));
        }
    }
    let pods = Api::<Pod>::namespaced(client.clone(), &args.namespace);
    for hop in hops.iter_mut() {
        let Some(name) = hop.pod.as_deref() else { continue };
        let Some(pod) = pods.get_opt(name).await.context("reading Pods")? else {
            continue;
        };
        let labels = pod.labels();
        hop.own = labels.get(&args.lane_label).cloned();
        hop.service = selectors
            .iter()
            .find(|(_, sel)| !sel.is_empty() && sel.iter().all(|(k, v)| labels.get(k) == Some(v)))
            .map(|(name, _)| name.clone());
    }
    Ok(())
}

/// Where the last probe of each lane is kept: `$XDG_STATE_HOME/laneway/probes` (else
/// `~/.local/state/laneway/probes`).
pub fn probes_dir() -> Option<PathBuf> {
    let state = std::env::var_os("XDG_STATE_HOME")
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".local/state")))?;
    Some(state.join("laneway/probes"))
}

/// Saves `last` as the last probe of `lane` in `ns` under `dir` ([`probes_dir`]).
pub fn save(dir: &Path, ns: &str, lane: &str, last: &LastProbe) -> anyhow::Result<()> {
    let dir = dir.join(ns);
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let path = dir.join(format!("{lane}.json"));
    std::fs::write(&path, serde_json::to_vec_pretty(last)?)
        .with_context(|| format!("writing {}", path.display()))
}

/// The last probe saved for `lane` in `ns` under `dir`, if any.
pub fn last_probe(dir: &Path, ns: &str, lane: &str) -> Option<LastProbe> {
    let path = dir.join(ns).join(format!("{lane}.json"));
    serde_json::from_slice(&std::fs::read(path).ok()?).ok()
}

#[cfg(test)]
mod tests;
