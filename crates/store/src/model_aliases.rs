//! Model aliases (docs/clients.md, "Model aliases"): read with the catalog's
//! models, written by a platform admin, every change audited.

use crate::audit::{append, NewAudit};
use crate::{conflict, Result, Store, StoreError};
use domain::alias::ModelAlias;
use serde_json::json;

/// A stored alias and its id (the API's handle on it).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ModelAliasRow {
    pub id: i64,
    #[serde(flatten)]
    pub alias: ModelAlias,
}

type Cols = (i64, String, String, Option<String>);

fn row((id, alias, model, tenant_id): Cols) -> ModelAliasRow {
    ModelAliasRow {
        id,
        alias: ModelAlias {
            alias,
            model,
            tenant_id,
        },
    }
}

/// The aliases of the catalog's enabled models (all of them when `wanted`).
pub(crate) async fn load(
    tx: &mut sqlx::Transaction<'_, sqlx::Postgres>,
    wanted: bool,
) -> Result<Vec<ModelAlias>> {
    let rows: Vec<Cols> = sqlx::query_as(
        "SELECT a.id, a.alias, a.model_id, a.tenant_id FROM model_aliases a
         JOIN models m ON m.id = a.model_id WHERE m.enabled AND $1",
    )
    .bind(wanted)
    .fetch_all(&mut **tx)
    .await?;
    Ok(rows.into_iter().map(|c| row(c).alias).collect())
}

fn audited(a: &ModelAlias) -> serde_json::Value {
    json!({"alias": a.alias, "model": a.model, "tenant_id": a.tenant_id})
}

impl Store {
    /// Every alias, global first, then by tenant and name.
    pub async fn model_aliases(&self) -> Result<Vec<ModelAliasRow>> {
        let rows: Vec<Cols> = sqlx::query_as(
            "SELECT id, alias, model_id, tenant_id FROM model_aliases
             ORDER BY tenant_id NULLS FIRST, alias",
        )
        .fetch_all(&self.pool)
        .await?;
        Ok(rows.into_iter().map(row).collect())
    }

    /// Adds an alias; the same name twice in one scope is a conflict.
    pub async fn create_model_alias(&self, actor: &str, a: &ModelAlias) -> Result<ModelAliasRow> {
        let mut tx = self.pool.begin().await?;
        let id: i64 = sqlx::query_scalar(
            "INSERT INTO model_aliases (alias, model_id, tenant_id) VALUES ($1, $2, $3) RETURNING id",
        )
        .bind(&a.alias)
        .bind(&a.model)
        .bind(&a.tenant_id)
        .fetch_one(&mut *tx)
        .await
        .map_err(conflict(format!("alias {}", a.alias)))?;
        append(
            &mut tx,
            NewAudit::new(actor, "model_alias.create", format!("model_alias:{id}"))
                .after(audited(a)),
        )
        .await?;
        tx.commit().await?;
        Ok(ModelAliasRow {
            id,
            alias: a.clone(),
        })
    }

    /// Points an alias at another model.
    pub async fn set_model_alias_model(
        &self,
        actor: &str,
        id: i64,
        model: &str,
    ) -> Result<ModelAliasRow> {
        let mut tx = self.pool.begin().await?;
        let before: Option<Cols> = sqlx::query_as(
            "SELECT id, alias, model_id, tenant_id FROM model_aliases WHERE id = $1 FOR UPDATE",
        )
        .bind(id)
        .fetch_optional(&mut *tx)
        .await?;
        let before = row(before.ok_or_else(|| StoreError::NotFound(format!("model alias {id}")))?);
        sqlx::query("UPDATE model_aliases SET model_id = $2, updated_at = now() WHERE id = $1")
            .bind(id)
            .bind(model)
            .execute(&mut *tx)
            .await?;
        let mut after = before.clone();
        after.alias.model = model.to_string();
        append(
            &mut tx,
            NewAudit::new(actor, "model_alias.update", format!("model_alias:{id}"))
                .before(audited(&before.alias))
                .after(audited(&after.alias)),
        )
        .await?;
        tx.commit().await?;
        Ok(after)
    }

    /// Removes an alias.
    pub async fn delete_model_alias(&self, actor: &str, id: i64) -> Result<()> {
        let mut tx = self.pool.begin().await?;
        let gone: Option<Cols> = sqlx::query_as(
            "DELETE FROM model_aliases WHERE id = $1 RETURNING id, alias, model_id, tenant_id",
        )
        .bind(id)
        .fetch_optional(&mut *tx)
        .await?;
        let gone = row(gone.ok_or_else(|| StoreError::NotFound(format!("model alias {id}")))?);
        append(
            &mut tx,
            NewAudit::new(actor, "model_alias.delete", format!("model_alias:{id}"))
                .before(audited(&gone.alias)),
        )
        .await?;
        tx.commit().await?;
        Ok(())
    }
}
