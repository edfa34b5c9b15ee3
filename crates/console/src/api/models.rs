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
    id: String,
    #[serde(default = "chat")]
    kind: String,
    upstream_base_url: String,
    upstream_model: String,
    /// Write-only: stored encrypted, never returned or logged.
    upstream_api_key: Option<String>,
    input_price_per_mtok_usd: MicroUsd,
    output_price_per_mtok_usd: MicroUsd,
    tokenizer: Option<String>,
    default_max_output_tokens: Option<i64>,
}

fn chat() -> String {
    "chat".into()
}

pub async fn create(
    State(cp): State<Arc<ControlPlane>>,
    Authed(actor): Authed,
    Json(m): Json<ModelIn>,
) -> Result<Json<Value>, ApiError> {
    require_platform_admin(&actor)?;
    if !(m.upstream_base_url.starts_with("https://") || m.upstream_base_url.starts_with("http://"))
    {
        return Err(ApiError::BadRequest(
            "upstream_base_url must be an http(s) URL".into(),
        ));
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
        return Err(ApiError::BadRequest(
            "upstream_base_url must not carry credentials; use upstream_api_key".into(),
        ));
    }
    if !["chat", "embedding"].contains(&m.kind.as_str()) {
        return Err(ApiError::BadRequest(
            "kind must be chat or embedding".into(),
        ));
    }
    if m.input_price_per_mtok_usd.0 < 0 || m.output_price_per_mtok_usd.0 < 0 {
        return Err(ApiError::BadRequest("prices must not be negative".into()));
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
    Ok(Json(
        json!({"id": m.id, "kind": m.kind, "upstream_base_url": m.upstream_base_url,
        "upstream_model": m.upstream_model, "has_upstream_api_key": m.upstream_api_key.is_some(),
        "input_price_per_mtok_usd": m.input_price_per_mtok_usd, "output_price_per_mtok_usd": m.output_price_per_mtok_usd}),
    ))
}
