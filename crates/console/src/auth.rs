//! Sessions over HTTP: email + password → a signed token, sent back as a
//! bearer token (API) or set as an HttpOnly cookie (console, see
//! `web::session`). The checks themselves — argon2id, HS256 with a pinned
//! algorithm and no leeway on `exp`, the user re-read on every request —
//! are the store's (`store::Store::{sign_in, authenticate}`): they are the
//! only way to a `store::Principal` and its tenant scope. Here: the
//! per-email limiter, the audit row of a failed login, and the extractor.

use crate::api::extract::Body;
use crate::error::ApiError;
use crate::ControlPlane;
use axum::extract::{FromRequestParts, State};
use axum::http::request::Parts;
use axum::Json;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use store::{IssuedSession, NewAudit, Principal, VerifiedSession};

/// Failed logins per email: at most 5 a minute.
#[derive(Default)]
pub struct LoginLimiter(Mutex<HashMap<String, (u32, Instant)>>);

const MAX_FAILURES: u32 = 5;
const WINDOW: Duration = Duration::from_secs(60);

impl LoginLimiter {
    /// Counts an attempt before the password is checked (so parallel
    /// guesses cannot all pass); false when the email is over its limit.
    pub(crate) fn attempt(&self, email: &str) -> bool {
        let mut m = self.0.lock().expect("limiter lock");
        if m.len() > 10_000 {
            m.retain(|_, (_, since)| since.elapsed() < WINDOW);
        }
        let e = m.entry(email.to_string()).or_insert((0, Instant::now()));
        if e.1.elapsed() >= WINDOW {
            *e = (0, Instant::now());
        }
        e.0 += 1;
        e.0 <= MAX_FAILURES
    }

    fn succeeded(&self, email: &str) {
        self.0.lock().expect("limiter lock").remove(email);
    }
}

#[derive(serde::Deserialize)]
pub struct Login {
    email: String,
    password: String,
}

pub async fn login(
    State(cp): State<Arc<ControlPlane>>,
    Body(l): Body<Login>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let (p, session) = sign_in(&cp, &l.email, l.password).await?;
    Ok(Json(serde_json::json!({
        "token": session.token, "role": p.role, "tenant_id": p.tenant,
        "expires_in": cp.sessions.lifetime_secs()})))
}

/// Email + password → the person and a new session, rate-limited per email
/// and audited on failure. Shared by the API's login and the console's
/// login form.
pub(crate) async fn sign_in(
    cp: &ControlPlane,
    email: &str,
    password: String,
) -> Result<(Principal, IssuedSession), ApiError> {
    let email = email.trim().to_lowercase();
    if !cp.logins.attempt(&email) {
        return Err(ApiError::TooManyAttempts);
    }
    let Some(p) = cp.store.sign_in(&email, password).await? else {
        cp.store
            .audit(NewAudit::new(
                "anonymous",
                "auth.login_failed",
                format!("user:{email}"),
            ))
            .await?;
        return Err(ApiError::Unauthenticated);
    };
    cp.logins.succeeded(&email);
    let session = cp.sessions.issue(&p).ok_or(ApiError::Internal)?;
    Ok((p, session))
}

/// The person a verified session names, re-read from the store.
pub(crate) async fn principal(
    cp: &ControlPlane,
    session: &VerifiedSession,
) -> Result<Principal, ApiError> {
    cp.store
        .authenticate(session)
        .await?
        .ok_or(ApiError::Unauthenticated)
}

/// The authenticated person behind a request (bearer token).
pub struct Authed(pub Principal);

impl FromRequestParts<Arc<ControlPlane>> for Authed {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut Parts,
        cp: &Arc<ControlPlane>,
    ) -> Result<Self, Self::Rejection> {
        let token = parts
            .headers
            .get(axum::http::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .ok_or(ApiError::Unauthenticated)?;
        let session = cp.sessions.verify(token).ok_or(ApiError::Unauthenticated)?;
        Ok(Authed(principal(cp, &session).await?))
    }
}
