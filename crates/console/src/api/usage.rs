use super::extract::Params;
use crate::auth::Authed;
use crate::{ApiError, ControlPlane};
use axum::extract::{Query, State};
use axum::Json;
use domain::limits;
use domain::MicroUsd;
use serde::Deserialize;
use serde_json::{json, Value};
use std::sync::Arc;
use store::Principal;

#[derive(Deserialize)]
pub struct Period {
    period: Option<String>,
}

/// A tenant's month: effective limits (base + active grants + borrowed,
/// `domain::limits::effective`), used and held live from the hold engine.
#[derive(Debug, Clone)]
pub struct MonthUsage {
    pub tenant_id: String,
    pub period: String,
    pub limit_tokens: Option<i64>,
    pub used_tokens: i64,
    pub held_tokens: i64,
    pub limit_cost: Option<MicroUsd>,
    pub cost: MicroUsd,
    pub held_cost: MicroUsd,
    pub granted_tokens: i64,
    pub granted_cost: MicroUsd,
    pub base_limit_tokens: Option<i64>,
    pub base_limit_cost: Option<MicroUsd>,
    pub borrowed_tokens: i64,
    pub borrowed_cost: MicroUsd,
    pub may_borrow: bool,
    pub borrow_cap_tokens: i64,
}

/// A tenant's budgets in a month at `now`: the effective limits (base +
/// approved grants unexpired at `now` + quota borrowed in the month, the
/// rule of `domain::limits::effective`), and the grants' and borrowings'
/// part of them.
pub struct Budgets {
    pub effective: domain::Limits,
    /// (tokens, micro-USD) of the approved grants in force.
    pub granted: (i64, i64),
    pub borrowed: limits::Borrowed,
}

pub async fn budgets(
    cp: &ControlPlane,
    scope: &store::TenantScope,
    t: &store::TenantRow,
    period: &str,
    now: chrono::DateTime<chrono::Utc>,
) -> Result<Budgets, ApiError> {
    let grants: Vec<_> = cp
        .store
        .active_grants(scope)
        .await?
        .iter()
        .filter(|g| g.tenant_id == t.id && g.app_id.is_none())
        .map(|g| g.grant())
        .collect();
    let granted = limits::granted(&grants, now);
    let (tokens, cost_micro) = cp
        .store
        .borrowed(scope)
        .await?
        .iter()
        .find(|b| b.tenant_id == t.id && b.period == period)
        .map_or((0, 0), |b| (b.tokens, b.cost_micro));
    let borrowed = limits::Borrowed { tokens, cost_micro };
    Ok(Budgets {
        effective: limits::effective(&t.limits, &grants, borrowed, now),
        granted,
        borrowed,
    })
}

/// A tenant's month, for a person whose scope covers it (404 otherwise).
pub async fn month_usage(
    cp: &ControlPlane,
    actor: &Principal,
    id: &str,
    period: Option<String>,
) -> Result<MonthUsage, ApiError> {
    let scope = actor.scope();
    let t = cp
        .store
        .tenant(scope, id)
        .await?
        .ok_or_else(|| ApiError::NotFound(format!("tenant {id}")))?;
    let now = chrono::Utc::now();
    let period = period.unwrap_or_else(|| cp.clock.month(now));
    if domain::period::parse_month(&period).is_none() {
        return Err(ApiError::field("period", "err.bad_time"));
    }
    let b = budgets(cp, scope, &t, &period, now).await?;
    let (granted_tokens, granted_cost) = b.granted;
    let (borrowed_tokens, borrowed_cost) = (b.borrowed.tokens, b.borrowed.cost_micro);
    let eff = b.effective;
    let c = cp.quota.month_counters(id, &period).await.map_err(|e| {
        tracing::warn!(error = %e, "usage: quota store unavailable");
        ApiError::Internal
    })?;
    Ok(MonthUsage {
        tenant_id: id.to_string(),
        period,
        limit_tokens: eff.monthly_tokens,
        used_tokens: c.used_tokens("t"),
        held_tokens: c.held_tokens("t"),
        limit_cost: eff.monthly_cost_usd,
        cost: MicroUsd(c.used_cost("t")),
        held_cost: MicroUsd(c.held_cost("t")),
        granted_tokens,
        granted_cost: MicroUsd(granted_cost),
        base_limit_tokens: t.limits.monthly_tokens,
        base_limit_cost: t.limits.monthly_cost_usd,
        borrowed_tokens,
        borrowed_cost: MicroUsd(borrowed_cost),
        may_borrow: t.may_borrow,
        borrow_cap_tokens: t.borrow_cap_tokens,
    })
}

pub async fn show(
    State(cp): State<Arc<ControlPlane>>,
    Authed(actor): Authed,
    Params(id): Params<String>,
    Query(q): Query<Period>,
) -> Result<Json<Value>, ApiError> {
    let u = month_usage(&cp, &actor, &id, q.period).await?;
    Ok(Json(json!({
        "tenant_id": u.tenant_id,
        "period": u.period,
        "limit_tokens": u.limit_tokens,
        "used_tokens": u.used_tokens,
        "held_tokens": u.held_tokens,
        "limit_cost_usd": u.limit_cost,
        "cost_usd": u.cost,
        "held_cost_usd": u.held_cost,
        "granted_tokens": u.granted_tokens,
        "granted_cost_usd": u.granted_cost,
        "base_limit_tokens": u.base_limit_tokens,
        "base_limit_cost_usd": u.base_limit_cost,
        "borrowed_tokens": u.borrowed_tokens,
        "borrowed_cost_usd": u.borrowed_cost,
        "may_borrow": u.may_borrow,
        "borrow_cap_tokens": u.borrow_cap_tokens,
    })))
}
