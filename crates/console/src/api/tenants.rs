use super::extract::{Body, IfMatch, Params};
use super::{first, known_models, require, require_platform_admin, valid_id, valid_limits};
use crate::auth::Authed;
use crate::{ApiError, ControlPlane};
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use domain::roles::{Access, Actor};
use domain::Limits;
use serde::Deserialize;
use serde_json::{json, Value};
use std::sync::Arc;
use store::{AppRow, Principal, TenantRow};

#[derive(Deserialize, Clone)]
#[serde(deny_unknown_fields)]
pub struct TenantIn {
    pub id: String,
    pub name: String,
    #[serde(default)]
    pub cost_center: String,
    #[serde(default = "standard")]
    pub priority: String,
    #[serde(default)]
    pub limits: Limits,
    #[serde(default)]
    pub may_borrow: bool,
    #[serde(default)]
    pub borrow_cap_tokens: i64,
    pub allowed_models: Option<Vec<String>>,
    #[serde(default)]
    pub clamp_max_tokens: bool,
    /// Requests that may wait in the fair queue at once (per replica);
    /// absent or null: the platform default.
    #[serde(default)]
    pub max_queued_requests: Option<i64>,
    /// Streamed answers that may be open at once (per replica); absent or
    /// null: the platform default.
    #[serde(default)]
    pub max_open_streams: Option<i64>,
}

/// The largest per-tenant cap (the schema's bound).
const MAX_CAP: i64 = 1_000_000;

/// A per-tenant cap: unset, or 1 ..= 1,000,000.
fn cap(field: &'static str, v: Option<i64>) -> Result<Option<i32>, ApiError> {
    match v {
        None => Ok(None),
        Some(n) if n < 1 => Err(ApiError::field(field, "err.positive")),
        Some(n) if n > MAX_CAP => Err(ApiError::field(field, "err.too_large")),
        Some(n) => Ok(Some(n as i32)),
    }
}

fn standard() -> String {
    "standard".into()
}

fn check(t: &TenantRow) -> Result<(), ApiError> {
    first(problems(t))
}

/// Every rule a tenant's fields break, all at once in the form's order
/// (the console shows each beside its field; the API answers the first).
fn problems(t: &TenantRow) -> Vec<ApiError> {
    let mut out = Vec::new();
    if t.name.trim().is_empty() {
        out.push(ApiError::field("name", "err.required"));
    } else {
        out.extend(super::valid_text("name", domain::text::NAME, &t.name).err());
    }
    out.extend(super::valid_text("cost_center", domain::text::COST_CENTER, &t.cost_center).err());
    if !["core", "standard", "batch"].contains(&t.priority.as_str()) {
        out.push(ApiError::field("priority", "err.priority"));
    }
    out.extend(super::limits_problems(&t.limits));
    if t.borrow_cap_tokens < 0 {
        out.push(ApiError::field("borrow_cap_tokens", "err.negative"));
    }
    out
}

/// Every rule a new tenant breaks: its id, its fields, its caps and its
/// allowed models (one place for the API and the console's form; `Err`:
/// the store could not be asked). Whether the id is taken is the store's
/// to say (409).
pub async fn new_tenant_problems(
    cp: &ControlPlane,
    t: &TenantIn,
) -> Result<Vec<ApiError>, ApiError> {
    let mut out: Vec<ApiError> = valid_id("id", &t.id).err().into_iter().collect();
    let row = row_of(t.clone());
    out.extend(problems(&row));
    out.extend(cap("max_queued_requests", t.max_queued_requests).err());
    out.extend(cap("max_open_streams", t.max_open_streams).err());
    out.extend(super::unknown_models(cp, t.allowed_models.as_deref()).await?);
    if let Err(e) = super::known_budget_models(cp, &t.limits).await {
        out.push(e);
    }
    Ok(out)
}

/// The row of a new tenant (a cap out of range left unset: refused by
/// `new_tenant_problems` first).
fn row_of(t: TenantIn) -> TenantRow {
    TenantRow {
        max_queued_requests: cap("max_queued_requests", t.max_queued_requests)
            .ok()
            .flatten(),
        max_open_streams: cap("max_open_streams", t.max_open_streams).ok().flatten(),
        id: t.id,
        name: t.name,
        cost_center: t.cost_center,
        priority: t.priority,
        limits: t.limits,
        may_borrow: t.may_borrow,
        borrow_cap_tokens: t.borrow_cap_tokens,
        allowed_models: t.allowed_models,
        clamp_max_tokens: t.clamp_max_tokens,
    }
}

pub fn render(t: &TenantRow) -> Value {
    json!({"id": t.id, "name": t.name, "cost_center": t.cost_center, "priority": t.priority,
        "limits": t.limits, "may_borrow": t.may_borrow, "borrow_cap_tokens": t.borrow_cap_tokens,
        "allowed_models": t.allowed_models, "clamp_max_tokens": t.clamp_max_tokens,
        "max_queued_requests": t.max_queued_requests, "max_open_streams": t.max_open_streams})
}

