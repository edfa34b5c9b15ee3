//! A model's deployments and fallback models (docs/routing.md):
//! `GET /api/v1/models/{id}/deployments` (with this replica's view of their
//! health), `PUT /api/v1/models/{id}/deployments/{name}` (add or edit),
//! `PATCH …/{name}` (`{"enabled": bool}`), `PUT /api/v1/models/{id}/fallbacks`.
//! Provider keys are write-only: encrypted before the store, never returned.

use super::extract::{Body, Params};
use super::require_platform_admin;
use crate::auth::Authed;
use crate::{ApiError, ControlPlane};
use axum::extract::State;
use axum::Json;
use domain::provider::{CapField, Dialect, ProviderProfile};
use domain::routing::MAX_DEPLOYMENTS;
use serde::Deserialize;
use serde_json::{json, Value};
use std::sync::Arc;
use store::DeploymentRow;

/// One deployment as the API takes it; the provider profile's fields sit
/// beside the rest (all absent: the model's profile applies).
#[derive(Deserialize, Clone, Debug, Default)]
#[serde(deny_unknown_fields)]
pub struct DeploymentIn {
    /// In `deployments: [...]` only; a path names it otherwise.
    #[serde(default)]
    pub name: Option<String>,
    pub upstream_base_url: String,
    pub upstream_model: String,
    /// Write-only: stored encrypted, never returned or logged.
    #[serde(default)]
    pub upstream_api_key: Option<String>,
    #[serde(default)]
    pub weight: Option<i32>,
    #[serde(default)]
    pub priority: Option<i32>,
    #[serde(default)]
    pub max_inflight: Option<i32>,
    #[serde(default)]
    pub enabled: Option<bool>,
    #[serde(default)]
    pub cap_field: Option<String>,
    #[serde(default)]
    pub hidden_reasoning: Option<bool>,
    #[serde(default)]
    pub apis: Option<Vec<String>>,
}

/// A provider base URL the gateway may call: absolute http(s), no
/// credentials in it (they belong in the write-only key, never in logs).
pub fn check_base_url(field: &'static str, url: &str) -> Result<(), ApiError> {
    if !(url.starts_with("https://") || url.starts_with("http://")) {
        return Err(ApiError::field(field, "err.url"));
    }
    let authority = url
        .split("://")
        .nth(1)
        .unwrap_or("")
        .split('/')
        .next()
        .unwrap_or("");
    if authority.is_empty() || authority.contains('@') {
        return Err(ApiError::field(field, "err.url"));
    }
    Ok(())
}

/// A deployment's name: letters, digits, '.', '_' or '-', at most 64,
/// starting with a letter or digit.
fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .next()
            .is_some_and(|b| b.is_ascii_alphanumeric())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

impl DeploymentIn {
    /// The row to store (its key encrypted), or what is wrong with it.
    pub fn to_row(
        &self,
        cp: &ControlPlane,
        model: &str,
        name: &str,
    ) -> Result<DeploymentRow, ApiError> {
        if let Some(e) = self.problems(name).into_iter().next() {
            return Err(e);
        }
        let weight = self.weight.unwrap_or(1);
        let priority = self.priority.unwrap_or(0);
        Ok(DeploymentRow {
            model_id: model.to_string(),
            name: name.to_string(),
            upstream_base_url: self.upstream_base_url.trim().to_string(),
            upstream_model: self.upstream_model.trim().to_string(),
            upstream_api_key_enc: self
                .upstream_api_key
                .as_deref()
                .filter(|k| !k.is_empty())
                .map(|k| domain::secret::encrypt(&cp.encryption_key, k)),
            weight,
            priority,
            max_inflight: self.max_inflight,
            profile: self.profile()?,
            enabled: self.enabled.unwrap_or(true),
        })
    }

