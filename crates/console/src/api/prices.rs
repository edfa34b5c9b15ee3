//! `GET` / `POST /api/v1/models/{id}/prices`: a model's dated price sheets
//! (docs/billing.md, "The price sheet"). Every signed-in role reads them
//! (prices are what every department is billed at); platform admins add
//! one, from a stated instant on (audited). Sheets are never edited: a new
//! price is a new sheet, so the list is the history.

use super::extract::{Body, Params};
use super::require_platform_admin;
use crate::auth::Authed;
use crate::{ApiError, ControlPlane};
use axum::extract::State;
use axum::Json;
use chrono::{DateTime, Utc};
use domain::pricing::PriceSheet;
use serde::Deserialize;
use serde_json::{json, Value};
use std::sync::Arc;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SheetIn {
    /// A price sheet: `input`, `output` (µUSD per million tokens) and any
    /// of the other components, tiers, service tiers, tool fees, multiplier.
    pub sheet: Value,
    /// When it takes effect (default: now). Not in the past: a sheet prices
    /// the requests received from then on; the ledger is never re-priced.
    pub effective_from: Option<DateTime<Utc>>,
    /// A deployment's own sheet (default: the model's).
    pub deployment: Option<String>,
}

/// How far in the past `effective_from` may lie (a clock a little behind
/// the server's).
const PAST_SLACK_SECS: i64 = 60;

async fn listing(cp: &ControlPlane, model: &str) -> Result<Value, ApiError> {
    let rows = cp.store.price_sheets_of(model).await?;
    let sheets: Vec<Value> = rows
        .iter()
        .map(|r| {
            json!({"effective_from": r.effective_from,
                "deployment": (!r.deployment.is_empty()).then_some(&r.deployment),
                "sheet": r.sheet, "created_at": r.created_at, "created_by": r.created_by})
        })
        .collect();
    Ok(json!({"model": model, "sheets": sheets}))
}

pub async fn list(
    State(cp): State<Arc<ControlPlane>>,
    Authed(_actor): Authed,
    Params(id): Params<String>,
) -> Result<Json<Value>, ApiError> {
    if !cp.store.model_exists(&id).await? {
        return Err(ApiError::NotFound(format!("model {id}")));
    }
    Ok(Json(listing(&cp, &id).await?))
}

pub async fn add(
    State(cp): State<Arc<ControlPlane>>,
    Authed(actor): Authed,
    Params(id): Params<String>,
    Body(p): Body<SheetIn>,
) -> Result<Json<Value>, ApiError> {
    require_platform_admin(&actor)?;
    if !cp.store.model_exists(&id).await? {
        return Err(ApiError::NotFound(format!("model {id}")));
    }
    let sheet = PriceSheet::from_json(&p.sheet).map_err(|e| {
        let param = match e.field.as_str() {
            "" => "sheet".to_string(),
            f => format!("sheet.{f}"),
        };
        ApiError::invalid(param, e.message)
    })?;
    let now = Utc::now();
    let from = p.effective_from.unwrap_or(now);
    if from < now - chrono::Duration::seconds(PAST_SLACK_SECS) {
        return Err(ApiError::invalid(
            "effective_from",
            "a price takes effect now or later; requests already booked are not re-priced",
        ));
    }
    if let Some(d) = &p.deployment {
        let known = cp.store.deployments_of(&id).await?;
        if !known.iter().any(|r| &r.name == d) {
            return Err(ApiError::invalid(
                "deployment",
                format!("model {id} has no deployment {d:?}"),
            ));
        }
    }
    let stored = serde_json::to_value(&sheet).expect("a sheet serialises");
    cp.store
        .add_price_sheet(&actor.label(), &id, p.deployment.as_deref(), from, &stored)
        .await?;
    Ok(Json(listing(&cp, &id).await?))
}
