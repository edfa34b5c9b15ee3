//! The deployments part of the models page: every model's deployments with
//! this replica's view of their health, and the forms that add, edit,
//! disable and enable one (platform admins). The provider key is write-only.

use super::int;
use crate::api::deployments::DeploymentIn;
use crate::error::ApiError;
use crate::web::{PageError, Session};
use crate::ControlPlane;
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Redirect, Response};
use axum::Form;
use serde::Deserialize;
use std::sync::Arc;

pub struct DeploymentLine {
    pub model: String,
    pub name: String,
    /// `model/deployments/name` as path segments (for the switch's action).
    pub path: String,
    pub upstream: String,
    pub upstream_model: String,
    pub weight: String,
    pub priority: String,
    pub max_inflight: String,
    pub enabled: bool,
    /// `healthy`, `ejected`, `probing`, `parked`; empty when this replica
    /// does not route to it (disabled).
    pub health: String,
    pub detail: String,
    /// False for the one-deployment form (the model's own upstream).
    pub editable: bool,
    /// The whole model is disabled: none of its deployments is used,
    /// whatever its own switch and health say.
    pub model_off: bool,
}

/// The deployments of `models`, in order. A model without deployments of
/// its own is served by its own upstream (`default`): the line says where
/// that goes. A disabled model's deployments say so, not their health.
pub async fn lines(
    cp: &ControlPlane,
    models: &[store::ModelRow],
) -> Result<Vec<DeploymentLine>, PageError> {
    let mut out = Vec::new();
    for m in models {
        let model = m.id.as_str();
        let model_off = !m.enabled;
        let health = cp.routes.deployments(model);
        let of = |name: &str| {
            let h = health.iter().find(|h| h.name == name);
            let state = h.map(|h| h.state.to_string()).unwrap_or_default();
            let detail = h
                .map(|h| {
                    format!(
                        "{} failures, {} ejections, {} in flight{}",
                        h.consecutive_failures,
                        h.ejections,
                        h.inflight,
                        if h.back_in_ms > 0 {
                            format!(", back in {} ms", h.back_in_ms)
                        } else {
                            String::new()
                        }
                    )
                })
                .unwrap_or_default();
            (state, detail)
        };
        let rows = cp.store.deployments_of(model).await?;
        if rows.is_empty() {
            let (health, detail) = of("default");
            out.push(DeploymentLine {
                model: model.to_string(),
                path: format!("{}/deployments/default", super::path_segment(model)),
                name: "default".into(),
                upstream: m.upstream_base_url.clone(),
                upstream_model: m.upstream_model.clone(),
                weight: "1".into(),
                priority: "0".into(),
                max_inflight: String::new(),
                enabled: true,
                health,
                detail,
                editable: false,
                model_off,
            });
        }
        for d in rows {
            let (health, detail) = of(&d.name);
            out.push(DeploymentLine {
                model: model.to_string(),
                path: format!(
                    "{}/deployments/{}",
                    super::path_segment(model),
                    super::path_segment(&d.name)
                ),
                upstream: d.upstream_base_url,
                upstream_model: d.upstream_model,
                weight: d.weight.to_string(),
                priority: d.priority.to_string(),
                max_inflight: d.max_inflight.map(|n| n.to_string()).unwrap_or_default(),
                enabled: d.enabled,
                health,
                detail,
                editable: true,
                model_off,
                name: d.name,
            });
        }
    }
    Ok(out)
}

/// The deployment form as typed (shown again, every field, when refused).
#[derive(Deserialize, Default, Clone)]
#[serde(default)]
pub struct DeploymentForm {
    pub model: String,
    pub name: String,
    pub upstream_base_url: String,
    pub upstream_model: String,
    /// Kept as typed when the form is refused: the person who just sent it
    /// gets it back in the (password) field instead of typing it again.
    pub upstream_api_key: String,
    pub weight: String,
    pub priority: String,
    pub max_inflight: String,
}

fn small(field: &'static str, v: &str) -> Result<Option<i32>, ApiError> {
    int(field, v)?
        .map(|n| i32::try_from(n).map_err(|_| ApiError::field(field, "err.not_a_number")))
        .transpose()
}

impl DeploymentForm {
    /// The deployment typed, and every field that does not parse (those
    /// fields left out of the deployment).
    pub(super) fn to_input(&self) -> (DeploymentIn, Vec<ApiError>) {
        let mut problems = Vec::new();
        let mut number = |field, v: &str| {
            small(field, v).unwrap_or_else(|e| {
                problems.push(e);
                None
            })
        };
        let d = DeploymentIn {
            name: None,
            weight: number("weight", &self.weight),
            priority: number("priority", &self.priority),
            max_inflight: number("max_inflight", &self.max_inflight),
            upstream_base_url: self.upstream_base_url.trim().to_string(),
            upstream_model: self.upstream_model.trim().to_string(),
            upstream_api_key: Some(self.upstream_api_key.trim().to_string())
                .filter(|k| !k.is_empty()),
            ..Default::default()
        };
        (d, problems)
    }
}

#[derive(Deserialize)]
pub struct EnabledForm {
    enabled: String,
}

/// `POST /console/models/{id}/deployments/{name}/enabled`: disable or enable.
pub async fn set_enabled(
    State(cp): State<Arc<ControlPlane>>,
    s: Session,
    Path((model, name)): Path<(String, String)>,
    Form(f): Form<EnabledForm>,
) -> Result<Response, PageError> {
    crate::api::require_platform_admin(&s.actor)?;
    cp.store
        .set_deployment_enabled(&s.actor.label(), &model, &name, f.enabled == "true")
        .await
        .map_err(ApiError::from)?;
    Ok(Redirect::to("/console/models").into_response())
}