/// Creates a tenant (platform admins only).
pub async fn create_tenant(
    cp: &ControlPlane,
    actor: &Actor,
    t: TenantIn,
) -> Result<TenantRow, ApiError> {
    require_platform_admin(actor)?;
    first(new_tenant_problems(cp, &t).await?)?;
    let row = row_of(t);
    cp.store.create_tenant(&actor.label(), &row).await?;
    Ok(row)
}

pub async fn create(
    State(cp): State<Arc<ControlPlane>>,
    Authed(actor): Authed,
    Body(t): Body<TenantIn>,
) -> Result<Response, ApiError> {
    let row = create_tenant(&cp, &actor, t)
        .await
        .map_err(super::in_limits)?;
    Ok(versioned(render(&row), 1))
}

/// A tenant's JSON with its row version, as the `version` field and the
/// `ETag` a change sends back in `If-Match`.
fn versioned(mut v: Value, version: i64) -> Response {
    v["version"] = json!(version);
    let mut r = Json(v).into_response();
    r.headers_mut()
        .insert(axum::http::header::ETAG, crate::error::etag(version));
    r
}

/// A tenant in the actor's scope and its row version.
pub async fn tenant_versioned(
    cp: &ControlPlane,
    actor: &Principal,
    id: &str,
) -> Result<(TenantRow, i64), ApiError> {
    // The version first: a change landing between the two reads makes the
    // pair look stale (refused, read again), never newer than it is.
    let version = cp
        .store
        .tenant_version(actor.scope(), id)
        .await?
        .ok_or_else(|| ApiError::NotFound(format!("tenant {id}")))?;
    Ok((tenant_for(cp, actor, id).await?, version))
}

/// A tenant in the actor's scope (404 for another tenant's admin).
pub async fn tenant_for(
    cp: &ControlPlane,
    actor: &Principal,
    id: &str,
) -> Result<TenantRow, ApiError> {
    cp.store
        .tenant(actor.scope(), id)
        .await?
        .ok_or_else(|| ApiError::NotFound(format!("tenant {id}")))
}

pub async fn show(
    State(cp): State<Arc<ControlPlane>>,
    Authed(actor): Authed,
    Params(id): Params<String>,
) -> Result<Response, ApiError> {
    let (t, version) = tenant_versioned(&cp, &actor, &id).await?;
    Ok(versioned(render(&t), version))
}

/// Tenants the actor may read: a tenant admin's own, everyone else all.
pub async fn visible_tenants(
    cp: &ControlPlane,
    actor: &Principal,
) -> Result<Vec<TenantRow>, ApiError> {
    Ok(cp.store.tenants(actor.scope()).await?)
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct TenantPatch {
    pub name: Option<String>,
    pub cost_center: Option<String>,
    pub priority: Option<String>,
    pub limits: Option<Limits>,
    pub may_borrow: Option<bool>,
    pub borrow_cap_tokens: Option<i64>,
    pub allowed_models: Option<Option<Vec<String>>>,
    pub clamp_max_tokens: Option<bool>,
    /// `null` goes back to the platform default.
    #[serde(default, deserialize_with = "present")]
    pub max_queued_requests: Option<Option<i64>>,
    #[serde(default, deserialize_with = "present")]
    pub max_open_streams: Option<Option<i64>>,
    /// The version the change is based on (or `If-Match`): refused with
    /// 409 `version_conflict` when the tenant changed since.
    pub version: Option<i64>,
}

/// Changes a tenant (platform admins only; the before/after is audited).
/// `p.version`, when given, is the version the change is based on;
/// without it the change applies to the tenant as read here. Either way a
/// change in between is refused (`ApiError::Stale`), never undone.
/// Returns the tenant and its new version.
pub async fn update_tenant(
    cp: &ControlPlane,
    actor: &Principal,
    id: &str,
    p: TenantPatch,
) -> Result<(TenantRow, i64), ApiError> {
    let (mut t, read) = tenant_versioned(cp, actor, id).await?;
    require_platform_admin(actor)?;
    let before = render(&t);
    if let Some(v) = p.name {
        t.name = v;
    }
    if let Some(v) = p.cost_center {
        t.cost_center = v;
    }
    if let Some(v) = p.priority {
        t.priority = v;
    }
    if let Some(v) = p.limits {
        t.limits = v;
    }
    if let Some(v) = p.may_borrow {
        t.may_borrow = v;
    }
    if let Some(v) = p.borrow_cap_tokens {
        t.borrow_cap_tokens = v;
    }
    if let Some(v) = p.allowed_models {
        t.allowed_models = v;
    }
    if let Some(v) = p.clamp_max_tokens {
        t.clamp_max_tokens = v;
    }
    if let Some(v) = p.max_queued_requests {
        t.max_queued_requests = cap("max_queued_requests", v)?;
    }
    if let Some(v) = p.max_open_streams {
        t.max_open_streams = cap("max_open_streams", v)?;
    }
    check(&t)?;
    known_models(cp, t.allowed_models.as_deref()).await?;
    super::known_budget_models(cp, &t.limits).await?;
    let expected = p.version.unwrap_or(read);
    let version = cp
        .store
        .update_tenant(&actor.label(), &t, before, Some(expected))
        .await?;
    Ok((t, version))
}

/// `PATCH /api/v1/tenants/{id}`: `If-Match: "<version>"` or a `version`
/// field makes it conditional (docs/console.md, "Versions").
pub async fn update(
    State(cp): State<Arc<ControlPlane>>,
    Authed(actor): Authed,
    if_match: IfMatch,
    Params(id): Params<String>,
    Body(mut p): Body<TenantPatch>,
) -> Result<Response, ApiError> {
    p.version = if_match.with(p.version)?;
    let (t, version) = update_tenant(&cp, &actor, &id, p)
        .await
        .map_err(super::in_limits)?;
    Ok(versioned(render(&t), version))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AppIn {
    pub id: String,
    pub name: String,
    #[serde(default)]
    pub limits: Limits,
    pub allowed_models: Option<Vec<String>>,
    /// Default tags and required tag keys of the app's requests.
    #[serde(default)]
    pub attribution: domain::attribution::Policy,
}

/// A present field, even `null`: `Some(None)` clears, absent leaves as is.
pub(crate) fn present<'de, D, T>(d: D) -> Result<Option<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    T::deserialize(d).map(Some)
}

/// A change to an app: only the fields given change (its limits change
/// through `PUT …/limits`). `allowed_models: null` lifts the restriction.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct AppPatch {
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default, deserialize_with = "present")]
    pub allowed_models: Option<Option<Vec<String>>>,
    #[serde(default)]
    pub attribution: Option<domain::attribution::Policy>,
}

