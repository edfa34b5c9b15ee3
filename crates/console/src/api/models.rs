use super::extract::{Body, Params};
use super::require_platform_admin;
use crate::auth::Authed;
use crate::{ApiError, ControlPlane};
use axum::extract::State;
use axum::Json;
use domain::provider::{CapField, Dialect, ProviderProfile};
use domain::MicroUsd;
use serde::Deserialize;
use serde_json::{json, Value};
use std::sync::Arc;
use store::{NewModel, Principal};

#[derive(Deserialize, Clone)]
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
    /// Provider profile (docs/providers.md); unset fields take the profile
    /// the upstream model's name suggests.
    #[serde(default)]
    pub cap_field: Option<String>,
    #[serde(default)]
    pub hidden_reasoning: Option<bool>,
    #[serde(default)]
    pub apis: Option<Vec<String>>,
}

fn chat() -> String {
    "chat".into()
}

/// A change to a model's prices and provider profile: only the fields
/// given change.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct ModelPatch {
    #[serde(default)]
    pub input_price_per_mtok_usd: Option<MicroUsd>,
    #[serde(default)]
    pub output_price_per_mtok_usd: Option<MicroUsd>,
    pub cap_field: Option<String>,
    pub hidden_reasoning: Option<bool>,
    pub apis: Option<Vec<String>>,
    /// False takes the whole model out of service (requests naming it are
    /// answered 404 `model_not_found`); true puts it back.
    pub enabled: Option<bool>,
}

/// A price is never negative (a refusal names its field).
fn valid_price(field: &'static str, v: MicroUsd) -> Result<(), ApiError> {
    if v.0 < 0 {
        return Err(ApiError::field(field, "err.negative"));
    }
    Ok(())
}

/// Applies `p` to model `id` (platform admins only): new prices, each
/// audited as `model.prices`, a new profile as `model.profile`, and its
/// switch as `model.enabled`; a negative price names its field. Requests admitted from then on are
/// priced by it.
pub async fn patch_model(
    cp: &ControlPlane,
    actor: &Principal,
    id: &str,
    p: ModelPatch,
) -> Result<store::ModelRow, ApiError> {
    require_platform_admin(actor)?;
    let m = find(cp, id).await?;
    for (field, v) in [
        ("input_price_per_mtok_usd", p.input_price_per_mtok_usd),
        ("output_price_per_mtok_usd", p.output_price_per_mtok_usd),
    ] {
        v.map_or(Ok(()), |v| valid_price(field, v))?;
    }
    let profile_given = p.cap_field.is_some() || p.hidden_reasoning.is_some() || p.apis.is_some();
    let profile = profile_with(
        m.profile.clone(),
        p.cap_field.as_deref(),
        p.hidden_reasoning,
        p.apis.as_deref(),
    )?;
    let input = p
        .input_price_per_mtok_usd
        .map_or(m.input_price_micro_per_mtok, |v| v.0);
    let output = p
        .output_price_per_mtok_usd
        .map_or(m.output_price_micro_per_mtok, |v| v.0);
    if (input, output) != (m.input_price_micro_per_mtok, m.output_price_micro_per_mtok) {
        cp.store
            .set_model_prices(&actor.label(), id, input, output)
            .await?;
    }
    if profile_given {
        cp.store
            .set_model_profile(&actor.label(), id, &profile)
            .await?;
    }
    if let Some(e) = p.enabled.filter(|e| *e != m.enabled) {
        cp.store.set_model_enabled(&actor.label(), id, e).await?;
    }
    find(cp, id).await
}

/// `base` with the given fields applied; an unknown cap field or dialect
/// is refused with a 400 naming the field.
pub fn profile_with(
    mut base: ProviderProfile,
    cap_field: Option<&str>,
    hidden_reasoning: Option<bool>,
    apis: Option<&[String]>,
) -> Result<ProviderProfile, ApiError> {
    if let Some(c) = cap_field {
        base.cap_field = CapField::parse(c.trim()).ok_or_else(|| {
            ApiError::invalid(
                "cap_field",
                format!("cap_field must be max_tokens, max_completion_tokens or both, not {c:?}"),
            )
        })?;
    }
    if let Some(h) = hidden_reasoning {
        base.hidden_reasoning = h;
    }
    if let Some(apis) = apis {
        let mut out = Vec::new();
        for (i, a) in apis.iter().enumerate() {
            let d = Dialect::parse(a.trim()).ok_or_else(|| {
                ApiError::invalid(
                    format!("apis[{i}]"),
                    format!("apis may hold chat, responses and messages, not {a:?}"),
                )
            })?;
            if !out.contains(&d) {
                out.push(d);
            }
        }
        base.apis = out;
    }
    Ok(base)
}

pub fn profile_json(p: &ProviderProfile) -> Value {
    json!({"cap_field": p.cap_field.as_str(), "hidden_reasoning": p.hidden_reasoning,
        "apis": p.apis.iter().map(|a| a.as_str()).collect::<Vec<_>>()})
}

