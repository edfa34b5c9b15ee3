//! The control plane: the JSON admin API (`/api/v1`), sessions and roles,
//! and the HTML console (`/console`, askama + htmx) built on the same
//! service functions (`api::*::{create_tenant, issue, …}`).
// A dependency nothing uses fails CI (clippy -D warnings).
#![cfg_attr(not(test), warn(unused_crate_dependencies))]

mod api;
mod auth;
mod cookies;
mod error;
pub mod i18n;
pub mod sso;
mod theme;
mod web;

use axum::handler::Handler;
use axum::routing::{get, patch, post, put};
use axum::Router;
use domain::period::PlatformClock;
use quota::QuotaEngine;
use std::sync::Arc;
use store::{Sessions, Store};

pub use api::prices::{import_catalog, ImportIn};
pub use auth::LoginLimiter;
pub use error::ApiError;

pub struct ControlPlane {
    pub store: Store,
    pub quota: Arc<QuotaEngine>,
    /// Session tokens (signed with `auth.jwt_secret`, ≥ 32 bytes), and the
    /// key of CSRF tokens derived from it.
    pub sessions: Sessions,
    /// Pepper of virtual keys' keyed hash.
    pub pepper: Vec<u8>,
    /// Encrypts upstream provider keys at rest.
    pub encryption_key: [u8; 32],
    pub clock: PlatformClock,
    pub logins: LoginLimiter,
    /// Bills: the ledger for open months, the archive for closed ones.
    pub books: billing::Books,
    /// The session cookie carries `Secure` (config `auth.cookie_secure`).
    pub cookie_secure: bool,
    /// Email + password sign-in is allowed (config `auth.password_login`;
    /// off when everyone signs in through SSO).
    pub password_login: bool,
    /// The header the trusted proxies append the client's IP to
    /// (`auth.client_ip_header`, e.g. `x-forwarded-for`); unset: the TCP peer.
    pub client_ip_header: Option<String>,
    /// The proxies whose header is believed (`auth.trusted_proxies`).
    pub trusted_proxies: domain::client_ip::TrustedProxies,
    /// Four eyes' memory (`auth.four_eyes_days`): who set a person's
    /// password, role, tenant or enabled state within it is not a second
    /// pair of eyes for them.
    pub four_eyes_days: u32,
    /// The longest a temporary grant may run, in days
    /// (`auth.max_grant_days`): a quota request expiring later is refused.
    pub max_grant_days: u32,
    /// Single sign-on (config `auth.oidc`), when configured.
    pub sso: Option<Arc<sso::Sso>>,
    /// The data plane's deployment health, as this replica sees it.
    pub routes: Arc<dyn domain::routing::HealthView>,
}

/// Declares the admin API's routes once, in the shape of axum's
/// `.route(path, get(a).patch(b))`: `api_router` registers them and
/// `API_ROUTES` lists them, so the OpenAPI test sees every route served.
macro_rules! api_routes {
    ($($path:literal => $m:ident($h:expr) $(.$more:ident($h2:expr))*,)*) => {
        /// Every `(method, path)` the admin API serves (lowercase method, axum
        /// path syntax), from the table the router is built from.
        pub const API_ROUTES: &[(&str, &str)] = &[
            $((stringify!($m), $path), $((stringify!($more), $path),)*)*
        ];

        fn api_router() -> Router<Arc<ControlPlane>> {
            use api::*;
            Router::new()$(.route($path, $m($h)$(.$more($h2))*))*
        }
    };
}

