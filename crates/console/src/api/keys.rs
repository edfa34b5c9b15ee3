use super::require;
use crate::auth::Authed;
use crate::{ApiError, ControlPlane};
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;
use chrono::{DateTime, Utc};
use domain::keys;
use domain::roles::Access;
use domain::Limits;
use serde::Deserialize;
use serde_json::{json, Value};
use std::sync::Arc;
use store::NewKey;
use uuid::Uuid;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KeyIn {
    name: String,
    expires_at: Option<DateTime<Utc>>,
    #[serde(default)]
    limits: Limits,
    allowed_models: Option<Vec<String>>,
}

/// Issues a key. Its plaintext is in this response and nowhere else.
pub async fn create(
    State(cp): State<Arc<ControlPlane>>,
    Authed(actor): Authed,
    Path((tenant, app)): Path<(String, String)>,
    Json(k): Json<KeyIn>,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    require(&actor, Access::Manage, &tenant)?;
    k.limits
        .validate()
        .map_err(|e| ApiError::BadRequest(e.to_string()))?;
    if k.expires_at.is_some_and(|t| t <= Utc::now()) {
        return Err(ApiError::BadRequest("expires_at is in the past".into()));
    }
    let key = keys::generate();
    let new = NewKey {
        tenant_id: tenant.clone(),
        app_id: app.clone(),
        name: k.name.clone(),
        prefix: keys::display_prefix(&key),
        key_hash: keys::keyed_hash(&cp.pepper, &key),
        limits: k.limits,
        allowed_models: k.allowed_models,
        expires_at: k.expires_at,
    };
    if !cp.store.app_exists(&tenant, &app).await? {
        return Err(ApiError::NotFound(format!("app {tenant}/{app}")));
    }
    let id = cp.store.create_key(&actor.label(), &new).await?;
    Ok((
        StatusCode::CREATED,
        Json(
            json!({"id": id, "tenant_id": tenant, "app_id": app, "name": k.name, "prefix": new.prefix,
            "expires_at": k.expires_at, "key": key}),
        ),
    ))
}

pub async fn revoke(
    State(cp): State<Arc<ControlPlane>>,
    Authed(actor): Authed,
    Path(id): Path<Uuid>,
) -> Result<StatusCode, ApiError> {
    let tenant = cp
        .store
        .key_tenant(id)
        .await?
        .ok_or_else(|| ApiError::NotFound(format!("key {id}")))?;
    require(&actor, Access::Manage, &tenant)?;
    cp.store.revoke_key(&actor.label(), id).await?;
    Ok(StatusCode::NO_CONTENT)
}
