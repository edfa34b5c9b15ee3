use super::{require, require_platform_admin, valid_id};
use crate::auth::Authed;
use crate::{ApiError, ControlPlane};
use axum::extract::{Path, State};
use axum::Json;
use domain::roles::Access;
use domain::Limits;
use serde::Deserialize;
use serde_json::{json, Value};
use std::sync::Arc;
use store::{AppRow, TenantRow};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TenantIn {
    id: String,
    name: String,
    #[serde(default)]
    cost_center: String,
    #[serde(default = "standard")]
    priority: String,
    #[serde(default)]
    limits: Limits,
    #[serde(default)]
    may_borrow: bool,
    #[serde(default)]
    borrow_cap_tokens: i64,
    allowed_models: Option<Vec<String>>,
    #[serde(default)]
    clamp_max_tokens: bool,
}

fn standard() -> String {
    "standard".into()
}

fn check(priority: &str, limits: &Limits, cap: i64) -> Result<(), ApiError> {
    if !["core", "standard", "batch"].contains(&priority) {
        return Err(ApiError::BadRequest(
            "priority must be core, standard or batch".into(),
        ));
    }
    limits
        .validate()
        .map_err(|e| ApiError::BadRequest(e.to_string()))?;
    if cap < 0 {
        return Err(ApiError::BadRequest(
            "borrow_cap_tokens must not be negative".into(),
        ));
    }
    Ok(())
}

pub fn render(t: &TenantRow) -> Value {
    json!({"id": t.id, "name": t.name, "cost_center": t.cost_center, "priority": t.priority,
        "limits": t.limits, "may_borrow": t.may_borrow, "borrow_cap_tokens": t.borrow_cap_tokens,
        "allowed_models": t.allowed_models, "clamp_max_tokens": t.clamp_max_tokens})
}

pub async fn create(
    State(cp): State<Arc<ControlPlane>>,
    Authed(actor): Authed,
    Json(t): Json<TenantIn>,
) -> Result<Json<Value>, ApiError> {
    require_platform_admin(&actor)?;
    valid_id("id", &t.id)?;
    check(&t.priority, &t.limits, t.borrow_cap_tokens)?;
    let row = TenantRow {
        id: t.id,
        name: t.name,
        cost_center: t.cost_center,
        priority: t.priority,
        limits: t.limits,
        may_borrow: t.may_borrow,
        borrow_cap_tokens: t.borrow_cap_tokens,
        allowed_models: t.allowed_models,
        clamp_max_tokens: t.clamp_max_tokens,
    };
    cp.store.create_tenant(&actor.label(), &row).await?;
    Ok(Json(render(&row)))
}

pub async fn show(
    State(cp): State<Arc<ControlPlane>>,
    Authed(actor): Authed,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    require(&actor, Access::Read, &id)?;
    let t = cp
        .store
        .tenant(&id)
        .await?
        .ok_or_else(|| ApiError::NotFound(format!("tenant {id}")))?;
    Ok(Json(render(&t)))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TenantPatch {
    name: Option<String>,
    cost_center: Option<String>,
    priority: Option<String>,
    limits: Option<Limits>,
    may_borrow: Option<bool>,
    borrow_cap_tokens: Option<i64>,
    allowed_models: Option<Option<Vec<String>>>,
    clamp_max_tokens: Option<bool>,
}

pub async fn update(
    State(cp): State<Arc<ControlPlane>>,
    Authed(actor): Authed,
    Path(id): Path<String>,
    Json(p): Json<TenantPatch>,
) -> Result<Json<Value>, ApiError> {
    require(&actor, Access::Read, &id)?;
    require_platform_admin(&actor)?;
    let mut t = cp
        .store
        .tenant(&id)
        .await?
        .ok_or_else(|| ApiError::NotFound(format!("tenant {id}")))?;
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
    check(&t.priority, &t.limits, t.borrow_cap_tokens)?;
    cp.store.update_tenant(&actor.label(), &t, before).await?;
    Ok(Json(render(&t)))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AppIn {
    id: String,
    name: String,
    #[serde(default)]
    limits: Limits,
    allowed_models: Option<Vec<String>>,
}

pub async fn create_app(
    State(cp): State<Arc<ControlPlane>>,
    Authed(actor): Authed,
    Path(tenant): Path<String>,
    Json(a): Json<AppIn>,
) -> Result<Json<Value>, ApiError> {
    require(&actor, Access::Manage, &tenant)?;
    valid_id("id", &a.id)?;
    a.limits
        .validate()
        .map_err(|e| ApiError::BadRequest(e.to_string()))?;
    if !cp.store.tenant_exists(&tenant).await? {
        return Err(ApiError::NotFound(format!("tenant {tenant}")));
    }
    let row = AppRow {
        tenant_id: tenant,
        id: a.id,
        name: a.name,
        limits: a.limits,
        allowed_models: a.allowed_models,
    };
    cp.store.create_app(&actor.label(), &row).await?;
    Ok(Json(
        json!({"tenant_id": row.tenant_id, "id": row.id, "name": row.name, "limits": row.limits,
        "allowed_models": row.allowed_models}),
    ))
}
