use std::net::SocketAddr;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context};
use clap::Parser;
use kube::api::ListParams;
use kube::{Api, Client};
use laneway::api::{LaneEntry, LaneRoute, TagRule, DEFAULT_LANE_LABEL};
use laneway::controller::{Centres, Controller, Health, Settings};
use laneway::lanes::{ClusterIp, Config};
use laneway::leader::{Elector, Fence, LeaseSettings};
use laneway::metrics::Metrics;
use laneway::publish::marks::{MarkTiming, Registry};
use laneway::publish::{
    ConfigCentre, ConfigMapCentre, NacosApi, NacosCentre, NacosRegistry, NacosSettings, Timing,
    ZooKeeperCentre,
};
use laneway::writer::{Limits, Writer};
use secrecy::SecretString;
use tokio::sync::watch;
use tracing::{error, info};

/// laneway: declarative traffic lanes and Dubbo tag routing for Kubernetes.
#[derive(Parser, Debug)]
#[command(version, args_override_self = true)]
struct Args {
    #[command(subcommand)]
    command: Option<Command>,
    /// Pod label that carries an instance's static lane.
    #[arg(long, env = "LANEWAY_LANE_LABEL", default_value = DEFAULT_LANE_LABEL)]
    lane_label: String,
    /// Namespaces to watch (comma-separated); all namespaces when empty.
    #[arg(long, env = "LANEWAY_NAMESPACES", value_delimiter = ',')]
    namespaces: Vec<String>,
    /// Address of /metrics, /healthz and /readyz.
    #[arg(long, env = "LANEWAY_METRICS_ADDR", default_value = "0.0.0.0:8080")]
    metrics_addr: SocketAddr,
    /// Namespace of the leader Lease (defaults to the pod's namespace).
    #[arg(long, env = "POD_NAMESPACE", default_value = "default")]
    lease_namespace: String,
    /// Name of the leader Lease.
    #[arg(long, env = "LANEWAY_LEASE_NAME", default_value = "laneway-leader")]
    lease_name: String,
    /// This replica's identity in the Lease and in Events (defaults to the pod name).
    #[arg(long, env = "POD_NAME")]
    identity: Option<String>,
    /// How long the Lease holds without renewal (whole seconds).
    #[arg(long, env = "LANEWAY_LEASE_DURATION", default_value = "15s", value_parser = duration)]
    lease_duration: Duration,
    /// How long after the start of its last successful renewal the leader may still write;
    /// shorter than the lease duration by more than the write timeout.
    #[arg(long, env = "LANEWAY_LEASE_RENEW_DEADLINE", default_value = "10s", value_parser = duration)]
    lease_renew_deadline: Duration,
    /// How often the Lease is renewed or tried.
    #[arg(long, env = "LANEWAY_LEASE_RETRY", default_value = "2s", value_parser = duration)]
    lease_retry: Duration,
    /// Longest time one write may take before it is abandoned.
    #[arg(long, env = "LANEWAY_WRITE_TIMEOUT", default_value = "4s", value_parser = duration)]
    write_timeout: Duration,
    /// Writes under way at once.
    #[arg(long, env = "LANEWAY_MAX_CONCURRENT_WRITES", default_value = "16")]
    max_concurrent_writes: usize,
    /// Most API writes per second (0: no limit), and the burst above it.
    #[arg(long, env = "LANEWAY_API_QPS", default_value = "0")]
    api_qps: f64,
    #[arg(long, env = "LANEWAY_API_BURST", default_value = "30")]
    api_burst: u32,
    /// Shortest time between two resolutions of one namespace. A change is acted on at once
    /// when the namespace is idle; changes that arrive while its writes are under way go
    /// together into its next resolution.
    #[arg(long, env = "LANEWAY_DEBOUNCE", default_value = "0s", value_parser = duration)]
    debounce: Duration,
    /// Name of the ConfigMap (in the lease namespace) that holds every published Dubbo rule.
    #[arg(long, env = "LANEWAY_CONFIGMAP_NAME", default_value = "laneway-dubbo-rules")]
    configmap_name: String,
    /// ZooKeeper servers (`host:port,...`) to publish Dubbo rules to.
    #[arg(long, env = "LANEWAY_ZOOKEEPER")]
    zookeeper: Option<String>,
    /// ZooKeeper digest credentials, `user:password`; laneway's rule znodes then only let
    /// this identity write.
    #[arg(long, env = "LANEWAY_ZOOKEEPER_AUTH", hide_env_values = true)]
    zookeeper_auth: Option<SecretString>,
    /// Nacos address (`http://host:8848`) to publish Dubbo rules to, and whose instances
    /// TagRules with `nacos` mark with their lanes.
    #[arg(long, env = "LANEWAY_NACOS_ADDR")]
    nacos_addr: Option<String>,
    /// Nacos namespace id; the public namespace when empty.
    #[arg(long, env = "LANEWAY_NACOS_NAMESPACE", default_value = "")]
    nacos_namespace: String,
    #[arg(long, env = "LANEWAY_NACOS_USERNAME")]
    nacos_username: Option<String>,
    #[arg(long, env = "LANEWAY_NACOS_PASSWORD", hide_env_values = true)]
    nacos_password: Option<SecretString>,
    /// How long a Service stays after laneway's HTTPRoutes stopped naming it and the gateways
    /// reported the change; at least the gateways' reload interval.
    #[arg(long, env = "LANEWAY_ROUTE_GRACE", default_value = "5s", value_parser = duration)]
    route_grace: Duration,
    /// Service entries a second that the LaneRoute status writes of the lanes' own endpoint
    /// counts share, over all LaneRoutes; a status has one entry per service. Any other change
    /// of a status (a service's source or the Service that serves it, a condition) is written
    /// at once whatever this is.
    #[arg(long, env = "LANEWAY_STATUS_ENTRIES_PER_SECOND", default_value_t = laneway::controller::COUNT_BUDGET,
          value_parser = clap::value_parser!(u32).range(1..))]
    status_entries_per_second: u32,
    /// How long a removed Dubbo rule stays published as `enabled: false` before it is deleted.
    #[arg(long, env = "LANEWAY_RULE_GRACE", default_value = "30s", value_parser = duration)]
    rule_grace: Duration,
    /// How often every rule in every config centre is read back and repaired.
    #[arg(long, env = "LANEWAY_CENTRE_RESYNC", default_value = "60s", value_parser = duration)]
    centre_resync: Duration,
    /// How often the instances of every Nacos service laneway marks are read back: an
    /// instance that registered again (and so lost its marks) is marked again within this.
    #[arg(long, env = "LANEWAY_NACOS_MARKS_RESYNC", default_value = "5s", value_parser = duration)]
    nacos_marks_resync: Duration,
    /// Whether laneway's lane and baseline Services get a cluster IP: `allocate` (plain callers
    /// through kube-proxy and meshes that route by cluster IP reach them) or `none` (headless:
    /// cheaper to create and no address of the Service range, for gateways that read
    /// EndpointSlices themselves). Changing it recreates laneway's Services.
    #[arg(long, env = "LANEWAY_SERVICE_CLUSTER_IP", default_value = "allocate")]
    service_cluster_ip: ClusterIp,
    /// Log format: `text` or `json` (levels from RUST_LOG).
    #[arg(long, env = "LANEWAY_LOG_FORMAT", default_value = "text")]
    log_format: String,
}

