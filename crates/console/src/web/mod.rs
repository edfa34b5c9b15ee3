//! The HTML console (`/console`): askama templates rendered on the server,
//! htmx for partial updates, no SPA. How to add a page: docs/console.md.
//!
//! Every page handler takes a `Session` (only a signed-in person gets one),
//! calls the same service functions as the JSON API (`crate::api::*`), and
//! renders a template whose struct holds already-formatted values and a
//! `Chrome` (layout: navigation, language, CSRF token).

pub mod error;
mod failure;
mod login;
mod pages;
pub mod session;
mod sso;

use crate::i18n::Lang;
use crate::ControlPlane;
use askama::Template;
use axum::http::header;
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum::Router;
use domain::roles::Role;
pub use error::PageError;
pub use session::Session;
use std::sync::Arc;

/// One entry of the navigation bar: shown to the listed roles.
pub struct NavEntry {
    pub href: &'static str,
    /// Translation key of the label (crate::i18n::TABLE).
    pub label: &'static str,
    pub roles: &'static [Role],
}

const ALL: &[Role] = &[
    Role::PlatformAdmin,
    Role::TenantAdmin,
    Role::Finance,
    Role::Auditor,
];

/// The navigation, in display order. A new page adds its row here.
pub const NAV: &[NavEntry] = &[
    NavEntry {
        href: "/console",
        label: "nav.dashboard",
        roles: ALL,
    },
    NavEntry {
        href: "/console/tenants",
        label: "nav.tenants",
        roles: &[
            Role::PlatformAdmin,
            Role::TenantAdmin,
            Role::Finance,
            Role::Auditor,
        ],
    },
    NavEntry {
        href: "/console/apps",
        label: "nav.apps",
        roles: &[Role::PlatformAdmin, Role::TenantAdmin],
    },
    NavEntry {
        href: "/console/quota-requests",
        label: "nav.quota",
        roles: ALL,
    },
    NavEntry {
        href: "/console/borrowing",
        label: "nav.borrowing",
        roles: &[Role::PlatformAdmin, Role::Finance, Role::Auditor],
    },
    NavEntry {
        href: "/console/models",
        label: "nav.models",
        roles: ALL,
    },
    NavEntry {
        href: "/console/users",
        label: "nav.users",
        roles: &[Role::PlatformAdmin],
    },
    NavEntry {
        href: "/console/audit",
        label: "nav.audit",
        roles: &[Role::PlatformAdmin, Role::Auditor],
    },
    NavEntry {
        href: "/console/requests",
        label: "nav.requests",
        roles: ALL,
    },
    NavEntry {
        href: "/console/bills",
        label: "nav.bills",
        roles: ALL,
    },
    NavEntry {
        href: "/console/analytics",
        label: "nav.analytics",
        roles: ALL,
    },
    NavEntry {
        href: "/console/reconciliation",
        label: "nav.reconciliation",
        roles: &[Role::PlatformAdmin, Role::Finance, Role::Auditor],
    },
    NavEntry {
        href: "/console/jobs",
        label: "nav.jobs",
        roles: &[Role::PlatformAdmin, Role::Finance, Role::Auditor],
    },
    NavEntry {
        href: "/console/notices",
        label: "nav.notices",
        roles: ALL,
    },
];

pub struct NavLink {
    pub href: &'static str,
    pub label: &'static str,
    pub active: bool,
}

pub struct UserBadge {
    pub email: String,
    pub role: &'static str,
    pub tenant: Option<String>,
}

/// What the shared layout (templates/layouts/base.html) needs. Every page
/// template struct has one, named `c`.
pub struct Chrome {
    pub lang: Lang,
    /// The colour scheme (`<html data-theme>`).
    pub theme: crate::theme::Theme,
    /// Translation key of the page title.
    pub title: &'static str,
    pub user: Option<UserBadge>,
    /// The session's CSRF token ("" when signed out).
    pub csrf: String,
    pub nav: Vec<NavLink>,
    /// The current path, where the language switch comes back to.
    pub path: String,
    /// The platform's time zone (`Asia/Shanghai`): the zone every time is
    /// shown in and every date picker is read in.
    pub zone: &'static str,
}

