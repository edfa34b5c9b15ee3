//! Sign in, sign out, and the language switch.

use super::session::{clear_cookie, session_cookie, Session};
use super::{render, Chrome, PageError};
use crate::auth;
use crate::error::ApiError;
use crate::i18n::{Lang, LANG_COOKIE};
use crate::ControlPlane;
use askama::Template;
use axum::extract::State;
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
}

pub async fn form(headers: HeaderMap) -> Result<impl IntoResponse, PageError> {
    render(LoginPage {
        c: Chrome::anonymous(Lang::from_headers(&headers), "login.title"),
        email: String::new(),
        error: None,
    })
}

#[derive(Deserialize)]
pub struct LoginForm {
    email: String,
    password: String,
}

/// Checks the password like the API's login (same limiter, same audit of
/// failures) and sets the session cookie.
pub async fn submit(
    State(cp): State<Arc<ControlPlane>>,
    headers: HeaderMap,
    Form(f): Form<LoginForm>,
) -> Result<Response, PageError> {
    let lang = Lang::from_headers(&headers);
    let failed = |status: StatusCode, key: &'static str, email: String| {
        let page = LoginPage {
            c: Chrome::anonymous(lang, "login.title"),
            email,
            error: Some(key),
        };
        Ok::<_, PageError>((status, render(page)?).into_response())
    };
    let session = match auth::sign_in(&cp, &f.email, f.password).await {
        Ok((_, s)) => s,
        Err(ApiError::Unauthenticated) => {
            return failed(StatusCode::UNAUTHORIZED, "login.failed", f.email)
        }
        Err(ApiError::TooManyAttempts) => {
            return failed(StatusCode::TOO_MANY_REQUESTS, "login.too_many", f.email)
        }
        Err(e) => return Err(e.into()),
    };
    let mut r = Redirect::to("/console").into_response();
    r.headers_mut()
        .insert(header::SET_COOKIE, session_cookie(&cp, &session.token));
    Ok(r)
}

pub async fn logout(State(cp): State<Arc<ControlPlane>>, _s: Session) -> Response {
    let mut r = Redirect::to("/console/login").into_response();
    r.headers_mut()
        .insert(header::SET_COOKIE, clear_cookie(&cp));
    r
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
    // Only back to a console page (no open redirect).
    let safe = f.back.bytes().all(|b| (0x21..0x7f).contains(&b));
    let back = if safe && f.back.starts_with("/console") {
        f.back
    } else {
        "/console".into()
    };
    let mut r = Redirect::to(&back).into_response();
    r.headers_mut().insert(
        header::SET_COOKIE,
        HeaderValue::from_str(&format!(
            "{LANG_COOKIE}={}; Path=/; Max-Age=31536000; SameSite=Lax",
            lang.code()
        ))
        .expect("ascii cookie"),
    );
    r
}
