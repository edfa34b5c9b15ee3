//! Sign in, sign out, and the language switch.

use super::error::safe_next;
use super::session::{
    clear_cookie, cookie, cookie_session, csrf_token, csrf_valid, session_cookie, Session,
};
use super::{render, Chrome, PageError};
use crate::auth::{self, ClientIp};
use crate::error::ApiError;
use crate::i18n::{Lang, LANG_COOKIE};
use crate::theme::{Theme, THEME_COOKIE};
use crate::ControlPlane;
use askama::Template;
use axum::extract::{Query, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use axum::Form;
use serde::Deserialize;
use std::sync::Arc;

#[derive(Template)]
#[template(path = "pages/login.html")]
struct LoginPage {
    c: Chrome,
    email: String,
    error: Option<&'static str>,
    /// Seconds until the next attempt is let through (the back-off), the
    /// `{secs}` of the error's sentence.
    wait: Option<u64>,
    /// The login form's CSRF token (see [`LoginCsrf`]).
    login_csrf: String,
    /// Email + password sign-in is offered.
    password_login: bool,
    /// The SSO button is offered.
    sso: bool,
    /// Where signing in returns to ("" = the dashboard).
    next: String,
}

/// Login CSRF (someone else's page signing the victim in as the attacker):
/// the login form is a double submit. Showing it sets a random nonce in an
/// `HttpOnly`, `SameSite=Strict` cookie and puts `HMAC(K, nonce)` in the
/// form; a login POST is refused unless the field matches the cookie. A
/// cross-site form carries neither the cookie (Strict) nor the token.
struct LoginCsrf {
    nonce: String,
    /// The nonce came with the request (no new cookie to set).
    known: bool,
}

const LOGIN_COOKIE: &str = "tg_login";
const LOGIN_PURPOSE: &str = "tollgate login csrf";

impl LoginCsrf {
    fn of(headers: &HeaderMap) -> LoginCsrf {
        match cookie(headers, LOGIN_COOKIE).filter(|n| n.len() == 32) {
            Some(nonce) => LoginCsrf { nonce, known: true },
            None => LoginCsrf {
                nonce: uuid::Uuid::new_v4().simple().to_string(),
                known: false,
            },
        }
    }

    fn token(&self, cp: &ControlPlane) -> String {
        csrf_token(&cp.sessions.derive_key(LOGIN_PURPOSE), &self.nonce)
    }

    fn valid(&self, cp: &ControlPlane, presented: &str) -> bool {
        self.known
            && csrf_valid(
                &cp.sessions.derive_key(LOGIN_PURPOSE),
                &self.nonce,
                presented,
            )
    }

    /// The page, with the nonce's cookie when it is new.
    fn answer(
        &self,
        cp: &ControlPlane,
        status: StatusCode,
        page: LoginPage,
    ) -> Result<Response, PageError> {
        let mut r = (status, render(page)?).into_response();
        if !self.known {
            let secure = if cp.cookie_secure { "; Secure" } else { "" };
            let v = format!(
                "{LOGIN_COOKIE}={}; Path=/console; HttpOnly; SameSite=Strict; Max-Age=3600{secure}",
                self.nonce
            );
            r.headers_mut().append(
                header::SET_COOKIE,
                HeaderValue::from_str(&v).expect("hex cookie"),
            );
        }
        Ok(r)
    }
}

fn login_page(
    cp: &ControlPlane,
    lang: Lang,
    csrf: &LoginCsrf,
    email: String,
    error: Option<&'static str>,
) -> LoginPage {
    LoginPage {
        c: Chrome::anonymous(lang, "login.title"),
        email,
        error,
        wait: None,
        login_csrf: csrf.token(cp),
        password_login: cp.password_login,
        sso: cp.sso.is_some(),
        next: String::new(),
    }
}

impl LoginPage {
    /// The error's sentence in the reader's language, the wait filled in.
    fn message(&self) -> Option<String> {
        let e = self.error?;
        let text = self.c.t(e);
        Some(match self.wait {
            Some(secs) => text.replace("{secs}", &secs.to_string()),
            None => text.to_string(),
        })
    }
}

/// The login page with an error, as a refused sign-in (SSO) shows it.
pub(super) fn refused(
    cp: &ControlPlane,
    headers: &HeaderMap,
    status: StatusCode,
    key: &'static str,
) -> Result<Response, PageError> {
    let csrf = LoginCsrf::of(headers);
    let page = login_page(
        cp,
        Lang::from_headers(headers),
        &csrf,
        String::new(),
        Some(key),
    );
    csrf.answer(cp, status, page)
}

pub async fn form(
    State(cp): State<Arc<ControlPlane>>,
    headers: HeaderMap,
    Query(q): Query<Next>,
) -> Result<Response, PageError> {
    let csrf = LoginCsrf::of(&headers);
    let mut page = login_page(
        &cp,
        Lang::from_headers(&headers),
        &csrf,
        String::new(),
        None,
    );
    if let Some(n) = safe_next(&q.next) {
        page.next = n.to_string();
        // The language switch comes back here, the way back kept.
        page.c.path = format!(
            "/console/login?{}",
            serde_urlencoded::to_string([("next", n)]).unwrap_or_default()
        );
    }
    csrf.answer(&cp, StatusCode::OK, page)
}

#[derive(Deserialize)]
pub struct LoginForm {
    email: String,
    password: String,
    #[serde(rename = "_csrf", default)]
    csrf: String,
    /// The page to come back to (`?next=` of the login page).
    #[serde(default)]
    next: String,
}

/// `?next=` of the login page.
#[derive(Deserialize, Default)]
#[serde(default)]
pub struct Next {
    next: String,
}

/// Checks the form's CSRF token, then the password like the API's login
/// (same back-off, same audit of failures), and sets the session cookie.
pub async fn submit(
    State(cp): State<Arc<ControlPlane>>,
    ClientIp(ip): ClientIp,
    headers: HeaderMap,
    Form(f): Form<LoginForm>,
) -> Result<Response, PageError> {
    let lang = Lang::from_headers(&headers);
    let csrf = LoginCsrf::of(&headers);
    let failed = |status: StatusCode, key: &'static str, email: String| {
        let mut page = login_page(&cp, lang, &csrf, email, Some(key));
        page.next = safe_next(&f.next).unwrap_or_default().to_string();
        csrf.answer(&cp, status, page)
    };
    if !csrf.valid(&cp, &f.csrf) {
        return failed(StatusCode::FORBIDDEN, "login.csrf", f.email);
    }
    let session = match auth::sign_in(&cp, &f.email, f.password, ip).await {
        Ok((_, s)) => s,
        Err(ApiError::Unauthenticated) => {
            return failed(StatusCode::UNAUTHORIZED, "login.failed", f.email)
        }
        Err(ApiError::TooManyAttempts(secs)) => {
            // The real wait, not "a minute" for a back-off of 1–4 s.
            let mut page = login_page(&cp, lang, &csrf, f.email, Some("login.too_many"));
            page.wait = Some(secs);
            page.next = safe_next(&f.next).unwrap_or_default().to_string();
            return csrf.answer(&cp, StatusCode::TOO_MANY_REQUESTS, page);
        }
        Err(ApiError::Forbidden(_)) => {
            return failed(StatusCode::FORBIDDEN, "login.password_off", f.email)
        }
        Err(e) => return Err(e.into()),
    };
    let to = safe_next(&f.next).unwrap_or("/console");
    let mut r = Redirect::to(to).into_response();
    r.headers_mut()
        .insert(header::SET_COOKIE, session_cookie(&cp, &session.token));
    Ok(r)
}

