//! The Postgres ledger as the hold engine's rebuild source.

use quota::{LedgerSource, QuotaEngine, ScopeUsage};
use store::{Store, TenantScope};

pub struct StoreLedger<'a> {
    pub store: &'a Store,
    pub quota: &'a QuotaEngine,
}

impl LedgerSource for StoreLedger<'_> {
    async fn month_usage(&self, tenant: &str, month: &str) -> Result<Vec<ScopeUsage>, String> {
        // Events settled but not yet stored are part of the month too: store
        // them first (idempotent), so the rebuild reads one complete source.
        // (The hold engine's trait speaks strings: its errors end in a log.)
        crate::ledger::sweep_outboxes(self.store, self.quota, &[tenant.to_string()])
            .await
            .map_err(|e| e.to_string())?;
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

    async fn end_user_month_usage(
        &self,
        tenant: &str,
        app: &str,
        end_user: &str,
        month: &str,
    ) -> Result<(i64, i64), String> {
        crate::ledger::sweep_outboxes(self.store, self.quota, &[tenant.to_string()])
            .await
            .map_err(|e| e.to_string())?;
        self.store
            .end_user_month_usage(&TenantScope::system(), tenant, app, end_user, month)
            .await
            .map_err(|e| e.to_string())
    }
}
