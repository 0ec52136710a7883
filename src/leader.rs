//! Leader election with a `coordination.k8s.io/v1` Lease: only the holder writes.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use kube::api::{ObjectMeta, PostParams};
use kube::{Api, Client};
use tokio::sync::watch;
use tracing::{info, warn};

/// How long a Lease is valid without renewal, and how often it is renewed or tried.
#[derive(Clone, Debug)]
pub struct LeaseSettings {
    pub namespace: String,
    pub name: String,
    pub identity: String,
    pub duration: Duration,
    pub retry: Duration,
}

pub struct Elector {
    api: Api<Lease>,
    settings: LeaseSettings,
    leading: watch::Sender<bool>,
}

impl Elector {
    pub fn new(client: Client, settings: LeaseSettings) -> (Self, watch::Receiver<bool>) {
        let (leading, rx) = watch::channel(false);
        let api = Api::namespaced(client, &settings.namespace);
        (
            Elector {
                api,
                settings,
                leading,
            },
            rx,
        )
    }

    /// Campaigns and renews until `stop` fires, then gives the Lease up so that another
    /// replica takes over at once.
    pub async fn run(self, mut stop: watch::Receiver<bool>) {
        let mut last_renewed: Option<tokio::time::Instant> = None;
        loop {
            match self.try_acquire_or_renew().await {
                Ok(true) => {
                    last_renewed = Some(tokio::time::Instant::now());
                    self.set_leading(true);
                }
                Ok(false) => {
                    last_renewed = None;
                    self.set_leading(false);
                }
                Err(e) => {
                    warn!(error = %e, "lease renewal failed");
                    // Step down before the Lease can have passed to another replica.
                    if last_renewed
                        .is_some_and(|t| t.elapsed() + self.settings.retry >= self.settings.duration)
                    {
                        self.set_leading(false);
                    }
                }
            }
            tokio::select! {
                _ = tokio::time::sleep(self.settings.retry) => {}
                _ = stop.changed() => break,
            }
        }
        if *self.leading.borrow() {
            self.set_leading(false);
            if let Err(e) = self.release().await {
                warn!(error = %e, "could not release the lease");
            }
        }
    }

    fn set_leading(&self, leading: bool) {
        if *self.leading.borrow() != leading {
            info!(leading, identity = %self.settings.identity, "leadership changed");
            self.leading.send_replace(leading);
        }
    }

    async fn try_acquire_or_renew(&self) -> Result<bool, kube::Error> {
        let now = Timestamp::now();
        let s = &self.settings;
        let Some(mut lease) = self.api.get_opt(&s.name).await? else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(s.name.clone()),
                    ..Default::default()
                },
                spec: Some(self.spec(now, 0, now)),
            };
            return match self.api.create(&PostParams::default(), &lease).await {
                Ok(_) => Ok(true),
                Err(kube::Error::Api(e)) if e.code == 409 => Ok(false),
                Err(e) => Err(e),
            };
        };
        let spec = lease.spec.clone().unwrap_or_default();
        let holder = spec.holder_identity.as_deref().unwrap_or_default();
        let duration = spec
            .lease_duration_seconds
            .map_or(s.duration, |d| Duration::from_secs(d.max(0) as u64));
        let renewed = spec.renew_time.as_ref().map(|t| t.0);
        let expired = renewed.is_none_or(|t| t + duration < now);
        let transitions = spec.lease_transitions.unwrap_or(0);
        let spec = if holder == s.identity {
            self.spec(spec.acquire_time.map_or(now, |t| t.0), transitions, now)
        } else if holder.is_empty() || expired {
            self.spec(now, transitions + 1, now)
        } else {
            return Ok(false);
        };
        lease.spec = Some(spec);
        match self.api.replace(&s.name, &PostParams::default(), &lease).await {
            Ok(_) => Ok(true),
            Err(kube::Error::Api(e)) if e.code == 409 => Ok(false),
            Err(e) => Err(e),
        }
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

    async fn release(&self) -> Result<(), kube::Error> {
        let Some(mut lease) = self.api.get_opt(&self.settings.name).await? else {
            return Ok(());
        };
        if let Some(spec) = lease.spec.as_mut() {
            if spec.holder_identity.as_deref() != Some(self.settings.identity.as_str()) {
                return Ok(());
            }
            spec.holder_identity = None;
            spec.renew_time = None;
        }
        self.api
            .replace(&self.settings.name, &PostParams::default(), &lease)
            .await
            .map(|_| ())
    }
}
