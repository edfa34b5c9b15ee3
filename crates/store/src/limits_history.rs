//! A scope's limits over time, read from the audit log, and restoring an
//! earlier version (itself audited, with the reason given).

use crate::audit::{append, AuditCols};
use crate::{AuditRow, NewAudit, Result, Store, StoreError, TenantScope};
use domain::Limits;
use serde_json::json;
use uuid::Uuid;

/// Whose limits: a tenant, an app of a tenant, or a key of a tenant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LimitsOwner {
    Tenant { tenant: String },
    App { tenant: String, app: String },
    Key { tenant: String, id: Uuid },
}

impl LimitsOwner {
    /// The audit log's name of the owner (`tenant:t`, `app:t/a`, `key:<uuid>`).
    pub fn target(&self) -> String {
        match self {
            LimitsOwner::Tenant { tenant } => format!("tenant:{tenant}"),
            LimitsOwner::App { tenant, app } => format!("app:{tenant}/{app}"),
            LimitsOwner::Key { id, .. } => format!("key:{id}"),
        }
    }

    pub fn tenant(&self) -> &str {
        match self {
            LimitsOwner::Tenant { tenant }
            | LimitsOwner::App { tenant, .. }
            | LimitsOwner::Key { tenant, .. } => tenant,
        }
    }

    /// `tenant`, `app` or `key`: the audit action's prefix.
    pub fn kind(&self) -> &'static str {
        match self {
            LimitsOwner::Tenant { .. } => "tenant",
            LimitsOwner::App { .. } => "app",
            LimitsOwner::Key { .. } => "key",
        }
    }
}

/// Rows of the history read at most.
const HISTORY_ROWS: i64 = 500;

