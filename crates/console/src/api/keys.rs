use super::extract::{Body, Params};
use super::{known_models, require, valid_limits};
use crate::auth::Authed;
use crate::{ApiError, ControlPlane};
use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use chrono::{DateTime, Utc};
use domain::keys;
use domain::roles::Access;
use domain::Limits;
use serde::Deserialize;
use serde_json::{json, Value};
use std::sync::Arc;
use store::{NewKey, Principal};
use uuid::Uuid;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KeyIn {
    pub name: String,
    pub expires_at: Option<DateTime<Utc>>,
    #[serde(default)]
    pub limits: Limits,
    pub allowed_models: Option<Vec<String>>,
    /// Default tags and required tag keys the key adds to its app's (its
    /// own override the app's defaults; both lists of required keys apply).
    /// End-user limits are the app's alone.
    #[serde(default)]
    pub attribution: domain::attribution::Policy,
}

/// A key just issued. `key` is the plaintext: shown in this one answer and
/// stored nowhere.
pub struct IssuedKey {
    pub id: Uuid,
    pub tenant_id: String,
    pub app_id: String,
    pub name: String,
    pub prefix: String,
    pub expires_at: Option<DateTime<Utc>>,
    pub key: String,
}

/// Issues a key for an app of a tenant the actor manages.
pub async fn issue(
    cp: &ControlPlane,
    actor: &Principal,
    tenant: &str,
    app: &str,
    k: KeyIn,
) -> Result<IssuedKey, ApiError> {
    require(actor, Access::Manage, tenant)?;
    if k.name.trim().is_empty() {
        return Err(ApiError::field("name", "err.required"));
    }
    super::valid_text("name", domain::text::KEY_NAME, &k.name)?;
    valid_limits(&k.limits)?;
    if k.expires_at.is_some_and(|t| t <= Utc::now()) {
        return Err(ApiError::field("expires_at", "err.past"));
    }
    super::valid_attribution(&k.attribution)?;
    if k.attribution.end_user_limits.is_some() {
        return Err(ApiError::invalid(
            "attribution.end_user_limits",
            "end-user limits are set on the app, not on a key".to_string(),
        ));
    }
    known_models(cp, k.allowed_models.as_deref()).await?;
    let key = keys::generate();
    let new = NewKey {
        tenant_id: tenant.to_string(),
        app_id: app.to_string(),
        name: k.name.clone(),
        prefix: keys::display_prefix(&key),
        key_hash: keys::keyed_hash(&cp.pepper, &key),
        limits: k.limits,
        allowed_models: k.allowed_models,
        expires_at: k.expires_at,
        attribution: k.attribution,
    };
    if !cp.store.app_exists(actor.scope(), tenant, app).await? {
        return Err(ApiError::NotFound(format!("app {tenant}/{app}")));
    }
    let id = cp.store.create_key(&actor.label(), &new).await?;
    Ok(IssuedKey {
        id,
        tenant_id: new.tenant_id,
        app_id: new.app_id,
        name: new.name,
        prefix: new.prefix,
        expires_at: new.expires_at,
        key,
    })
}

/// Issues a key. Its plaintext is in this response and nowhere else.
pub async fn create(
    State(cp): State<Arc<ControlPlane>>,
    Authed(actor): Authed,
    Params((tenant, app)): Params<(String, String)>,
    Body(k): Body<KeyIn>,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let k = issue(&cp, &actor, &tenant, &app, k)
        .await
        .map_err(super::in_limits)?;
    Ok((
        StatusCode::CREATED,
        Json(
            json!({"id": k.id, "tenant_id": k.tenant_id, "app_id": k.app_id, "name": k.name, "prefix": k.prefix,
            "expires_at": k.expires_at, "key": k.key}),
        ),
    ))
}

/// Revokes a key of a tenant the actor manages (another tenant's key is
/// not found).
pub async fn revoke_key(
    cp: &ControlPlane,
    actor: &Principal,
    id: Uuid,
) -> Result<String, ApiError> {
    let tenant = cp
        .store
        .key_tenant(actor.scope(), id)
        .await?
        .ok_or_else(|| ApiError::NotFound(format!("key {id}")))?;
    require(actor, Access::Manage, &tenant)?;
    cp.store.revoke_key(&actor.label(), id).await?;
    Ok(tenant)
}

pub async fn revoke(
    State(cp): State<Arc<ControlPlane>>,
    Authed(actor): Authed,
    Params(id): Params<Uuid>,
) -> Result<StatusCode, ApiError> {
    revoke_key(&cp, &actor, id).await?;
    Ok(StatusCode::NO_CONTENT)
}
