//! How console pages fail. A handler returns `PageError`; it becomes a bare
//! response carrying the failure, and `render_failures` (a layer in front of
//! every console route, which knows the reader's language and whether htmx
//! asked, `failure::render_failures`) turns it into a page — or, for htmx,
//! a message in `#flash`.

use crate::error::ApiError;
use crate::ControlPlane;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Redirect, Response};

#[derive(Debug)]
pub enum PageError {
    /// No valid session: to the login page.
    Login,
    /// A state change without the session's CSRF token.
    Csrf,
    Api(ApiError),
    /// A filter named a tenant the reader cannot see: one that does not
    /// exist, or (to a tenant admin) another tenant's — the same answer,
    /// so the answer never tells whether another tenant exists.
    NoSuchTenant(String),
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
pub(super) struct Failure(
    pub(super) StatusCode,
    pub(super) &'static str,
    pub(super) Option<String>,
);

impl IntoResponse for PageError {
    fn into_response(self) -> Response {
        let f = match self {
            PageError::Login => return login_redirect(),
            PageError::Csrf => Failure(StatusCode::FORBIDDEN, "error.csrf", None),
            PageError::NoSuchTenant(t) => Failure(
                StatusCode::NOT_FOUND,
                "error.no_such_tenant",
                Some(t.chars().take(64).collect()),
            ),
            PageError::Api(e) => {
                let (status, _) = e.status_code();
                let (key, detail) = match &e {
                    ApiError::Forbidden(m) => ("error.forbidden", Some(m.clone())),
                    ApiError::FourEyes(r) => (refusal_key(*r), None),
                    ApiError::NotFound(m) => ("error.not_found", Some(m.clone())),
                    ApiError::Conflict(_) => ("error.conflict", None),
                    ApiError::Stale { .. } => ("error.stale", None),
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

/// Marks an answer "sign in first": `render_failures`, which knows the
/// request, sends the browser to the login page with the way back.
#[derive(Clone, Copy)]
pub(super) struct NeedsLogin;

fn login_redirect() -> Response {
    let mut r = Redirect::to("/console/login").into_response();
    r.extensions_mut().insert(NeedsLogin);
    r
}

/// The login page that comes back to `next` after signing in (when it is a
/// console page worth coming back to).
fn login_to(next: Option<&str>) -> String {
    match next.and_then(safe_next) {
        Some(n) => format!(
            "/console/login?{}",
            serde_urlencoded::to_string([("next", n)]).unwrap_or_default()
        ),
        None => "/console/login".into(),
    }
}

/// The page to return to after signing in: the page htmx acted from, else
/// the address asked for (GET), else the page the form was on.
fn return_to(method: &Method, uri: &Uri, h: &HeaderMap, htmx: bool) -> Option<String> {
    // `http://host:port/console/x?y#z` → `/console/x?y` (the host is the
    // browser's; only the path is kept, and `safe_next` checks it).
    let path_of = |url: &str| -> Option<String> {
        let rest = url.split_once("://")?.1;
        let path = &rest[rest.find('/')?..];
        Some(path.split('#').next().unwrap_or_default().to_string())
    };
    let header = |name| h.get(name).and_then(|v: &HeaderValue| v.to_str().ok());
    if htmx {
        return header("hx-current-url").and_then(path_of);
    }
    if *method == Method::GET {
        return uri.path_and_query().map(|p| p.as_str().to_string());
    }
    header("referer").and_then(path_of)
}

/// "Sign in first": to the login page with the way back. htmx gets
/// `HX-Redirect` (a full page load) on a non-redirect status — an XHR
/// follows a 303 itself, and the login page would be swapped into the card.
/// A session cookie the server no longer honours (expired, signed out
/// elsewhere) is cleared: the login form's POST would otherwise carry it
/// and be refused for want of that session's CSRF token.
pub(super) fn sign_in_first(
    cp: &ControlPlane,
    method: &Method,
    uri: &Uri,
    h: &HeaderMap,
    htmx: bool,
) -> Response {
    let to = login_to(return_to(method, uri, h, htmx).as_deref());
    let mut r = if htmx {
        let mut r = StatusCode::UNAUTHORIZED.into_response();
        r.headers_mut().insert(
            "hx-redirect",
            HeaderValue::from_str(&to).expect("an encoded console path"),
        );
        r
    } else {
        Redirect::to(&to).into_response()
    };
    if crate::cookies::cookie(h, crate::cookies::SESSION_COOKIE).is_some() {
        r.headers_mut().insert(
            axum::http::header::SET_COOKIE,
            crate::cookies::clear_cookie(cp),
        );
    }
    r
}

/// The page a form posting to `path` belongs to: where a GET of a
/// POST-only address goes (a reload of a form's result, the language
/// switch on it, a bookmark), instead of a bare 405.
pub fn page_of(path: &str) -> String {
    let segs: Vec<&str> = path.trim_end_matches('/').split('/').collect();
    let keep = |n: usize| segs[..segs.len().saturating_sub(n)].join("/");
    match segs.as_slice() {
        // …/limits/{version}/restore → …/limits
        [.., "limits", _, "restore"] => keep(2),
        ["", "console", "keys", _, "revoke" | "rotate"] | ["", "console", "keys", _] => {
            "/console/apps".into()
        }
        // /console/tenants/{t}/apps/{app}[/keys] → the tenant's apps
        ["", "console", "tenants", _, "apps", _] => keep(1),
        ["", "console", "tenants", _, "apps", _, "keys"] => keep(2),
        ["", "console", area @ ("models" | "users" | "quota-requests" | "borrowing"), ..] => {
            format!("/console/{area}")
        }
        ["", "console", "logout" | "lang" | "theme"] => "/console".into(),
        // A page that takes its own form (a tenant, a limits history).
        _ => path.to_string(),
    }
}

/// A console address asked with a method it does not serve: a GET of a
/// form's POST address goes to the form's page (303); anything else is 405.
pub async fn method_not_allowed(method: Method, uri: Uri) -> Response {
    if matches!(method, Method::GET | Method::HEAD) {
        let page = page_of(uri.path());
        let page = if page == uri.path() {
            "/console".into()
        } else {
            page
        };
        return Redirect::to(&page).into_response();
    }
    StatusCode::METHOD_NOT_ALLOWED.into_response()
}

/// The translation key of a four-eyes refusal.
pub(crate) fn refusal_key(r: domain::roles::DecisionRefusal) -> &'static str {
    match r {
        domain::roles::DecisionRefusal::NotPlatformAdmin
        | domain::roles::DecisionRefusal::NotFinance => "quota.refuse_not_admin",
        domain::roles::DecisionRefusal::OwnRequest => "quota.refuse_own",
        domain::roles::DecisionRefusal::SameLine => "quota.refuse_same_line",
        domain::roles::DecisionRefusal::AccountSet => "quota.refuse_account_set",
    }
}

/// `next` when it is a console page to come back to: a path of this
/// console (no other site: not `//host`, no backslash, printable ASCII), not
/// the login or logout itself, not the bare dashboard (where a sign-in lands
/// anyway).
pub fn safe_next(next: &str) -> Option<&str> {
    let ok = next
        .bytes()
        .all(|b| (0x21..0x7f).contains(&b) && b != b'\\')
        && (next.starts_with("/console/") || next.starts_with("/console?"))
        && !next.starts_with("/console/login")
        && !next.starts_with("/console/logout")
        && !next.starts_with("/console/sso/");
    ok.then_some(next)
}

#[cfg(test)]
mod tests {
    use super::page_of;

    #[test]
    fn a_forms_post_address_leads_back_to_its_page() {
        for (post, page) in [
            (
                "/console/tenants/t/limits/12/restore",
                "/console/tenants/t/limits",
            ),
            (
                "/console/tenants/t/apps/a/limits/3/restore",
                "/console/tenants/t/apps/a/limits",
            ),
            (
                "/console/keys/0b1c/limits/9/restore",
                "/console/keys/0b1c/limits",
            ),
            ("/console/keys/0b1c/revoke", "/console/apps"),
            ("/console/keys/0b1c/rotate", "/console/apps"),
            ("/console/keys/0b1c", "/console/apps"),
            ("/console/tenants/t/apps/a", "/console/tenants/t/apps"),
            ("/console/tenants/t/apps/a/keys", "/console/tenants/t/apps"),
            ("/console/users/0b1c/role", "/console/users"),
            ("/console/users/0b1c/password", "/console/users"),
            ("/console/models/gpt-4o/prices", "/console/models"),
            ("/console/models/deployments", "/console/models"),
            (
                "/console/quota-requests/0b1c/approve",
                "/console/quota-requests",
            ),
            ("/console/borrowing/pool", "/console/borrowing"),
            ("/console/logout", "/console"),
            ("/console/lang", "/console"),
            ("/console/theme", "/console"),
            ("/console/tenants/t", "/console/tenants/t"),
            ("/console/keys/0b1c/limits", "/console/keys/0b1c/limits"),
        ] {
            assert_eq!(page_of(post), page, "{post}");
        }
    }
}
