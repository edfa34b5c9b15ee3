//! A key after it was issued: rotated (a new secret, the previous one
//! working until a grace period ends) and edited (name, expiry, allowed
//! models); each audited with the key's name. The secrets are stored only
//! as keyed hashes (see migrations/0033_key_rotation.sql).

use crate::audit::{append, NewAudit};
use crate::console::KeyListRow;
use crate::{Result, Store, StoreError, TenantScope};
use chrono::{DateTime, Utc};
use serde_json::json;
use uuid::Uuid;

/// A rotation done: the new secret's prefix and when the previous one
/// stops working.
#[derive(Debug, Clone)]
pub struct Rotation {
    pub tenant_id: String,
    pub app_id: String,
    pub name: String,
    pub prefix: String,
    pub previous_prefix: String,
    pub grace_ends_at: DateTime<Utc>,
    /// The prefix of an earlier previous secret whose grace was still
    /// running: it stopped working with this rotation.
    pub ended_early: Option<String>,
    pub version: i64,
}

/// A key's name, expiry and allowed models, as an edit sets them whole.
#[derive(Debug, Clone)]
pub struct KeyEdit {
    pub name: String,
    pub expires_at: Option<DateTime<Utc>>,
    /// `None`: every model its app allows.
    pub allowed_models: Option<Vec<String>>,
}

#[derive(sqlx::FromRow)]
struct Current {
    tenant_id: String,
    app_id: String,
    name: String,
    prefix: String,
    expires_at: Option<DateTime<Utc>>,
    allowed_models: Option<Vec<String>>,
    version: i64,
    previous_prefix: Option<String>,
    previous_valid_until: Option<DateTime<Utc>>,
    now: DateTime<Utc>,
}

/// The active key `id` (not revoked, not expired), locked for the change.
async fn lock_active(tx: &mut sqlx::PgConnection, id: Uuid) -> Result<Current> {
    sqlx::query_as::<_, Current>(
        "SELECT tenant_id, app_id, name, prefix, expires_at, allowed_models, version,
                previous_prefix, previous_valid_until, now() AS now
         FROM virtual_keys
         WHERE id = $1 AND revoked_at IS NULL AND (expires_at IS NULL OR expires_at > now())
         FOR UPDATE",
    )
    .bind(id)
    .fetch_optional(tx)
    .await?
    .ok_or_else(|| StoreError::NotFound(format!("active key {id}")))
}

impl Store {
    /// Gives key `id` a new secret (`hash`, `prefix`); its current one
    /// keeps working for `grace_secs` more seconds (0: it stops now), as
    /// Postgres's clock reads. Audited as `key.rotate` with the key's name,
    /// both prefixes and the grace end. A grace still running from an
    /// earlier rotation ends now (one previous secret at a time). Refused
    /// as `NotFound` for a revoked or expired key.
    pub async fn rotate_key(
        &self,
        actor: &str,
        id: Uuid,
        hash: &[u8; 32],
        prefix: &str,
        grace_secs: i64,
    ) -> Result<Rotation> {
        let mut tx = self.pool.begin().await?;
        let cur = lock_active(&mut tx, id).await?;
        let ended_early = cur
            .previous_prefix
            .clone()
            .filter(|_| cur.previous_valid_until.is_some_and(|t| t > cur.now));
        let grace_ends_at: DateTime<Utc> = sqlx::query_scalar(
            "UPDATE virtual_keys
             SET previous_key_hash = key_hash, previous_prefix = prefix,
                 previous_valid_until = now() + make_interval(secs => $4),
                 key_hash = $2, prefix = $3, rotated_at = now(), version = version + 1
             WHERE id = $1
             RETURNING previous_valid_until",
        )
        .bind(id)
        .bind(hash.as_slice())
        .bind(prefix)
        .bind(grace_secs as f64)
        .fetch_one(&mut *tx)
        .await
        .map_err(crate::conflict(format!("key {id}")))?;
        let mut before = json!({"name": cur.name, "tenant": cur.tenant_id, "app": cur.app_id,
            "prefix": cur.prefix, "version": cur.version});
        if let Some(p) = &ended_early {
            before["previous_prefix"] = json!(p);
            before["previous_valid_until"] = json!(cur.previous_valid_until);
        }
        let mut after = json!({"name": cur.name, "tenant": cur.tenant_id, "app": cur.app_id,
            "prefix": prefix, "previous_prefix": cur.prefix, "grace_secs": grace_secs,
            "grace_ends_at": grace_ends_at, "version": cur.version + 1});
        if let Some(p) = &ended_early {
            after["ended_early"] = json!(p);
        }
        append(
            &mut tx,
            NewAudit::new(actor, "key.rotate", format!("key:{id}"))
                .before(before)
                .after(after),
        )
        .await?;
        tx.commit().await?;
        Ok(Rotation {
            tenant_id: cur.tenant_id,
            app_id: cur.app_id,
            name: cur.name,
            prefix: prefix.to_string(),
            previous_prefix: cur.prefix,
            grace_ends_at,
            ended_early,
            version: cur.version + 1,
        })
    }

    /// Sets an active key's name, expiry and allowed models (the caller
    /// merged its change onto the row at version `expected`; `None`:
    /// whichever is stored); refused as `Stale` when the row is at another
    /// version by now. Audited as `key.update` with the fields and versions
    /// before and after. Returns the new version.
    pub async fn update_key(
        &self,
        actor: &str,
        id: Uuid,
        edit: &KeyEdit,
        expected: Option<i64>,
    ) -> Result<i64> {
        let mut tx = self.pool.begin().await?;
        let cur = lock_active(&mut tx, id).await?;
        let target = format!("key:{id}");
        if let Some(expected) = expected.filter(|v| *v != cur.version) {
            return Err(StoreError::Stale {
                what: target,
                expected,
                current: cur.version,
            });
        }
        sqlx::query(
            "UPDATE virtual_keys SET name = $2, expires_at = $3, allowed_models = $4,
                    version = version + 1
             WHERE id = $1",
        )
        .bind(id)
        .bind(&edit.name)
        .bind(edit.expires_at)
        .bind(&edit.allowed_models)
        .execute(&mut *tx)
        .await?;
        append(
            &mut tx,
            NewAudit::new(actor, "key.update", target)
                .before(
                    json!({"name": cur.name, "tenant": cur.tenant_id, "app": cur.app_id,
                    "prefix": cur.prefix, "expires_at": cur.expires_at,
                    "allowed_models": cur.allowed_models, "version": cur.version}),
                )
                .after(
                    json!({"name": edit.name, "tenant": cur.tenant_id, "app": cur.app_id,
                    "prefix": cur.prefix, "expires_at": edit.expires_at,
                    "allowed_models": edit.allowed_models, "version": cur.version + 1}),
                ),
        )
        .await?;
        tx.commit().await?;
        Ok(cur.version + 1)
    }

    /// One key as the console lists it, if it is in `scope`.
    pub async fn key_detail(&self, scope: &TenantScope, id: Uuid) -> Result<Option<KeyListRow>> {
        Ok(sqlx::query_as::<_, KeyListRow>(
            "SELECT id, tenant_id, app_id, name, prefix, expires_at, revoked_at, created_at,
                    allowed_models, version, previous_prefix, previous_valid_until, rotated_at
             FROM virtual_keys WHERE id = $1 AND ($2::text IS NULL OR tenant_id = $2)",
        )
        .bind(id)
        .bind(scope.tenant())
        .fetch_optional(&self.pool)
        .await?)
    }
}
