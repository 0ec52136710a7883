//! The one writer: every write laneway makes to the API server passes through here, behind the
//! lease [`Fence`]. Work comes as a [`Plan`] per namespace: ordered phases of independent steps,
//! run with bounded concurrency inside a phase. A failing step never stops the others; a step
//! that needs an object whose write failed is skipped.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use futures::stream::{FuturesUnordered, StreamExt};
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{ApiResource, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::runtime::events::{Event, Recorder, Reporter};
use kube::{Api, Client, Resource};
use serde_json::json;
use tokio::sync::{Mutex, Semaphore};
use tokio::time::Instant;
use tracing::{debug, info, warn};

use crate::api::{LaneEntry, LaneRoute, TagRule};
use crate::gateway::HttpRoute;
use crate::kind::Typed;
use crate::lanes::ObjectKey;
use crate::leader::{Fence, Fenced};
use crate::metrics::Metrics;

mod ops;
mod throttle;
pub use ops::*;
pub use throttle::retry_after_layer;

/// What the writer needs of a kind it writes: a namespaced object it can send and read back.
pub trait Writable:
    Typed
    + Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
    + Clone
    + serde::Serialize
    + serde::de::DeserializeOwned
    + std::fmt::Debug
{
}

impl<K> Writable for K where
    K: Typed
        + Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + serde::Serialize
        + serde::de::DeserializeOwned
        + std::fmt::Debug
{
}

/// Field manager of every write.
pub const FIELD_MANAGER: &str = "laneway.io/controller";
/// Finalizer that lets laneway remove what a LaneRoute or TagRule produced.
pub const FINALIZER: &str = "laneway.io/cleanup";
/// Hash of the applied object, so that an unchanged object is never written again.
pub const HASH_ANNOTATION: &str = "laneway.io/applied-hash";

/// Status writes and Events under way at once. A LaneRoute's status holds every service of the
/// lane: at 50,000 pods and 200 LaneRoutes, their count refreshes coming due together took
/// the API server from the slices for seconds.
const REPORTING_WRITES: usize = 2;

async fn permit(slots: &Semaphore) -> Result<tokio::sync::SemaphorePermit<'_>, WriteError> {
    slots
        .acquire()
        .await
        .map_err(|e| WriteError::Failed(e.to_string()))
}

/// Token bucket bounding the rate of API writes (`qps` 0: unbounded).
struct RateLimit {
    qps: f64,
    burst: f64,
    state: Mutex<(f64, Instant)>,
}

impl RateLimit {
    fn new(qps: f64, burst: u32) -> Self {
        let burst = f64::from(burst.max(1));
        RateLimit {
            qps,
            burst,
            state: Mutex::new((burst, Instant::now())),
        }
    }

    async fn take(&self) {
        if self.qps <= 0.0 {
            return;
        }
        let wait = {
            let mut state = self.state.lock().await;
            let (tokens, last) = &mut *state;
            let now = Instant::now();
            *tokens = (*tokens + now.duration_since(*last).as_secs_f64() * self.qps).min(self.burst);
            *last = now;
            *tokens -= 1.0;
            (*tokens < 0.0).then(|| Duration::from_secs_f64(-*tokens / self.qps))
        };
        if let Some(wait) = wait {
            tokio::time::sleep(wait).await;
        }
    }
}

/// How many writes may be under way at once, and how fast they may be sent.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    pub concurrency: usize,
    pub qps: f64,
    pub burst: u32,
}

/// Sends every write, behind the fence.
#[derive(Clone)]
pub struct Writer {
    client: Client,
    fence: Fence,
    metrics: Arc<Metrics>,
    slots: Arc<Semaphore>,
    /// Status writes and Events under way at once, within `slots`.
    reporting: Arc<Semaphore>,
    /// Most requests one plan holds at once (`slots` bounds all plans together).
    concurrency: usize,
    rate: Arc<RateLimit>,
    recorder: Recorder,
}

impl Writer {
    /// `client` should not retry on its own: the fence bounds every write by its timeout.
    pub fn new(client: Client, fence: Fence, metrics: Arc<Metrics>, limits: Limits, identity: &str) -> Self {
        let reporter = Reporter {
            controller: FIELD_MANAGER.into(),
            instance: Some(identity.to_owned()),
        };
        Writer {
            recorder: Recorder::new(client.clone(), reporter),
            client,
            fence,
            metrics,
            slots: Arc::new(Semaphore::new(limits.concurrency.max(1))),
            reporting: Arc::new(Semaphore::new(REPORTING_WRITES)),
            concurrency: limits.concurrency.max(1),
            rate: Arc::new(RateLimit::new(limits.qps, limits.burst)),
        }
    }

    pub fn fence(&self) -> &Fence {
        &self.fence
    }

