//! Failures rendered: `render_failures`, a layer in front of every console
//! route, turns a failed answer (`error::Failure`, `error::NeedsLogin`) into
//! the error page in the reader's language — a signed-in person's keeps the
//! navigation and Log out — or, for htmx, a message in `#flash`; and the
//! console's own 404.

use super::error::{sign_in_first, Failure, NeedsLogin, PageError};
use crate::error::ApiError;
use crate::i18n::Lang;
use crate::web::{Chrome, Session};
use crate::ControlPlane;
use askama::Template;
use axum::extract::{FromRequestParts, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, Uri};
use axum::middleware::Next;
use axum::response::{Html, IntoResponse, Response};
use std::sync::Arc;

/// The signed-in layout when the request has a valid session, else the
/// anonymous one (also when the session cannot be read: the database down).
async fn chrome_of(cp: &Arc<ControlPlane>, uri: Uri, headers: HeaderMap, lang: Lang) -> Chrome {
    let mut req = Request::new(());
    *req.uri_mut() = uri;
    *req.headers_mut() = headers;
    let (mut parts, ()) = req.into_parts();
    match Session::from_request_parts(&mut parts, cp).await {
        Ok(s) => Chrome::new(&s, "error.title", ""),
        Err(_) => Chrome::anonymous(lang, "error.title"),
    }
}

/// An unknown `/console/…` address: the console's own 404 page.
pub async fn not_found(_s: Session) -> PageError {
    PageError::Api(ApiError::NotFound("page".into()))
}

#[derive(Template)]
#[template(path = "pages/error.html")]
struct ErrorPage {
    c: Chrome,
    message: &'static str,
    detail: Option<String>,
    status: u16,
}

#[derive(Template)]
#[template(path = "partials/flash.html")]
struct Flash {
    message: &'static str,
    detail: Option<String>,
}

/// Renders failures in the reader's language — a signed-in person's error
/// page keeps the navigation and Log out — and sets the headers every
/// console answer carries.
pub async fn render_failures(
    State(cp): State<Arc<ControlPlane>>,
    req: Request,
    next: Next,
) -> Response {
    let lang = Lang::from_headers(req.headers());
    let htmx = req.headers().contains_key("hx-request");
    // Kept to find the session again, only when something failed.
    let (method, uri, headers) = (
        req.method().clone(),
        req.uri().clone(),
        req.headers().clone(),
    );
    let mut resp = next.run(req).await;
    if resp.extensions_mut().remove::<NeedsLogin>().is_some() {
        resp = sign_in_first(&cp, &method, &uri, &headers, htmx);
    }
    if let Some(Failure(status, key, detail)) = resp.extensions_mut().remove::<Failure>() {
        let message = lang.t(key);
        let html = if htmx {
            Flash { message, detail }.render()
        } else {
            ErrorPage {
                c: chrome_of(&cp, uri, headers, lang).await,
                message,
                detail,
                status: status.as_u16(),
            }
            .render()
        };
        resp = match html {
            Ok(h) => (status, Html(h)).into_response(),
            Err(_) => status.into_response(),
        };
        if htmx {
            let h = resp.headers_mut();
            h.insert("hx-retarget", HeaderValue::from_static("#flash"));
            h.insert("hx-reswap", HeaderValue::from_static("innerHTML"));
        }
        if status == StatusCode::SERVICE_UNAVAILABLE {
            resp.headers_mut()
                .insert("retry-after", HeaderValue::from_static("5"));
        }
    }
    let h = resp.headers_mut();
    h.insert("x-frame-options", HeaderValue::from_static("DENY"));
    h.insert(
        "x-content-type-options",
        HeaderValue::from_static("nosniff"),
    );
    h.insert("referrer-policy", HeaderValue::from_static("same-origin"));
    h.entry("cache-control")
        .or_insert(HeaderValue::from_static("no-store"));
    resp
}
