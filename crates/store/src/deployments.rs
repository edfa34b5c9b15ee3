//! A model's deployments and fallback models (docs/routing.md). A model
//! without deployment rows is served by its own upstream columns; once it
//! has rows, by its enabled rows, and its own columns mirror the first.

use crate::audit::{append, NewAudit};
use crate::{Result, Store, StoreError};
use domain::provider::ProviderProfile;
use serde_json::json;
use sqlx::{Postgres, Transaction};

/// One deployment of a model, as stored (the provider key encrypted).
#[derive(Debug, Clone, PartialEq)]
pub struct DeploymentRow {
    pub model_id: String,
    pub name: String,
    pub upstream_base_url: String,
    pub upstream_model: String,
    pub upstream_api_key_enc: Option<Vec<u8>>,
    pub weight: i32,
    pub priority: i32,
    pub max_inflight: Option<i32>,
    /// None: the model's own profile.
    pub profile: Option<ProviderProfile>,
    pub enabled: bool,
}

/// Every model's deployments and fallbacks, read with the catalog.
#[derive(Debug, Clone, Default)]
pub struct RoutingRows {
    /// In each model's order (`position`), disabled ones included.
    pub deployments: Vec<DeploymentRow>,
    /// (model, its fallback models in order), for models that have any.
    pub fallbacks: Vec<(String, Vec<String>)>,
}

const COLUMNS: &str = "model_id, name, upstream_base_url, upstream_model, upstream_api_key_enc,
    weight, priority, max_inflight, profile, enabled";

/// A `model_deployments` row as stored (its profile still JSON).
#[derive(sqlx::FromRow)]
struct DeploymentCols {
    model_id: String,
    name: String,
    upstream_base_url: String,
    upstream_model: String,
    upstream_api_key_enc: Option<Vec<u8>>,
    weight: i32,
    priority: i32,
    max_inflight: Option<i32>,
    profile: Option<serde_json::Value>,
    enabled: bool,
}

fn row(r: DeploymentCols) -> Result<DeploymentRow> {
    let profile = r
        .profile
        .map(serde_json::from_value)
        .transpose()
        .map_err(|e| StoreError::Corrupt(format!("deployment profile: {e}")))?;
    Ok(DeploymentRow {
        model_id: r.model_id,
        name: r.name,
        upstream_base_url: r.upstream_base_url,
        upstream_model: r.upstream_model,
        upstream_api_key_enc: r.upstream_api_key_enc,
        weight: r.weight,
        priority: r.priority,
        max_inflight: r.max_inflight,
        profile,
        enabled: r.enabled,
    })
}

/// What the audit trail records of a deployment: never the key.
fn audited(d: &DeploymentRow) -> serde_json::Value {
    json!({"name": d.name, "upstream_base_url": d.upstream_base_url,
        "upstream_model": d.upstream_model, "has_upstream_api_key": d.upstream_api_key_enc.is_some(),
        "weight": d.weight, "priority": d.priority, "max_inflight": d.max_inflight,
        "profile": d.profile, "enabled": d.enabled})
}

pub(crate) async fn load(tx: &mut Transaction<'_, Postgres>) -> Result<RoutingRows> {
    let deployments = sqlx::query_as::<_, DeploymentCols>(&format!(
        "SELECT {COLUMNS} FROM model_deployments ORDER BY model_id, position, name"
    ))
    .fetch_all(&mut **tx)
    .await?
    .into_iter()
    .map(row)
    .collect::<Result<Vec<_>>>()?;
    let fallbacks =
        sqlx::query_as("SELECT id, fallbacks FROM models WHERE enabled AND fallbacks <> '{}'")
            .fetch_all(&mut **tx)
            .await?;
    Ok(RoutingRows {
        deployments,
        fallbacks,
    })
}

