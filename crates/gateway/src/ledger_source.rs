//! The Postgres ledger as the hold engine's rebuild source.

use quota::{LedgerSource, ScopeUsage};
use store::Store;

pub struct StoreLedger<'a>(pub &'a Store);

impl LedgerSource for StoreLedger<'_> {
    async fn month_usage(&self, tenant: &str, month: &str) -> Result<Vec<ScopeUsage>, String> {
        let rows = self
            .0
            .month_usage(tenant, month)
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
}
