//! The shared pool, borrows and reclaims (DESIGN §7, §11), and a model's
//! fairness settings (cheaper model, pool capacity, guarantees).

use super::require_platform_admin;
use crate::auth::Authed;
use crate::{ApiError, ControlPlane};
use axum::extract::{Path, Query, State};
use axum::Json;
use domain::borrowing::{ppm_share, share_ppm, PoolPolicy};
use domain::roles::{Actor, Role};
use domain::MicroUsd;
use serde::Deserialize;
use serde_json::{json, Value};
use std::sync::Arc;

fn may_read_pool(actor: &Actor) -> Result<(), ApiError> {
    match actor.role {
        Role::PlatformAdmin | Role::Finance | Role::Auditor => Ok(()),
        Role::TenantAdmin => Err(ApiError::Forbidden(
            "the platform pool is visible to platform admins, finance and auditors".into(),
        )),
    }
}

#[derive(Deserialize)]
pub struct Period {
    period: Option<String>,
}

fn period_of(cp: &ControlPlane, p: Option<String>) -> Result<String, ApiError> {
    let period = p.unwrap_or_else(|| cp.clock.month(chrono::Utc::now()));
    if domain::period::parse_month(&period).is_none() {
        return Err(ApiError::BadRequest("period must be YYYY-MM".into()));
    }
    Ok(period)
}

