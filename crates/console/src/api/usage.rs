use super::require;
use crate::auth::Authed;
use crate::{ApiError, ControlPlane};
use axum::extract::{Path, Query, State};
use axum::Json;
use domain::roles::Access;
use domain::MicroUsd;
use serde::Deserialize;
use serde_json::{json, Value};
use std::sync::Arc;

#[derive(Deserialize)]
pub struct Period {
    period: Option<String>,
}

/// A tenant's month: limits (base + active grants + borrowed), used and held, live
/// from the hold engine.
pub async fn show(
    State(cp): State<Arc<ControlPlane>>,
    Authed(actor): Authed,
    Path(id): Path<String>,
    Query(q): Query<Period>,
) -> Result<Json<Value>, ApiError> {
    require(&actor, Access::Read, &id)?;
    let period = q
        .period
        .unwrap_or_else(|| cp.clock.month(chrono::Utc::now()));
    if domain::period::parse_month(&period).is_none() {
        return Err(ApiError::BadRequest("period must be YYYY-MM".into()));
    }
    let t = cp
        .store
        .tenant(&id)
        .await?
        .ok_or_else(|| ApiError::NotFound(format!("tenant {id}")))?;
    let grants = cp.store.active_grants().await?;
    let (granted_tokens, granted_cost) = grants
        .iter()
        .filter(|g| g.tenant_id == id && g.app_id.is_none())
        .fold((0i64, 0i64), |(a, b), g| (a + g.tokens, b + g.cost_micro));
    let c = cp.quota.month_counters(&id, &period).await.map_err(|e| {
        tracing::warn!(error = %e, "usage: quota store unavailable");
        ApiError::Internal
    })?;
    let (borrowed_tokens, borrowed_cost) = cp
        .store
        .borrowed()
        .await?
        .iter()
        .find(|b| b.tenant_id == id && b.period == period)
        .map_or((0, 0), |b| (b.tokens, b.cost_micro));
    // Effective limit = base + grants + borrowed (DESIGN §3).
    let eff = t.limits.raised_by(
        granted_tokens.saturating_add(borrowed_tokens),
        granted_cost.saturating_add(borrowed_cost),
    );
    Ok(Json(json!({
        "tenant_id": id,
        "period": period,
        "limit_tokens": eff.monthly_tokens,
        "used_tokens": c.used_tokens("t"),
        "held_tokens": c.held_tokens("t"),
        "limit_cost_usd": eff.monthly_cost_usd,
        "cost_usd": MicroUsd(c.used_cost("t")),
        "held_cost_usd": MicroUsd(c.held_cost("t")),
        "granted_tokens": granted_tokens,
        "granted_cost_usd": MicroUsd(granted_cost),
        "base_limit_tokens": t.limits.monthly_tokens,
        "base_limit_cost_usd": t.limits.monthly_cost_usd,
        "borrowed_tokens": borrowed_tokens,
        "borrowed_cost_usd": MicroUsd(borrowed_cost),
        "may_borrow": t.may_borrow,
        "borrow_cap_tokens": t.borrow_cap_tokens,
    })))
}
