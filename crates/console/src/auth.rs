//! Sessions over HTTP: email + password → a signed token, sent back as a
//! bearer token (API) or set as an HttpOnly cookie (console, see
//! `web::session`). The checks themselves — argon2id, HS256 with a pinned
//! algorithm and no leeway on `exp`, the session's row and the user re-read
//! on every request — are the store's (`store::Store::{sign_in,
//! open_session, authenticate}`): they are the only way to a
//! `store::Principal` and its tenant scope. Here: the sign-in back-off, the
//! audit row of a failed login and the extractors (the API's login, logout
//! and password change are `api::session`'s).

use crate::error::ApiError;
use crate::ControlPlane;
use axum::extract::{ConnectInfo, FromRequestParts};
use axum::http::request::Parts;
use axum::http::HeaderMap;
use domain::login::Backoff;
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use store::{IssuedSession, NewAudit, Principal, SignedInVia, VerifiedSession};

/// The sign-in back-off (`domain::login::Backoff`) per email and per client
/// IP. Kept in Redis, so every replica counts the same attempts; while
/// Redis cannot answer, each replica counts in memory (sign-in keeps
/// working, limited per replica).
#[derive(Default)]
pub struct LoginLimiter {
    local: Mutex<HashMap<String, (i64, i64)>>,
}

/// Where an attempt was counted, so its outcome is booked in the same place.
#[derive(Clone, Copy)]
pub(crate) enum Counted {
    Shared,
    Local,
}

fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

impl LoginLimiter {
    /// Counts an attempt before the password is checked (so parallel
    /// guesses cannot all pass); `Err(ms)` when the subject must wait.
    pub(crate) async fn attempt(
        &self,
        quota: &quota::QuotaEngine,
        subject: &str,
        rule: &Backoff,
    ) -> Result<Counted, i64> {
        match quota.login_attempt(subject, rule).await {
            Ok(Ok(())) => return Ok(Counted::Shared),
            Ok(Err(ms)) => return Err(ms),
            Err(e) => {
                tracing::warn!(error = %e, "login limiter: Redis unavailable, counting on this replica")
            }
        }
        let mut m = self.local.lock().expect("limiter lock");
        let now = now_ms();
        if m.len() > 10_000 {
            m.retain(|_, (_, last)| now - *last < rule.forget_ms);
        }
        let e = m.entry(subject.to_string()).or_insert((0, 0));
        if e.0 > 0 && now - e.1 >= rule.forget_ms {
            *e = (0, 0);
        }
        rule.admit(e.0, e.1, now)?;
        *e = (e.0 + 1, now);
        Ok(Counted::Local)
    }

    /// The attempt succeeded: `clear` ends the subject's run of failures,
    /// otherwise only this attempt is taken back.
    pub(crate) async fn succeeded(
        &self,
        quota: &quota::QuotaEngine,
        subject: &str,
        rule: &Backoff,
        counted: Counted,
        clear: bool,
    ) {
        match counted {
            Counted::Shared => {
                let r = if clear {
                    quota.login_succeeded(subject, rule).await
                } else {
                    quota.login_refund(subject, rule).await
                };
                if let Err(e) = r {
                    tracing::warn!(error = %e, "login limiter: could not book a success");
                }
            }
            Counted::Local => {
                let mut m = self.local.lock().expect("limiter lock");
                if clear {
                    m.remove(subject);
                } else if let Some(e) = m.get_mut(subject) {
                    e.0 = (e.0 - 1).max(0);
                }
            }
        }
    }
}

pub(crate) fn wait_secs(ms: i64) -> ApiError {
    ApiError::TooManyAttempts(u64::try_from(ms.max(0)).unwrap_or(0).div_ceil(1000).max(1))
}

/// The client's address: the TCP peer, or — when the peer is one of the
/// operator's proxies (`auth.trusted_proxies`) — the right-most entry of
/// their header (`auth.client_ip_header`) that is not one of them
/// (`domain::client_ip`: the left part of the header is the client's own
/// writing).
pub struct ClientIp(pub Option<IpAddr>);

