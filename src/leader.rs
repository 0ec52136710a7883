//! Leader election with a `coordination.k8s.io/v1` Lease, and the fence every write passes.
//!
//! The discipline is client-go's: `duration > renew_deadline > retry`, and a write timeout
//! shorter than `duration - renew_deadline`.
//! - The leader may send a write only before its renew deadline: `renew_deadline` after the
//!   start of its last successful renewal. A write sent just before the deadline ends (or is
//!   abandoned) within the write timeout, so it lands before the Lease can pass to anyone else.
//! - A standby never compares the holder's `renewTime` with its own clock: it notes, by its own
//!   monotonic clock, when it last saw the Lease record change, and takes over only when the
//!   record has not changed for the Lease's duration. Clock skew between machines does not
//!   matter.
//! - On shutdown the fence closes first, writes under way finish, then the Lease is released
//!   so that a standby takes over at once.

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use kube::api::{ObjectMeta, PostParams};
use kube::{Api, Client};
use tokio::sync::watch;
use tokio::time::Instant;
use tracing::{info, warn};

use crate::metrics::Metrics;

/// How the Lease is held.
#[derive(Clone, Debug)]
pub struct LeaseSettings {
    pub namespace: String,
    pub name: String,
    pub identity: String,
    /// How long the Lease holds without renewal (whole seconds: the Lease records seconds).
    pub duration: Duration,
    /// How long after the start of its last successful renewal the leader may still write.
    pub renew_deadline: Duration,
    /// How often the Lease is renewed or tried.
    pub retry: Duration,
    /// Longest time one write (or one Lease request) may take before it is abandoned.
    pub write_timeout: Duration,
}

/// Lease settings that break the timing discipline; the message names the flag at fault.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SettingsError {
    #[error("--lease-duration must be a whole number of seconds, at least 1s (got {0}ms): the Lease records whole seconds")]
    Duration(u128),
    #[error(
        "--lease-renew-deadline ({renew_deadline}ms) must be shorter than --lease-duration ({duration}ms)"
    )]
    RenewDeadline { renew_deadline: u128, duration: u128 },
    #[error("--lease-retry ({retry}ms) must be above zero and shorter than --lease-renew-deadline ({renew_deadline}ms)")]
    Retry { retry: u128, renew_deadline: u128 },
    #[error("--write-timeout ({write_timeout}ms) must be above zero and shorter than --lease-duration minus --lease-renew-deadline ({margin}ms), so that a write sent before the deadline ends before another replica can lead")]
    WriteTimeout { write_timeout: u128, margin: u128 },
}

/// Why one try to acquire or renew the Lease failed.
#[derive(Debug, thiserror::Error)]
enum LeaseError {
    #[error("no answer within {0:?}")]
    TimedOut(Duration),
    #[error(transparent)]
    Api(#[from] kube::Error),
}

impl LeaseSettings {
    /// Checks the timing discipline.
    pub fn validate(&self) -> Result<(), SettingsError> {
        let ms = |d: Duration| d.as_millis();
        if self.duration.subsec_nanos() != 0 || self.duration < Duration::from_secs(1) {
            return Err(SettingsError::Duration(ms(self.duration)));
        }
        if self.renew_deadline >= self.duration {
            return Err(SettingsError::RenewDeadline {
                renew_deadline: ms(self.renew_deadline),
                duration: ms(self.duration),
            });
        }
        if self.retry.is_zero() || self.retry >= self.renew_deadline {
            return Err(SettingsError::Retry {
                retry: ms(self.retry),
                renew_deadline: ms(self.renew_deadline),
            });
        }
        let margin = self.duration - self.renew_deadline;
        if self.write_timeout.is_zero() || self.write_timeout >= margin {
            return Err(SettingsError::WriteTimeout {
                write_timeout: ms(self.write_timeout),
                margin: ms(margin),
            });
        }
        Ok(())
    }
}

/// Why a write was not made.
#[derive(Debug, thiserror::Error)]
pub enum Fenced<E> {
    /// This replica does not hold the Lease (or is past its renew deadline).
    #[error("not the leader")]
    NotLeader,
    /// The write did not finish within the write timeout; the server may still apply it.
    #[error("no answer within {0:?}")]
    TimedOut(Duration),
    #[error(transparent)]
    Failed(E),
}

#[derive(Debug, Default)]
struct FenceState {
    /// Until when writes may be sent; `None` while not leading.
    deadline: Option<Instant>,
    /// Set on shutdown: no write is sent any more.
    closed: bool,
    /// When a write last timed out (it may still land on the server).
    last_timeout: Option<Instant>,
}

/// The one gate every write passes: open only while this replica leads and before its renew
/// deadline. Cheap to clone.
#[derive(Clone)]
pub struct Fence {
    state: Arc<Mutex<FenceState>>,
    in_flight: Arc<AtomicUsize>,
    drained: Arc<tokio::sync::Notify>,
    leading: watch::Sender<bool>,
    write_timeout: Duration,
    metrics: Arc<Metrics>,
}

/// Counts a write as under way until dropped.
struct InFlight<'a>(&'a Fence);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        if self.0.in_flight.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.0.drained.notify_waiters();
        }
    }
}