#[derive(clap::Subcommand, Debug)]
enum Command {
    /// Which pods serve a lane (or one service in it), where they come from and why.
    Explain(laneway::explain::ExplainArgs),
}

fn duration(s: &str) -> Result<Duration, String> {
    let d: kube::core::Duration = s.parse().map_err(|e| format!("{e}"))?;
    Ok(d.into())
}

/// mimalloc hands freed memory back to the system and allocates small objects faster than the
/// system allocator: lower RSS after a relist, shorter resolutions. Built without asking for
/// transparent huge pages (`no_thp`): with them, a few live objects keep whole huge pages
/// resident.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// The binary's edge: flags, clients, the fence, the writer, the config centres and the
/// controller, and the tasks that run them; a straight line of setup, longer than most
/// functions because it is read once, top to bottom.
#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    if let Some(Command::Explain(explain)) = &args.command {
        print!("{}", laneway::explain::run(explain).await?);
        return Ok(());
    }
    init_logs(&args.log_format);

    let lease = LeaseSettings {
        namespace: args.lease_namespace.clone(),
        name: args.lease_name.clone(),
        identity: String::new(),
        duration: args.lease_duration,
        renew_deadline: args.lease_renew_deadline,
        retry: args.lease_retry,
        write_timeout: args.write_timeout,
    };
    if let Err(e) = lease.validate() {
        bail!("{e}");
    }
    let (client, write_client) = clients().await?;
    check_crds(&client, &args.namespaces).await?;

    let identity = args.identity.clone().unwrap_or_else(|| {
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
        format!("{}-{}", host.trim(), std::process::id())
    });
    let metrics = Arc::new(Metrics::default());
    let ready = Arc::new(AtomicBool::new(false));
    let health = Arc::new(Health::default());
    let (stop_tx, stop_rx) = watch::channel(false);

    let listener = tokio::net::TcpListener::bind(args.metrics_addr)
        .await
        .with_context(|| format!("binding {}", args.metrics_addr))?;
    let app = laneway::http::router(metrics.clone(), ready.clone(), health.clone());
    let server = tokio::spawn(async move { axum::serve(listener, app).await });

    let fence = Fence::new(args.write_timeout, metrics.clone());
    let lease = LeaseSettings {
        identity: identity.clone(),
        ..lease
    };
    let elector = Elector::new(write_client.clone(), lease, fence.clone());
    let elector = tokio::spawn(elector.run(stop_rx.clone()));
    let limits = Limits {
        concurrency: args.max_concurrent_writes,
        qps: args.api_qps,
        burst: args.api_burst,
    };
    let writer = Writer::new(write_client.clone(), fence, metrics, limits, &identity);

    let settings = Settings {
        config: Config {
            lane_label: args.lane_label.clone(),
            nacos_marks: args.nacos_addr.is_some(),
            cluster_ip: args.service_cluster_ip,
        },
        namespaces: args.namespaces.clone(),
        debounce: args.debounce,
        route_grace: args.route_grace,
        status_entries_per_second: args.status_entries_per_second,
    };
    let centres = centres(&write_client, &args)?;
    let names: Vec<&str> = centres.all.iter().map(|c| c.name()).collect();
    info!(%identity, namespaces = ?args.namespaces, lane_label = %args.lane_label, centres = ?names, "laneway starting");
    let controller = Controller::new(client, settings, centres, writer, health);
    let controller = tokio::spawn(controller.run(ready, stop_rx.clone()));

    shutdown_signal().await;
    info!("shutting down");
    // The elector closes the fence first, lets writes under way end, then releases the Lease.
    stop_tx.send_replace(true);
    let _ = tokio::time::timeout(args.write_timeout * 3, elector).await;
    let _ = tokio::time::timeout(Duration::from_secs(2), controller).await;
    server.abort();
    Ok(())
}