/// Changes an app of a tenant the actor manages (audited `app.update`);
/// the store merges the change under the row's lock.
pub async fn update_app_in(
    cp: &ControlPlane,
    actor: &Principal,
    tenant: &str,
    app: &str,
    p: AppPatch,
) -> Result<AppRow, ApiError> {
    require(actor, Access::Manage, tenant)?;
    if !cp.store.app_exists(actor.scope(), tenant, app).await? {
        return Err(ApiError::NotFound(format!("app {tenant}/{app}")));
    }
    if let Some(n) = &p.name {
        valid_app_name(n)?;
    }
    if let Some(m) = &p.allowed_models {
        known_models(cp, m.as_deref()).await?;
    }
    if let Some(pol) = &p.attribution {
        super::valid_attribution(pol)?;
    }
    let change = store::AppChange {
        name: p.name,
        allowed_models: p.allowed_models,
        attribution: p.attribution,
    };
    Ok(cp
        .store
        .update_app(&actor.label(), tenant, app, &change)
        .await?)
}

/// An app's name is not blank.
fn valid_app_name(n: &str) -> Result<(), ApiError> {
    if n.trim().is_empty() {
        return Err(ApiError::field("name", "err.required"));
    }
    super::valid_text("name", domain::text::NAME, n)
}

/// `PATCH /api/v1/tenants/{id}/apps/{app}`.
pub async fn update_app(
    State(cp): State<Arc<ControlPlane>>,
    Authed(actor): Authed,
    Params((tenant, app)): Params<(String, String)>,
    Body(p): Body<AppPatch>,
) -> Result<Json<Value>, ApiError> {
    let a = update_app_in(&cp, &actor, &tenant, &app, p)
        .await
        .map_err(super::in_limits)?;
    Ok(Json(app_json(&a)))
}

/// Creates an app in a tenant the actor manages.
pub async fn create_app_in(
    cp: &ControlPlane,
    actor: &Principal,
    tenant: &str,
    a: AppIn,
) -> Result<AppRow, ApiError> {
    require(actor, Access::Manage, tenant)?;
    valid_id("id", &a.id)?;
    valid_app_name(&a.name)?;
    valid_limits(&a.limits)?;
    super::known_budget_models(cp, &a.limits).await?;
    super::valid_attribution(&a.attribution)?;
    known_models(cp, a.allowed_models.as_deref()).await?;
    if !cp.store.tenant_exists(actor.scope(), tenant).await? {
        return Err(ApiError::NotFound(format!("tenant {tenant}")));
    }
    let row = AppRow {
        tenant_id: tenant.to_string(),
        id: a.id,
        name: a.name,
        limits: a.limits,
        allowed_models: a.allowed_models,
        attribution: a.attribution,
    };
    cp.store.create_app(&actor.label(), &row).await?;
    Ok(row)
}

pub async fn create_app(
    State(cp): State<Arc<ControlPlane>>,
    Authed(actor): Authed,
    Params(tenant): Params<String>,
    Body(a): Body<AppIn>,
) -> Result<Json<Value>, ApiError> {
    let row = create_app_in(&cp, &actor, &tenant, a)
        .await
        .map_err(super::in_limits)?;
    Ok(Json(app_json(&row)))
}

fn app_json(row: &AppRow) -> Value {
    json!({"tenant_id": row.tenant_id, "id": row.id, "name": row.name, "limits": row.limits,
        "allowed_models": row.allowed_models, "attribution": row.attribution})
}
