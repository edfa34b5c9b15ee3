//! The browser's side of single sign-on: `/console/sso/start` sends it to
//! the provider with a sealed cookie holding `state`, `nonce` and the PKCE
//! verifier; `/console/sso/callback` checks them, signs the person in (or
//! refuses: audited when the callback belongs to a sign-in this server
//! started) and sets the session cookie. Callbacks are rate-limited per
//! client IP.

use super::login::refused;
use super::session::{cookie, session_cookie};
use super::PageError;
use crate::auth::{ip_subject, open_session, wait_secs, ClientIp};
use crate::sso::{Pending, SsoError, PENDING_SECS};
use crate::ControlPlane;
use axum::extract::{Query, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{Html, IntoResponse, Redirect, Response};
use domain::login::Backoff;
use serde::Deserialize;
use std::sync::Arc;
use store::{NewAudit, SignedInVia, SsoIdentity, SsoRefusal};

const SSO_COOKIE: &str = "tg_sso";

/// `SameSite=Lax`: the provider sends the browser back with a cross-site
/// top-level GET, which a Strict cookie would not come with.
fn pending_cookie(cp: &ControlPlane, value: &str, max_age: i64) -> HeaderValue {
    let secure = if cp.cookie_secure { "; Secure" } else { "" };
    HeaderValue::from_str(&format!(
        "{SSO_COOKIE}={value}; Path=/console/sso; HttpOnly; SameSite=Lax; Max-Age={max_age}{secure}"
    ))
    .expect("hex cookie")
}

fn seal(cp: &ControlPlane, p: &Pending) -> String {
    let json = serde_json::to_string(p).expect("pending serialises");
    hex::encode(domain::secret::encrypt(&cp.encryption_key, &json))
}

fn unseal(cp: &ControlPlane, h: &HeaderMap) -> Option<Pending> {
    let bytes = hex::decode(cookie(h, SSO_COOKIE)?).ok()?;
    let json = domain::secret::decrypt(&cp.encryption_key, &bytes).ok()?;
    serde_json::from_str(json.expose()).ok()
}

pub async fn start(State(cp): State<Arc<ControlPlane>>) -> Result<Response, PageError> {
    let Some(sso) = &cp.sso else {
        return Ok(StatusCode::NOT_FOUND.into_response());
    };
    let (url, pending) = match sso.start(chrono::Utc::now().timestamp()).await {
        Ok(x) => x,
        Err(e) => {
            tracing::warn!(error = %e, "SSO start failed");
            return Err(PageError::Api(crate::ApiError::Unavailable));
        }
    };
    let mut r = Redirect::to(&url).into_response();
    r.headers_mut().insert(
        header::SET_COOKIE,
        pending_cookie(&cp, &seal(&cp, &pending), PENDING_SECS),
    );
    Ok(r)
}

#[derive(Deserialize)]
pub struct Callback {
    code: Option<String>,
    state: Option<String>,
    error: Option<String>,
}

/// The most of a provider's (or anyone's) text an audit row keeps.
const WHY_CHARS: usize = 200;

/// `why`, cut to [`WHY_CHARS`] characters (marked when cut).
fn clip(why: &str) -> String {
    match why.char_indices().nth(WHY_CHARS) {
        Some((at, _)) => format!("{}… (cut)", &why[..at]),
        None => why.to_string(),
    }
}

/// The provider's answer. Every call counts against the caller's address
/// in the sign-in back-off per client IP (the budget password sign-in
/// uses), so a flood is answered 429 after twenty tries; a finished
/// sign-in takes its try back. Only a callback whose `state` matches the
/// sealed cookie of a sign-in this server started for this browser is a
/// sign-in attempt: its refusal is audited, the provider's text cut short.
/// Anything else is refused without an audit row (anyone can call this
/// URL; the audit chain is permanent).
pub async fn callback(
    State(cp): State<Arc<ControlPlane>>,
    ClientIp(ip): ClientIp,
    headers: HeaderMap,
    Query(q): Query<Callback>,
) -> Result<Response, PageError> {
    let Some(sso) = &cp.sso else {
        return Ok(StatusCode::NOT_FOUND.into_response());
    };
    let by_ip = ip.map(ip_subject);
    let counted = match &by_ip {
        Some(s) => Some(
            cp.logins
                .attempt(&cp.quota, s, &Backoff::PER_IP)
                .await
                .map_err(wait_secs)?,
        ),
        None => None,
    };
    let (cp, headers) = (&cp, &headers);
    let refuse = |status: StatusCode, key: &'static str| {
        let mut r = refused(cp, headers, status, key)?;
        r.headers_mut()
            .append(header::SET_COOKIE, pending_cookie(cp, "", 0));
        Ok::<_, PageError>(r)
    };
    let fail = |status: StatusCode, key: &'static str, why: String| async move {
        cp.store
            .audit(
                NewAudit::new(
                    "anonymous",
                    "auth.sso_refused",
                    format!("sso:{}", sso.issuer()),
                )
                .after(serde_json::json!({ "why": clip(&why) })),
            )
            .await?;
        refuse(status, key)
    };
    let pending = match (unseal(cp, headers), &q.state) {
        (Some(p), Some(state)) if p.started(state) => p,
        _ => return refuse(StatusCode::BAD_REQUEST, "login.sso_failed"),
    };
    let (Some(code), Some(state), None) = (&q.code, &q.state, &q.error) else {
        let why = format!(
            "provider answered {}",
            q.error.as_deref().unwrap_or("without a code")
        );
        return fail(StatusCode::BAD_REQUEST, "login.sso_failed", why).await;
    };
    let who = match sso
        .finish(pending, code, state, chrono::Utc::now().timestamp())
        .await
    {
        Ok(w) => w,
        Err(SsoError::NoRole { email, groups }) => {
            let why = format!("no role for {email} (groups {groups:?})");
            return fail(StatusCode::FORBIDDEN, "login.sso_no_role", why).await;
        }
        Err(e) => {
            tracing::warn!(error = %clip(&e.to_string()), "SSO sign-in failed");
            return fail(StatusCode::BAD_REQUEST, "login.sso_failed", e.to_string()).await;
        }
    };
    let identity = SsoIdentity {
        issuer: &who.issuer,
        subject: &who.subject,
        email: &who.email,
        email_verified: who.email_verified,
        role: who.role.as_str(),
        tenant: who.tenant.as_deref(),
    };
    let p = match cp.store.sso_sign_in(&identity).await? {
        Ok(p) => p,
        Err(r) => {
            let why = match r {
                SsoRefusal::Disabled => "account disabled",
                SsoRefusal::EmailTaken => {
                    "email belongs to another account (not verified by the provider)"
                }
                SsoRefusal::UnknownTenant => "the mapped tenant does not exist",
            };
            let why = format!("{}: {why}", who.email);
            return fail(StatusCode::FORBIDDEN, "login.sso_no_role", why).await;
        }
    };
    let session = open_session(cp, &p, SignedInVia::Oidc).await?;
    if let (Some(s), Some(c)) = (&by_ip, counted) {
        cp.logins
            .succeeded(&cp.quota, s, &Backoff::PER_IP, c, false)
            .await;
    }
    // A page of our own, not a redirect: the session cookie is SameSite=
    // Strict, and a redirect chain that began at the provider would not
    // carry it; a navigation from this page does.
    let mut r = Html(
        "<!doctype html><meta charset=\"utf-8\"><meta http-equiv=\"refresh\" content=\"0;url=/console\">\
         <title>tollgate</title><p><a id=\"continue\" href=\"/console\">tollgate</a></p>",
    )
    .into_response();
    let h = r.headers_mut();
    h.insert(header::SET_COOKIE, session_cookie(cp, &session.token));
    h.append(header::SET_COOKIE, pending_cookie(cp, "", 0));
    Ok(r)
}

#[cfg(test)]
mod tests {
    #[test]
    fn provider_text_is_cut_short() {
        assert_eq!(super::clip("access_denied"), "access_denied");
        let long = "é".repeat(16 * 1024);
        let cut = super::clip(&long);
        assert!(cut.ends_with("… (cut)"), "{cut}");
        assert_eq!(
            cut.chars().count(),
            super::WHY_CHARS + "… (cut)".chars().count()
        );
    }
}
