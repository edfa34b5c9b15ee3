//! Sessions: email + password (argon2id) → a signed JWT (HS256 pinned, `exp`
//! checked), sent back as a bearer token (API) or set as an HttpOnly cookie
//! (console, see `web::session`). Every request re-reads the user, so a
//! disabled user or a changed role takes effect at once.

use crate::api::extract::Body;
use crate::error::ApiError;
use crate::passwords;
use crate::ControlPlane;
use axum::extract::{FromRequestParts, State};
use axum::http::request::Parts;
use axum::Json;
use domain::roles::{Actor, Role};
use jsonwebtoken::{decode, encode, Algorithm, DecodingKey, EncodingKey, Header, Validation};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use store::NewAudit;

#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct Claims {
    pub sub: String,
    pub exp: i64,
    pub iat: i64,
    /// Unique per session: the console's CSRF token is derived from it.
    #[serde(default)]
    pub jti: String,
}

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

#[derive(Deserialize)]
pub struct Login {
    email: String,
    password: String,
}

pub async fn login(
    State(cp): State<Arc<ControlPlane>>,
    Body(l): Body<Login>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let user = check_password(&cp, &l.email, l.password).await?;
    let (token, _) = issue_token(&cp, &user)?;
    Ok(Json(
        serde_json::json!({"token": token, "role": user.role, "tenant_id": user.tenant_id, "expires_in": cp.session_secs}),
    ))
}

/// Email + password → the user, rate-limited per email and audited on
/// failure. Shared by the API's login and the console's login form.
pub(crate) async fn check_password(
    cp: &ControlPlane,
    email: &str,
    password: String,
) -> Result<store::UserRow, ApiError> {
    let email = email.trim().to_lowercase();
    if !cp.logins.attempt(&email) {
        return Err(ApiError::TooManyAttempts);
    }
    let user = cp.store.user_by_email(&email).await?;
    // argon2 takes tens of milliseconds of CPU: off the async workers that
    // also serve the data plane.
    let stored = user.as_ref().map(|u| u.password_hash.clone());
    let ok = tokio::task::spawn_blocking(move || match stored {
        Some(h) => passwords::verify(&password, &h),
        None => {
            passwords::verify_dummy(&password);
            false
        }
    })
    .await
    .map_err(|_| ApiError::Internal)?;
    let Some(user) = user.filter(|_| ok) else {
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
    Ok(user)
}

/// A signed session token for `user`; returns (token, jti).
pub(crate) fn issue_token(
    cp: &ControlPlane,
    user: &store::UserRow,
) -> Result<(String, String), ApiError> {
    let now = chrono::Utc::now().timestamp();
    let jti = uuid::Uuid::new_v4().simple().to_string();
    let claims = Claims {
        sub: user.id.to_string(),
        iat: now,
        exp: now + cp.session_secs,
        jti: jti.clone(),
    };
    let token = encode(
        &Header::new(Algorithm::HS256),
        &claims,
        &EncodingKey::from_secret(&cp.jwt_secret),
    )
    .map_err(|_| ApiError::Internal)?;
    Ok((token, jti))
}

/// Verifies a token's signature (HS256 only) and expiry (no leeway).
pub(crate) fn decode_token(cp: &ControlPlane, token: &str) -> Result<Claims, ApiError> {
    let mut v = Validation::new(Algorithm::HS256);
    v.leeway = 0;
    decode::<Claims>(token, &DecodingKey::from_secret(&cp.jwt_secret), &v)
        .map(|d| d.claims)
        .map_err(|_| ApiError::Unauthenticated)
}

/// The person a verified token names, re-read from the store.
pub(crate) async fn actor_of(cp: &ControlPlane, claims: &Claims) -> Result<Actor, ApiError> {
    let id = claims.sub.parse().map_err(|_| ApiError::Unauthenticated)?;
    let user = cp
        .store
        .user_by_id(id)
        .await?
        .ok_or(ApiError::Unauthenticated)?;
    let role = Role::parse(&user.role).ok_or(ApiError::Unauthenticated)?;
    Ok(Actor {
        user_id: user.id.to_string(),
        email: user.email,
        role,
        tenant: user.tenant_id,
    })
}

/// The authenticated person behind a request (bearer token).
pub struct Authed(pub Actor);

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
        let claims = decode_token(cp, token)?;
        Ok(Authed(actor_of(cp, &claims).await?))
    }
}
