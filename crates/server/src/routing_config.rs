//! `[routing]`: retries before the first byte and deployment health
//! (docs/routing.md).

use serde::{Deserialize, Serialize};
use std::time::Duration;

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RoutingConfig {
    /// Attempts per request, the first included (1 = no retry).
    pub max_tries: u32,
    /// No new attempt starts this long after the first.
    pub retry_deadline_ms: u64,
    /// Timeout to response headers of one attempt (the request's own
    /// timeout applies when it is shorter).
    pub attempt_timeout_ms: u64,
    /// Consecutive failures that eject a deployment.
    pub eject_after_failures: u32,
    /// First ejection; doubled after each failed probe, up to the max.
    pub ejection_ms: u64,
    pub max_ejection_ms: u64,
    /// Active probe period of ejected deployments (0 = passive only: the
    /// first request after the ejection is the probe).
    pub probe_secs: u64,
}

impl Default for RoutingConfig {
    fn default() -> Self {
        Self {
            max_tries: 3,
            retry_deadline_ms: 30_000,
            attempt_timeout_ms: 30_000,
            eject_after_failures: 3,
            ejection_ms: 5_000,
            max_ejection_ms: 60_000,
            probe_secs: 0,
        }
    }
}

impl RoutingConfig {
    pub fn validate(&self) -> anyhow::Result<()> {
        if self.max_tries == 0 || self.max_tries > 10 {
            anyhow::bail!("routing.max_tries must be between 1 and 10");
        }
        if self.eject_after_failures == 0 {
            anyhow::bail!("routing.eject_after_failures must be at least 1");
        }
        if self.ejection_ms == 0 || self.max_ejection_ms < self.ejection_ms {
            anyhow::bail!("routing.ejection_ms must be > 0 and at most routing.max_ejection_ms");
        }
        Ok(())
    }

    pub fn tuning(&self) -> gateway::routing::RoutingTuning {
        use domain::routing::{HealthPolicy, RetryPolicy};
        gateway::routing::RoutingTuning {
            retry: RetryPolicy {
                max_tries: self.max_tries.max(1),
                total: Duration::from_millis(self.retry_deadline_ms),
            },
            health: HealthPolicy {
                eject_after: self.eject_after_failures.max(1),
                base_ejection_ms: self.ejection_ms.max(1),
                max_ejection_ms: self.max_ejection_ms.max(self.ejection_ms),
                probe_grace_ms: self.attempt_timeout_ms.max(1_000),
            },
            attempt_timeout: Duration::from_millis(self.attempt_timeout_ms.max(100)),
            probe_every: (self.probe_secs > 0).then(|| Duration::from_secs(self.probe_secs)),
        }
    }
}
