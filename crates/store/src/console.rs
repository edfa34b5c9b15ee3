//! Reads (and the one write, a role change) the console's pages need that
//! the gateway does not: lists of tenants, apps, keys, models and users, and
//! the audit log searched by actor, action, target and time.

use crate::audit::{append, NewAudit};
use crate::catalog::{
    app_row, model_row, tenant_row, AppCols, AppRow, ModelCols, ModelRow, TenantCols, TenantRow,
};
use crate::{Result, Store, StoreError, TenantScope};
use chrono::{DateTime, Utc};
use serde_json::json;
use uuid::Uuid;

/// A virtual key as the console lists it (never its hash).
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct KeyListRow {
    pub id: Uuid,
    pub tenant_id: String,
    pub app_id: String,
    pub name: String,
    pub prefix: String,
    pub expires_at: Option<DateTime<Utc>>,
    pub revoked_at: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
    /// `None`: every model its app allows.
    pub allowed_models: Option<Vec<String>>,
    /// The row version (see migrations/0023_row_versions.sql).
    pub version: i64,
    /// After a rotation: the previous secret's prefix and the end of its
    /// grace (past: it no longer works).
    pub previous_prefix: Option<String>,
    pub previous_valid_until: Option<DateTime<Utc>>,
    pub rotated_at: Option<DateTime<Utc>>,
}

/// One key's use as its row in the console shows it: this month's requests
/// and cost, and the last day (platform time) it was used in this month or
/// the one before.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct KeySpendRow {
    pub key_id: String,
    pub requests: i64,
    pub cost_micro: i64,
    pub last_day: Option<chrono::NaiveDate>,
}

#[derive(Debug, Clone, sqlx::FromRow)]
pub struct UserListRow {
    pub id: Uuid,
    pub email: String,
    pub role: String,
    pub tenant_id: Option<String>,
    pub disabled: bool,
    pub created_at: DateTime<Utc>,
}

/// Audit log filters; empty strings and None match everything. Text
/// filters match a substring, case-insensitively. Pages are keyset pages:
/// the next (older) page is the rows `before` the last id of this one.
#[derive(Debug, Clone, Default)]
pub struct AuditFilter {
    pub actor: String,
    pub action: String,
    pub target: String,
    pub from: Option<DateTime<Utc>>,
    pub to: Option<DateTime<Utc>>,
    /// Only rows with an id below this one.
    pub before: Option<i64>,
    pub limit: i64,
}

/// `%` and `_` typed by a person are literal characters, not wildcards.
fn like_pattern(s: &str) -> String {
    let escaped = s
        .replace('\\', "\\\\")
        .replace('%', "\\%")
        .replace('_', "\\_");
    format!("%{escaped}%")
}

impl Store {
    /// The scope's tenants.
    pub async fn tenants(&self, scope: &TenantScope) -> Result<Vec<TenantRow>> {
        let rows = sqlx::query_as::<_, TenantCols>(
            "SELECT id, name, cost_center, priority, limits, may_borrow, borrow_cap_tokens, allowed_models, clamp_max_tokens,
                    max_queued_requests, max_open_streams
             FROM tenants WHERE ($1::text IS NULL OR id = $1) ORDER BY id",
        )
        .bind(scope.tenant())
        .fetch_all(&self.pool)
        .await?;
        rows.into_iter().map(tenant_row).collect()
    }

    /// Every app of the scope's tenants, by tenant then id (the ids a
    /// picker offers).
    pub async fn app_ids(&self, scope: &TenantScope) -> Result<Vec<(String, String)>> {
        Ok(sqlx::query_as::<_, (String, String)>(
            "SELECT tenant_id, id FROM apps WHERE ($1::text IS NULL OR tenant_id = $1)
             ORDER BY tenant_id, id",
        )
        .bind(scope.tenant())
        .fetch_all(&self.pool)
        .await?)
    }

    pub async fn apps_of(&self, scope: &TenantScope, tenant: &str) -> Result<Vec<AppRow>> {
        let rows = sqlx::query_as::<_, AppCols>(
            "SELECT tenant_id, id, name, limits, allowed_models, attribution FROM apps
             WHERE tenant_id = $1 AND ($2::text IS NULL OR tenant_id = $2) ORDER BY id",
        )
        .bind(tenant)
        .bind(scope.tenant())
        .fetch_all(&self.pool)
        .await?;
        rows.into_iter().map(app_row).collect()
    }

    /// The names of these keys, by id, within the scope (a key of another
    /// tenant is simply absent).
    pub async fn key_names(
        &self,
        scope: &TenantScope,
        ids: &[Uuid],
    ) -> Result<std::collections::HashMap<Uuid, String>> {
        let rows = sqlx::query_as::<_, (Uuid, String)>(
            "SELECT id, name FROM virtual_keys WHERE id = ANY($1) AND ($2::text IS NULL OR tenant_id = $2)",
        )
        .bind(ids)
        .bind(scope.tenant())
        .fetch_all(&self.pool)
        .await?;
        Ok(rows.into_iter().collect())
    }

    pub async fn keys_of(&self, scope: &TenantScope, tenant: &str) -> Result<Vec<KeyListRow>> {
        let rows = sqlx::query_as::<_, KeyListRow>(
            "SELECT id, tenant_id, app_id, name, prefix, expires_at, revoked_at, created_at,
                    allowed_models, version, previous_prefix, previous_valid_until, rotated_at
             FROM virtual_keys WHERE tenant_id = $1 AND ($2::text IS NULL OR tenant_id = $2)
             ORDER BY app_id, created_at DESC",
        )
        .bind(tenant)
        .bind(scope.tenant())
        .fetch_all(&self.pool)
        .await?;
        Ok(rows)
    }

