//! Appending to and reading the hash-chained audit log. Appends serialize on a
//! transaction-scoped advisory lock so the chain has exactly one tail.

use crate::{Result, Store, TenantScope};
use chrono::{DateTime, SubsecRound, Utc};
use domain::audit::AuditEntry;
use serde_json::Value;
use sqlx::{Postgres, Transaction};

const AUDIT_LOCK: i64 = 0x7467_6175_6469_7400; // "tgaudit"

#[derive(Debug, Clone)]
pub struct NewAudit {
    pub actor: String,
    pub action: String,
    pub target: String,
    pub before: Value,
    pub after: Value,
    pub reason: String,
}

impl NewAudit {
    pub fn new(
        actor: impl Into<String>,
        action: impl Into<String>,
        target: impl Into<String>,
    ) -> Self {
        Self {
            actor: actor.into(),
            action: action.into(),
            target: target.into(),
            before: Value::Null,
            after: Value::Null,
            reason: String::new(),
        }
    }
    pub fn before(mut self, v: Value) -> Self {
        self.before = v;
        self
    }
    pub fn after(mut self, v: Value) -> Self {
        self.after = v;
        self
    }
    pub fn reason(mut self, r: impl Into<String>) -> Self {
        self.reason = r.into();
        self
    }
}

#[derive(Debug, Clone)]
pub struct AuditRow {
    pub id: i64,
    pub entry: AuditEntry,
    pub prev_hash: Vec<u8>,
    pub hash: Vec<u8>,
}

fn fmt_at(at: DateTime<Utc>) -> String {
    at.format("%Y-%m-%dT%H:%M:%S%.6fZ").to_string()
}

/// Appends one row inside the caller's transaction, so the change and its
/// audit row commit together or not at all.
pub(crate) async fn append(tx: &mut Transaction<'_, Postgres>, a: NewAudit) -> Result<()> {
    sqlx::query("SELECT pg_advisory_xact_lock($1)")
        .bind(AUDIT_LOCK)
        .execute(&mut **tx)
        .await?;
    let prev: Option<Vec<u8>> =
        sqlx::query_scalar("SELECT hash FROM audit_log ORDER BY id DESC LIMIT 1")
            .fetch_optional(&mut **tx)
            .await?;
    let prev = prev.unwrap_or_else(|| vec![0u8; 32]);
    // Postgres keeps microseconds: hash exactly what is stored.
    let at = Utc::now().trunc_subsecs(6);
    let entry = AuditEntry {
        at: fmt_at(at),
        actor: a.actor,
        action: a.action,
        target: a.target,
        before: a.before,
        after: a.after,
        reason: a.reason,
    };
    let hash = entry.chain_hash(&prev);
    sqlx::query(
        "INSERT INTO audit_log (at, actor, action, target, before, after, reason, prev_hash, hash)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
    )
    .bind(at)
    .bind(&entry.actor)
    .bind(&entry.action)
    .bind(&entry.target)
    .bind(&entry.before)
    .bind(&entry.after)
    .bind(&entry.reason)
    .bind(prev)
    .bind(hash.as_slice())
    .execute(&mut **tx)
    .await?;
    Ok(())
}

impl Store {
    pub async fn audit(&self, a: NewAudit) -> Result<()> {
        let mut tx = self.pool.begin().await?;
        append(&mut tx, a).await?;
        tx.commit().await?;
        Ok(())
    }

    /// The whole chain in order (verification reads every row). The log
    /// belongs to the platform: a one-tenant scope reads none of it.
    pub async fn audit_chain(&self, scope: &TenantScope) -> Result<Vec<AuditRow>> {
        let rows = sqlx::query_as::<_, AuditCols>(
            "SELECT id, at, actor, action, target, before, after, reason, prev_hash, hash FROM audit_log
             WHERE $1 ORDER BY id",
        )
        .bind(scope.is_all())
        .fetch_all(&self.pool)
        .await?;
        Ok(rows.into_iter().map(AuditRow::from).collect())
    }
}

/// An `audit_log` row as selected (`id, at, actor, action, target, before,
/// after, reason, prev_hash, hash`).
#[derive(sqlx::FromRow)]
pub(crate) struct AuditCols {
    id: i64,
    at: DateTime<Utc>,
    actor: String,
    action: String,
    target: String,
    before: Value,
    after: Value,
    reason: String,
    prev_hash: Vec<u8>,
    hash: Vec<u8>,
}

impl From<AuditCols> for AuditRow {
    fn from(r: AuditCols) -> Self {
        AuditRow {
            id: r.id,
            entry: AuditEntry {
                at: fmt_at(r.at),
                actor: r.actor,
                action: r.action,
                target: r.target,
                before: r.before,
                after: r.after,
                reason: r.reason,
            },
            prev_hash: r.prev_hash,
            hash: r.hash,
        }
    }
}
