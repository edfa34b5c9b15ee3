//! A model's fairness settings (docs/design.md §7): the cheaper model it
//! degrades to, its concurrency pool and the core tenants' guaranteed
//! slots. Platform admins change them here (the service
//! `PUT /api/v1/models/{id}/fairness` calls).

use super::{form_error, int, path_segment, FieldError};
use crate::api::pool::{self as svc, FairnessIn, GuaranteeIn};
use crate::error::ApiError;
use crate::web::{render, Chrome, PageError, Session};
use crate::ControlPlane;
use askama::Template;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::Form;
use serde::Deserialize;
use std::sync::Arc;

/// The form as typed: guarantees as `tenant=slots` separated by commas.
#[derive(Deserialize, Default, Clone)]
#[serde(default)]
pub struct FairnessForm {
    pub degrade_to: String,
    pub pool_capacity: String,
    pub guarantees: String,
}

/// `core-a=4, core-b=2` → the guarantees; None when an item is not
/// `tenant=slots` with whole slots.
fn guarantees(v: &str) -> Option<Vec<GuaranteeIn>> {
    v.split([',', '\n', ';'])
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|item| {
            let (t, n) = item.split_once('=')?;
            Some(GuaranteeIn {
                tenant_id: t.trim().to_string(),
                slots: n.trim().parse().ok()?,
            })
        })
        .collect()
}

impl FairnessForm {
    fn parse(&self) -> Result<FairnessIn, Vec<ApiError>> {
        let cap = int("pool_capacity", &self.pool_capacity).and_then(|c| {
            c.map(|c| {
                i32::try_from(c).map_err(|_| ApiError::field("pool_capacity", "err.too_large"))
            })
            .transpose()
        });
        let g = guarantees(&self.guarantees).ok_or(ApiError::field("guarantees", "err.guarantees"));
        match (cap, g) {
            (Ok(pool_capacity), Ok(guarantees)) => Ok(FairnessIn {
                degrade_to: Some(self.degrade_to.trim().to_string()).filter(|d| !d.is_empty()),
                pool_capacity,
                guarantees,
            }),
            (c, g) => Err([c.err(), g.err()].into_iter().flatten().collect()),
        }
    }
}

#[derive(Template)]
#[template(path = "pages/fairness.html")]
struct FairnessPage {
    c: Chrome,
    model: String,
    /// `model` as a path segment (the form's action).
    model_path: String,
    /// The other models (what it may degrade to).
    others: Vec<String>,
    /// Core tenants: the ones that may hold guarantees.
    core: Vec<(String, String)>,
    form: FairnessForm,
    errors: FieldError,
    saved: bool,
}

#[derive(Deserialize, Default)]
#[serde(default)]
pub struct Saved {
    saved: bool,
}

async fn page(
    cp: &ControlPlane,
    s: &Session,
    id: &str,
    form: Option<(FairnessForm, FieldError)>,
    saved: bool,
) -> Result<FairnessPage, PageError> {
    crate::api::require_platform_admin(&s.actor)?;
    let models = cp.store.models().await?;
    let m = models
        .iter()
        .find(|m| m.id == id)
        .ok_or_else(|| ApiError::NotFound(format!("model {id}")))?;
    let (form, errors) = match form {
        Some(f) => f,
        None => {
            let g = cp.store.model_guarantees(id).await?;
            let form = FairnessForm {
                degrade_to: m.degrade_to.clone().unwrap_or_default(),
                pool_capacity: m.pool_capacity.map(|c| c.to_string()).unwrap_or_default(),
                guarantees: g
                    .iter()
                    .map(|g| format!("{}={}", g.tenant_id, g.slots))
                    .collect::<Vec<_>>()
                    .join(", "),
            };
            (form, FieldError::default())
        }
    };
    let core = cp
        .store
        .tenants(s.actor.scope())
        .await?
        .into_iter()
        .filter(|t| t.priority == "core")
        .map(|t| (t.id, t.name))
        .collect();
    Ok(FairnessPage {
        c: Chrome::new(s, "nav.models", "/console/models"),
        model: id.to_string(),
        model_path: path_segment(id),
        others: models
            .iter()
            .filter(|o| o.id != id)
            .map(|o| o.id.clone())
            .collect(),
        core,
        form,
        errors,
        saved,
    })
}

pub async fn show(
    State(cp): State<Arc<ControlPlane>>,
    s: Session,
    Path(id): Path<String>,
    Query(q): Query<Saved>,
) -> Result<Html<String>, PageError> {
    render(page(&cp, &s, &id, None, q.saved).await?)
}

/// Saves the settings; every field in error is shown beside it, with
/// what was typed.
pub async fn save(
    State(cp): State<Arc<ControlPlane>>,
    s: Session,
    Path(id): Path<String>,
    Form(f): Form<FairnessForm>,
) -> Result<Response, PageError> {
    crate::api::require_platform_admin(&s.actor)?;
    let mut errs = match f.parse() {
        Ok(input) => match svc::set_fairness(&cp, &s.actor, &id, &input).await {
            Ok(()) => {
                let to = format!("/console/models/{}/fairness?saved=true", path_segment(&id));
                return Ok(Redirect::to(&to).into_response());
            }
            // Refused: the first problem, then every other field's.
            Err(first) => {
                let mut all = vec![first];
                all.extend(svc::fairness_problems(&cp, &s.actor, &id, &input).await?);
                all
            }
        },
        Err(errs) => errs,
    };
    // An unknown tenant is named by its element in the API
    // (`guarantees[0].tenant_id`); the form has one field for all.
    let field = |e: ApiError| match e {
        ApiError::Invalid { param, .. } if param.starts_with("guarantees[") => {
            ApiError::field("guarantees", "err.unknown_tenant")
        }
        e => e,
    };
    let first = field(errs.remove(0));
    let errors = form_error(first)?.and(errs.into_iter().map(field).collect());
    let p = page(&cp, &s, &id, Some((f, errors)), false).await?;
    Ok((StatusCode::UNPROCESSABLE_ENTITY, render(p)?).into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn guarantees_are_read_as_tenant_equals_slots() {
        let g = guarantees("core-a=4, core-b = 2\n").unwrap();
        assert_eq!(
            g.iter()
                .map(|g| (g.tenant_id.as_str(), g.slots))
                .collect::<Vec<_>>(),
            vec![("core-a", 4), ("core-b", 2)]
        );
        assert!(guarantees("").unwrap().is_empty());
        assert!(guarantees("core-a").is_none());
        assert!(guarantees("core-a=four").is_none());
    }
}
