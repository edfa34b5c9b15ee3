use crate::auth::Authed;
use crate::{ApiError, ControlPlane};
use axum::extract::State;
use axum::Json;
use domain::roles::Role;
use serde_json::{json, Value};
use std::sync::Arc;

fn may_audit(role: Role) -> Result<(), ApiError> {
    match role {
        Role::PlatformAdmin | Role::Auditor => Ok(()),
        _ => Err(ApiError::Forbidden(
            "only platform admins and auditors read the audit log".into(),
        )),
    }
}

pub async fn list(
    State(cp): State<Arc<ControlPlane>>,
    Authed(actor): Authed,
) -> Result<Json<Value>, ApiError> {
    may_audit(actor.role)?;
    let rows = cp.store.audit_recent(500).await?;
    let data: Vec<Value> = rows
        .iter()
        .map(|r| {
            json!({"id": r.id, "at": r.entry.at, "actor": r.entry.actor, "action": r.entry.action,
                "target": r.entry.target, "before": r.entry.before, "after": r.entry.after,
                "reason": r.entry.reason, "hash": hex(&r.hash)})
        })
        .collect();
    Ok(Json(json!({"data": data})))
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Recomputes the whole chain; names the first row that does not match.
pub async fn verify(
    State(cp): State<Arc<ControlPlane>>,
    Authed(actor): Authed,
) -> Result<Json<Value>, ApiError> {
    may_audit(actor.role)?;
    let rows = cp.store.audit_chain().await?;
    let chain: Vec<_> = rows
        .iter()
        .map(|r| (r.entry.clone(), r.prev_hash.clone(), r.hash.clone()))
        .collect();
    Ok(Json(match domain::audit::first_broken(&chain) {
        None => json!({"intact": true, "rows": rows.len()}),
        Some(i) => json!({"intact": false, "rows": rows.len(), "first_broken_id": rows[i].id,
            "first_broken": {"action": rows[i].entry.action, "target": rows[i].entry.target}}),
    }))
}