    /// The metrics its writes are counted in.
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    /// Runs `plan` phase by phase (steps of a phase at once, within the concurrency limit) and
    /// hands the report to `done`; then runs its tail, where a step that needs a failed write
    /// of the first phases is skipped, and hands that report to `done` too.
    pub async fn execute(&self, plan: Plan, done: impl Fn(Report)) {
        let mut failed: BTreeSet<Subject> = BTreeSet::new();
        let head = self
            .run_phases(&plan.namespace, plan.phases, &mut failed, false)
            .await;
        done(head);
        if let Some(tail) = plan.tail {
            done(self.run_phases(&plan.namespace, tail, &mut failed, true).await);
        }
    }

    async fn run_phases(
        &self,
        namespace: &str,
        phases: Vec<Vec<Step>>,
        failed: &mut BTreeSet<Subject>,
        tail: bool,
    ) -> Report {
        let mut report = Report {
            namespace: namespace.to_owned(),
            tail,
            results: Vec::new(),
        };
        for phase in phases {
            // Steps start as slots free up, so that a plan of thousands of writes holds only
            // as many requests as may run at once.
            let mut waiting = phase.into_iter();
            let mut running = FuturesUnordered::new();
            loop {
                while running.len() < self.concurrency {
                    let Some(step) = waiting.next() else { break };
                    let subject = step.op.subject();
                    if let Some(missing) = step.needs.iter().find(|n| failed.contains(*n)) {
                        let what = match missing {
                            Subject::Output(t) => t.to_string(),
                            Subject::Finalizer(kind, key) => format!("the finalizer of {kind:?} {key}"),
                            other => format!("{other:?}"),
                        };
                        failed.insert(subject.clone());
                        report.results.push((subject, Err(WriteError::Skipped(what))));
                        continue;
                    }
                    running.push(async move {
                        let result = self.run(step.op).await;
                        (subject, result)
                    });
                }
                let Some((subject, result)) = running.next().await else {
                    break;
                };
                if result.is_err() {
                    failed.insert(subject.clone());
                }
                report.results.push((subject, result));
            }
        }
        report
    }

    async fn run(&self, op: Op) -> Result<Done, WriteError> {
        // Statuses and Events wait for a place of their own first, so that however many of
        // them are due at once, they never crowd the outputs out of the API server.
        let _reporting = match op {
            Op::Status { .. } | Op::Event { .. } => Some(permit(&self.reporting).await?),
            _ => None,
        };
        let _slot = permit(&self.slots).await?;
        match self.once(op.clone()).await {
            // A connection that broke under the request (a pooled connection the server or a
            // proxy closed) is worth one immediate second try: every write here is idempotent.
            Err(WriteError::Failed(_)) => self.once(op).await,
            result => result,
        }
    }

    async fn once(&self, op: Op) -> Result<Done, WriteError> {
        self.rate.take().await;
        match op {
            Op::Apply { output, hash, known } => match output {
                Output::Service(obj) => self.apply(Arc::unwrap_or_clone(obj), hash, known).await,
                Output::Slice(obj) => self.apply(Arc::unwrap_or_clone(obj), hash, known).await,
                Output::Route(obj) => self.apply(Arc::unwrap_or_clone(obj), hash, known).await,
            },
            Op::Delete(target) => match target.kind {
                OutputKind::Service => self.delete::<Service>(&target.key).await,
                OutputKind::EndpointSlice => self.delete::<EndpointSlice>(&target.key).await,
                OutputKind::HttpRoute => self.delete::<HttpRoute>(&target.key).await,
            },
            Op::Status { key, status, version } => match status {
                Status::LaneRoute(s) => self.status::<LaneRoute>(&key, &s, version).await,
                Status::TagRule(s) => self.status::<TagRule>(&key, &s, version).await,
                Status::LaneEntry(s) => self.status::<LaneEntry>(&key, &s, version).await,
            },
            Op::Finalizer { kind, key, present } => match kind {
                OwnKind::LaneRoute => self.finalizer::<LaneRoute>(&key, present).await,
                OwnKind::TagRule => self.finalizer::<TagRule>(&key, present).await,
                OwnKind::LaneEntry => self.finalizer::<LaneEntry>(&key, present).await,
            },
            Op::Event {
                reference,
                type_,
                reason,
                note,
            } => {
                let event = Event {
                    type_,
                    reason,
                    note: Some(note),
                    action: "Resolve".into(),
                    secondary: None,
                };
                // Events are best effort: one lost never blocks anything else.
                if let Err(e) = self.fence.write(self.recorder.publish(&event, &reference)).await {
                    debug!(error = %e, "could not publish event");
                }
                Ok(Done::Written)
            }
            Op::Probe { entry, routes, .. } => self.dry_run(&entry.namespace, routes).await,
        }
    }

