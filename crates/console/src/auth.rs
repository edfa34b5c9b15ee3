//! Sessions: email + password (argon2id) → a signed JWT (HS256 pinned, `exp`
//! checked), sent back as a bearer token. Every request re-reads the user,
//! so a disabled user or a changed role takes effect at once.

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
struct Claims {
    sub: String,
    exp: i64,
    iat: i64,
}

/// Failed logins per email: at most 5 a minute.
#[derive(Default)]
pub struct LoginLimiter(Mutex<HashMap<String, (u32, Instant)>>);

const MAX_FAILURES: u32 = 5;
const WINDOW: Duration = Duration::from_secs(60);

impl LoginLimiter {
    /// Counts an attempt before the password is checked (so parallel
    /// guesses cannot all pass); false when the email is over its limit.
    fn attempt(&self, email: &str) -> bool {
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
    Json(l): Json<Login>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let email = l.email.trim().to_lowercase();
    if !cp.logins.attempt(&email) {
        return Err(ApiError::TooManyAttempts);
    }
    let user = cp.store.user_by_email(&email).await?;
    // argon2 takes tens of milliseconds of CPU: off the async workers that
    // also serve the data plane.
    let stored = user.as_ref().map(|u| u.password_hash.clone());
    let password = l.password;
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
    let now = chrono::Utc::now().timestamp();
    let claims = Claims {
        sub: user.id.to_string(),
        iat: now,
        exp: now + cp.session_secs,
    };
    let token = encode(
        &Header::new(Algorithm::HS256),
        &claims,
        &EncodingKey::from_secret(&cp.jwt_secret),
    )
    .map_err(|_| ApiError::Internal)?;
    Ok(Json(
        serde_json::json!({"token": token, "role": user.role, "tenant_id": user.tenant_id, "expires_in": cp.session_secs}),
    ))
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
        let mut v = Validation::new(Algorithm::HS256);
        v.leeway = 0;
        let claims = decode::<Claims>(token, &DecodingKey::from_secret(&cp.jwt_secret), &v)
            .map_err(|_| ApiError::Unauthenticated)?
            .claims;
        let id = claims.sub.parse().map_err(|_| ApiError::Unauthenticated)?;
        let user = cp
            .store
            .user_by_id(id)
            .await?
            .ok_or(ApiError::Unauthenticated)?;
        let role = Role::parse(&user.role).ok_or(ApiError::Unauthenticated)?;
        Ok(Authed(Actor {
            user_id: user.id.to_string(),
            email: user.email,
            role,
            tenant: user.tenant_id,
        }))
    }
}