    /// Everything wrong with the deployment's fields, not only the first
    /// (the console's form shows them all at once; the API answers the
    /// first). Each names its field and a translated message.
    pub fn problems(&self, name: &str) -> Vec<ApiError> {
        let mut out = Vec::new();
        if name.trim().is_empty() {
            out.push(ApiError::field("name", "err.required"));
        } else if !valid_name(name) {
            out.push(ApiError::field("name", "err.deployment_name"));
        }
        if self.upstream_base_url.trim().is_empty() {
            out.push(ApiError::field("upstream_base_url", "err.required"));
        } else if let Err(e) = check_base_url("upstream_base_url", &self.upstream_base_url) {
            out.push(e);
        }
        if self.upstream_model.trim().is_empty() {
            out.push(ApiError::field("upstream_model", "err.required"));
        }
        if !(0..=10_000).contains(&self.weight.unwrap_or(1)) {
            out.push(ApiError::field("weight", "err.weight_range"));
        }
        if !(0..=100).contains(&self.priority.unwrap_or(0)) {
            out.push(ApiError::field("priority", "err.priority_range"));
        }
        if self.max_inflight.is_some_and(|n| n <= 0) {
            out.push(ApiError::field("max_inflight", "err.at_least_one"));
        }
        out
    }

    /// A profile of its own when any profile field is given (the fields
    /// not given take what the upstream model's name suggests).
    fn profile(&self) -> Result<Option<ProviderProfile>, ApiError> {
        if self.cap_field.is_none() && self.hidden_reasoning.is_none() && self.apis.is_none() {
            return Ok(None);
        }
        let mut p = ProviderProfile::suggested_for(&self.upstream_model);
        if let Some(c) = &self.cap_field {
            p.cap_field = CapField::parse(c).ok_or_else(|| {
                ApiError::invalid("cap_field", "max_tokens, max_completion_tokens or both")
            })?;
        }
        if let Some(h) = self.hidden_reasoning {
            p.hidden_reasoning = h;
        }
        if let Some(apis) = &self.apis {
            p.apis = apis
                .iter()
                .enumerate()
                .map(|(j, a)| {
                    Dialect::parse(a).ok_or_else(|| {
                        ApiError::invalid(format!("apis[{j}]"), "chat, responses or messages")
                    })
                })
                .collect::<Result<_, _>>()?;
        }
        Ok(Some(p))
    }
}

/// The rows of `deployments: [...]`, named `d1`, `d2`, … where unnamed.
pub fn rows_of(
    cp: &ControlPlane,
    model: &str,
    deps: &[DeploymentIn],
) -> Result<Vec<DeploymentRow>, ApiError> {
    if deps.len() > MAX_DEPLOYMENTS {
        return Err(ApiError::invalid("deployments", "at most 64 deployments"));
    }
    let rows = deps
        .iter()
        .enumerate()
        .map(|(i, d)| {
            let name = d.name.clone().unwrap_or_else(|| format!("d{}", i + 1));
            d.to_row(cp, model, &name)
                .map_err(|e| e.within(&format!("deployments[{i}].")))
        })
        .collect::<Result<Vec<_>, _>>()?;
    for (i, r) in rows.iter().enumerate() {
        if rows[..i].iter().any(|o| o.name == r.name) {
            return Err(ApiError::invalid(
                "deployments",
                format!("two deployments named {}", r.name),
            ));
        }
    }
    Ok(rows)
}

/// Fallbacks must be other existing models.
pub async fn check_fallbacks(
    cp: &ControlPlane,
    model: &str,
    fallbacks: &[String],
) -> Result<(), ApiError> {
    for (i, f) in fallbacks.iter().enumerate() {
        if f == model || !cp.store.model_exists(f).await? {
            return Err(ApiError::invalid(
                format!("fallbacks[{i}]"),
                format!("{f} is not another existing model"),
            ));
        }
    }
    Ok(())
}

fn shown(d: &DeploymentRow, health: Option<&domain::routing::DeploymentHealth>) -> Value {
    json!({"name": d.name, "upstream_base_url": d.upstream_base_url, "upstream_model": d.upstream_model,
        "has_upstream_api_key": d.upstream_api_key_enc.is_some(), "weight": d.weight,
        "priority": d.priority, "max_inflight": d.max_inflight, "enabled": d.enabled,
        "profile": d.profile, "health": health})
}

