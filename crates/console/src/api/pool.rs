//! The shared pool, borrows and reclaims (docs/design.md §7, §11), and a model's
//! fairness settings (cheaper model, pool capacity, guarantees).

use super::extract::{Body, Params};
use super::require_platform_admin;
use crate::auth::Authed;
use crate::{ApiError, ControlPlane};
use axum::extract::{Query, State};
use axum::Json;
use domain::borrowing::{ppm_share, share_ppm, PoolPolicy};
use domain::roles::{Actor, Role};
use domain::MicroUsd;
use serde::Deserialize;
use serde_json::{json, Value};
use std::sync::Arc;
use store::{BorrowRow, Principal, ReclaimRow};

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

/// The pool, its policy and a month's lending.
pub struct PoolView {
    pub policy: PoolPolicy,
    pub period: String,
    /// What the pool has lent (Redis; Postgres' sum when Redis has no month).
    pub lent_tokens: i64,
    /// Σ outstanding of active borrows (Postgres).
    pub outstanding_tokens: i64,
    /// (tenant, outstanding tokens, outstanding micro-USD)
    pub outstanding: Vec<(String, i64, i64)>,
}

/// The pool as the API and the console show it (platform admins, finance,
/// auditors).
pub async fn pool_view(
    cp: &ControlPlane,
    actor: &Principal,
    period: Option<String>,
) -> Result<PoolView, ApiError> {
    may_read_pool(actor)?;
    let period = period_of(cp, period)?;
    let policy = cp.store.pool_policy().await?;
    let outstanding: Vec<(String, i64, i64)> = cp
        .store
        .borrowed(actor.scope())
        .await?
        .into_iter()
        .filter(|b| b.period == period)
        .map(|b| (b.tenant_id, b.tokens, b.cost_micro))
        .collect();
    let sum: i64 = outstanding.iter().map(|b| b.1).sum();
    let lent = cp
        .quota
        .pool_state(&period)
        .await
        .map_err(|e| {
            tracing::warn!(error = %e, "pool: quota store unavailable");
            ApiError::Internal
        })?
        .map_or(sum, |s| s.0);
    Ok(PoolView {
        policy,
        period,
        lent_tokens: lent,
        outstanding_tokens: sum,
        outstanding,
    })
}

