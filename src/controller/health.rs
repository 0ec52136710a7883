//! Liveness of the event loop, for `/healthz`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::time::Instant;

/// How often the event loop proves it is alive, and how long without that before `/healthz`
/// fails.
pub const HEARTBEAT: Duration = Duration::from_secs(2);
pub const STALL_AFTER: Duration = Duration::from_secs(20);

/// Liveness of the event loop, for `/healthz`.
#[derive(Debug)]
pub struct Health {
    started: Instant,
    beat_ms: AtomicU64,
}

impl Default for Health {
    fn default() -> Self {
        Health {
            started: Instant::now(),
            beat_ms: AtomicU64::new(0),
        }
    }
}

impl Health {
    pub(super) fn beat(&self) {
        let ms = self.started.elapsed().as_millis() as u64;
        self.beat_ms.store(ms, Ordering::Relaxed);
    }

    /// The loop has made progress within [`STALL_AFTER`].
    pub fn alive(&self) -> bool {
        let last = Duration::from_millis(self.beat_ms.load(Ordering::Relaxed));
        self.started.elapsed().saturating_sub(last) < STALL_AFTER
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_loop_that_stops_beating_is_reported_dead() {
        let health = Health::default();
        health.beat();
        tokio::time::sleep(STALL_AFTER / 2).await;
        assert!(health.alive());
        tokio::time::sleep(STALL_AFTER).await;
        assert!(!health.alive(), "no beat for {:?}", STALL_AFTER * 3 / 2);
        health.beat();
        assert!(health.alive());
    }
}