    /// Server-side applies `routes` with `dryRun=All`, stopping at the first the API server
    /// refuses: nothing is written.
    async fn dry_run(&self, ns: &str, routes: Vec<HttpRoute>) -> Result<Done, WriteError> {
        let api: Api<HttpRoute> = self.api(ns);
        let params = PatchParams::apply(FIELD_MANAGER).force().dry_run();
        for route in routes {
            let name = route.metadata.name.clone().unwrap_or_default();
            self.fence
                .write(api.patch(&name, &params, &Patch::Apply(&route)))
                .await?;
        }
        Ok(Done::Written)
    }

    fn api<K: Writable>(&self, ns: &str) -> Api<K> {
        Api::namespaced(self.client.clone(), ns)
    }

    /// Writes `obj` stamped with `hash` as `known` allows; an object whose immutable fields
    /// changed is deleted and created again.
    async fn apply<K: Writable>(&self, mut obj: K, hash: String, known: Known) -> Result<Done, WriteError> {
        let kind = K::KIND;
        let meta = obj.meta_mut();
        meta.annotations
            .get_or_insert_with(Default::default)
            .insert(HASH_ANNOTATION.into(), hash.clone());
        let ns = meta.namespace.clone().unwrap_or_default();
        let name = meta.name.clone().unwrap_or_default();
        let api: Api<K> = self.api(&ns);
        // Made again the way it was written: created, or applied.
        let again = match known {
            Known::Unsure => Known::Unsure,
            _ => Known::Absent,
        };
        match self.send(&api, &name, &obj, known).await {
            Ok((written, how)) => {
                self.metrics.write(kind, how);
                debug!(%kind, namespace = %ns, name, how, "written");
                let version = written.meta().resource_version.clone();
                Ok(Done::Applied { hash, version })
            }
            Err(e) if e.is_immutable() => {
                let reason = e.to_string();
                warn!(%kind, namespace = %ns, name, reason, "a field that cannot change changed; recreating");
                let key = ObjectKey::new(&ns, &name);
                self.delete::<K>(&key).await?;
                let (written, _) = self.send(&api, &name, &obj, again).await?;
                self.metrics.write(kind, "recreate");
                let version = written.meta().resource_version.clone();
                Ok(Done::Recreated {
                    hash,
                    version,
                    reason,
                })
            }
            Err(e) => Err(e),
        }
    }

    /// Creates `obj` or replaces it at the version `known` gives, and server-side applies it
    /// when nothing is known. When the object turns out other than `known` says (created,
    /// changed or deleted since), one read gives its version now and it is replaced at that, or
    /// created: an output laneway creates or replaces is never server-side applied, so no
    /// field it dropped stays behind under another entry of its field manager. Returns the
    /// object as written and how it was written.
    async fn send<K: Writable>(
        &self,
        api: &Api<K>,
        name: &str,
        obj: &K,
        known: Known,
    ) -> Result<(K, &'static str), WriteError> {
        let params = PostParams {
            field_manager: Some(FIELD_MANAGER.into()),
            ..PostParams::default()
        };
        let create = || async { (self.fence.write(api.create(&params, obj)).await, "create") };
        let replace = |version: Option<String>| {
            let mut obj = obj.clone();
            obj.meta_mut().resource_version = version;
            let params = &params;
            async move { (self.fence.write(api.replace(name, params, &obj)).await, "replace") }
        };
        let as_known = match known {
            Known::Absent => create().await,
            Known::At(version) => replace(Some(version)).await,
            Known::Unsure => {
                let params = PatchParams::apply(FIELD_MANAGER).force();
                let applied = self
                    .fence
                    .write(api.patch(name, &params, &Patch::Apply(obj)))
                    .await;
                return Ok((applied?, "apply"));
            }
        };
        let (result, how) = match as_known {
            (Err(Fenced::Failed(kube::Error::Api(e))), _) if e.code == 409 || e.code == 404 => {
                match api.get_metadata_opt(name).await? {
                    Some(now) => replace(now.metadata.resource_version).await,
                    None => create().await,
                }
            }
            written => written,
        };
        Ok((result?, how))
    }

    async fn delete<K: Writable>(&self, key: &ObjectKey) -> Result<Done, WriteError> {
        let api: Api<K> = self.api(&key.namespace);
        let kind = K::KIND;
        match self
            .fence
            .write(api.delete(&key.name, &DeleteParams::default()))
            .await
        {
            Ok(_) => {
                info!(kind = %kind, %key, "deleted");
                self.metrics.write(kind, "delete");
                Ok(Done::Deleted)
            }
            Err(Fenced::Failed(kube::Error::Api(e))) if e.code == 404 => Ok(Done::Deleted),
            Err(e) => Err(e.into()),
        }
    }

