//! Temporary quota requests and the grants they become.

use crate::audit::{append, NewAudit};
use crate::{Result, Store, StoreError, TenantScope};
use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::json;
use uuid::Uuid;

#[derive(Debug, Clone, Serialize, sqlx::FromRow)]
pub struct QuotaRequestRow {
    pub id: Uuid,
    pub tenant_id: String,
    pub app_id: Option<String>,
    pub tokens: i64,
    pub cost_micro: i64,
    pub expires_at: DateTime<Utc>,
    pub reason: String,
    pub state: String,
    pub requested_by: Uuid,
    pub decided_by: Option<Uuid>,
    pub decided_at: Option<DateTime<Utc>>,
    pub note: String,
    pub created_at: DateTime<Utc>,
}

#[derive(Debug, Clone)]
pub struct NewQuotaRequest {
    pub tenant_id: String,
    pub app_id: Option<String>,
    pub tokens: i64,
    pub cost_micro: i64,
    pub expires_at: DateTime<Utc>,
    pub reason: String,
    pub requested_by: Uuid,
}

/// An approved, unexpired grant, as the hot path applies it.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct GrantRow {
    pub tenant_id: String,
    pub app_id: Option<String>,
    pub tokens: i64,
    pub cost_micro: i64,
    pub expires_at: DateTime<Utc>,
}

impl GrantRow {
    pub fn grant(&self) -> domain::limits::Grant {
        domain::limits::Grant {
            tokens: self.tokens,
            cost_micro: self.cost_micro,
            expires_at: self.expires_at,
        }
    }
}

/// Approved unexpired grants of the tenant `$1` (NULL: every tenant).
pub(crate) const ACTIVE_GRANTS: &str =
    "SELECT tenant_id, app_id, tokens, cost_micro, expires_at FROM quota_requests
     WHERE state = 'approved' AND expires_at > now() AND ($1::text IS NULL OR tenant_id = $1)";

const COLS: &str =
    "id, tenant_id, app_id, tokens, cost_micro, expires_at, reason, state, requested_by, \
                    decided_by, decided_at, note, created_at";

impl Store {
    pub async fn create_quota_request(
        &self,
        actor: &str,
        q: &NewQuotaRequest,
    ) -> Result<QuotaRequestRow> {
        let id = Uuid::now_v7();
        let mut tx = self.pool.begin().await?;
        let r = sqlx::query_as::<_, QuotaRequestRow>(&format!(
            "INSERT INTO quota_requests (id, tenant_id, app_id, tokens, cost_micro, expires_at, reason, requested_by)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8) RETURNING {COLS}"
        ))
        .bind(id)
        .bind(&q.tenant_id)
        .bind(&q.app_id)
        .bind(q.tokens)
        .bind(q.cost_micro)
        .bind(q.expires_at)
        .bind(&q.reason)
        .bind(q.requested_by)
        .fetch_one(&mut *tx)
        .await?;
        let created = r;
        append(
            &mut tx,
            NewAudit::new(actor, "quota_request.create", format!("quota_request:{id}"))
                .after(serde_json::to_value(&created).expect("serialises"))
                .reason(&q.reason),
        )
        .await?;
        tx.commit().await?;
        Ok(created)
    }

    pub async fn quota_request(
        &self,
        scope: &TenantScope,
        id: Uuid,
    ) -> Result<Option<QuotaRequestRow>> {
        let r = sqlx::query_as::<_, QuotaRequestRow>(&format!(
            "SELECT {COLS} FROM quota_requests WHERE id = $1 AND ($2::text IS NULL OR tenant_id = $2)"
        ))
        .bind(id)
        .bind(scope.tenant())
        .fetch_optional(&self.pool)
        .await?;
        Ok(r)
    }

    /// Approves or rejects a pending request, once. The caller has checked
    /// that the decider may decide it (four eyes).
    pub async fn decide_quota_request(
        &self,
        actor: &str,
        id: Uuid,
        decided_by: Uuid,
        approve: bool,
        note: &str,
    ) -> Result<QuotaRequestRow> {
        let state = if approve { "approved" } else { "rejected" };
        let mut tx = self.pool.begin().await?;
        let r = sqlx::query_as::<_, QuotaRequestRow>(&format!(
            "UPDATE quota_requests SET state = $2, decided_by = $3, decided_at = now(), note = $4
             WHERE id = $1 AND state = 'pending' RETURNING {COLS}"
        ))
        .bind(id)
        .bind(state)
        .bind(decided_by)
        .bind(note)
        .fetch_optional(&mut *tx)
        .await?
        .ok_or_else(|| StoreError::Conflict(format!("quota request {id} is not pending")))?;
        let decided = r;
        append(
            &mut tx,
            NewAudit::new(
                actor,
                format!(
                    "quota_request.{}",
                    if approve { "approve" } else { "reject" }
                ),
                format!("quota_request:{id}"),
            )
            .before(json!({"state": "pending"}))
            .after(serde_json::to_value(&decided).expect("serialises"))
            .reason(note),
        )
        .await?;
        tx.commit().await?;
        Ok(decided)
    }

    /// The scope's requests, newest first.
    pub async fn quota_requests(&self, scope: &TenantScope) -> Result<Vec<QuotaRequestRow>> {
        let rows = sqlx::query_as::<_, QuotaRequestRow>(&format!(
            "SELECT {COLS} FROM quota_requests WHERE ($1::text IS NULL OR tenant_id = $1) ORDER BY created_at DESC LIMIT 500"
        ))
        .bind(scope.tenant())
        .fetch_all(&self.pool)
        .await?;
        Ok(rows)
    }

    /// The scope's approved grants that have not expired yet.
    pub async fn active_grants(&self, scope: &TenantScope) -> Result<Vec<GrantRow>> {
        Ok(sqlx::query_as(ACTIVE_GRANTS)
            .bind(scope.tenant())
            .fetch_all(&self.pool)
            .await?)
    }
}