/// The pool, its policy, and this month's lending: what Redis has lent
/// (`lent_tokens`) next to the sum of outstanding borrows in Postgres.
pub async fn show(
    State(cp): State<Arc<ControlPlane>>,
    Authed(actor): Authed,
    Query(q): Query<Period>,
) -> Result<Json<Value>, ApiError> {
    may_read_pool(&actor)?;
    let period = period_of(&cp, q.period)?;
    let p = cp.store.pool_policy().await?;
    let outstanding: Vec<_> = cp
        .store
        .borrowed()
        .await?
        .into_iter()
        .filter(|b| b.period == period)
        .collect();
    let sum: i64 = outstanding.iter().map(|b| b.tokens).sum();
    let lent = cp
        .quota
        .pool_state(&period)
        .await
        .map_err(|e| {
            tracing::warn!(error = %e, "pool: quota store unavailable");
            ApiError::Internal
        })?
        .map(|s| s.0);
    Ok(Json(json!({
        "monthly_tokens": p.monthly_tokens,
        "monthly_cost_usd": p.monthly_cost_micro.map(MicroUsd),
        "max_borrow_share": ppm_share(p.max_borrow_share_ppm),
        "reclaim_below_share": ppm_share(p.reclaim_below_share_ppm),
        "period": period,
        "lent_tokens": lent.unwrap_or(sum),
        "outstanding_tokens": sum,
        "free_tokens": p.monthly_tokens.map(|t| (t - lent.unwrap_or(sum)).max(0)),
        "outstanding": outstanding.iter().map(|b| json!({
            "tenant_id": b.tenant_id, "tokens": b.tokens, "cost_usd": MicroUsd(b.cost_micro)})).collect::<Vec<_>>(),
    })))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PoolIn {
    monthly_tokens: Option<i64>,
    monthly_cost_usd: Option<MicroUsd>,
    #[serde(default = "default_borrow_share")]
    max_borrow_share: f64,
    #[serde(default = "default_reclaim_share")]
    reclaim_below_share: f64,
}

fn default_borrow_share() -> f64 {
    0.05
}

fn default_reclaim_share() -> f64 {
    0.2
}

pub async fn update(
    State(cp): State<Arc<ControlPlane>>,
    Authed(actor): Authed,
    Json(p): Json<PoolIn>,
) -> Result<Json<Value>, ApiError> {
    require_platform_admin(&actor)?;
    let share = |v: f64, f: &str| {
        share_ppm(v).ok_or_else(|| ApiError::BadRequest(format!("{f} must be between 0 and 1")))
    };
    let policy = PoolPolicy {
        monthly_tokens: p.monthly_tokens,
        monthly_cost_micro: p.monthly_cost_usd.map(|c| c.0),
        max_borrow_share_ppm: share(p.max_borrow_share, "max_borrow_share")?,
        reclaim_below_share_ppm: share(p.reclaim_below_share, "reclaim_below_share")?,
    };
    if policy.monthly_tokens.is_some_and(|t| t < 0)
        || policy.monthly_cost_micro.is_some_and(|c| c < 0)
    {
        return Err(ApiError::BadRequest(
            "pool sizes must not be negative".into(),
        ));
    }
    if policy.max_borrow_share_ppm == 0 {
        return Err(ApiError::BadRequest(
            "max_borrow_share must be above 0".into(),
        ));
    }
    cp.store.set_pool_policy(&actor.label(), &policy).await?;
    Ok(Json(json!({
        "monthly_tokens": policy.monthly_tokens,
        "monthly_cost_usd": policy.monthly_cost_micro.map(MicroUsd),
        "max_borrow_share": ppm_share(policy.max_borrow_share_ppm),
        "reclaim_below_share": ppm_share(policy.reclaim_below_share_ppm),
    })))
}

/// Borrows and reclaims of a month. Tenant admins see their own tenant's.
pub async fn borrows(
    State(cp): State<Arc<ControlPlane>>,
    Authed(actor): Authed,
    Query(q): Query<Period>,
) -> Result<Json<Value>, ApiError> {
    let period = period_of(&cp, q.period)?;
    let mine = |t: &str| actor.role != Role::TenantAdmin || actor.tenant.as_deref() == Some(t);
    let borrows: Vec<Value> = cp
        .store
        .borrows(&period)
        .await?
        .into_iter()
        .filter(|b| mine(&b.tenant_id))
        .map(|b| {
            json!({"id": b.id, "tenant_id": b.tenant_id, "period": b.period, "state": b.state,
                "asked_tokens": b.asked_tokens, "tokens": b.tokens, "cost_usd": MicroUsd(b.cost_micro),
                "outstanding_tokens": b.outstanding_tokens,
                "outstanding_cost_usd": MicroUsd(b.outstanding_cost_micro),
                "trigger": b.trigger, "created_at": b.created_at, "settled_at": b.settled_at})
        })
        .collect();
    let reclaims: Vec<Value> = cp
        .store
        .reclaims(&period, false)
        .await?
        .into_iter()
        .filter(|r| mine(&r.tenant_id))
        .map(|r| {
            json!({"id": r.id, "borrow_id": r.borrow_id, "tenant_id": r.tenant_id, "tokens": r.tokens,
                "cost_usd": MicroUsd(r.cost_micro), "state": r.state, "reason": r.reason, "at": r.at})
        })
        .collect();
    Ok(Json(
        json!({"period": period, "data": borrows, "reclaims": reclaims}),
    ))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GuaranteeIn {
    tenant_id: String,
    slots: i32,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FairnessIn {
    degrade_to: Option<String>,
    pool_capacity: Option<i32>,
    #[serde(default)]
    guarantees: Vec<GuaranteeIn>,
}

/// `PUT /api/v1/models/{id}/fairness`: cheaper model, pool capacity and
/// core tenants' guaranteed slots (replacing the previous ones).
pub async fn model_fairness(
    State(cp): State<Arc<ControlPlane>>,
    Authed(actor): Authed,
    Path(id): Path<String>,
    Json(f): Json<FairnessIn>,
) -> Result<Json<Value>, ApiError> {
    require_platform_admin(&actor)?;
    if let Some(d) = &f.degrade_to {
        if d == &id || !cp.store.model_exists(d).await? {
            return Err(ApiError::BadRequest(
                "degrade_to must name another existing model".into(),
            ));
        }
    }
    if f.pool_capacity.is_some_and(|c| c <= 0) {
        return Err(ApiError::BadRequest(
            "pool_capacity must be positive".into(),
        ));
    }
    let mut total = 0i64;
    for g in &f.guarantees {
        let t = cp
            .store
            .tenant(&g.tenant_id)
            .await?
            .ok_or_else(|| ApiError::NotFound(format!("tenant {}", g.tenant_id)))?;
        if t.priority != "core" {
            return Err(ApiError::BadRequest(format!(
                "only core tenants have guarantees; {} is {}",
                t.id, t.priority
            )));
        }
        if g.slots <= 0 {
            return Err(ApiError::BadRequest("slots must be positive".into()));
        }
        total += i64::from(g.slots);
    }
    match f.pool_capacity {
        Some(c) if total > i64::from(c) => {
            return Err(ApiError::BadRequest(
                "guaranteed slots exceed the pool capacity".into(),
            ))
        }
        None if total > 0 => {
            return Err(ApiError::BadRequest(
                "guarantees need a pool_capacity".into(),
            ))
        }
        _ => {}
    }
    let guarantees: Vec<(String, i32)> = f
        .guarantees
        .iter()
        .map(|g| (g.tenant_id.clone(), g.slots))
        .collect();
    cp.store
        .set_model_fairness(
            &actor.label(),
            &id,
            f.degrade_to.as_deref(),
            f.pool_capacity,
            &guarantees,
        )
        .await?;
    Ok(Json(
        json!({"id": id, "degrade_to": f.degrade_to, "pool_capacity": f.pool_capacity,
        "guarantees": guarantees.iter().map(|(t, s)| json!({"tenant_id": t, "slots": s})).collect::<Vec<_>>()}),
    ))
}
