//! Request lookup (docs/design.md §10, §11): why was request X refused or degraded,
//! or what did it cost. Tenant admins see only their tenant's requests:
//! their scope reads no other tenant's, so another tenant's id answers 404,
//! like an unknown one.

use super::extract::Params;
use crate::auth::Authed;
use crate::{ApiError, ControlPlane};
use axum::extract::State;
use axum::Json;
use domain::usage::UsageEvent;
use domain::MicroUsd;
use serde_json::{json, Value};
use std::sync::Arc;
use store::{Principal, RequestDecisionRow};

/// What is known about one request: the decision (refused, degraded, or
/// queued: admitted after a wait in the fair queue)
/// and/or the usage event (admitted, including degraded ones).
pub struct RequestRecord {
    pub request_id: String,
    pub tenant_id: String,
    pub decision: Option<RequestDecisionRow>,
    pub usage: Option<UsageEvent>,
}

pub async fn lookup(
    cp: &ControlPlane,
    actor: &Principal,
    id: &str,
) -> Result<RequestRecord, ApiError> {
    let not_found = || ApiError::NotFound(format!("request {id}"));
    let id = id.trim();
    if id.is_empty() || id.len() > 128 {
        return Err(not_found());
    }
    let mut decision = cp.store.request_decision(actor.scope(), id).await?;
    // The provider's own words can name the upstream model, the platform's
    // provider account or organisation: platform admins only.
    if !actor.actor().is_platform_admin() {
        if let Some(detail) = decision.as_mut().and_then(|d| d.detail.as_object_mut()) {
            detail.remove("upstream_error");
        }
    }
    let usage = cp.store.usage_event(actor.scope(), id).await?;
    let tenant = decision
        .as_ref()
        .map(|d| d.tenant_id.clone())
        .or_else(|| usage.as_ref().map(|u| u.tenant_id.clone()))
        .ok_or_else(not_found)?;
    Ok(RequestRecord {
        request_id: id.to_string(),
        tenant_id: tenant,
        decision,
        usage,
    })
}

pub fn render(r: &RequestRecord) -> Value {
    let decision = r.decision.as_ref().map(|d| {
        json!({"decision": d.decision, "reason": d.reason, "status": d.status, "scope": d.scope,
            "at": d.at, "period": d.period, "app_id": d.app_id, "key_id": d.key_id, "model": d.model,
            "detail": d.detail})
    });
    let usage = r.usage.as_ref().map(|u| {
        json!({"input_tokens": u.input_tokens, "output_tokens": u.output_tokens,
            "cost_usd": MicroUsd(u.cost_micro), "status": u.status, "stream": u.stream,
            "model": u.model, "app_id": u.app_id, "key_id": u.key_id, "period": u.period,
            "usage_source": u.usage_source, "est_tokens": u.est_tokens,
            "overrun_tokens": u.overrun_tokens, "deployment": u.deployment,
            "tags": u.attribution.tags, "end_user": u.attribution.end_user,
            "anomaly": u.anomaly.as_ref().map(|a| json!({"kind": a.kind, "reported": a.reported})),
            "raw_usage": u.raw_usage})
    });
    let outcome = match (&r.decision, &r.usage) {
        // Waited in the fair queue, then admitted: its wait is in `decision`.
        (Some(d), Some(_)) if d.decision == "queued" => "admitted".into(),
        (Some(d), _) => d.decision.clone(),
        (None, Some(_)) => "admitted".into(),
        (None, None) => "unknown".into(),
    };
    json!({"request_id": r.request_id, "tenant_id": r.tenant_id, "outcome": outcome,
        "decision": decision, "usage": usage})
}

pub async fn show(
    State(cp): State<Arc<ControlPlane>>,
    Authed(actor): Authed,
    Params(id): Params<String>,
) -> Result<Json<Value>, ApiError> {
    Ok(Json(render(&lookup(&cp, &actor, &id).await?)))
}