/// The deployments of a model with this replica's view of their health.
pub async fn list_model(cp: &ControlPlane, model: &str) -> Result<Value, ApiError> {
    if !cp.store.model_exists(model).await? {
        return Err(ApiError::NotFound(format!("model {model}")));
    }
    let rows = cp.store.deployments_of(model).await?;
    let health = cp.routes.deployments(model);
    let find = |name: &str| health.iter().find(|h| h.name == name);
    let deployments: Vec<Value> = if rows.is_empty() {
        // The one-deployment form: the model's own upstream, named `default`.
        health
            .iter()
            .map(|h| json!({"name": h.name, "health": h}))
            .collect()
    } else {
        rows.iter().map(|d| shown(d, find(&d.name))).collect()
    };
    let fallbacks = cp.store.fallbacks_of(model).await?;
    Ok(json!({"model": model, "deployments": deployments, "fallbacks": fallbacks}))
}

pub async fn list(
    State(cp): State<Arc<ControlPlane>>,
    Authed(actor): Authed,
    Params(id): Params<String>,
) -> Result<Json<Value>, ApiError> {
    require_platform_admin(&actor)?;
    Ok(Json(list_model(&cp, &id).await?))
}

/// Adds or edits one deployment (audited).
pub async fn put_deployment(
    cp: &ControlPlane,
    actor: &domain::roles::Actor,
    model: &str,
    name: &str,
    d: &DeploymentIn,
) -> Result<(), ApiError> {
    require_platform_admin(actor)?;
    if !cp.store.model_exists(model).await? {
        return Err(ApiError::NotFound(format!("model {model}")));
    }
    let row = d.to_row(cp, model, name)?;
    cp.store.put_deployment(&actor.label(), &row).await?;
    Ok(())
}

pub async fn put(
    State(cp): State<Arc<ControlPlane>>,
    Authed(actor): Authed,
    Params((id, name)): Params<(String, String)>,
    Body(d): Body<DeploymentIn>,
) -> Result<Json<Value>, ApiError> {
    // The path names the deployment; a different name in the body would
    // otherwise be silently dropped.
    if d.name.as_deref().is_some_and(|n| n != name) {
        return Err(ApiError::invalid(
            "name",
            "the path names the deployment: leave name out or give the same",
        ));
    }
    put_deployment(&cp, &actor, &id, &name, &d).await?;
    Ok(Json(list_model(&cp, &id).await?))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EnabledIn {
    pub enabled: bool,
}

pub async fn set_enabled(
    State(cp): State<Arc<ControlPlane>>,
    Authed(actor): Authed,
    Params((id, name)): Params<(String, String)>,
    Body(e): Body<EnabledIn>,
) -> Result<Json<Value>, ApiError> {
    require_platform_admin(&actor)?;
    cp.store
        .set_deployment_enabled(&actor.label(), &id, &name, e.enabled)
        .await?;
    Ok(Json(list_model(&cp, &id).await?))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FallbacksIn {
    pub fallbacks: Vec<String>,
}

pub async fn set_fallbacks(
    State(cp): State<Arc<ControlPlane>>,
    Authed(actor): Authed,
    Params(id): Params<String>,
    Body(f): Body<FallbacksIn>,
) -> Result<Json<Value>, ApiError> {
    require_platform_admin(&actor)?;
    if !cp.store.model_exists(&id).await? {
        return Err(ApiError::NotFound(format!("model {id}")));
    }
    check_fallbacks(&cp, &id, &f.fallbacks).await?;
    cp.store
        .set_model_routing(&actor.label(), &id, &[], &f.fallbacks)
        .await?;
    Ok(Json(list_model(&cp, &id).await?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_problem_of_a_deployment_at_once() {
        let d = DeploymentIn {
            upstream_base_url: "ftp://x".into(),
            upstream_model: " ".into(),
            weight: Some(20_000),
            priority: Some(101),
            max_inflight: Some(0),
            ..Default::default()
        };
        let fields: Vec<String> = d
            .problems("-bad name")
            .iter()
            .map(|e| match e {
                ApiError::Field { field, .. } => field.to_string(),
                e => panic!("{e}"),
            })
            .collect();
        assert_eq!(
            fields,
            [
                "name",
                "upstream_base_url",
                "upstream_model",
                "weight",
                "priority",
                "max_inflight"
            ]
        );
        let ok = DeploymentIn {
            upstream_base_url: "https://api.example.com/v1".into(),
            upstream_model: "m".into(),
            weight: Some(0),
            priority: Some(100),
            ..Default::default()
        };
        assert!(ok.problems("east-1").is_empty());
        assert!(ok.problems("").len() == 1);
    }
}
