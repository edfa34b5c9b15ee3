//! A model's price sheets (docs/billing.md, "The price sheet"): every sheet
//! it has had, from when, for which deployment, and who added it — the
//! history is the list, since a sheet is never edited. Every signed-in role
//! reads it (prices are what every department is billed at); platform
//! admins add a sheet from a stated instant on, the same service as
//! `POST /api/v1/models/{id}/prices` (audited as `model.price_sheet`).

use super::{path_segment, when};
use crate::api::prices::{add_sheet, SheetIn};
use crate::error::ApiError;
use crate::web::{render, Chrome, PageError, Session};
use crate::ControlPlane;
use askama::Template;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::Form;
use chrono::{DateTime, Utc};
use domain::money::MicroUsd;
use domain::pricing::PriceSheet;
use serde::Deserialize;
use std::sync::Arc;

/// One sheet as the page lists it: the base prices per million tokens,
/// and the rest (tiers, service tiers, fees, multiplier) as its JSON.
pub struct SheetRow {
    pub from: String,
    pub deployment: String,
    pub input: String,
    pub cached_input: String,
    pub cache_write_5m: String,
    pub cache_write_1h: String,
    pub output: String,
    pub more: String,
    pub by: String,
    /// In force now (the latest of its deployment whose instant has come).
    pub current: bool,
    pub future: bool,
}

#[derive(Deserialize, Default, Clone)]
#[serde(default)]
pub struct SheetForm {
    /// The sheet as JSON (`{"input": 3000000, "output": 15000000, …}`).
    pub sheet: String,
    /// RFC 3339 (`2026-12-01T00:00:00Z`); empty: now.
    pub effective_from: String,
    /// A deployment's own sheet; empty: the model's.
    pub deployment: String,
}

#[derive(Template)]
#[template(path = "pages/prices.html")]
struct PricesPage {
    c: Chrome,
    model: String,
    model_path: String,
    rows: Vec<SheetRow>,
    can_edit: bool,
    form: SheetForm,
    /// The refusal of the last save (the API's `param`, its message, and
    /// the form field it belongs to), in the API's words.
    error: Option<(String, String, String)>,
    saved: bool,
}

#[derive(Deserialize, Default)]
#[serde(default)]
pub struct Saved {
    saved: bool,
}

fn per_mtok(p: Option<i64>) -> String {
    p.map(|p| MicroUsd(p).shown()).unwrap_or_default()
}

/// The sheet's parts beyond the base prices, as compact JSON.
fn more_of(sheet: &serde_json::Value) -> String {
    let Some(o) = sheet.as_object() else {
        return String::new();
    };
    let rest: serde_json::Map<String, serde_json::Value> = o
        .iter()
        .filter(|(k, _)| {
            !matches!(
                k.as_str(),
                "input" | "output" | "cached_input" | "cache_write_5m" | "cache_write_1h"
            )
        })
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    if rest.is_empty() {
        String::new()
    } else {
        serde_json::Value::Object(rest).to_string()
    }
}

async fn page(
    cp: &ControlPlane,
    s: &Session,
    id: &str,
    form: SheetForm,
    error: Option<(String, String)>,
    saved: bool,
) -> Result<PricesPage, PageError> {
    // `sheet.cahced_input` is the `sheet` field's.
    let error = error.map(|(param, message)| {
        let field = param
            .split(['.', '['])
            .next()
            .unwrap_or_default()
            .to_string();
        (param, message, field)
    });
    if !cp.store.model_exists(id).await? {
        return Err(ApiError::NotFound(format!("model {id}")).into());
    }
    let sheets = cp.store.price_sheets_of(id).await?;
    let now = Utc::now();
    // The sheet in force per deployment ('' the model's): the latest whose
    // instant has come (listed oldest first).
    let mut current: std::collections::HashMap<&str, usize> = Default::default();
    for (i, r) in sheets.iter().enumerate() {
        if r.effective_from <= now {
            current.insert(r.deployment.as_str(), i);
        }
    }
    let rows = sheets
        .iter()
        .enumerate()
        .rev()
        .map(|(i, r)| {
            let sheet = PriceSheet::from_json(&r.sheet).unwrap_or_default();
            SheetRow {
                from: when(s.clock, r.effective_from),
                deployment: r.deployment.clone(),
                input: per_mtok(Some(sheet.base.input)),
                cached_input: per_mtok(sheet.base.cached_input),
                cache_write_5m: per_mtok(sheet.base.cache_write_5m),
                cache_write_1h: per_mtok(sheet.base.cache_write_1h),
                output: per_mtok(Some(sheet.base.output)),
                more: more_of(&r.sheet),
                by: r.created_by.clone(),
                current: current.get(r.deployment.as_str()) == Some(&i),
                future: r.effective_from > now,
            }
        })
        .collect();
    Ok(PricesPage {
        c: Chrome::new(s, "nav.models", "/console/models"),
        model: id.to_string(),
        model_path: path_segment(id),
        rows,
        can_edit: s.actor.is_platform_admin(),
        form,
        error,
        saved,
    })
}