/// Writes one deployment row. `replace`: an existing row of that name is
/// edited in place (its position kept, its key kept when none is given);
/// otherwise a duplicate name is a conflict.
async fn write(
    tx: &mut Transaction<'_, Postgres>,
    d: &DeploymentRow,
    position: i32,
    replace: bool,
) -> Result<()> {
    let on_conflict = if replace {
        " ON CONFLICT (model_id, name) DO UPDATE SET upstream_base_url = EXCLUDED.upstream_base_url,
            upstream_model = EXCLUDED.upstream_model,
            upstream_api_key_enc = COALESCE(EXCLUDED.upstream_api_key_enc, model_deployments.upstream_api_key_enc),
            weight = EXCLUDED.weight, priority = EXCLUDED.priority, max_inflight = EXCLUDED.max_inflight,
            profile = EXCLUDED.profile, enabled = EXCLUDED.enabled, updated_at = now()"
    } else {
        ""
    };
    sqlx::query(&format!(
        "INSERT INTO model_deployments (model_id, name, upstream_base_url, upstream_model,
            upstream_api_key_enc, weight, priority, max_inflight, profile, enabled, position)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11){on_conflict}"
    ))
    .bind(&d.model_id)
    .bind(&d.name)
    .bind(&d.upstream_base_url)
    .bind(&d.upstream_model)
    .bind(&d.upstream_api_key_enc)
    .bind(d.weight)
    .bind(d.priority)
    .bind(d.max_inflight)
    .bind(d.profile.as_ref().map(|p| json!(p)))
    .bind(d.enabled)
    .bind(position)
    .execute(&mut **tx)
    .await
    .map_err(crate::conflict(format!("deployment {}", d.name)))?;
    Ok(())
}

/// The model's own upstream columns follow its first deployment.
async fn mirror_first(tx: &mut Transaction<'_, Postgres>, model: &str) -> Result<()> {
    sqlx::query(
        "UPDATE models m SET upstream_base_url = d.upstream_base_url, upstream_model = d.upstream_model,
            upstream_api_key_enc = d.upstream_api_key_enc, updated_at = now()
         FROM (SELECT * FROM model_deployments WHERE model_id = $1 ORDER BY position, name LIMIT 1) d
         WHERE m.id = $1",
    )
    .bind(model)
    .execute(&mut **tx)
    .await?;
    Ok(())
}

async fn lock_model(tx: &mut Transaction<'_, Postgres>, model: &str) -> Result<()> {
    let found: Option<String> =
        sqlx::query_scalar("SELECT id FROM models WHERE id = $1 FOR UPDATE")
            .bind(model)
            .fetch_optional(&mut **tx)
            .await?;
    found
        .map(|_| ())
        .ok_or_else(|| StoreError::NotFound(format!("model {model}")))
}

impl Store {
    /// A model's deployments in order, disabled ones included.
    pub async fn deployments_of(&self, model: &str) -> Result<Vec<DeploymentRow>> {
        sqlx::query_as::<_, DeploymentCols>(&format!(
            "SELECT {COLUMNS} FROM model_deployments WHERE model_id = $1 ORDER BY position, name"
        ))
        .bind(model)
        .fetch_all(&self.pool)
        .await?
        .into_iter()
        .map(row)
        .collect()
    }

    /// A model's fallback models, in order.
    pub async fn fallbacks_of(&self, model: &str) -> Result<Vec<String>> {
        let f: Option<Vec<String>> =
            sqlx::query_scalar("SELECT fallbacks FROM models WHERE id = $1")
                .bind(model)
                .fetch_optional(&self.pool)
                .await?;
        f.ok_or_else(|| StoreError::NotFound(format!("model {model}")))
    }

    /// Replaces a model's deployments (when `deployments` is not empty) and
    /// its fallbacks, in one audited transaction.
    pub async fn set_model_routing(
        &self,
        actor: &str,
        model: &str,
        deployments: &[DeploymentRow],
        fallbacks: &[String],
    ) -> Result<()> {
        let mut tx = self.pool.begin().await?;
        lock_model(&mut tx, model).await?;
        if !deployments.is_empty() {
            sqlx::query("DELETE FROM model_deployments WHERE model_id = $1")
                .bind(model)
                .execute(&mut *tx)
                .await?;
            for (i, d) in deployments.iter().enumerate() {
                write(&mut tx, d, i as i32, false).await?;
            }
            mirror_first(&mut tx, model).await?;
        }
        sqlx::query("UPDATE models SET fallbacks = $2, updated_at = now() WHERE id = $1")
            .bind(model)
            .bind(fallbacks)
            .execute(&mut *tx)
            .await?;
        let after = json!({"deployments": deployments.iter().map(audited).collect::<Vec<_>>(),
            "fallbacks": fallbacks});
        append(
            &mut tx,
            NewAudit::new(actor, "model.routing", format!("model:{model}")).after(after),
        )
        .await?;
        tx.commit().await?;
        Ok(())
    }

