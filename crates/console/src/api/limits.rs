//! Limits history and rollback: the limit changes of a tenant, an app or a
//! key (from the audit log: who, when, each limit before → after, reason),
//! and restoring an earlier version in one audited action (platform admins,
//! a reason required). The restore writes the scope's limits the way any
//! limits change does: the catalog listener reloads it on the hot path.

use super::extract::{Body, IfMatch, Params};
use super::{require, require_platform_admin, valid_limits};
use crate::auth::Authed;
use crate::{ApiError, ControlPlane};
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use domain::audit::{limits_change, FieldChange};
use domain::roles::Access;
use domain::Limits;
use serde::Deserialize;
use serde_json::{json, Value};
use std::sync::Arc;
use store::{LimitsOwner, Principal};
use uuid::Uuid;

/// One version of a scope's limits: the audit entry that set them.
pub struct LimitVersion {
    /// The audit entry's id (what a restore names).
    pub id: i64,
    /// `2026-12-01T10:00:00.000000Z` (UTC).
    pub at: String,
    pub actor: String,
    pub action: String,
    pub reason: String,
    /// Each limit this entry changed, before → after.
    pub changes: Vec<FieldChange>,
    /// The limits in force after it.
    pub limits: Limits,
    /// The newest version: the limits in force now.
    pub current: bool,
}

/// The tenant's limits, if the actor may read the tenant (404 otherwise).
pub async fn tenant_owner(
    cp: &ControlPlane,
    actor: &Principal,
    tenant: &str,
) -> Result<LimitsOwner, ApiError> {
    require(actor, Access::Read, tenant)?;
    if !cp.store.tenant_exists(actor.scope(), tenant).await? {
        return Err(ApiError::NotFound(format!("tenant {tenant}")));
    }
    Ok(LimitsOwner::Tenant {
        tenant: tenant.to_string(),
    })
}

pub async fn app_owner(
    cp: &ControlPlane,
    actor: &Principal,
    tenant: &str,
    app: &str,
) -> Result<LimitsOwner, ApiError> {
    require(actor, Access::Read, tenant)?;
    if !cp.store.app_exists(actor.scope(), tenant, app).await? {
        return Err(ApiError::NotFound(format!("app {tenant}/{app}")));
    }
    Ok(LimitsOwner::App {
        tenant: tenant.to_string(),
        app: app.to_string(),
    })
}

pub async fn key_owner(
    cp: &ControlPlane,
    actor: &Principal,
    id: Uuid,
) -> Result<LimitsOwner, ApiError> {
    let tenant = cp
        .store
        .key_tenant(actor.scope(), id)
        .await?
        .ok_or_else(|| ApiError::NotFound(format!("key {id}")))?;
    require(actor, Access::Read, &tenant)?;
    Ok(LimitsOwner::Key { tenant, id })
}

