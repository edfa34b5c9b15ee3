//! The Postgres ledger as the hold engine's rebuild source.

use crate::LedgerWriter;
use quota::{LedgerSource, QuotaEngine, ScopeUsage};
use std::time::Duration;
use store::{Store, TenantScope};

/// How long a rebuild waits for this replica's ledger writer to store what
/// it has queued (well inside the quota engine's 5 s rebuild lock).
const FLUSH_WAIT: Duration = Duration::from_secs(2);

pub struct StoreLedger<'a> {
    pub store: &'a Store,
    pub quota: &'a QuotaEngine,
    /// This replica's ledger writer, when it has one: a rebuild waits for it
    /// to store what it has queued, so the events this replica settled just
    /// before Redis lost them are in the sums (their outbox copies were lost
    /// with Redis). Tools and jobs without a writer pass `None`.
    pub writer: Option<&'a LedgerWriter>,
}

impl StoreLedger<'_> {
    /// Everything settled before the rebuild began, stored: this replica's
    /// writer queue first (bounded wait: a writer stuck on a failing
    /// Postgres leaves its events to the outbox, and the rebuild's own query
    /// would fail anyway), then what the tenant's Redis outbox still holds
    /// (idempotent by request id, so storing an event twice counts it once).
    async fn store_pending(&self, tenant: &str) -> Result<(), String> {
        if let Some(w) = self.writer {
            if tokio::time::timeout(FLUSH_WAIT, w.flush()).await.is_err() {
                tracing::warn!(tenant, "ledger writer did not flush before a month rebuild");
            }
        }
        // (The hold engine's trait speaks strings: its errors end in a log.)
        crate::ledger::sweep_outboxes(self.store, self.quota, &[tenant.to_string()])
            .await
            .map(|_| ())
            .map_err(|e| e.to_string())
    }
}

impl LedgerSource for StoreLedger<'_> {
    async fn month_usage(&self, tenant: &str, month: &str) -> Result<Vec<ScopeUsage>, String> {
        // Events settled but not yet stored are part of the month too: store
        // them first, so the rebuild reads one complete source.
        self.store_pending(tenant).await?;
        let rows = self
            .store
            .month_usage(&TenantScope::system(), tenant, month)
            .await
            .map_err(|e| e.to_string())?;
        Ok(rows
            .into_iter()
            .map(|r| ScopeUsage {
                app: r.app_id,
                key: r.key_id,
                tokens: r.tokens,
                cost: r.cost_micro,
                overrun_tokens: r.overrun_tokens,
                overrun_cost: r.overrun_cost_micro,
            })
            .collect())
    }

    async fn window_usage(
        &self,
        tenant: &str,
        app: Option<&str>,
        key: Option<&str>,
        models: Option<&[String]>,
        days: domain::budgets::Days,
    ) -> Result<(i64, i64, i64), String> {
        self.store_pending(tenant).await?;
        self.store
            .window_usage(&TenantScope::system(), tenant, app, key, models, days)
            .await
            .map_err(|e| e.to_string())
    }

    async fn end_user_month_usage(
        &self,
        tenant: &str,
        app: &str,
        end_user: &str,
        month: &str,
    ) -> Result<(i64, i64), String> {
        self.store_pending(tenant).await?;
        self.store
            .end_user_month_usage(&TenantScope::system(), tenant, app, end_user, month)
            .await
            .map_err(|e| e.to_string())
    }
}
