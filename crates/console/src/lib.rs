//! The control plane: the JSON admin API (`/api/v1`), sessions and roles,
//! and the HTML console (`/console`, askama + htmx) built on the same
//! service functions (`api::*::{create_tenant, issue, …}`).

mod api;
mod auth;
mod error;
pub mod i18n;
mod web;

use axum::routing::{delete, get, post, put};
use axum::Router;
use domain::period::PlatformClock;
use quota::QuotaEngine;
use std::sync::Arc;
use store::{Sessions, Store};

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
}

pub fn router(cp: Arc<ControlPlane>) -> Router {
    use api::*;
    Router::new()
        .route("/api/v1/auth/login", post(auth::login))
        .route("/api/v1/users", post(users::create))
        .route("/api/v1/users/{id}/role", post(users::set_role))
        .route("/api/v1/models", post(models::create))
        .route(
            "/api/v1/models/{id}",
            get(models::show).patch(models::update),
        )
        .route("/api/v1/tenants", post(tenants::create))
        .route(
            "/api/v1/tenants/{id}",
            get(tenants::show).patch(tenants::update),
        )
        .route("/api/v1/tenants/{id}/apps", post(tenants::create_app))
        .route("/api/v1/tenants/{id}/apps/{app}/keys", post(keys::create))
        .route("/api/v1/tenants/{id}/usage", get(usage::show))
        .route("/api/v1/keys/{id}", delete(keys::revoke))
        .route(
            "/api/v1/quota-requests",
            post(quota_requests::create).get(quota_requests::list),
        )
        .route(
            "/api/v1/quota-requests/{id}/approve",
            post(quota_requests::approve),
        )
        .route(
            "/api/v1/quota-requests/{id}/reject",
            post(quota_requests::reject),
        )
        .route("/api/v1/pool", get(pool::show).put(pool::update))
        .route("/api/v1/borrows", get(pool::borrows))
        .route("/api/v1/models/{id}/fairness", put(pool::model_fairness))
        .route("/api/v1/audit", get(audit::list))
        .route("/api/v1/audit/verify", get(audit::verify))
        .route("/api/v1/bills", get(bills::show))
        .route("/api/v1/bills.csv", get(bills::csv))
        .route("/api/v1/bills.focus.csv", get(bills::focus_csv))
        .route("/api/v1/job-runs", get(bills::job_runs))
        .route("/api/v1/notices", get(bills::notices))
        .route("/api/v1/requests/{request_id}", get(requests::show))
        .route("/api/v1/openapi.json", get(openapi))
        .with_state(cp.clone())
        .merge(web::router(cp))
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
