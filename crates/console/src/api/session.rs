//! `/api/v1/auth`: sign in with email and password (a bearer token), sign
//! out, and change one's own password.

use super::extract::Body;
use crate::auth::{Authed, AuthedSession, ClientIp};
use crate::error::ApiError;
use crate::ControlPlane;
use axum::extract::State;
use axum::Json;
use std::sync::Arc;

#[derive(serde::Deserialize)]
pub struct Login {
    email: String,
    password: String,
}

pub async fn login(
    State(cp): State<Arc<ControlPlane>>,
    ClientIp(ip): ClientIp,
    Body(l): Body<Login>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let (p, session) = crate::auth::sign_in(&cp, &l.email, l.password, ip).await?;
    Ok(Json(serde_json::json!({
        "token": session.token, "role": p.role, "tenant_id": p.tenant,
        "expires_in": cp.sessions.lifetime_secs()})))
}

/// `POST /api/v1/auth/logout`: the presented session stops working.
pub async fn logout(
    State(cp): State<Arc<ControlPlane>>,
    AuthedSession(_, session): AuthedSession,
) -> Result<axum::http::StatusCode, ApiError> {
    cp.store.revoke_session(&session).await?;
    Ok(axum::http::StatusCode::NO_CONTENT)
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PasswordChange {
    current_password: String,
    new_password: String,
}

/// `POST /api/v1/auth/password`: one's own password, the current one
/// checked; every session of the person ends (sign in again).
pub async fn change_password(
    State(cp): State<Arc<ControlPlane>>,
    ClientIp(ip): ClientIp,
    Authed(actor): Authed,
    Body(c): Body<PasswordChange>,
) -> Result<axum::http::StatusCode, ApiError> {
    // The current password goes through the same back-off as a sign-in.
    crate::auth::check_password(&cp, &actor.email, c.current_password, ip).await?;
    let hash = super::users::hash_password(c.new_password).await?;
    let id = actor.user_id.parse().map_err(|_| ApiError::Internal)?;
    cp.store
        .set_user_password(&actor.label(), Some(id), id, &hash, false)
        .await?;
    Ok(axum::http::StatusCode::NO_CONTENT)
}