api_routes! {
    "/api/v1/auth/login" => post(api::session::login),
    "/api/v1/auth/logout" => post(api::session::logout),
    "/api/v1/auth/password" => post(api::session::change_password),
    "/api/v1/users" => post(users::create),
    "/api/v1/users/{id}/disable" => post(users::disable),
    "/api/v1/users/{id}/password" => post(users::password),
    "/api/v1/users/{id}/role" => post(users::set_role),
    "/api/v1/models" => post(models::create),
    "/api/v1/models/{id}" => get(models::show).patch(models::update),
    "/api/v1/tenants" => post(tenants::create),
    "/api/v1/tenants/{id}" => get(tenants::show).patch(tenants::update),
    "/api/v1/tenants/{id}/apps" => post(tenants::create_app),
    "/api/v1/tenants/{id}/apps/{app}" => patch(tenants::update_app),
    "/api/v1/tenants/{id}/limits/versions" => get(limits::tenant_history),
    "/api/v1/tenants/{id}/limits/versions/{version}/restore" => post(limits::tenant_restore),
    "/api/v1/tenants/{id}/apps/{app}/limits" => put(limits::app_set),
    "/api/v1/tenants/{id}/apps/{app}/limits/versions" => get(limits::app_history),
    "/api/v1/tenants/{id}/apps/{app}/limits/versions/{version}/restore" => post(limits::app_restore),
    "/api/v1/tenants/{id}/apps/{app}/keys" => post(keys::create),
    "/api/v1/tenants/{id}/usage" => get(usage::show),
    "/api/v1/keys/{id}" => get(keys::show).patch(keys::update).delete(keys::revoke),
    "/api/v1/keys/{id}/rotate" => post(keys::rotate),
    "/api/v1/keys/{id}/limits" => put(limits::key_set),
    "/api/v1/keys/{id}/limits/versions" => get(limits::key_history),
    "/api/v1/keys/{id}/limits/versions/{version}/restore" => post(limits::key_restore),
    "/api/v1/quota-requests" => post(quota_requests::create).get(quota_requests::list),
    "/api/v1/quota-requests/{id}/approve" => post(quota_requests::approve),
    "/api/v1/quota-requests/{id}/reject" => post(quota_requests::reject),
    "/api/v1/pool" => get(pool::show).put(pool::update),
    "/api/v1/borrows" => get(pool::borrows),
    "/api/v1/models/{id}/fairness" => put(pool::model_fairness),
    "/api/v1/models/{id}/deployments" => get(deployments::list),
    "/api/v1/models/{id}/deployments/{name}" => put(deployments::put).patch(deployments::set_enabled),
    "/api/v1/models/{id}/fallbacks" => put(deployments::set_fallbacks),
    "/api/v1/models/{id}/prices" => get(prices::list).post(prices::add),
    "/api/v1/model-aliases" => get(model_aliases::list).post(model_aliases::create),
    "/api/v1/model-aliases/{id}" => patch(model_aliases::update).delete(model_aliases::delete),
    "/api/v1/prices/import" => post(prices::import.layer(axum::extract::DefaultBodyLimit::max(prices::IMPORT_BODY_LIMIT))),
    "/api/v1/audit" => get(audit::list),
    "/api/v1/audit/verify" => get(audit::verify),
    "/api/v1/bills" => get(bills::show),
    "/api/v1/bills.csv" => get(bills::csv),
    "/api/v1/bills.focus.csv" => get(bills::focus_csv),
    "/api/v1/job-runs" => get(bills::job_runs),
    "/api/v1/provider-accounts" => get(reconciliation::list_accounts),
    "/api/v1/provider-accounts/{id}" => put(reconciliation::put_account),
    "/api/v1/reconciliation" => get(reconciliation::show),
    "/api/v1/adjustments" => post(reconciliation::propose),
    "/api/v1/adjustments/{id}/approve" => post(reconciliation::approve),
    "/api/v1/adjustments/{id}/reject" => post(reconciliation::reject),
    "/api/v1/notices" => get(bills::notices),
    "/api/v1/requests" => get(request_log::list),
    "/api/v1/requests/{request_id}" => get(requests::show),
    "/api/v1/openapi.json" => get(openapi),
}

pub fn router(cp: Arc<ControlPlane>) -> Router {
    api_router().with_state(cp.clone()).merge(web::router(cp))
}

/// The API's OpenAPI document (kept beside the code; a test checks that it
/// names every route the router serves).
pub const OPENAPI: &str = include_str!("../openapi.json");

async fn openapi() -> impl axum::response::IntoResponse {
    (
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        OPENAPI,
    )
}