/// Ends the session on the server (the token stops working everywhere,
/// not only in this browser) and clears the cookie.
pub async fn logout(
    State(cp): State<Arc<ControlPlane>>,
    _s: Session,
    headers: HeaderMap,
) -> Result<Response, PageError> {
    if let Some(v) = cookie_session(&cp, &headers) {
        cp.store.revoke_session(&v).await.map_err(ApiError::from)?;
    }
    let mut r = Redirect::to("/console/login").into_response();
    r.headers_mut()
        .insert(header::SET_COOKIE, clear_cookie(&cp));
    Ok(r)
}

#[derive(Deserialize)]
pub struct LanguageForm {
    lang: String,
    #[serde(default)]
    back: String,
}

/// Remembers the chosen language for a year and goes back to the page.
pub async fn language(Form(f): Form<LanguageForm>) -> Response {
    let lang = Lang::parse(&f.lang).unwrap_or_default();
    remember(
        &f.back,
        format!(
            "{LANG_COOKIE}={}; Path=/; Max-Age=31536000; SameSite=Lax",
            lang.code()
        ),
    )
}

#[derive(Deserialize)]
pub struct ThemeForm {
    theme: String,
    #[serde(default)]
    back: String,
}

/// Remembers the chosen colour scheme for a year (`auto`: forgets it, the
/// browser's own applies) and goes back to the page.
pub async fn theme(Form(f): Form<ThemeForm>) -> Response {
    let theme = Theme::parse(&f.theme).unwrap_or_default();
    let cookie = match theme {
        Theme::Auto => format!("{THEME_COOKIE}=; Path=/; Max-Age=0; SameSite=Lax"),
        t => format!(
            "{THEME_COOKIE}={}; Path=/; Max-Age=31536000; SameSite=Lax",
            t.code()
        ),
    };
    remember(&f.back, cookie)
}

/// A preference's answer: `cookie` set, back to `back` when it is a console
/// page (no open redirect), else the dashboard.
fn remember(back: &str, cookie: String) -> Response {
    let safe = back.bytes().all(|b| (0x21..0x7f).contains(&b));
    let back = if safe && back.starts_with("/console") {
        back
    } else {
        "/console"
    };
    let mut r = Redirect::to(back).into_response();
    r.headers_mut().insert(
        header::SET_COOKIE,
        HeaderValue::from_str(&cookie).expect("ascii cookie"),
    );
    r
}
