use super::{require_platform_admin, valid_id};
use crate::auth::Authed;
use crate::{passwords, ApiError, ControlPlane};
use axum::extract::State;
use axum::Json;
use domain::roles::Role;
use serde::Deserialize;
use serde_json::{json, Value};
use std::sync::Arc;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NewUser {
    email: String,
    password: String,
    role: String,
    tenant_id: Option<String>,
}

pub async fn create(
    State(cp): State<Arc<ControlPlane>>,
    Authed(actor): Authed,
    Json(u): Json<NewUser>,
) -> Result<Json<Value>, ApiError> {
    require_platform_admin(&actor)?;
    let role = Role::parse(&u.role).ok_or_else(|| ApiError::BadRequest("unknown role".into()))?;
    match (role, &u.tenant_id) {
        (Role::TenantAdmin, Some(t)) => valid_id("tenant_id", t)?,
        (Role::TenantAdmin, None) => {
            return Err(ApiError::BadRequest(
                "a tenant admin needs tenant_id".into(),
            ))
        }
        (_, Some(_)) => {
            return Err(ApiError::BadRequest(
                "only tenant admins belong to a tenant".into(),
            ))
        }
        (_, None) => {}
    }
    if !u.email.contains('@') {
        return Err(ApiError::BadRequest("email is not an address".into()));
    }
    let hash = passwords::hash(&u.password).map_err(|e| ApiError::BadRequest(e.to_string()))?;
    let creator = actor.user_id.parse().ok();
    let id = cp
        .store
        .create_user_by(
            &actor.label(),
            creator,
            &u.email,
            &hash,
            role.as_str(),
            u.tenant_id.as_deref(),
        )
        .await?;
    Ok(Json(
        json!({"id": id, "email": u.email.trim().to_lowercase(), "role": role.as_str(), "tenant_id": u.tenant_id}),
    ))
}