/// The pool, its policy, and this month's lending: what Redis has lent
/// (`lent_tokens`) next to the sum of outstanding borrows in Postgres.
pub async fn show(
    State(cp): State<Arc<ControlPlane>>,
    Authed(actor): Authed,
    Query(q): Query<Period>,
) -> Result<Json<Value>, ApiError> {
    let v = pool_view(&cp, &actor, q.period).await?;
    let p = &v.policy;
    Ok(Json(json!({
        "monthly_tokens": p.monthly_tokens,
        "monthly_cost_usd": p.monthly_cost_micro.map(MicroUsd),
        "max_borrow_share": ppm_share(p.max_borrow_share_ppm),
        "reclaim_below_share": ppm_share(p.reclaim_below_share_ppm),
        "period": v.period,
        "lent_tokens": v.lent_tokens,
        "outstanding_tokens": v.outstanding_tokens,
        "free_tokens": p.monthly_tokens.map(|t| (t - v.lent_tokens).max(0)),
        "outstanding": v.outstanding.iter().map(|(t, tok, c)| json!({
            "tenant_id": t, "tokens": tok, "cost_usd": MicroUsd(*c)})).collect::<Vec<_>>(),
    })))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PoolIn {
    pub monthly_tokens: Option<i64>,
    pub monthly_cost_usd: Option<MicroUsd>,
    #[serde(default = "default_borrow_share")]
    pub max_borrow_share: f64,
    #[serde(default = "default_reclaim_share")]
    pub reclaim_below_share: f64,
}

fn default_borrow_share() -> f64 {
    0.05
}

fn default_reclaim_share() -> f64 {
    0.2
}

/// What is wrong with a pool, every field at once (sizes are never
/// negative, the shares are between 0 and 1, a borrow may take more than
/// nothing): the API answers the first, the console shows them all.
pub fn pool_problems(p: &PoolIn) -> Vec<ApiError> {
    let mut out = Vec::new();
    if p.monthly_tokens.is_some_and(|t| t < 0) {
        out.push(ApiError::field("monthly_tokens", "err.negative"));
    }
    if p.monthly_cost_usd.is_some_and(|c| c.0 < 0) {
        out.push(ApiError::field("monthly_cost_usd", "err.negative"));
    }
    match share_ppm(p.max_borrow_share) {
        None => out.push(ApiError::field("max_borrow_share", "err.share")),
        Some(0) => out.push(ApiError::field("max_borrow_share", "err.share_positive")),
        Some(_) => {}
    }
    if share_ppm(p.reclaim_below_share).is_none() {
        out.push(ApiError::field("reclaim_below_share", "err.share"));
    }
    out
}

/// Sets the shared pool (platform admins, audited as `pool.update`); a
/// refusal names its field ([`pool_problems`]).
pub async fn set_pool(
    cp: &ControlPlane,
    actor: &Principal,
    p: PoolIn,
) -> Result<PoolPolicy, ApiError> {
    require_platform_admin(actor)?;
    if let Some(e) = pool_problems(&p).into_iter().next() {
        return Err(e);
    }
    let policy = PoolPolicy {
        monthly_tokens: p.monthly_tokens,
        monthly_cost_micro: p.monthly_cost_usd.map(|c| c.0),
        max_borrow_share_ppm: share_ppm(p.max_borrow_share).unwrap_or_default(),
        reclaim_below_share_ppm: share_ppm(p.reclaim_below_share).unwrap_or_default(),
    };
    cp.store.set_pool_policy(&actor.label(), &policy).await?;
    Ok(policy)
}

pub async fn update(
    State(cp): State<Arc<ControlPlane>>,
    Authed(actor): Authed,
    Body(p): Body<PoolIn>,
) -> Result<Json<Value>, ApiError> {
    let policy = set_pool(&cp, &actor, p).await?;
    Ok(Json(json!({
        "monthly_tokens": policy.monthly_tokens,
        "monthly_cost_usd": policy.monthly_cost_micro.map(MicroUsd),
        "max_borrow_share": ppm_share(policy.max_borrow_share_ppm),
        "reclaim_below_share": ppm_share(policy.reclaim_below_share_ppm),
    })))
}

/// Borrows and reclaims of a month in `actor`'s scope (tenant admins:
/// their own tenant's).
pub async fn history(
    cp: &ControlPlane,
    actor: &Principal,
    period: Option<String>,
) -> Result<(String, Vec<BorrowRow>, Vec<ReclaimRow>), ApiError> {
    let period = period_of(cp, period)?;
    let borrows = cp.store.borrows(actor.scope(), &period).await?;
    let reclaims = cp.store.reclaims(actor.scope(), &period, false).await?;
    Ok((period, borrows, reclaims))
}

/// Borrows and reclaims of a month. Tenant admins see their own tenant's.
pub async fn borrows(
    State(cp): State<Arc<ControlPlane>>,
    Authed(actor): Authed,
    Query(q): Query<Period>,
) -> Result<Json<Value>, ApiError> {
    let (period, borrows, reclaims) = history(&cp, &actor, q.period).await?;
    let borrows: Vec<Value> = borrows
        .into_iter()
        .map(|b| {
            json!({"id": b.id, "tenant_id": b.tenant_id, "period": b.period, "state": b.state,
                "asked_tokens": b.asked_tokens, "tokens": b.tokens, "cost_usd": MicroUsd(b.cost_micro),
                "outstanding_tokens": b.outstanding_tokens,
                "outstanding_cost_usd": MicroUsd(b.outstanding_cost_micro),
                "trigger": b.trigger, "created_at": b.created_at, "settled_at": b.settled_at})
        })
        .collect();
    let reclaims: Vec<Value> = reclaims
        .into_iter()
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
    pub tenant_id: String,
    pub slots: i32,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FairnessIn {
    pub degrade_to: Option<String>,
    pub pool_capacity: Option<i32>,
    #[serde(default)]
    pub guarantees: Vec<GuaranteeIn>,
}

/// What is wrong with fairness settings for model `id`, each field at
/// once (the cheaper model is another existing model, the capacity at
/// least 1, guarantees only for core tenants, each named once, with slots,
/// within the capacity): the API answers the first, the console shows all.
pub async fn fairness_problems(
    cp: &ControlPlane,
    actor: &Principal,
    id: &str,
    f: &FairnessIn,
) -> Result<Vec<ApiError>, ApiError> {
    let mut out = Vec::new();
    if let Some(d) = &f.degrade_to {
        if d == id || !cp.store.model_exists(d).await? {
            out.push(ApiError::field("degrade_to", "err.other_model"));
        }
    }
    if f.pool_capacity.is_some_and(|c| c <= 0) {
        out.push(ApiError::field("pool_capacity", "err.at_least_one"));
    }
    let mut total = 0i64;
    let mut seen = std::collections::HashSet::new();
    for (i, g) in f.guarantees.iter().enumerate() {
        let problem = if !seen.insert(g.tenant_id.as_str()) {
            Some(ApiError::Element {
                field: "guarantees",
                index: i,
                key: "err.duplicate_tenant",
            })
        } else {
            match cp.store.tenant(actor.scope(), &g.tenant_id).await? {
                None => Some(ApiError::invalid(
                    format!("guarantees[{i}].tenant_id"),
                    crate::i18n::english("err.unknown_tenant"),
                )),
                Some(t) if t.priority != "core" => {
                    Some(ApiError::field("guarantees", "err.core_only"))
                }
                Some(_) if g.slots <= 0 => Some(ApiError::field("guarantees", "err.at_least_one")),
                Some(_) => None,
            }
        };
        if let Some(p) = problem {
            // One problem per field: the first guarantee in error.
            out.push(p);
            return Ok(out);
        }
        total += i64::from(g.slots);
    }
    match f.pool_capacity {
        Some(c) if c > 0 && total > i64::from(c) => {
            out.push(ApiError::field("guarantees", "err.slots_exceed"))
        }
        None if total > 0 => out.push(ApiError::field("pool_capacity", "err.needs_capacity")),
        _ => {}
    }
    Ok(out)
}

/// Sets model `id`'s cheaper model, pool capacity and core tenants'
/// guaranteed slots, replacing the previous ones (platform admins, audited
/// as `model.fairness`); a refusal names its field
/// ([`fairness_problems`]).
pub async fn set_fairness(
    cp: &ControlPlane,
    actor: &Principal,
    id: &str,
    f: &FairnessIn,
) -> Result<(), ApiError> {
    require_platform_admin(actor)?;
    if let Some(e) = fairness_problems(cp, actor, id, f)
        .await?
        .into_iter()
        .next()
    {
        return Err(e);
    }
    let guarantees: Vec<(String, i32)> = f
        .guarantees
        .iter()
        .map(|g| (g.tenant_id.clone(), g.slots))
        .collect();
    cp.store
        .set_model_fairness(
            &actor.label(),
            id,
            f.degrade_to.as_deref(),
            f.pool_capacity,
            &guarantees,
        )
        .await?;
    Ok(())
}

/// `PUT /api/v1/models/{id}/fairness`: cheaper model, pool capacity and
/// core tenants' guaranteed slots (replacing the previous ones).
pub async fn model_fairness(
    State(cp): State<Arc<ControlPlane>>,
    Authed(actor): Authed,
    Params(id): Params<String>,
    Body(f): Body<FairnessIn>,
) -> Result<Json<Value>, ApiError> {
    set_fairness(&cp, &actor, &id, &f).await?;
    Ok(Json(
        json!({"id": id, "degrade_to": f.degrade_to, "pool_capacity": f.pool_capacity,
        "guarantees": f.guarantees.iter().map(|g| json!({"tenant_id": g.tenant_id, "slots": g.slots})).collect::<Vec<_>>()}),
    ))
}
