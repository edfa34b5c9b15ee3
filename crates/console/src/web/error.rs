//! How console pages fail. A handler returns `PageError`; it becomes a bare
//! response carrying the failure, and `render_failures` (a layer in front of
//! every console route, which knows the reader's language and whether htmx
//! asked) turns it into a page — or, for htmx, a message in `#flash`.

use crate::error::ApiError;
use crate::i18n::Lang;
use crate::web::{Chrome, Session};
use crate::ControlPlane;
use askama::Template;
use axum::extract::{FromRequestParts, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, Uri};
use axum::middleware::Next;
use axum::response::{Html, IntoResponse, Redirect, Response};
use std::sync::Arc;

#[derive(Debug)]
pub enum PageError {
    /// No valid session: to the login page.
    Login,
    /// A state change without the session's CSRF token.
    Csrf,
    Api(ApiError),
}

impl From<ApiError> for PageError {
    fn from(e: ApiError) -> Self {
        match e {
            ApiError::Unauthenticated => PageError::Login,
            e => PageError::Api(e),
        }
    }
}

impl From<store::StoreError> for PageError {
    fn from(e: store::StoreError) -> Self {
        PageError::Api(e.into())
    }
}

impl From<askama::Error> for PageError {
    fn from(e: askama::Error) -> Self {
        tracing::error!(error = %e, "template failed to render");
        PageError::Api(ApiError::Internal)
    }
}

/// What `render_failures` renders: (status, message key, detail).
#[derive(Clone)]
struct Failure(StatusCode, &'static str, Option<String>);

impl IntoResponse for PageError {
    fn into_response(self) -> Response {
        let f = match self {
            PageError::Login => return login_redirect(),
            PageError::Csrf => Failure(StatusCode::FORBIDDEN, "error.csrf", None),
            PageError::Api(e) => {
                let (status, _) = e.status_code();
                let (key, detail) = match &e {
                    ApiError::Forbidden(m) => ("error.forbidden", Some(m.clone())),
                    ApiError::FourEyes(r) => (super::pages::quota::refusal_key(*r), None),
                    ApiError::NotFound(m) => ("error.not_found", Some(m.clone())),
                    ApiError::Conflict(_) => ("error.conflict", None),
                    ApiError::BadRequest(m) => ("error.bad_request", Some(m.clone())),
                    ApiError::Field { .. }
                    | ApiError::Element { .. }
                    | ApiError::Invalid { .. } => ("error.bad_request", Some(e.to_string())),
                    ApiError::TooManyAttempts(_) => ("error.too_many", None),
                    ApiError::Unavailable => ("error.db_down", None),
                    ApiError::Unauthenticated => return login_redirect(),
                    ApiError::Internal => ("error.internal", None),
                };
                Failure(status, key, detail)
            }
        };
        let mut r = f.0.into_response();
        r.extensions_mut().insert(f);
        r
    }
}

fn login_redirect() -> Response {
    let mut r = Redirect::to("/console/login").into_response();
    // htmx follows HX-Redirect with a full page load.
    r.headers_mut()
        .insert("hx-redirect", HeaderValue::from_static("/console/login"));
    r
}

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
    let (uri, headers) = (req.uri().clone(), req.headers().clone());
    let mut resp = next.run(req).await;
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
