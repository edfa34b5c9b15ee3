//! Console sessions: the API's signed JWT in an `HttpOnly`, `SameSite=Strict`
//! cookie (`Secure` unless `auth.cookie_secure = false`), and CSRF tokens
//! derived from the session so they need no storage:
//! `csrf = hex(HMAC-SHA256(K, "csrf:" || jti))`, with the key
//! `K = HMAC-SHA256(jwt_secret, "tollgate csrf")` (`Sessions::derive_key`).
//!
//! Every state-changing console request that carries a session cookie must
//! carry that token, as the `x-csrf-token` header (htmx, from `hx-headers` on
//! `<body>`) or the `_csrf` form field (plain forms). The check is one
//! middleware (`require_csrf`) in front of every console route, compared in
//! constant time. Bearer-token requests (`/api/v1`) send no cookie and are
//! not CSRF-able.

use crate::auth;
pub use crate::cookies::{clear_cookie, cookie, session_cookie, SESSION_COOKIE};
use crate::error::ApiError;
use crate::i18n::Lang;
use crate::theme::Theme;
use crate::web::error::PageError;
use crate::ControlPlane;
use axum::body::Body;
use axum::extract::{FromRequestParts, Request, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, Method};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use hmac::{Hmac, Mac};
use sha2::Sha256;
use std::sync::Arc;
use store::{Principal, VerifiedSession};

pub const CSRF_HEADER: &str = "x-csrf-token";
pub const CSRF_FIELD: &str = "_csrf";
/// What the CSRF key is derived for.
const CSRF_PURPOSE: &str = "tollgate csrf";
/// Console form bodies are small; anything larger is refused before parsing.
const MAX_FORM_BYTES: usize = 256 * 1024;

fn mac(secret: &[u8], jti: &str) -> Hmac<Sha256> {
    let mut m = Hmac::<Sha256>::new_from_slice(secret).expect("hmac takes any key length");
    m.update(b"csrf:");
    m.update(jti.as_bytes());
    m
}

pub fn csrf_token(secret: &[u8], jti: &str) -> String {
    hex::encode(mac(secret, jti).finalize().into_bytes())
}

/// Constant-time check of a presented token against the session's.
pub fn csrf_valid(secret: &[u8], jti: &str, presented: &str) -> bool {
    match hex::decode(presented.trim()) {
        Ok(bytes) if !jti.is_empty() => mac(secret, jti).verify_slice(&bytes).is_ok(),
        _ => false,
    }
}

pub(crate) fn cookie_session(cp: &ControlPlane, h: &HeaderMap) -> Option<VerifiedSession> {
    cp.sessions.verify(&cookie(h, SESSION_COOKIE)?)
}

fn csrf_key(cp: &ControlPlane) -> [u8; 32] {
    cp.sessions.derive_key(CSRF_PURPOSE)
}

/// Refuses (403) a state-changing request whose valid session cookie comes
/// without the session's CSRF token. Requests without a session go on: the
/// handler's `Session` extractor sends them to the login page, and the two
/// routes that take no session (login, language) change no server state
/// that belongs to anyone.
pub async fn require_csrf(
    State(cp): State<Arc<ControlPlane>>,
    req: Request,
    next: Next,
) -> Response {
    if matches!(*req.method(), Method::GET | Method::HEAD | Method::OPTIONS) {
        return next.run(req).await;
    }
    let Some(session) = cookie_session(&cp, req.headers()) else {
        return next.run(req).await;
    };
    let key = csrf_key(&cp);
    if let Some(t) = req.headers().get(CSRF_HEADER).and_then(|v| v.to_str().ok()) {
        return if csrf_valid(&key, session.jti(), t) {
            next.run(req).await
        } else {
            PageError::Csrf.into_response()
        };
    }
    // A plain form: the token is a field of the urlencoded body.
    let (parts, body) = req.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, MAX_FORM_BYTES).await else {
        return PageError::Api(ApiError::BadRequest("form too large".into())).into_response();
    };
    let presented = form_urlencoded_field(&bytes, CSRF_FIELD);
    if !presented.is_some_and(|t| csrf_valid(&key, session.jti(), &t)) {
        return PageError::Csrf.into_response();
    }
    next.run(Request::from_parts(parts, Body::from(bytes)))
        .await
}

fn form_urlencoded_field(body: &[u8], name: &str) -> Option<String> {
    serde_urlencoded::from_bytes::<Vec<(String, String)>>(body)
        .ok()?
        .into_iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v)
}

/// A signed-in person on a console page, with what the page needs to
/// render the layout: their CSRF token, language and the current path.
pub struct Session {
    /// Who (an `Actor`, by `Deref`) and what they may read (`scope()`).
    pub actor: Principal,
    pub csrf: String,
    pub lang: Lang,
    pub theme: Theme,
    pub path: String,
    /// The request came from htmx: answer with a fragment.
    pub htmx: bool,
    /// The platform's zone: every time a page shows, and every date picker
    /// it reads, is in it.
    pub clock: domain::period::PlatformClock,
}

impl FromRequestParts<Arc<ControlPlane>> for Session {
    type Rejection = PageError;

    async fn from_request_parts(
        parts: &mut Parts,
        cp: &Arc<ControlPlane>,
    ) -> Result<Self, Self::Rejection> {
        let session = cookie_session(cp, &parts.headers).ok_or(PageError::Login)?;
        let actor = match auth::principal(cp, &session).await {
            Ok(a) => a,
            Err(ApiError::Unauthenticated) => return Err(PageError::Login),
            Err(e) => return Err(PageError::Api(e)),
        };
        Ok(Session {
            clock: cp.clock,
            actor,
            csrf: csrf_token(&csrf_key(cp), session.jti()),
            lang: Lang::from_headers(&parts.headers),
            theme: Theme::from_headers(&parts.headers),
            // A form's result (a POST) is not an address to come back to:
            // the language switch goes to the form's page.
            path: match parts.method {
                Method::GET | Method::HEAD => parts
                    .uri
                    .path_and_query()
                    .map(|p| p.as_str().to_string())
                    .unwrap_or_else(|| "/console".into()),
                _ => super::error::page_of(parts.uri.path()),
            },
            htmx: parts.headers.contains_key("hx-request"),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csrf_tokens_are_bound_to_the_session() {
        let s = b"0123456789abcdef0123456789abcdef";
        let t = csrf_token(s, "jti-1");
        assert!(csrf_valid(s, "jti-1", &t));
        assert!(!csrf_valid(s, "jti-2", &t));
        assert!(!csrf_valid(
            b"another-secret-another-secret-xx",
            "jti-1",
            &t
        ));
        assert!(!csrf_valid(s, "jti-1", "not hex"));
        assert!(!csrf_valid(s, "jti-1", ""));
        assert!(!csrf_valid(s, "", &csrf_token(s, "")));
    }

    #[test]
    fn cookies_are_found_among_others() {
        let mut h = HeaderMap::new();
        h.insert(
            axum::http::header::COOKIE,
            "a=1; tg_session=abc.def; b=2".parse().unwrap(),
        );
        assert_eq!(cookie(&h, SESSION_COOKIE).as_deref(), Some("abc.def"));
        assert_eq!(cookie(&h, "c"), None);
    }

    #[test]
    fn form_fields_are_decoded() {
        assert_eq!(
            form_urlencoded_field(b"name=x&_csrf=ab%20cd", CSRF_FIELD).as_deref(),
            Some("ab cd")
        );
        assert_eq!(form_urlencoded_field(b"name=x", CSRF_FIELD), None);
    }
}