    /// Per key of a tenant: `period`'s requests and cost, and the last day
    /// with usage in `period` or `previous` — from the rollups (two ranges
    /// of their primary key, however large the ledger). Keys without usage
    /// in either month have no row.
    pub async fn key_spend(
        &self,
        scope: &TenantScope,
        tenant: &str,
        period: &str,
        previous: &str,
    ) -> Result<Vec<KeySpendRow>> {
        let rows = sqlx::query_as::<_, KeySpendRow>(
            "SELECT key_id,
                    LEAST(COALESCE(sum(requests) FILTER (WHERE period = $2), 0), 9007199254740991)::bigint AS requests,
                    LEAST(COALESCE(sum(cost_micro) FILTER (WHERE period = $2), 0), 9007199254740991)::bigint AS cost_micro,
                    max(day) AS last_day
             FROM usage_rollups
             WHERE period IN ($2, $3) AND tenant_id = $1 AND ($4::text IS NULL OR tenant_id = $4)
             GROUP BY key_id",
        )
        .bind(tenant)
        .bind(period)
        .bind(previous)
        .bind(scope.tenant())
        .fetch_all(&self.pool)
        .await?;
        Ok(rows)
    }

    /// Every model, without its (encrypted) provider key.
    pub async fn models(&self) -> Result<Vec<ModelRow>> {
        let rows = sqlx::query_as::<_, ModelCols>(
            "SELECT id, kind, upstream_base_url, upstream_model, input_price_micro_per_mtok,
                    output_price_micro_per_mtok, tokenizer, default_max_output_tokens, degrade_to, pool_capacity,
                    cap_field, hidden_reasoning, apis, enabled
             FROM models ORDER BY id",
        )
        .fetch_all(&self.pool)
        .await?;
        rows.into_iter().map(model_row).collect()
    }

    pub async fn users(&self) -> Result<Vec<UserListRow>> {
        let rows = sqlx::query_as::<_, UserListRow>(
            "SELECT id, email, role, tenant_id, disabled, created_at FROM users ORDER BY email",
        )
        .fetch_all(&self.pool)
        .await?;
        Ok(rows)
    }

    /// Changes another user's role (the caller refuses a change of one's
    /// own role before it gets here), with its audit row.
    pub async fn set_user_role(
        &self,
        actor: &str,
        by: Option<Uuid>,
        id: Uuid,
        role: &str,
        tenant_id: Option<&str>,
    ) -> Result<()> {
        let mut tx = self.pool.begin().await?;
        let (email, old_role, old_tenant): (String, String, Option<String>) =
            sqlx::query_as("SELECT email, role, tenant_id FROM users WHERE id = $1 FOR UPDATE")
                .bind(id)
                .fetch_optional(&mut *tx)
                .await?
                .ok_or_else(|| StoreError::NotFound(format!("user {id}")))?;
        sqlx::query(
            "UPDATE users SET role = $2, tenant_id = $3, access_set_by = $4, access_set_at = now() \
             WHERE id = $1",
        )
        .bind(id)
        .bind(role)
        .bind(tenant_id)
        .bind(by)
        .execute(&mut *tx)
        .await?;
        append(
            &mut tx,
            NewAudit::new(actor, "user.role_change", format!("user:{email}"))
                .before(json!({"role": old_role, "tenant_id": old_tenant}))
                .after(json!({"role": role, "tenant_id": tenant_id})),
        )
        .await?;
        // Sessions opened under the old role end with it (a "change" to the
        // same role and tenant ends nothing).
        if old_role != role || old_tenant.as_deref() != tenant_id {
            crate::auth::revoke_user_sessions(&mut tx, id).await?;
        }
        tx.commit().await?;
        Ok(())
    }

    /// Audit rows matching the filter, newest first. The log belongs to
    /// the platform, not to a tenant: a one-tenant scope reads none of it.
    pub async fn audit_search(
        &self,
        scope: &TenantScope,
        f: &AuditFilter,
    ) -> Result<Vec<crate::AuditRow>> {
        let rows = sqlx::query_as::<_, crate::audit::AuditCols>(
            "SELECT id, at, actor, action, target, before, after, reason, prev_hash, hash FROM audit_log
             WHERE ($1 = '' OR actor ILIKE $2) AND ($3 = '' OR action ILIKE $4) AND ($5 = '' OR target ILIKE $6)
               AND ($7::timestamptz IS NULL OR at >= $7) AND ($8::timestamptz IS NULL OR at <= $8)
               AND ($10::int8 IS NULL OR id < $10) AND $11
             ORDER BY id DESC LIMIT $9",
        )
        .bind(&f.actor)
        .bind(like_pattern(&f.actor))
        .bind(&f.action)
        .bind(like_pattern(&f.action))
        .bind(&f.target)
        .bind(like_pattern(&f.target))
        .bind(f.from)
        .bind(f.to)
        .bind(f.limit.clamp(1, 1000))
        .bind(f.before)
        .bind(scope.is_all())
        .fetch_all(&self.pool)
        .await?;
        Ok(rows.into_iter().map(crate::AuditRow::from).collect())
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn like_patterns_escape_wildcards() {
        assert_eq!(super::like_pattern("a%b_c\\"), "%a\\%b\\_c\\\\%");
    }
}