fn init_logs(format: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into());
    let logs = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stdout()));
    if format == "json" {
        logs.json().init();
    } else {
        logs.init();
    }
}

/// A client for reads and watches, and one for writes and the Lease: those are bounded by the
/// fence's timeout and must not retry on their own; a 429 keeps the server's `Retry-After`.
async fn clients() -> anyhow::Result<(Client, Client)> {
    let config = kube::Config::infer()
        .await
        .context("no Kubernetes client configuration (KUBECONFIG or in-cluster)")?;
    let client = Client::try_from(config.clone()).context("Kubernetes client")?;
    let mut write_config = config;
    write_config.default_retry = false;
    let write_client = kube::client::ClientBuilder::try_from(write_config)
        .context("Kubernetes client")?
        .with_layer(&laneway::writer::retry_after_layer())
        .build();
    Ok((client, write_client))
}

/// The config centres from the flags: the ConfigMap always, ZooKeeper and Nacos when given.
fn centres(client: &Client, args: &Args) -> anyhow::Result<Centres> {
    let configmap = Arc::new(ConfigMapCentre::new(
        client.clone(),
        &args.lease_namespace,
        &args.configmap_name,
    ));
    let mut all: Vec<Arc<dyn ConfigCentre>> = vec![configmap.clone()];
    let mut registry: Option<Arc<dyn Registry>> = None;
    if let Some(servers) = &args.zookeeper {
        all.push(Arc::new(ZooKeeperCentre::new(
            servers,
            args.zookeeper_auth.clone(),
        )));
    }
    if let Some(address) = &args.nacos_addr {
        let settings = NacosSettings {
            address: address.clone(),
            namespace: args.nacos_namespace.clone(),
            username: args.nacos_username.clone(),
            password: args.nacos_password.clone(),
        };
        let api = NacosApi::new(settings).context("Nacos client")?;
        all.push(Arc::new(NacosCentre::new(api.clone())));
        registry = Some(Arc::new(NacosRegistry::new(api)));
    }
    let timing = Timing {
        grace: args.rule_grace,
        audit: args.centre_resync,
        ..Timing::default()
    };
    Ok(Centres {
        configmap,
        all,
        timing,
        registry,
        mark_timing: MarkTiming {
            resync: args.nacos_marks_resync,
            ..MarkTiming::default()
        },
    })
}

