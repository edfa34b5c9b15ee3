//! The console's cookies: reading one from a request, and the session
//! cookie set at sign-in and cleared at sign-out or expiry.

use crate::ControlPlane;
use axum::http::{header, HeaderMap, HeaderValue};

pub const SESSION_COOKIE: &str = "tg_session";

/// A cookie's value from the request's `Cookie` headers.
pub fn cookie(h: &HeaderMap, name: &str) -> Option<String> {
    h.get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|kv| kv.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v.to_string())
}

/// `Set-Cookie` for a new session.
pub fn session_cookie(cp: &ControlPlane, token: &str) -> HeaderValue {
    let secure = if cp.cookie_secure { "; Secure" } else { "" };
    HeaderValue::from_str(&format!(
        "{SESSION_COOKIE}={token}; Path=/; HttpOnly; SameSite=Strict; Max-Age={}{secure}",
        cp.sessions.lifetime_secs()
    ))
    .expect("a JWT is a valid header value")
}

/// `Set-Cookie` that removes the session.
pub fn clear_cookie(cp: &ControlPlane) -> HeaderValue {
    let secure = if cp.cookie_secure { "; Secure" } else { "" };
    HeaderValue::from_str(&format!(
        "{SESSION_COOKIE}=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0{secure}"
    ))
    .expect("static cookie")
}