impl Fence {
    pub fn new(write_timeout: Duration, metrics: Arc<Metrics>) -> Self {
        let (leading, _) = watch::channel(false);
        Fence {
            state: Arc::default(),
            in_flight: Arc::default(),
            drained: Arc::default(),
            leading,
            write_timeout,
            metrics,
        }
    }

    /// Follows whether this replica may write; turns false at the renew deadline at the latest.
    pub fn subscribe(&self) -> watch::Receiver<bool> {
        self.leading.subscribe()
    }

    /// Whether a write sent now would be allowed.
    pub fn is_open(&self) -> bool {
        let state = self.lock();
        !state.closed && state.deadline.is_some_and(|d| Instant::now() < d)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, FenceState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Runs one write if the fence is open now, abandoning it after the write timeout.
    pub async fn write<T, E, F>(&self, write: F) -> Result<T, Fenced<E>>
    where
        F: Future<Output = Result<T, E>>,
    {
        let _in_flight = {
            let state = self.lock();
            let open = !state.closed && state.deadline.is_some_and(|d| Instant::now() < d);
            if !open {
                self.metrics.fenced_writes.inc();
                return Err(Fenced::NotLeader);
            }
            self.in_flight.fetch_add(1, Ordering::SeqCst);
            InFlight(self)
        };
        match tokio::time::timeout(self.write_timeout, write).await {
            Ok(result) => result.map_err(Fenced::Failed),
            Err(_) => {
                self.lock().last_timeout = Some(Instant::now());
                Err(Fenced::TimedOut(self.write_timeout))
            }
        }
    }

    /// Opens (or keeps open) the fence until `deadline`.
    fn extend(&self, deadline: Instant) {
        let mut state = self.lock();
        if state.closed {
            return;
        }
        state.deadline = Some(deadline);
        drop(state);
        self.set_leading(true);
    }

    /// Closes the fence until the next successful acquisition.
    fn revoke(&self) {
        self.lock().deadline = None;
        self.set_leading(false);
    }

    fn deadline(&self) -> Option<Instant> {
        self.lock().deadline
    }

    fn set_leading(&self, leading: bool) {
        self.metrics.leader.set(i64::from(leading));
        self.leading
            .send_if_modified(|l| std::mem::replace(l, leading) != leading);
    }

    /// Closes the fence for good and waits for the writes under way; true when none of them
    /// can still land later (none was abandoned recently), so the Lease may be released.
    async fn close(&self, margin: Duration) -> bool {
        {
            let mut state = self.lock();
            state.closed = true;
            state.deadline = None;
        }
        self.set_leading(false);
        let drained = async {
            loop {
                let notified = self.drained.notified();
                if self.in_flight.load(Ordering::SeqCst) == 0 {
                    return;
                }
                notified.await;
            }
        };
        let finished = tokio::time::timeout(self.write_timeout, drained).await.is_ok();
        let recent_timeout = self.lock().last_timeout.is_some_and(|t| t.elapsed() < margin);
        finished && !recent_timeout
    }
}

/// What this replica last saw of the Lease, and when (by its own clock) that record appeared.
#[derive(Default)]
struct Observed {
    record: Option<LeaseSpec>,
    since: Option<Instant>,
}

pub struct Elector {
    api: Api<Lease>,
    settings: LeaseSettings,
    fence: Fence,
    observed: Observed,
}

enum Attempt {
    /// This replica holds the Lease; the renewal started at this instant.
    Held(Instant),
    /// Another replica holds it.
    Standby,
}

impl Elector {
    /// `client` should not retry on its own: every Lease request is bounded by the write timeout.
    pub fn new(client: Client, settings: LeaseSettings, fence: Fence) -> Self {
        let api = Api::namespaced(client, &settings.namespace);
        Elector {
            api,
            settings,
            fence,
            observed: Observed::default(),
        }
    }