impl Store {
    /// The audit entries about `owner` that carry limits, newest first
    /// (none when the scope does not cover the owner's tenant). The caller
    /// keeps those that changed the limits (`domain::audit::limits_change`).
    pub async fn limit_history(
        &self,
        scope: &TenantScope,
        owner: &LimitsOwner,
    ) -> Result<Vec<AuditRow>> {
        if !scope.covers(owner.tenant()) {
            return Ok(Vec::new());
        }
        let rows = sqlx::query_as::<_, AuditCols>(
            "SELECT id, at, actor, action, target, before, after, reason, prev_hash, hash FROM audit_log
             WHERE target = $1 AND jsonb_typeof(after -> 'limits') = 'object'
             ORDER BY id DESC LIMIT $2",
        )
        .bind(owner.target())
        .bind(HISTORY_ROWS)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows.into_iter().map(AuditRow::from).collect())
    }

    /// Sets `owner`'s limits back to an earlier version (audit row `from`),
    /// audited as `<kind>.limits_restore` with the limits before and after
    /// and the reason. The catalog listener sees the change like any other.
    pub async fn restore_limits(
        &self,
        actor: &str,
        owner: &LimitsOwner,
        limits: &Limits,
        from: i64,
        reason: &str,
    ) -> Result<()> {
        let action = format!("{}.limits_restore", owner.kind());
        let extra = Some(("restored_from", json!(from)));
        self.write_limits(actor, owner, limits, &action, extra, Some(reason), None)
            .await
            .map(|_| ())
    }

    /// `owner`'s row version (see migrations/0023_row_versions.sql), if it
    /// exists and the scope covers it.
    pub async fn limits_owner_version(
        &self,
        scope: &TenantScope,
        owner: &LimitsOwner,
    ) -> Result<Option<i64>> {
        if !scope.covers(owner.tenant()) {
            return Ok(None);
        }
        let (table, which, second) = owner_row(owner);
        let q = format!("SELECT version FROM {table} WHERE {which}");
        let mut q = sqlx::query_scalar::<_, i64>(&q).bind(owner.tenant());
        if let Some(s) = &second {
            q = q.bind(s);
        }
        Ok(q.fetch_optional(&self.pool).await?)
    }

    /// Sets `owner`'s limits (an app's or a key's, edited from the row at
    /// version `expected`; `None`: whichever is stored), audited as
    /// `<kind>.limits` with the limits and versions before and after.
    /// Refused as `Stale` when the row is at another version by now; returns
    /// the new version.
    pub async fn set_limits(
        &self,
        actor: &str,
        owner: &LimitsOwner,
        limits: &Limits,
        expected: Option<i64>,
    ) -> Result<i64> {
        let action = format!("{}.limits", owner.kind());
        self.write_limits(actor, owner, limits, &action, None, None, expected)
            .await
    }

    /// The one write of a scope's limits, with its audit entry, in one
    /// transaction; the row's version goes up by one (and must be
    /// `expected`, when given). Returns the new version.
    #[allow(clippy::too_many_arguments)]
    async fn write_limits(
        &self,
        actor: &str,
        owner: &LimitsOwner,
        limits: &Limits,
        action: &str,
        extra: Option<(&str, serde_json::Value)>,
        reason: Option<&str>,
        expected: Option<i64>,
    ) -> Result<i64> {
        let (table, which, second) = owner_row(owner);
        let select = format!("SELECT limits, version FROM {table} WHERE {which} FOR UPDATE");
        let set = if second.is_some() { "$3" } else { "$2" };
        let update =
            format!("UPDATE {table} SET limits = {set}, version = version + 1 WHERE {which}");
        let after = serde_json::to_value(limits).expect("limits serialise");
        let mut tx = self.pool.begin().await?;
        let mut q = sqlx::query_as::<_, (serde_json::Value, i64)>(&select).bind(owner.tenant());
        if let Some(s) = &second {
            q = q.bind(s);
        }
        let (before, current) = q
            .fetch_optional(&mut *tx)
            .await?
            .ok_or_else(|| StoreError::NotFound(owner.target()))?;
        if let Some(expected) = expected.filter(|v| *v != current) {
            return Err(StoreError::Stale {
                what: owner.target(),
                expected,
                current,
            });
        }
        let mut q = sqlx::query(&update).bind(owner.tenant());
        if let Some(s) = &second {
            q = q.bind(s);
        }
        q.bind(&after).execute(&mut *tx).await?;
        let mut after = json!({"limits": after, "version": current + 1});
        if let Some((k, v)) = extra {
            after[k] = v;
        }
        let mut entry = NewAudit::new(actor, action, owner.target())
            .before(json!({"limits": before, "version": current}))
            .after(after);
        if let Some(r) = reason {
            entry = entry.reason(r);
        }
        append(&mut tx, entry).await?;
        tx.commit().await?;
        Ok(current + 1)
    }

    /// The audit entries about `target` that moved its row past version
    /// `since` (each carries `after.version`), oldest first: what changed
    /// since someone opened a form at that version.
    pub async fn changes_since(&self, target: &str, since: i64) -> Result<Vec<AuditRow>> {
        let rows = sqlx::query_as::<_, AuditCols>(
            "SELECT id, at, actor, action, target, before, after, reason, prev_hash, hash FROM audit_log
             WHERE target = $1 AND jsonb_typeof(after -> 'version') = 'number'
               AND (after ->> 'version')::bigint > $2
             ORDER BY id LIMIT 20",
        )
        .bind(target)
        .bind(since)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows.into_iter().map(AuditRow::from).collect())
    }
}

/// (table, the owner's WHERE, its bind after the tenant).
fn owner_row(owner: &LimitsOwner) -> (&'static str, &'static str, Option<String>) {
    match owner {
        LimitsOwner::Tenant { .. } => ("tenants", "id = $1", None),
        LimitsOwner::App { app, .. } => ("apps", "tenant_id = $1 AND id = $2", Some(app.clone())),
        LimitsOwner::Key { id, .. } => (
            "virtual_keys",
            "tenant_id = $1 AND id::text = $2",
            Some(id.to_string()),
        ),
    }
}