    /// Replaces the status of a laneway object, whole, at `version`, or at the version it has
    /// now when there is none or the object changed since; one deleted meanwhile is no error.
    async fn status<K: Writable>(
        &self,
        key: &ObjectKey,
        status: &impl serde::Serialize,
        version: Option<String>,
    ) -> Result<Done, WriteError> {
        let status = serde_json::to_value(status).map_err(|e| WriteError::Failed(e.to_string()))?;
        let resource = ApiResource::erase::<K>(&());
        let api: Api<DynamicObject> = Api::namespaced_with(self.client.clone(), &key.namespace, &resource);
        let object = DynamicObject::new(&key.name, &resource)
            .within(&key.namespace)
            .data(json!({ "status": status }));
        let params = PostParams {
            field_manager: Some(FIELD_MANAGER.into()),
            ..PostParams::default()
        };
        let replace = |version: Option<String>| {
            let mut at = object.clone();
            at.metadata.resource_version = version;
            let (api, params) = (&api, &params);
            async move { self.fence.write(api.replace_status(&key.name, params, &at)).await }
        };
        let stale = |r: &Result<_, _>| matches!(r, Err(Fenced::Failed(kube::Error::Api(e))) if e.code == 409);
        let at_version_seen = match version {
            Some(version) => Some(replace(Some(version)).await).filter(|r| !stale(r)),
            None => None,
        };
        let result = match at_version_seen {
            Some(result) => result,
            None => match api.get_metadata_opt(&key.name).await? {
                Some(now) => replace(now.metadata.resource_version).await,
                None => return Ok(Done::Written),
            },
        };
        let kind = K::KIND;
        match result {
            Ok(_) => {
                self.metrics.write(kind, "status");
                debug!(%kind, %key, "status written");
                Ok(Done::Written)
            }
            Err(Fenced::Failed(kube::Error::Api(e))) if e.code == 404 => Ok(Done::Written),
            Err(e) => Err(e.into()),
        }
    }

    /// Adds or removes laneway's finalizer with a JSON patch that fails (and is retried) if the
    /// list changed since it was read, so other controllers' finalizers are never lost.
    async fn finalizer<K: Writable>(&self, key: &ObjectKey, present: bool) -> Result<Done, WriteError> {
        let api: Api<K> = self.api(&key.namespace);
        let Some(obj) = api.get_opt(&key.name).await? else {
            return Ok(Done::Written);
        };
        let current = obj.meta().finalizers.clone().unwrap_or_default();
        let position = current.iter().position(|f| f == FINALIZER);
        let ops = match (present, position) {
            (true, Some(_)) | (false, None) => return Ok(Done::Written),
            (true, None) if current.is_empty() => json!([
                {"op": "test", "path": "/metadata/finalizers", "value": null},
                {"op": "add", "path": "/metadata/finalizers", "value": [FINALIZER]},
            ]),
            (true, None) => json!([
                {"op": "test", "path": "/metadata/finalizers", "value": current},
                {"op": "add", "path": "/metadata/finalizers/-", "value": FINALIZER},
            ]),
            (false, Some(i)) => json!([
                {"op": "test", "path": format!("/metadata/finalizers/{i}"), "value": FINALIZER},
                {"op": "remove", "path": format!("/metadata/finalizers/{i}")},
            ]),
        };
        let patch: json_patch::Patch =
            serde_json::from_value(ops).map_err(|e| WriteError::Failed(e.to_string()))?;
        match self
            .fence
            .write(api.patch(&key.name, &PatchParams::default(), &Patch::<()>::Json(patch)))
            .await
        {
            Ok(_) => {
                self.metrics.write(K::KIND, "finalizer");
                Ok(Done::Written)
            }
            Err(Fenced::Failed(kube::Error::Api(e))) if e.code == 404 => Ok(Done::Written),
            Err(e) => Err(e.into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// How long `n` writes take to get their turn, on tokio's paused clock.
    async fn time_of(limit: &RateLimit, n: usize) -> Duration {
        let start = Instant::now();
        for _ in 0..n {
            limit.take().await;
        }
        start.elapsed()
    }

    #[tokio::test(start_paused = true)]
    async fn api_qps_spaces_writes_beyond_the_burst_and_zero_does_not() {
        let limit = RateLimit::new(10.0, 5);
        // The burst goes at once, the next 10 at 10 a second.
        assert_eq!(time_of(&limit, 5).await, Duration::ZERO);
        let paced = time_of(&limit, 10).await;
        assert!(
            paced >= Duration::from_millis(999) && paced < Duration::from_millis(1100),
            "{paced:?}"
        );
        // A quiet spell refills the bucket up to the burst, no further.
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert_eq!(time_of(&limit, 5).await, Duration::ZERO);
        assert!(time_of(&limit, 1).await >= Duration::from_millis(99));

        assert_eq!(time_of(&RateLimit::new(0.0, 1), 1000).await, Duration::ZERO);
    }
}