/// The owner's limit versions, newest (in force) first.
pub async fn history(
    cp: &ControlPlane,
    actor: &Principal,
    owner: &LimitsOwner,
) -> Result<Vec<LimitVersion>, ApiError> {
    let rows = cp.store.limit_history(actor.scope(), owner).await?;
    let mut out: Vec<LimitVersion> = rows
        .into_iter()
        .filter_map(|r| {
            let ch = limits_change(&r.entry.action, &r.entry.before, &r.entry.after)?;
            Some(LimitVersion {
                id: r.id,
                at: r.entry.at,
                actor: r.entry.actor,
                action: r.entry.action,
                reason: r.entry.reason,
                changes: ch.changes,
                limits: ch.limits,
                current: false,
            })
        })
        .collect();
    if let Some(first) = out.first_mut() {
        first.current = true;
    }
    Ok(out)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RestoreIn {
    /// Why (required; stored as given).
    pub reason: String,
}

/// Puts back the limits of an earlier version of `owner` (platform admins;
/// a reason is required and audited with the change). Returns the limits
/// now in force.
pub async fn restore(
    cp: &ControlPlane,
    actor: &Principal,
    owner: &LimitsOwner,
    version: i64,
    reason: &str,
) -> Result<Limits, ApiError> {
    require_platform_admin(actor)?;
    if reason.trim().is_empty() {
        return Err(ApiError::field("reason", "err.required"));
    }
    super::valid_text("reason", domain::text::REASON, reason)?;
    let version = history(cp, actor, owner)
        .await?
        .into_iter()
        .find(|v| v.id == version)
        .ok_or_else(|| ApiError::NotFound(format!("limits version {version}")))?;
    valid_limits(&version.limits)?;
    super::known_budget_models(cp, &version.limits).await?;
    cp.store
        .restore_limits(&actor.label(), owner, &version.limits, version.id, reason)
        .await?;
    Ok(version.limits)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LimitsIn {
    pub limits: Limits,
    /// The version of the app or key the change is based on (or
    /// `If-Match`): 409 `version_conflict` when it changed since.
    #[serde(default)]
    pub version: Option<i64>,
}

/// `owner`'s row version (404 when it is not in the actor's scope).
pub async fn version_of(
    cp: &ControlPlane,
    actor: &Principal,
    owner: &LimitsOwner,
) -> Result<i64, ApiError> {
    cp.store
        .limits_owner_version(actor.scope(), owner)
        .await?
        .ok_or_else(|| ApiError::NotFound(owner.target()))
}

/// Whether `actor` may set `owner`'s limits here: an app's or a key's, by
/// whoever manages its tenant (the one rule the API and the page use).
pub fn may_set(actor: &Principal, owner: &LimitsOwner) -> Result<(), ApiError> {
    if matches!(owner, LimitsOwner::Tenant { .. }) {
        return Err(ApiError::Forbidden(
            "a tenant's limits are set on the tenant".into(),
        ));
    }
    require(actor, Access::Manage, owner.tenant())
}

/// New limits for an app or a key (whoever manages its tenant: a tenant
/// admin for their own tenant's, a platform admin for any), audited as
/// `<kind>.limits`; they bind on the hot path once the catalog listener has
/// them. A tenant's own limits are the platform's to set (PATCH the tenant),
/// never a tenant admin's: 403 here. `expected`: the row version the change
/// is based on (a change in between is refused, `ApiError::Stale`). Returns
/// the new version.
pub async fn set(
    cp: &ControlPlane,
    actor: &Principal,
    owner: &LimitsOwner,
    limits: &Limits,
    expected: Option<i64>,
) -> Result<i64, ApiError> {
    may_set(actor, owner)?;
    valid_limits(limits)?;
    super::known_budget_models(cp, limits).await?;
    Ok(cp
        .store
        .set_limits(&actor.label(), owner, limits, expected)
        .await?)
}

/// The answer of a limits change: the limits and the new version (also as
/// the `ETag`).
fn set_answer(limits: &Limits, version: i64) -> Response {
    let mut r = Json(json!({"limits": limits, "version": version})).into_response();
    r.headers_mut()
        .insert(axum::http::header::ETAG, crate::error::etag(version));
    r
}

pub async fn app_set(
    State(cp): State<Arc<ControlPlane>>,
    Authed(actor): Authed,
    if_match: IfMatch,
    Params((tenant, app)): Params<(String, String)>,
    Body(l): Body<LimitsIn>,
) -> Result<Response, ApiError> {
    let owner = app_owner(&cp, &actor, &tenant, &app).await?;
    let expected = if_match.with(l.version)?;
    let version = set(&cp, &actor, &owner, &l.limits, expected)
        .await
        .map_err(super::in_limits)?;
    Ok(set_answer(&l.limits, version))
}

pub async fn key_set(
    State(cp): State<Arc<ControlPlane>>,
    Authed(actor): Authed,
    if_match: IfMatch,
    Params(id): Params<Uuid>,
    Body(l): Body<LimitsIn>,
) -> Result<Response, ApiError> {
    let owner = key_owner(&cp, &actor, id).await?;
    let expected = if_match.with(l.version)?;
    let version = set(&cp, &actor, &owner, &l.limits, expected)
        .await
        .map_err(super::in_limits)?;
    Ok(set_answer(&l.limits, version))
}

/// A history answer: the versions and the owner's row version (the
/// `version` field and the `ETag` a change sends back).
async fn history_answer(
    cp: &ControlPlane,
    actor: &Principal,
    owner: &LimitsOwner,
) -> Result<Response, ApiError> {
    let version = version_of(cp, actor, owner).await?;
    let mut v = render(&history(cp, actor, owner).await?);
    v["version"] = json!(version);
    let mut r = Json(v).into_response();
    r.headers_mut()
        .insert(axum::http::header::ETAG, crate::error::etag(version));
    Ok(r)
}

fn render(versions: &[LimitVersion]) -> Value {
    let items: Vec<Value> = versions
        .iter()
        .map(|v| {
            let changes: Vec<Value> = v
                .changes
                .iter()
                .map(|c| json!({"field": c.field, "before": c.before, "after": c.after}))
                .collect();
            json!({"version": v.id, "at": v.at, "actor": v.actor, "action": v.action,
                "reason": v.reason, "changes": changes, "limits": v.limits, "current": v.current})
        })
        .collect();
    json!({"versions": items})
}

pub async fn tenant_history(
    State(cp): State<Arc<ControlPlane>>,
    Authed(actor): Authed,
    Params(tenant): Params<String>,
) -> Result<Response, ApiError> {
    let owner = tenant_owner(&cp, &actor, &tenant).await?;
    history_answer(&cp, &actor, &owner).await
}

pub async fn tenant_restore(
    State(cp): State<Arc<ControlPlane>>,
    Authed(actor): Authed,
    Params((tenant, version)): Params<(String, i64)>,
    Body(r): Body<RestoreIn>,
) -> Result<Json<Value>, ApiError> {
    let owner = tenant_owner(&cp, &actor, &tenant).await?;
    let limits = restore(&cp, &actor, &owner, version, &r.reason).await?;
    Ok(Json(json!({"limits": limits})))
}

pub async fn app_history(
    State(cp): State<Arc<ControlPlane>>,
    Authed(actor): Authed,
    Params((tenant, app)): Params<(String, String)>,
) -> Result<Response, ApiError> {
    let owner = app_owner(&cp, &actor, &tenant, &app).await?;
    history_answer(&cp, &actor, &owner).await
}

pub async fn app_restore(
    State(cp): State<Arc<ControlPlane>>,
    Authed(actor): Authed,
    Params((tenant, app, version)): Params<(String, String, i64)>,
    Body(r): Body<RestoreIn>,
) -> Result<Json<Value>, ApiError> {
    let owner = app_owner(&cp, &actor, &tenant, &app).await?;
    let limits = restore(&cp, &actor, &owner, version, &r.reason).await?;
    Ok(Json(json!({"limits": limits})))
}

pub async fn key_history(
    State(cp): State<Arc<ControlPlane>>,
    Authed(actor): Authed,
    Params(id): Params<Uuid>,
) -> Result<Response, ApiError> {
    let owner = key_owner(&cp, &actor, id).await?;
    history_answer(&cp, &actor, &owner).await
}

pub async fn key_restore(
    State(cp): State<Arc<ControlPlane>>,
    Authed(actor): Authed,
    Params((id, version)): Params<(Uuid, i64)>,
    Body(r): Body<RestoreIn>,
) -> Result<Json<Value>, ApiError> {
    let owner = key_owner(&cp, &actor, id).await?;
    let limits = restore(&cp, &actor, &owner, version, &r.reason).await?;
    Ok(Json(json!({"limits": limits})))
}