    /// Campaigns and renews until `stop` fires; then closes the fence, lets writes under way
    /// finish and releases the Lease so that another replica takes over at once.
    pub async fn run(mut self, mut stop: watch::Receiver<bool>) {
        loop {
            match self.attempt().await {
                Ok(Attempt::Held(started)) => self.fence.extend(started + self.settings.renew_deadline),
                Ok(Attempt::Standby) => {
                    if self.fence.deadline().is_some() {
                        info!(identity = %self.settings.identity, "another replica holds the lease");
                    }
                    self.fence.revoke();
                }
                Err(e) => warn!(error = %e, "lease renewal failed"),
            }
            // Step down exactly at the renew deadline if no renewal succeeds before it.
            let deadline = self.fence.deadline();
            let next = Instant::now() + self.settings.retry;
            tokio::select! {
                _ = tokio::time::sleep_until(next) => {}
                _ = sleep_until_opt(deadline.filter(|d| *d < next)) => {
                    warn!(identity = %self.settings.identity, "renew deadline passed; no longer writing");
                    self.fence.revoke();
                    tokio::time::sleep_until(next).await;
                }
                _ = stop.changed() => break,
            }
        }
        let margin = self.settings.duration - self.settings.renew_deadline;
        let was_leading = self.fence.deadline().is_some();
        let clean = self.fence.close(margin).await;
        if was_leading {
            if clean {
                match tokio::time::timeout(self.settings.write_timeout, self.release()).await {
                    Ok(Ok(())) => info!("lease released"),
                    Ok(Err(e)) => warn!(error = %e, "could not release the lease"),
                    Err(_) => warn!("could not release the lease in time"),
                }
            } else {
                warn!("a write may still land; the lease is left to expire instead of released");
            }
        }
    }

    /// One try to acquire or renew, bounded by the write timeout per request.
    async fn attempt(&mut self) -> Result<Attempt, LeaseError> {
        let started = Instant::now();
        let timeout = self.settings.write_timeout;
        let s = self.settings.clone();
        let current = tokio::time::timeout(timeout, self.api.get_opt(&s.name))
            .await
            .map_err(|_| LeaseError::TimedOut(timeout))??;
        let now = Timestamp::now();
        let Some(mut lease) = current else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(s.name.clone()),
                    ..Default::default()
                },
                spec: Some(self.spec(now, 0, now)),
            };
            return match self.send(self.api.create(&PostParams::default(), &lease)).await? {
                Some(created) => {
                    self.observe(created.spec, started);
                    Ok(Attempt::Held(started))
                }
                None => Ok(Attempt::Standby),
            };
        };
        let spec = lease.spec.clone().unwrap_or_default();
        self.observe(Some(spec.clone()), started);
        let holder = spec.holder_identity.as_deref().unwrap_or_default();
        let transitions = spec.lease_transitions.unwrap_or(0);
        let new_spec = if holder == s.identity {
            self.spec(spec.acquire_time.map_or(now, |t| t.0), transitions, now)
        } else if holder.is_empty() || self.expired(&spec) {
            self.spec(now, transitions + 1, now)
        } else {
            return Ok(Attempt::Standby);
        };
        // `replace` sends the resourceVersion read above: if anyone wrote the Lease since, the
        // server answers 409 and nothing changes hands.
        lease.spec = Some(new_spec);
        match self
            .send(self.api.replace(&s.name, &PostParams::default(), &lease))
            .await?
        {
            Some(updated) => {
                if holder != self.settings.identity {
                    info!(identity = %self.settings.identity, previous = holder, "acquired the lease");
                }
                self.observe(updated.spec, started);
                Ok(Attempt::Held(started))
            }
            None => Ok(Attempt::Standby),
        }
    }

    /// A Lease write: `Some` on success, `None` when another replica got there first.
    async fn send(
        &self,
        request: impl Future<Output = Result<Lease, kube::Error>>,
    ) -> Result<Option<Lease>, LeaseError> {
        let timeout = self.settings.write_timeout;
        match tokio::time::timeout(timeout, request).await {
            Err(_) => Err(LeaseError::TimedOut(timeout)),
            Ok(Ok(lease)) => Ok(Some(lease)),
            Ok(Err(kube::Error::Api(e))) if e.code == 409 => Ok(None),
            Ok(Err(e)) => Err(e.into()),
        }
    }

    /// Notes the record seen; its clock starts when it first differs from the last one seen.
    fn observe(&mut self, record: Option<LeaseSpec>, at: Instant) {
        if self.observed.record != record || self.observed.since.is_none() {
            self.observed.record = record;
            self.observed.since = Some(at);
        }
    }

    /// The holder has not renewed for the Lease's duration, as this replica has watched it.
    fn expired(&self, spec: &LeaseSpec) -> bool {
        let duration = spec
            .lease_duration_seconds
            .map_or(self.settings.duration, |d| Duration::from_secs(d.max(0) as u64));
        self.observed
            .since
            .is_some_and(|since| since.elapsed() >= duration)
    }

    fn spec(&self, acquired: Timestamp, transitions: i32, now: Timestamp) -> LeaseSpec {
        LeaseSpec {
            holder_identity: Some(self.settings.identity.clone()),
            lease_duration_seconds: Some(self.settings.duration.as_secs() as i32),
            acquire_time: Some(MicroTime(acquired)),
            renew_time: Some(MicroTime(now)),
            lease_transitions: Some(transitions),
            ..Default::default()
        }
    }

    /// Gives the Lease up (holder cleared), if this replica still holds it.
    async fn release(&self) -> Result<(), kube::Error> {
        let Some(mut lease) = self.api.get_opt(&self.settings.name).await? else {
            return Ok(());
        };
        let Some(spec) = lease.spec.as_mut() else {
            return Ok(());
        };
        if spec.holder_identity.as_deref() != Some(self.settings.identity.as_str()) {
            return Ok(());
        }
        spec.holder_identity = None;
        spec.lease_duration_seconds = Some(1);
        spec.renew_time = Some(MicroTime(Timestamp::now()));
        self.api
            .replace(&self.settings.name, &PostParams::default(), &lease)
            .await
            .map(|_| ())
    }
}

