//! Price sheets by model and deployment, dated and never edited: a new
//! price is a new row, so the rows are the history (docs/billing.md, "The
//! price sheet"). Every new sheet is audited.

use crate::audit::{append, NewAudit};
use crate::{Result, Store, StoreError};
use chrono::{DateTime, Utc};
use serde_json::json;

/// One dated sheet as stored.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct PriceSheetRow {
    pub model_id: String,
    /// '' for the model's own sheet.
    pub deployment: String,
    pub effective_from: DateTime<Utc>,
    /// A `domain::pricing::PriceSheet` as JSON (checked before it is stored).
    pub sheet: serde_json::Value,
    pub created_at: DateTime<Utc>,
    pub created_by: String,
}

const COLUMNS: &str = "model_id, deployment, effective_from, sheet, created_at, created_by";

/// Every model's sheets, for the catalog.
pub(crate) async fn load(
    tx: &mut sqlx::Transaction<'_, sqlx::Postgres>,
) -> Result<Vec<PriceSheetRow>> {
    Ok(sqlx::query_as::<_, PriceSheetRow>(&format!(
        "SELECT {COLUMNS} FROM model_price_sheets ORDER BY model_id, effective_from"
    ))
    .fetch_all(&mut **tx)
    .await?)
}

impl Store {
    /// Adds a sheet for `model` (or one of its deployments) from `from` on
    /// (audited, with the sheet it replaces at that instant). A second sheet
    /// at the same instant is a conflict.
    pub async fn add_price_sheet(
        &self,
        actor: &str,
        model: &str,
        deployment: Option<&str>,
        from: DateTime<Utc>,
        sheet: &serde_json::Value,
    ) -> Result<PriceSheetRow> {
        let mut tx = self.pool.begin().await?;
        let found: Option<String> =
            sqlx::query_scalar("SELECT id FROM models WHERE id = $1 FOR UPDATE")
                .bind(model)
                .fetch_optional(&mut *tx)
                .await?;
        if found.is_none() {
            return Err(StoreError::NotFound(format!("model {model}")));
        }
        let deployment = deployment.unwrap_or("");
        let before: Option<serde_json::Value> = sqlx::query_scalar(
            "SELECT sheet FROM model_price_sheets
             WHERE model_id = $1 AND deployment = $2 AND effective_from <= $3
             ORDER BY effective_from DESC LIMIT 1",
        )
        .bind(model)
        .bind(deployment)
        .bind(from)
        .fetch_optional(&mut *tx)
        .await?;
        let row = sqlx::query_as::<_, PriceSheetRow>(&format!(
            "INSERT INTO model_price_sheets (model_id, deployment, effective_from, sheet, created_by)
             VALUES ($1, $2, $3, $4, $5) RETURNING {COLUMNS}"
        ))
        .bind(model)
        .bind(deployment)
        .bind(from)
        .bind(sheet)
        .bind(actor)
        .fetch_one(&mut *tx)
        .await
        .map_err(crate::conflict(format!(
            "a price sheet of {model} effective at {from}"
        )))?;
        let target = match deployment {
            "" => format!("model:{model}"),
            d => format!("model:{model}/{d}"),
        };
        let mut audit = NewAudit::new(actor, "model.price_sheet", target)
            .after(json!({"effective_from": from, "sheet": sheet}));
        if let Some(b) = before {
            audit = audit.before(json!({"sheet": b}));
        }
        append(&mut tx, audit).await?;
        tx.commit().await?;
        Ok(row)
    }

    /// A model's sheets, its deployments' included, oldest first.
    pub async fn price_sheets_of(&self, model: &str) -> Result<Vec<PriceSheetRow>> {
        Ok(sqlx::query_as::<_, PriceSheetRow>(&format!(
            "SELECT {COLUMNS} FROM model_price_sheets WHERE model_id = $1
             ORDER BY effective_from, deployment"
        ))
        .bind(model)
        .fetch_all(&self.pool)
        .await?)
    }
}

/// A model as a price import sees it: its upstream name, its two base
/// prices and the model's own sheet in force at the instant asked.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct PricedModel {
    pub id: String,
    pub upstream_model: String,
    pub input_price_micro_per_mtok: i64,
    pub output_price_micro_per_mtok: i64,
    pub sheet: Option<serde_json::Value>,
}

impl Store {
    /// Every model (enabled or not), with its own sheet in force at `at`.
    pub async fn priced_models(&self, at: DateTime<Utc>) -> Result<Vec<PricedModel>> {
        Ok(sqlx::query_as::<_, PricedModel>(
            "SELECT m.id, m.upstream_model, m.input_price_micro_per_mtok,
                    m.output_price_micro_per_mtok,
                    (SELECT s.sheet FROM model_price_sheets s
                     WHERE s.model_id = m.id AND s.deployment = '' AND s.effective_from <= $1
                     ORDER BY s.effective_from DESC LIMIT 1) AS sheet
             FROM models m ORDER BY m.id",
        )
        .bind(at)
        .fetch_all(&self.pool)
        .await?)
    }
}
