//! Refused, degraded and queued requests (migrations 0005, 0032): written in batches by the
//! gateway's decision writer, read by the request lookup (docs/design.md §10, §11).

use crate::{Result, Store, TenantScope};
use chrono::{DateTime, NaiveDate, Utc};
use serde_json::Value;
use sqlx::QueryBuilder;

#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct RequestDecisionRow {
    pub request_id: String,
    pub at: DateTime<Utc>,
    /// `YYYY-MM`, platform time.
    pub period: String,
    pub day: NaiveDate,
    pub tenant_id: String,
    pub app_id: String,
    pub key_id: String,
    pub model: String,
    /// `refused`, `degraded` or `queued` (admitted after a wait in the fair
    /// queue: `detail.waited_ms`, `detail.queue_reason`; a degraded request
    /// that waited carries those in its detail too).
    pub decision: String,
    /// A reason code (crates/domain/src/reason.rs).
    pub reason: String,
    pub status: i16,
    pub scope: Option<String>,
    /// Counters at the time (limit, headroom, estimate …).
    pub detail: Value,
    /// The request's tags and end user, as far as the request was read
    /// (stored in the ledger's encoding: `crate::ledger::AttributionCols`).
    #[sqlx(flatten, try_from = "crate::ledger::AttributionCols")]
    pub attribution: domain::attribution::Attribution,
}

const COLUMNS: &str =
    "request_id, at, period, day, tenant_id, app_id, key_id, model, decision, reason, status, scope, detail, tags, end_user";

impl Store {
    /// Stores a batch; a request id already stored is left as it was (a
    /// retried batch never duplicates or overwrites).
    pub async fn insert_request_decisions(&self, rows: &[RequestDecisionRow]) -> Result<u64> {
        if rows.is_empty() {
            return Ok(0);
        }
        let mut q = QueryBuilder::new(format!("INSERT INTO request_decisions ({COLUMNS}) "));
        q.push_values(rows, |mut b, r| {
            b.push_bind(&r.request_id)
                .push_bind(r.at)
                .push_bind(&r.period)
                .push_bind(r.day)
                .push_bind(&r.tenant_id)
                .push_bind(&r.app_id)
                .push_bind(&r.key_id)
                .push_bind(&r.model)
                .push_bind(&r.decision)
                .push_bind(&r.reason)
                .push_bind(r.status)
                .push_bind(&r.scope)
                .push_bind(&r.detail)
                .push_bind(crate::ledger::tags_json(&r.attribution.tags))
                .push_bind(crate::ledger::end_user_col(&r.attribution.end_user));
        });
        q.push(" ON CONFLICT (request_id) DO NOTHING");
        Ok(q.build().execute(&self.pool).await?.rows_affected())
    }

    pub async fn request_decision(
        &self,
        scope: &TenantScope,
        request_id: &str,
    ) -> Result<Option<RequestDecisionRow>> {
        let r = sqlx::query_as::<_, RequestDecisionRow>(&format!(
            "SELECT {COLUMNS} FROM request_decisions WHERE request_id = $1
               AND ($2::text IS NULL OR tenant_id = $2)"
        ))
        .bind(request_id)
        .bind(scope.tenant())
        .fetch_optional(&self.pool)
        .await?;
        Ok(r)
    }

    /// Tenants refusing requests for their own monthly budget now: each
    /// tenant's latest refusal in `period` for its tenant-level token or
    /// cost budget, when no request of the tenant was admitted after it
    /// (request ids are in time order). Its detail holds the limit that
    /// refused (`limit_value`).
    pub async fn budget_refusals(
        &self,
        scope: &TenantScope,
        period: &str,
    ) -> Result<Vec<BudgetRefusal>> {
        Ok(sqlx::query_as::<_, BudgetRefusal>(
            "SELECT d.tenant_id, d.reason, d.detail FROM (
                 SELECT DISTINCT ON (tenant_id) tenant_id, request_id, reason, detail
                 FROM request_decisions
                 WHERE period = $1 AND decision = 'refused'
                   AND reason IN ('tenant_monthly_cost_exhausted', 'tenant_monthly_budget_exhausted')
                   AND ($2::text IS NULL OR tenant_id = $2)
                 ORDER BY tenant_id, request_id DESC
             ) d
             WHERE d.request_id > COALESCE(
                 (SELECT max(u.request_id) FROM usage_events u WHERE u.tenant_id = d.tenant_id), '')
             ORDER BY d.tenant_id",
        )
        .bind(period)
        .bind(scope.tenant())
        .fetch_all(&self.pool)
        .await?)
    }
}

/// A tenant's latest refusal for its own monthly budget
/// ([`Store::budget_refusals`]).
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct BudgetRefusal {
    pub tenant_id: String,
    /// `tenant_monthly_cost_exhausted` or `tenant_monthly_budget_exhausted`.
    pub reason: String,
    pub detail: Value,
}