async fn sleep_until_opt(deadline: Option<Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(duration: u64, renew: u64, retry: u64, timeout: u64) -> LeaseSettings {
        LeaseSettings {
            namespace: "ns".into(),
            name: "lease".into(),
            identity: "me".into(),
            duration: Duration::from_millis(duration),
            renew_deadline: Duration::from_millis(renew),
            retry: Duration::from_millis(retry),
            write_timeout: Duration::from_millis(timeout),
        }
    }

    #[test]
    fn timing_discipline_is_enforced() {
        assert!(settings(15_000, 10_000, 2_000, 4_000).validate().is_ok());
        let e = settings(500, 300, 100, 50).validate().unwrap_err().to_string();
        assert!(e.contains("--lease-duration"), "{e}");
        let e = settings(1_500, 1_000, 100, 50)
            .validate()
            .unwrap_err()
            .to_string();
        assert!(e.contains("whole number of seconds"), "{e}");
        let e = settings(4_000, 4_000, 500, 100)
            .validate()
            .unwrap_err()
            .to_string();
        assert!(e.contains("--lease-renew-deadline"), "{e}");
        let e = settings(4_000, 3_000, 3_000, 100)
            .validate()
            .unwrap_err()
            .to_string();
        assert!(e.contains("--lease-retry"), "{e}");
        let e = settings(4_000, 3_000, 500, 1_000)
            .validate()
            .unwrap_err()
            .to_string();
        assert!(e.contains("--write-timeout"), "{e}");
    }

    #[tokio::test(start_paused = true)]
    async fn the_fence_shuts_at_the_deadline_and_bounds_each_write() {
        let fence = Fence::new(Duration::from_millis(100), Arc::new(Metrics::default()));
        let ok = || async { Ok::<_, ()>(()) };
        assert!(matches!(fence.write(ok()).await, Err(Fenced::NotLeader)));
        fence.extend(Instant::now() + Duration::from_secs(1));
        assert!(fence.write(ok()).await.is_ok());
        let slow = fence.write(async {
            tokio::time::sleep(Duration::from_secs(5)).await;
            Ok::<_, ()>(())
        });
        assert!(matches!(slow.await, Err(Fenced::TimedOut(_))));
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(!fence.is_open());
        assert!(matches!(fence.write(ok()).await, Err(Fenced::NotLeader)));
    }

    #[tokio::test(start_paused = true)]
    async fn closing_waits_for_writes_under_way_and_refuses_new_ones() {
        let fence = Fence::new(Duration::from_secs(1), Arc::new(Metrics::default()));
        fence.extend(Instant::now() + Duration::from_secs(10));
        let f2 = fence.clone();
        let writing = tokio::spawn(async move {
            f2.write(async {
                tokio::time::sleep(Duration::from_millis(300)).await;
                Ok::<_, ()>(())
            })
            .await
        });
        tokio::task::yield_now().await;
        let started = Instant::now();
        assert!(fence.close(Duration::from_secs(2)).await, "nothing was abandoned");
        assert!(started.elapsed() >= Duration::from_millis(300));
        assert!(writing.await.unwrap().is_ok());
        assert!(matches!(
            fence.write(async { Ok::<_, ()>(()) }).await,
            Err(Fenced::NotLeader)
        ));
        fence.extend(Instant::now() + Duration::from_secs(10));
        assert!(!fence.is_open(), "a closed fence stays closed");
    }
}
