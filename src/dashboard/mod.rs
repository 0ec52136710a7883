//! `kubectl laneway dashboard`: a read-only page of the lanes, served on localhost by the
//! plugin itself with the user's own credentials (it lists and watches LaneRoutes and
//! LaneEntries, nothing else, and writes nothing). The page asks for the lanes every second,
//! so it follows the cluster as laneway reports it, and the last `kubectl laneway probe` of each
//! lane saved on this machine.

mod view;

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::Context;
use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;
use futures::StreamExt;
use k8s_openapi::jiff::Timestamp;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Api, Client, Resource};
use serde::de::DeserializeOwned;

use crate::api::{LaneEntry, LaneRoute};
pub use view::{view, with_last_probes, Cell, LaneView, NamespaceView, ProbeCell, View};

const PAGE: &str = include_str!("page.html");

/// Serve a page of the lanes on localhost until interrupted.
#[derive(clap::Args, Debug, Clone)]
pub struct DashboardArgs {
    /// Only this namespace (every namespace the user can list when not given).
    #[arg(long, short = 'n')]
    pub namespace: Option<String>,
    /// Where to serve the page (port 0: any free port).
    #[arg(long, default_value = "127.0.0.1:8765")]
    pub listen: SocketAddr,
}

#[derive(Clone)]
struct Lanes {
    routes: Store<LaneRoute>,
    entries: Store<LaneEntry>,
}

/// Serves the page; prints its address first.
pub async fn run(args: &DashboardArgs) -> anyhow::Result<()> {
    let client = Client::try_default()
        .await
        .context("no Kubernetes configuration (KUBECONFIG)")?;
    let lanes = Lanes {
        routes: follow(api(&client, args.namespace.as_deref())),
        entries: follow(api(&client, args.namespace.as_deref())),
    };
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("listening on {}", args.listen))?;
    println!("laneway dashboard: http://{}/", listener.local_addr()?);
    let app = Router::new()
        .route("/", get(page))
        .route("/lanes.json", get(lanes_json))
        .with_state(Arc::new(lanes));
    axum::serve(listener, app)
        .with_graceful_shutdown(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await
        .context("serving the dashboard")
}

fn api<K>(client: &Client, namespace: Option<&str>) -> Api<K>
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope>,
    K::DynamicType: Default,
{
    match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    }
}

/// A store that a background watch keeps up to date (reconnecting with back-off; a watch the
/// user may not make is reported once and retried).
fn follow<K>(api: Api<K>) -> Store<K>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone,
{
    let (store, writer) = reflector::store();
    let stream = reflector::reflector(writer, watcher(api, watcher::Config::default()))
        .default_backoff()
        .touched_objects();
    tokio::spawn(async move {
        let mut told = false;
        futures::pin_mut!(stream);
        while let Some(event) = stream.next().await {
            if let (Err(e), false) = (event, told) {
                eprintln!(
                    "laneway dashboard: watching {}: {e}",
                    K::plural(&K::DynamicType::default())
                );
                told = true;
            }
        }
    });
    store
}

async fn page() -> impl IntoResponse {
    ([(header::CONTENT_TYPE, "text/html; charset=utf-8")], PAGE)
}

async fn lanes_json(State(lanes): State<Arc<Lanes>>) -> impl IntoResponse {
    let routes: Vec<LaneRoute> = lanes.routes.state().iter().map(|r| (**r).clone()).collect();
    let entries: Vec<LaneEntry> = lanes.entries.state().iter().map(|e| (**e).clone()).collect();
    let mut view = view(&routes, &entries, Timestamp::now());
    if let Some(dir) = crate::probe::probes_dir() {
        with_last_probes(&mut view, |ns, lane| crate::probe::last_probe(&dir, ns, lane));
    }
    let body = serde_json::to_string(&view).unwrap_or_default();
    (
        [
            (header::CONTENT_TYPE, "application/json"),
            (header::CACHE_CONTROL, "no-store"),
        ],
        body,
    )
}