    /// Adds a deployment, or edits the one of that name (an edit without a
    /// new key keeps the stored one). A model still in its one-deployment
    /// form first gets that deployment as a row named `default`.
    pub async fn put_deployment(&self, actor: &str, d: &DeploymentRow) -> Result<()> {
        let mut tx = self.pool.begin().await?;
        lock_model(&mut tx, &d.model_id).await?;
        sqlx::query(
            "INSERT INTO model_deployments (model_id, name, upstream_base_url, upstream_model, upstream_api_key_enc)
             SELECT id, 'default', upstream_base_url, upstream_model, upstream_api_key_enc FROM models
             WHERE id = $1 AND NOT EXISTS (SELECT 1 FROM model_deployments WHERE model_id = $1)",
        )
        .bind(&d.model_id)
        .execute(&mut *tx)
        .await?;
        let before = sqlx::query_as::<_, DeploymentCols>(&format!(
            "SELECT {COLUMNS} FROM model_deployments WHERE model_id = $1 AND name = $2 FOR UPDATE"
        ))
        .bind(&d.model_id)
        .bind(&d.name)
        .fetch_optional(&mut *tx)
        .await?
        .map(row)
        .transpose()?;
        // A new row goes last; an edited one keeps its place.
        let position: i32 = sqlx::query_scalar(
            "SELECT COALESCE(max(position) + 1, 0) FROM model_deployments WHERE model_id = $1",
        )
        .bind(&d.model_id)
        .fetch_one(&mut *tx)
        .await?;
        write(&mut tx, d, position, true).await?;
        // A stored key stays only with the origin it was given for.
        let key_dropped = d.upstream_api_key_enc.is_none()
            && before.as_ref().is_some_and(|b| {
                b.upstream_api_key_enc.is_some()
                    && !domain::secret::key_stays_with(&b.upstream_base_url, &d.upstream_base_url)
            });
        if key_dropped {
            sqlx::query(
                "UPDATE model_deployments SET upstream_api_key_enc = NULL WHERE model_id = $1 AND name = $2",
            )
            .bind(&d.model_id)
            .bind(&d.name)
            .execute(&mut *tx)
            .await?;
        }
        mirror_first(&mut tx, &d.model_id).await?;
        let mut after = audited(d);
        if key_dropped {
            after["upstream_api_key"] = json!(
                "dropped: the upstream's origin changed and no key was given for the new one"
            );
        } else if d.upstream_api_key_enc.is_none() {
            after["has_upstream_api_key"] = json!(before
                .as_ref()
                .is_some_and(|b| b.upstream_api_key_enc.is_some()));
        }
        let mut audit = NewAudit::new(
            actor,
            "model.deployment",
            format!("model:{}/{}", d.model_id, d.name),
        )
        .after(after);
        if let Some(b) = &before {
            audit = audit.before(audited(b));
        }
        append(&mut tx, audit).await?;
        tx.commit().await?;
        Ok(())
    }

    /// Takes a deployment out of rotation, or puts it back (audited).
    pub async fn set_deployment_enabled(
        &self,
        actor: &str,
        model: &str,
        name: &str,
        enabled: bool,
    ) -> Result<()> {
        let mut tx = self.pool.begin().await?;
        let n = sqlx::query(
            "UPDATE model_deployments SET enabled = $3, updated_at = now() WHERE model_id = $1 AND name = $2",
        )
        .bind(model)
        .bind(name)
        .bind(enabled)
        .execute(&mut *tx)
        .await?
        .rows_affected();
        if n == 0 {
            return Err(StoreError::NotFound(format!("deployment {model}/{name}")));
        }
        append(
            &mut tx,
            NewAudit::new(actor, "model.deployment", format!("model:{model}/{name}"))
                .after(json!({"enabled": enabled})),
        )
        .await?;
        tx.commit().await?;
        Ok(())
    }
}