impl FromRequestParts<Arc<ControlPlane>> for ClientIp {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(
        parts: &mut Parts,
        cp: &Arc<ControlPlane>,
    ) -> Result<Self, Self::Rejection> {
        Ok(ClientIp(client_ip(cp, &parts.headers, parts)))
    }
}

fn client_ip(cp: &ControlPlane, h: &HeaderMap, parts: &Parts) -> Option<IpAddr> {
    let peer = parts
        .extensions
        .get::<ConnectInfo<SocketAddr>>()
        .map(|c| c.0.ip());
    let Some(name) = &cp.client_ip_header else {
        return peer;
    };
    // Every line of the header, in order (a proxy may add its own line).
    let lines: Vec<&str> = h
        .get_all(name.as_str())
        .iter()
        .filter_map(|v| v.to_str().ok())
        .collect();
    let forwarded = (!lines.is_empty()).then(|| lines.join(","));
    cp.trusted_proxies.client(peer, forwarded.as_deref())
}

/// Email + password → the person and a new session (unless password
/// sign-in is turned off). Shared by the API's login and the console's
/// login form.
pub(crate) async fn sign_in(
    cp: &ControlPlane,
    email: &str,
    password: String,
    ip: Option<IpAddr>,
) -> Result<(Principal, IssuedSession), ApiError> {
    if !cp.password_login {
        return Err(ApiError::Forbidden(
            "password sign-in is turned off: sign in with SSO".into(),
        ));
    }
    let p = check_password(cp, email, password, ip).await?;
    let session = open_session(cp, &p, SignedInVia::Password).await?;
    Ok((p, session))
}

/// The per-IP back-off's subject: one budget for every way of signing in
/// (password, SSO callback) from that address.
pub(crate) fn ip_subject(ip: IpAddr) -> String {
    format!("ip:{ip}")
}

/// Email + password → the person, behind the back-off per client IP and
/// per email, audited on failure.
pub(crate) async fn check_password(
    cp: &ControlPlane,
    email: &str,
    password: String,
    ip: Option<IpAddr>,
) -> Result<Principal, ApiError> {
    let email = email.trim().to_lowercase();
    let by_ip = ip.map(ip_subject);
    let by_email = format!("email:{email}");
    let ip_counted = match &by_ip {
        Some(s) => Some(
            cp.logins
                .attempt(&cp.quota, s, &Backoff::PER_IP)
                .await
                .map_err(wait_secs)?,
        ),
        None => None,
    };
    let email_counted = cp
        .logins
        .attempt(&cp.quota, &by_email, &Backoff::PER_EMAIL)
        .await
        .map_err(wait_secs)?;
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
    cp.logins
        .succeeded(
            &cp.quota,
            &by_email,
            &Backoff::PER_EMAIL,
            email_counted,
            true,
        )
        .await;
    if let (Some(s), Some(c)) = (&by_ip, ip_counted) {
        cp.logins
            .succeeded(&cp.quota, s, &Backoff::PER_IP, c, false)
            .await;
    }
    Ok(p)
}

/// A stored, revocable session for someone who just signed in.
pub(crate) async fn open_session(
    cp: &ControlPlane,
    p: &Principal,
    via: SignedInVia,
) -> Result<IssuedSession, ApiError> {
    cp.store
        .open_session(&cp.sessions, p, via)
        .await?
        .ok_or(ApiError::Internal)
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

/// The authenticated person behind a request (bearer token), and the
/// session it came with.
pub struct Authed(pub Principal);

/// Like [`Authed`], with the session itself (logout, password change).
pub struct AuthedSession(pub Principal, pub VerifiedSession);

impl FromRequestParts<Arc<ControlPlane>> for AuthedSession {
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
        Ok(AuthedSession(principal(cp, &session).await?, session))
    }
}

impl FromRequestParts<Arc<ControlPlane>> for Authed {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut Parts,
        cp: &Arc<ControlPlane>,
    ) -> Result<Self, Self::Rejection> {
        let AuthedSession(p, _) = AuthedSession::from_request_parts(parts, cp).await?;
        Ok(Authed(p))
    }
}