fn model_json(m: &store::ModelRow, platform_admin: bool) -> Value {
    let mut v = json!({"id": m.id, "kind": m.kind, "upstream_model": m.upstream_model,
        "input_price_per_mtok_usd": MicroUsd(m.input_price_micro_per_mtok),
        "output_price_per_mtok_usd": MicroUsd(m.output_price_micro_per_mtok),
        "default_max_output_tokens": m.default_max_output_tokens,
        "degrade_to": m.degrade_to, "pool_capacity": m.pool_capacity,
        "enabled": m.enabled, "profile": profile_json(&m.profile)});
    // Where a model goes is for the platform's staff.
    if platform_admin {
        v["upstream_base_url"] = json!(m.upstream_base_url);
    }
    v
}

async fn find(cp: &ControlPlane, id: &str) -> Result<store::ModelRow, ApiError> {
    cp.store
        .models()
        .await?
        .into_iter()
        .find(|m| m.id == id)
        .ok_or_else(|| ApiError::NotFound(format!("model {id}")))
}

/// `GET /api/v1/models/{id}`: the model, its prices and provider profile.
pub async fn show(
    State(cp): State<Arc<ControlPlane>>,
    Authed(actor): Authed,
    Params(id): Params<String>,
) -> Result<Json<Value>, ApiError> {
    let m = find(&cp, &id).await?;
    Ok(Json(model_json(&m, actor.is_platform_admin())))
}

/// `PATCH /api/v1/models/{id}`: changes the prices and/or the provider
/// profile (platform admins only, audited).
pub async fn update(
    State(cp): State<Arc<ControlPlane>>,
    Authed(actor): Authed,
    Params(id): Params<String>,
    Body(p): Body<ModelPatch>,
) -> Result<Json<Value>, ApiError> {
    let m = patch_model(&cp, &actor, &id, p).await?;
    Ok(Json(model_json(&m, true)))
}

pub async fn create(
    State(cp): State<Arc<ControlPlane>>,
    Authed(actor): Authed,
    Body(m): Body<ModelIn>,
) -> Result<Json<Value>, ApiError> {
    let (m, profile) = create_model(&cp, &actor, m).await?;
    Ok(Json(
        json!({"id": m.id, "kind": m.kind, "upstream_base_url": m.upstream_base_url,
        "upstream_model": m.upstream_model, "has_upstream_api_key": m.upstream_api_key.is_some(),
        "input_price_per_mtok_usd": m.input_price_per_mtok_usd, "output_price_per_mtok_usd": m.output_price_per_mtok_usd,
        "deployments": m.deployments.iter().enumerate().map(|(i, d)| d.name.clone().unwrap_or_else(|| format!("d{}", i + 1))).collect::<Vec<_>>(),
        "fallbacks": m.fallbacks, "profile": profile_json(&profile)}),
    ))
}

/// Every rule a new model's own fields break, all at once in the form's
/// order (one place for the API, which answers the first, and the
/// console's form, which shows each beside its field). Whether the id is
/// taken is the store's to say (409); deployments and fallbacks are
/// checked by their own rules.
pub fn new_model_problems(m: &ModelIn) -> Vec<ApiError> {
    let mut out: Vec<ApiError> = super::valid_id_model(&m.id).err().into_iter().collect();
    if !["chat", "embedding"].contains(&m.kind.as_str()) {
        out.push(ApiError::field("kind", "err.kind"));
    }
    if m.upstream_base_url.trim().is_empty() {
        out.push(ApiError::field("upstream_base_url", "err.required"));
    } else {
        out.extend(
            super::deployments::check_base_url("upstream_base_url", &m.upstream_base_url).err(),
        );
    }
    if m.upstream_model.trim().is_empty() {
        out.push(ApiError::field("upstream_model", "err.required"));
    }
    out.extend(valid_price("input_price_per_mtok_usd", m.input_price_per_mtok_usd).err());
    out.extend(valid_price("output_price_per_mtok_usd", m.output_price_per_mtok_usd).err());
    if m.default_max_output_tokens.is_some_and(|v| v < 1) {
        out.push(ApiError::field(
            "default_max_output_tokens",
            "err.at_least_one",
        ));
    }
    if m.tokenizer
        .as_deref()
        .is_some_and(|t| !["o200k", "cl100k", "other"].contains(&t))
    {
        out.push(ApiError::field("tokenizer", "err.tokenizer"));
    }
    if m.cap_field
        .as_deref()
        .is_some_and(|c| CapField::parse(c.trim()).is_none())
    {
        out.push(ApiError::field("cap_field", "err.cap_field"));
    }
    out
}

/// Adds a model (platform admins only). The provider key is encrypted
/// before it reaches the store.
pub async fn create_model(
    cp: &ControlPlane,
    actor: &domain::roles::Actor,
    m: ModelIn,
) -> Result<(ModelIn, ProviderProfile), ApiError> {
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
    super::first(new_model_problems(&m))?;
    super::deployments::check_fallbacks(cp, &m.id, &m.fallbacks).await?;
    let profile = profile_with(
        ProviderProfile::suggested_for(&m.upstream_model),
        m.cap_field.as_deref(),
        m.hidden_reasoning,
        m.apis.as_deref(),
    )?;
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
        profile: profile.clone(),
    };
    cp.store.create_model(&actor.label(), &new).await?;
    if !deployments.is_empty() || !m.fallbacks.is_empty() {
        cp.store
            .set_model_routing(&actor.label(), &m.id, &deployments, &m.fallbacks)
            .await?;
    }
    Ok((m, profile))
}