impl Chrome {
    /// The layout for a signed-in page; `active` is the NAV href to mark.
    pub fn new(s: &Session, title: &'static str, active: &str) -> Chrome {
        let nav = NAV
            .iter()
            .filter(|n| n.roles.contains(&s.actor.role))
            .map(|n| NavLink {
                href: n.href,
                label: n.label,
                active: n.href == active,
            })
            .collect();
        Chrome {
            lang: s.lang,
            theme: s.theme,
            title,
            user: Some(UserBadge {
                email: s.actor.email.clone(),
                role: role_key(s.actor.role),
                tenant: s.actor.tenant.clone(),
            }),
            csrf: s.csrf.clone(),
            nav,
            path: s.path.clone(),
            zone: s.clock.tz.name(),
        }
    }

    /// The layout without a session (login, error pages).
    pub fn anonymous(lang: Lang, title: &'static str) -> Chrome {
        Chrome {
            lang,
            theme: crate::theme::Theme::Auto,
            title,
            user: None,
            csrf: String::new(),
            nav: Vec::new(),
            path: "/console/login".into(),
            zone: "UTC",
        }
    }

    pub fn t(&self, key: &str) -> &'static str {
        self.lang.t(key)
    }

    /// The text of `key` with `{zone}` the platform's time zone (a date
    /// picker's label names the zone it is read in).
    pub fn zone_t(&self, key: &str) -> String {
        self.lang.t(key).replace("{zone}", self.zone)
    }

    /// The longest text of a kind (`reason`, `name`, … of
    /// `domain::text`): a form's `maxlength`.
    pub fn max(&self, kind: &str) -> usize {
        domain::text::ALL
            .iter()
            .find(|l| l.kind == kind)
            .map_or(0, |l| l.max_chars)
    }

    /// A stored code (a priority, a model kind, a state) in the reader's
    /// language: the text of `area.code`, else the code as it is.
    pub fn tv(&self, area: &str, code: &str) -> String {
        self.lang.tv(area, code)
    }
}

pub fn role_key(r: Role) -> &'static str {
    match r {
        Role::PlatformAdmin => "role.platform_admin",
        Role::TenantAdmin => "role.tenant_admin",
        Role::Finance => "role.finance",
        Role::Auditor => "role.auditor",
    }
}

/// Renders a template into a 200 HTML answer.
pub fn render(t: impl Template) -> Result<Html<String>, PageError> {
    Ok(Html(t.render()?))
}

/// Renders a template into a 200 HTML answer, or a 422 one when the page
/// refused its filter (`refused`): the page with the message beside the
/// filter and no rows.
pub fn render_refusable(t: impl Template, refused: bool) -> Result<Response, PageError> {
    let html = Html(t.render()?);
    Ok(if refused {
        (axum::http::StatusCode::UNPROCESSABLE_ENTITY, html).into_response()
    } else {
        html.into_response()
    })
}

/// A form's answer to htmx is its fragment; without htmx (a plain form
/// post) the fragment is shown inside the layout.
pub fn fragment_or_page(
    s: &Session,
    title: &'static str,
    active: &str,
    fragment: impl Template,
) -> Result<Html<String>, PageError> {
    let body = fragment.render()?;
    if s.htmx {
        return Ok(Html(body));
    }
    render(Wrapped {
        c: Chrome::new(s, title, active),
        body,
    })
}

#[derive(Template)]
#[template(path = "pages/wrapped.html")]
struct Wrapped {
    c: Chrome,
    body: String,
}

const HTMX_JS: &[u8] = include_bytes!("../../../../static/htmx.min.js");
const CONSOLE_JS: &[u8] = include_bytes!("../../../../static/console.js");
const CONSOLE_CSS: &[u8] = include_bytes!("../../../../static/console.css");

fn asset(content_type: &'static str, bytes: &'static [u8]) -> impl IntoResponse {
    (
        [
            (header::CONTENT_TYPE, content_type),
            (header::CACHE_CONTROL, "public, max-age=3600"),
        ],
        bytes,
    )
}

