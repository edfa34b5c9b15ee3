//! `GET` / `POST /api/v1/models/{id}/prices`: a model's dated price sheets
//! (docs/billing.md, "The price sheet"). Every signed-in role reads them
//! (prices are what every department is billed at); platform admins add
//! one, from a stated instant on (audited). Sheets are never edited: a new
//! price is a new sheet, so the list is the history.
//!
//! `POST /api/v1/prices/import` reads LiteLLM's price catalog into sheets
//! (docs/billing.md, "Importing prices"); `tollgate prices import` is the
//! same through [`import_catalog`].

use super::extract::{Body, Params};
use super::require_platform_admin;
use crate::auth::Authed;
use crate::{ApiError, ControlPlane};
use axum::extract::State;
use axum::Json;
use chrono::{DateTime, Utc};
use domain::pricing::{litellm, PriceSheet};
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

/// `effective_from` (default `now`), refused in the past.
fn effective_from(
    from: Option<DateTime<Utc>>,
    now: DateTime<Utc>,
) -> Result<DateTime<Utc>, ApiError> {
    let from = from.unwrap_or(now);
    if from < now - chrono::Duration::seconds(PAST_SLACK_SECS) {
        return Err(ApiError::invalid(
            "effective_from",
            "a price takes effect now or later; requests already booked are not re-priced",
        ));
    }
    Ok(from)
}

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
    add_sheet(&cp, &actor, &id, p).await?;
    Ok(Json(listing(&cp, &id).await?))
}

/// Adds a sheet to a model (platform admins; audited as
/// `model.price_sheet`): the API's and the console's one way to change a
/// price.
pub async fn add_sheet(
    cp: &ControlPlane,
    actor: &store::Principal,
    id: &str,
    p: SheetIn,
) -> Result<(), ApiError> {
    require_platform_admin(actor)?;
    if !cp.store.model_exists(id).await? {
        return Err(ApiError::NotFound(format!("model {id}")));
    }
    let sheet = PriceSheet::from_json(&p.sheet).map_err(|e| {
        let param = match e.field.as_str() {
            "" => "sheet".to_string(),
            f => format!("sheet.{f}"),
        };
        ApiError::invalid(param, e.message)
    })?;
    let from = effective_from(p.effective_from, Utc::now())?;
    if let Some(d) = &p.deployment {
        // A model still in its one-deployment form is served by one named
        // `default` (docs/routing.md).
        let known = cp.store.deployments_of(id).await?;
        let one_form = known.is_empty() && d == "default";
        if !one_form && !known.iter().any(|r| &r.name == d) {
            return Err(ApiError::invalid(
                "deployment",
                format!("model {id} has no deployment {d:?}"),
            ));
        }
    }
    let stored = serde_json::to_value(&sheet).expect("a sheet serialises");
    cp.store
        .add_price_sheet(&actor.label(), id, p.deployment.as_deref(), from, &stored)
        .await?;
    Ok(())
}

/// The largest catalog `POST /api/v1/prices/import` reads (LiteLLM's is
/// about 3.5 MB).
pub const IMPORT_BODY_LIMIT: usize = 32 * 1024 * 1024;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ImportIn {
    /// The catalog's format: `litellm`.
    pub format: String,
    /// LiteLLM's `model_prices_and_context_window.json`, as is.
    pub catalog: Value,
    /// Store the new sheets (default: only show what would change).
    #[serde(default)]
    pub apply: bool,
    /// When the new sheets take effect (default: now; not in the past).
    pub effective_from: Option<DateTime<Utc>>,
    /// Round a price finer than a µUSD per million tokens (default: refuse it).
    #[serde(default)]
    pub round: bool,
}

/// Reads a LiteLLM catalog against every model's upstream name and the sheet
/// in force now; with `apply`, adds one sheet per changed model at
/// `effective_from` (audited as `model.price_sheet` by `actor`). Returns
/// the plan and whether it was applied.
pub async fn import_catalog(
    store: &store::Store,
    actor: &str,
    p: &ImportIn,
) -> Result<(litellm::Plan, bool), ApiError> {
    if p.format != "litellm" {
        return Err(ApiError::invalid(
            "format",
            "the only format is \"litellm\"",
        ));
    }
    let catalog = p
        .catalog
        .as_object()
        .ok_or_else(|| ApiError::invalid("catalog", "a catalog is a JSON object"))?;
    let now = Utc::now();
    let from = effective_from(p.effective_from, now)?;
    let mut models = Vec::new();
    for m in store.priced_models(now).await? {
        let current = match &m.sheet {
            Some(s) => PriceSheet::from_json(s).map_err(|e| {
                tracing::error!(model = %m.id, error = %e, "a stored price sheet does not read");
                ApiError::Internal
            })?,
            None => PriceSheet::two(m.input_price_micro_per_mtok, m.output_price_micro_per_mtok),
        };
        models.push(litellm::CatalogModel {
            id: m.id,
            upstream_model: m.upstream_model,
            current,
        });
    }
    let plan = litellm::plan(catalog, &models, p.round);
    if p.apply {
        for (model, sheet) in &plan.new_sheets {
            let stored = serde_json::to_value(sheet).expect("a sheet serialises");
            store
                .add_price_sheet(actor, model, None, from, &stored)
                .await?;
        }
    }
    Ok((plan, p.apply))
}

pub async fn import(
    State(cp): State<Arc<ControlPlane>>,
    Authed(actor): Authed,
    Body(p): Body<ImportIn>,
) -> Result<Json<Value>, ApiError> {
    require_platform_admin(&actor)?;
    let (plan, applied) = import_catalog(&cp.store, &actor.label(), &p).await?;
    let mut out = serde_json::to_value(&plan).expect("a plan serialises");
    out["applied"] = json!(applied);
    Ok(Json(out))
}
