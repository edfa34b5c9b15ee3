//! Redis must run `maxmemory-policy noeviction` (see quota's eviction
//! check): start-up refuses anything else, and a running replica re-reads
//! the policy every minute and says so loudly when it changed — an error in
//! the log, `tollgate_redis_eviction_policy_ok` at 0, and a platform notice
//! on the console (once per change).

use anyhow::bail;
use gateway::REDIS_EVICTION_POLICY_OK;
use quota::{QuotaEngine, QuotaError};
use std::sync::Arc;
use std::time::Duration;
use store::Store;
use tokio::task::JoinHandle;

const EVERY: Duration = Duration::from_secs(60);

/// Fails start-up with the message that names `maxmemory-policy` and the
/// fix. A Redis that does not answer yet is not refused here (requests fail
/// closed until it does); the watch checks it once it answers.
pub async fn check_at_start(quota: &QuotaEngine) -> anyhow::Result<()> {
    match quota.check_eviction_policy().await {
        Ok(()) => {
            metrics::gauge!(REDIS_EVICTION_POLICY_OK).set(1.0);
            Ok(())
        }
        Err(QuotaError::Misconfigured(msg)) => bail!(msg),
        Err(e) => {
            tracing::warn!(error = %e, "could not read Redis maxmemory-policy at start; checking again shortly");
            Ok(())
        }
    }
}

pub fn spawn_watch(store: Store, quota: Arc<QuotaEngine>) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut was_ok = true;
        loop {
            tokio::time::sleep(EVERY).await;
            match quota.check_eviction_policy().await {
                Ok(()) => {
                    metrics::gauge!(REDIS_EVICTION_POLICY_OK).set(1.0);
                    if !was_ok {
                        tracing::info!("Redis maxmemory-policy is noeviction again");
                    }
                    was_ok = true;
                }
                Err(QuotaError::Misconfigured(msg)) => {
                    metrics::gauge!(REDIS_EVICTION_POLICY_OK).set(0.0);
                    tracing::error!("{msg}");
                    if was_ok {
                        let detail = serde_json::json!({"setting": "maxmemory-policy"});
                        if let Err(e) = store
                            .add_notice(None, "redis_eviction_policy", &msg, &detail)
                            .await
                        {
                            tracing::warn!(error = %e, "could not record the eviction-policy notice");
                        }
                    }
                    was_ok = false;
                }
                Err(e) => tracing::debug!(error = %e, "eviction-policy check: Redis not answering"),
            }
        }
    })
}
