//! Model aliases (docs/clients.md, "Model aliases"), platform admin only:
//! `GET /api/v1/model-aliases`, `POST /api/v1/model-aliases`
//! (`{"alias","model","tenant_id"?}`), `PATCH /api/v1/model-aliases/{id}`
//! (`{"model"}`), `DELETE /api/v1/model-aliases/{id}`. Every change is
//! audited and reaches each replica's catalog through its notification.

use super::extract::{Body, Params};
use super::require_platform_admin;
use crate::auth::Authed;
use crate::{ApiError, ControlPlane};
use axum::extract::State;
use axum::Json;
use domain::alias::ModelAlias;
use serde::Deserialize;
use serde_json::{json, Value};
use std::sync::Arc;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AliasIn {
    pub alias: String,
    pub model: String,
    /// Absent: every tenant's alias.
    #[serde(default)]
    pub tenant_id: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AliasPatch {
    pub model: String,
}

async fn check_model(cp: &ControlPlane, model: &str) -> Result<(), ApiError> {
    if cp.store.model_exists(model).await? {
        Ok(())
    } else {
        Err(ApiError::invalid(
            "model",
            format!("no model {model:?} in the catalog"),
        ))
    }
}

pub async fn list(
    State(cp): State<Arc<ControlPlane>>,
    Authed(actor): Authed,
) -> Result<Json<Value>, ApiError> {
    require_platform_admin(&actor)?;
    Ok(Json(json!({"data": cp.store.model_aliases().await?})))
}

pub async fn create(
    State(cp): State<Arc<ControlPlane>>,
    Authed(actor): Authed,
    Body(a): Body<AliasIn>,
) -> Result<Json<Value>, ApiError> {
    require_platform_admin(&actor)?;
    domain::alias::validate(&a.alias).map_err(|e| ApiError::invalid("alias", e.message()))?;
    check_model(&cp, &a.model).await?;
    if let Some(t) = &a.tenant_id {
        if !cp.store.tenant_exists(actor.scope(), t).await? {
            return Err(ApiError::invalid("tenant_id", format!("no tenant {t:?}")));
        }
    }
    let alias = ModelAlias {
        alias: a.alias,
        model: a.model,
        tenant_id: a.tenant_id,
    };
    let row = cp.store.create_model_alias(&actor.label(), &alias).await?;
    Ok(Json(json!(row)))
}

pub async fn update(
    State(cp): State<Arc<ControlPlane>>,
    Authed(actor): Authed,
    Params(id): Params<i64>,
    Body(p): Body<AliasPatch>,
) -> Result<Json<Value>, ApiError> {
    require_platform_admin(&actor)?;
    check_model(&cp, &p.model).await?;
    let row = cp
        .store
        .set_model_alias_model(&actor.label(), id, &p.model)
        .await?;
    Ok(Json(json!(row)))
}

pub async fn delete(
    State(cp): State<Arc<ControlPlane>>,
    Authed(actor): Authed,
    Params(id): Params<i64>,
) -> Result<Json<Value>, ApiError> {
    require_platform_admin(&actor)?;
    cp.store.delete_model_alias(&actor.label(), id).await?;
    Ok(Json(json!({"deleted": id})))
}