pub fn router(cp: Arc<ControlPlane>) -> Router {
    use pages::*;
    let console = Router::new()
        .route("/console", get(dashboard::show))
        .route("/console/login", get(login::form).post(login::submit))
        .route("/console/logout", post(login::logout))
        .route("/console/lang", post(login::language))
        .route("/console/theme", post(login::theme))
        .route("/console/sso/start", get(sso::start))
        .route("/console/sso/callback", get(sso::callback))
        .route("/console/tenants", get(tenants::list).post(tenants::create))
        .route("/console/tenants/new", get(tenants::new_form))
        .route(
            "/console/tenants/{id}",
            get(tenants::show).post(tenants::update),
        )
        .route("/console/tenants/{id}/limits", get(limits::tenant))
        .route(
            "/console/tenants/{id}/limits/{version}/restore",
            post(limits::tenant_restore),
        )
        .route(
            "/console/tenants/{id}/apps/{app}/limits",
            get(limits::app).post(limits::app_edit),
        )
        .route(
            "/console/tenants/{id}/apps/{app}/limits/{version}/restore",
            post(limits::app_restore),
        )
        .route(
            "/console/keys/{id}/limits",
            get(limits::key).post(limits::key_edit),
        )
        .route(
            "/console/keys/{id}/limits/{version}/restore",
            post(limits::key_restore),
        )
        .route("/console/apps", get(apps::pick))
        .route(
            "/console/tenants/{id}/apps",
            get(apps::list).post(apps::create),
        )
        .route("/console/tenants/{id}/apps/{app}", post(apps::update))
        .route(
            "/console/tenants/{id}/apps/{app}/keys",
            post(apps::issue_key),
        )
        .route("/console/keys/{id}", post(apps::edit_key))
        .route("/console/keys/{id}/rotate", post(apps::rotate_key))
        .route("/console/keys/{id}/revoke", post(apps::revoke_key))
        .route(
            "/console/quota-requests",
            get(quota::list).post(quota::create),
        )
        .route("/console/quota-requests/{id}/approve", post(quota::approve))
        .route("/console/quota-requests/{id}/reject", post(quota::reject))
        .route("/console/borrowing", get(borrowing::show))
        .route("/console/borrowing/pool", post(borrowing::set_pool))
        .route("/console/models", get(models::list).post(models::create))
        .route("/console/models/deployments", post(models::put_deployment))
        .route("/console/models/{id}/prices", post(models::set_prices))
        .route(
            "/console/models/{id}/price-sheets",
            get(prices::show).post(prices::save),
        )
        .route("/console/models/{id}/enabled", post(models::set_enabled))
        .route(
            "/console/models/{id}/fairness",
            get(fairness::show).post(fairness::save),
        )
        .route(
            "/console/models/{id}/deployments/{name}/enabled",
            post(deployments::set_enabled),
        )
        .route("/console/users", get(users::list).post(users::create))
        .route("/console/users/{id}/role", post(users::set_role))
        .route("/console/users/{id}/disabled", post(users::set_disabled))
        .route("/console/users/{id}/password", post(users::reset_password))
        .route("/console/audit", get(audit::list))
        .route("/console/audit/verify", get(audit::verify))
        .route("/console/audit.csv", get(audit::csv_export))
        .route("/console/requests", get(requests::lookup))
        .route("/console/bills", get(bills::show))
        .route("/console/bills.csv", get(bills::csv_export))
        .route("/console/bills.focus.csv", get(bills::focus_export))
        .route("/console/jobs", get(bills::jobs))
        .route("/console/analytics", get(analytics::show))
        .route("/console/reconciliation", get(reconciliation::show))
        .route(
            "/console/reconciliation/accounts",
            post(reconciliation::put_account),
        )
        .route(
            "/console/reconciliation/adjustments",
            post(reconciliation::propose),
        )
        .route(
            "/console/adjustments/{id}/approve",
            post(reconciliation::approve),
        )
        .route(
            "/console/adjustments/{id}/reject",
            post(reconciliation::reject),
        )
        .route("/console/notices", get(bills::notices))
        .route("/console/{*rest}", get(failure::not_found))
        .method_not_allowed_fallback(error::method_not_allowed)
        .layer(axum::middleware::from_fn_with_state(
            cp.clone(),
            session::require_csrf,
        ))
        .layer(axum::middleware::from_fn_with_state(
            cp.clone(),
            failure::render_failures,
        ))
        .with_state(cp);
    Router::new()
        .route("/", get(|| async { Redirect::to("/console") }))
        .route(
            "/static/htmx.min.js",
            get(|| async { asset("text/javascript; charset=utf-8", HTMX_JS) }),
        )
        .route(
            "/static/console.js",
            get(|| async { asset("text/javascript; charset=utf-8", CONSOLE_JS) }),
        )
        .route(
            "/static/console.css",
            get(|| async { asset("text/css; charset=utf-8", CONSOLE_CSS) }),
        )
        .merge(console)
}
