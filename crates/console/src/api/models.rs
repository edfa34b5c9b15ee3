use super::extract::Body;
use super::require_platform_admin;
use crate::auth::Authed;
use crate::{ApiError, ControlPlane};
use axum::extract::State;
use axum::Json;
use domain::MicroUsd;
use serde::Deserialize;
use serde_json::{json, Value};
use std::sync::Arc;
use store::NewModel;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelIn {
    pub id: String,
    #[serde(default = "chat")]
    pub kind: String,
    /// The one-deployment form; empty when `deployments` is given.
    #[serde(default)]
    pub upstream_base_url: String,
    #[serde(default)]
    pub upstream_model: String,
    /// Write-only: stored encrypted, never returned or logged.
    pub upstream_api_key: Option<String>,
    pub input_price_per_mtok_usd: MicroUsd,
    pub output_price_per_mtok_usd: MicroUsd,
    pub tokenizer: Option<String>,
    pub default_max_output_tokens: Option<i64>,
    /// Several deployments (docs/routing.md), instead of the upstream fields.
    #[serde(default)]
    pub deployments: Vec<super::deployments::DeploymentIn>,
    /// Models tried in order when every deployment is down.
    #[serde(default)]
    pub fallbacks: Vec<String>,
}

fn chat() -> String {
    "chat".into()
}

pub async fn create(
    State(cp): State<Arc<ControlPlane>>,
    Authed(actor): Authed,
    Body(m): Body<ModelIn>,
) -> Result<Json<Value>, ApiError> {
    let m = create_model(&cp, &actor, m).await?;
    Ok(Json(
        json!({"id": m.id, "kind": m.kind, "upstream_base_url": m.upstream_base_url,
        "upstream_model": m.upstream_model, "has_upstream_api_key": m.upstream_api_key.is_some(),
        "input_price_per_mtok_usd": m.input_price_per_mtok_usd, "output_price_per_mtok_usd": m.output_price_per_mtok_usd,
        "deployments": m.deployments.iter().enumerate().map(|(i, d)| d.name.clone().unwrap_or_else(|| format!("d{}", i + 1))).collect::<Vec<_>>(),
        "fallbacks": m.fallbacks}),
    ))
}

/// Adds a model (platform admins only). The provider key is encrypted
/// before it reaches the store.
pub async fn create_model(
    cp: &ControlPlane,
    actor: &domain::roles::Actor,
    m: ModelIn,
) -> Result<ModelIn, ApiError> {
    require_platform_admin(actor)?;
    let deployments = super::deployments::rows_of(cp, &m.id, &m.deployments)?;
    let mut m = m;
    let mut key_enc = None;
    if let Some(first) = deployments.first() {
        let top = [&m.upstream_base_url, &m.upstream_model];
        if top.iter().any(|v| !v.is_empty()) || m.upstream_api_key.is_some() {
            return Err(ApiError::invalid(
                "deployments",
                "give either deployments or upstream_base_url/upstream_model/upstream_api_key, not both",
            ));
        }
        // The model's own upstream columns mirror its first deployment.
        m.upstream_base_url = first.upstream_base_url.clone();
        m.upstream_model = first.upstream_model.clone();
        key_enc = first.upstream_api_key_enc.clone();
    }
    super::deployments::check_base_url("upstream_base_url", &m.upstream_base_url)?;
    super::deployments::check_fallbacks(cp, &m.id, &m.fallbacks).await?;
    if !["chat", "embedding"].contains(&m.kind.as_str()) {
        return Err(ApiError::field("kind", "err.kind"));
    }
    if m.tokenizer
        .as_deref()
        .is_some_and(|t| !["o200k", "cl100k", "other"].contains(&t))
    {
        return Err(ApiError::field("tokenizer", "err.tokenizer"));
    }
    super::valid_id_model(&m.id)?;
    if m.upstream_model.trim().is_empty() {
        return Err(ApiError::field("upstream_model", "err.required"));
    }
    if m.input_price_per_mtok_usd.0 < 0 {
        return Err(ApiError::field("input_price_per_mtok_usd", "err.negative"));
    }
    if m.output_price_per_mtok_usd.0 < 0 {
        return Err(ApiError::field("output_price_per_mtok_usd", "err.negative"));
    }
    let new = NewModel {
        id: m.id.clone(),
        kind: m.kind.clone(),
        upstream_base_url: m.upstream_base_url.clone(),
        upstream_model: m.upstream_model.clone(),
        upstream_api_key_enc: key_enc.or_else(|| {
            m.upstream_api_key
                .as_deref()
                .map(|k| domain::secret::encrypt(&cp.encryption_key, k))
        }),
        input_price_micro_per_mtok: m.input_price_per_mtok_usd.0,
        output_price_micro_per_mtok: m.output_price_per_mtok_usd.0,
        tokenizer: m.tokenizer.clone(),
        default_max_output_tokens: m.default_max_output_tokens.unwrap_or(4096).max(1),
    };
    cp.store.create_model(&actor.label(), &new).await?;
    if !deployments.is_empty() || !m.fallbacks.is_empty() {
        cp.store
            .set_model_routing(&actor.label(), &m.id, &deployments, &m.fallbacks)
            .await?;
    }
    Ok(m)
}