/// Fails with a clear message when the CRDs are not installed.
async fn check_crds(client: &Client, namespaces: &[String]) -> anyhow::Result<()> {
    let lp = ListParams::default().limit(1);
    let (routes, rules, entries): (Api<LaneRoute>, Api<TagRule>, Api<LaneEntry>) = match namespaces.first() {
        Some(ns) => (
            Api::namespaced(client.clone(), ns),
            Api::namespaced(client.clone(), ns),
            Api::namespaced(client.clone(), ns),
        ),
        None => (
            Api::all(client.clone()),
            Api::all(client.clone()),
            Api::all(client.clone()),
        ),
    };
    for result in [
        routes.list(&lp).await.map(|_| ()),
        rules.list(&lp).await.map(|_| ()),
        entries.list(&lp).await.map(|_| ()),
    ] {
        match result {
            Ok(()) => {}
            Err(kube::Error::Api(e)) if e.code == 404 => {
                error!("the laneway CRDs are not installed");
                bail!("the LaneRoute, TagRule and LaneEntry CRDs (laneway.io/v1alpha1) are not installed: run `kubectl apply -f crds/` first");
            }
            Err(e) => return Err(e).context("listing LaneRoutes and TagRules"),
        }
    }
    Ok(())
}

async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(s) => s,
            Err(_) => {
                let _ = ctrl_c.await;
                return;
            }
        };
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = ctrl_c.await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_status_budget_of_no_entries_is_refused_and_the_default_is_the_documented_one() {
        let refused = Args::try_parse_from(["laneway", "--status-entries-per-second", "0"])
            .expect_err("0 entries a second would never write counts");
        assert!(
            refused.to_string().contains("--status-entries-per-second"),
            "{refused}"
        );
        let args = Args::try_parse_from(["laneway"]).expect("defaults");
        assert_eq!(args.status_entries_per_second, 500);
        let args = Args::try_parse_from(["laneway", "--status-entries-per-second", "100"]).expect("100");
        assert_eq!(args.status_entries_per_second, 100);
    }
}