pub async fn show(
    State(cp): State<Arc<ControlPlane>>,
    s: Session,
    Path(id): Path<String>,
    Query(q): Query<Saved>,
) -> Result<Html<String>, PageError> {
    render(page(&cp, &s, &id, SheetForm::default(), None, q.saved).await?)
}

/// Adds the sheet typed; a refusal is shown with what was typed kept.
pub async fn save(
    State(cp): State<Arc<ControlPlane>>,
    s: Session,
    Path(id): Path<String>,
    Form(f): Form<SheetForm>,
) -> Result<Response, PageError> {
    crate::api::require_platform_admin(&s.actor)?;
    let parsed = parse(&f);
    let result = match parsed {
        Ok(input) => add_sheet(&cp, &s.actor, &id, input).await,
        Err(e) => Err(e),
    };
    match result {
        Ok(()) => {
            let to = format!(
                "/console/models/{}/price-sheets?saved=true",
                path_segment(&id)
            );
            Ok(Redirect::to(&to).into_response())
        }
        Err(ApiError::Invalid { param, message }) => {
            let p = page(&cp, &s, &id, f, Some((param, message)), false).await?;
            Ok((StatusCode::UNPROCESSABLE_ENTITY, render(p)?).into_response())
        }
        Err(e) => Err(e.into()),
    }
}

fn parse(f: &SheetForm) -> Result<SheetIn, ApiError> {
    let sheet: serde_json::Value = serde_json::from_str(f.sheet.trim())
        .map_err(|e| ApiError::invalid("sheet", format!("not JSON: {e}")))?;
    let effective_from = match f.effective_from.trim() {
        "" => None,
        t => Some(
            DateTime::parse_from_rfc3339(t)
                .map_err(|_| {
                    ApiError::invalid(
                        "effective_from",
                        "an instant in RFC 3339, e.g. 2026-12-01T00:00:00Z",
                    )
                })?
                .with_timezone(&Utc),
        ),
    };
    let deployment = Some(f.deployment.trim().to_string()).filter(|d| !d.is_empty());
    Ok(SheetIn {
        sheet,
        effective_from,
        deployment,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_form_reads_json_an_instant_and_a_deployment() {
        let f = SheetForm {
            sheet: r#"{"input": 1, "output": 2}"#.into(),
            effective_from: "2026-12-01T00:00:00Z".into(),
            deployment: " eu ".into(),
        };
        let p = parse(&f).unwrap();
        assert_eq!(p.sheet["output"], 2);
        assert_eq!(p.deployment.as_deref(), Some("eu"));
        assert!(p.effective_from.is_some());
        let bad = SheetForm {
            sheet: "{".into(),
            ..Default::default()
        };
        assert!(matches!(parse(&bad), Err(ApiError::Invalid { param, .. }) if param == "sheet"));
        assert_eq!(
            more_of(&serde_json::json!({"input": 1, "tool_fees": {"web_search": 10000}})),
            r#"{"tool_fees":{"web_search":10000}}"#
        );
    }
}
