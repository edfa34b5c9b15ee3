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
    pub upstream_base_url: String,
    pub upstream_model: String,
    /// Write-only: stored encrypted, never returned or logged.
    pub upstream_api_key: Option<String>,
    pub input_price_per_mtok_usd: MicroUsd,
    pub output_price_per_mtok_usd: MicroUsd,
    pub tokenizer: Option<String>,
    pub default_max_output_tokens: Option<i64>,
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
        "input_price_per_mtok_usd": m.input_price_per_mtok_usd, "output_price_per_mtok_usd": m.output_price_per_mtok_usd}),
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
    if !(m.upstream_base_url.starts_with("https://") || m.upstream_base_url.starts_with("http://"))
    {
        return Err(ApiError::field("upstream_base_url", "err.url"));
    }
    let authority = m
        .upstream_base_url
        .split("://")
        .nth(1)
        .unwrap_or("")
        .split('/')
        .next()
        .unwrap_or("");
    if authority.contains('@') {
        // Credentials in a URL end up in logs and audit rows: they go in
        // upstream_api_key, which is stored encrypted and never shown.
        return Err(ApiError::field("upstream_base_url", "err.url"));
    }
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
        upstream_api_key_enc: m
            .upstream_api_key
            .as_deref()
            .map(|k| domain::secret::encrypt(&cp.encryption_key, k)),
        input_price_micro_per_mtok: m.input_price_per_mtok_usd.0,
        output_price_micro_per_mtok: m.output_price_per_mtok_usd.0,
        tokenizer: m.tokenizer.clone(),
        default_max_output_tokens: m.default_max_output_tokens.unwrap_or(4096).max(1),
    };
    cp.store.create_model(&actor.label(), &new).await?;
    Ok(m)
}
