use crate::auth::Authed;
use crate::{ApiError, ControlPlane};
use axum::extract::State;
use axum::Json;
use domain::roles::{Actor, Role};
use serde_json::{json, Value};
use std::sync::Arc;
use store::{AuditFilter, AuditRow};

pub fn may_audit(actor: &Actor) -> Result<(), ApiError> {
    match actor.role {
        Role::PlatformAdmin | Role::Auditor => Ok(()),
        _ => Err(ApiError::Forbidden(
            "only platform admins and auditors read the audit log".into(),
        )),
    }
}

/// Audit rows matching the filter, newest first.
pub async fn search(
    cp: &ControlPlane,
    actor: &Actor,
    f: &AuditFilter,
) -> Result<Vec<AuditRow>, ApiError> {
    may_audit(actor)?;
    Ok(cp.store.audit_search(f).await?)
}

pub async fn list(
    State(cp): State<Arc<ControlPlane>>,
    Authed(actor): Authed,
) -> Result<Json<Value>, ApiError> {
    let filter = AuditFilter {
        limit: 500,
        ..Default::default()
    };
    let rows = search(&cp, &actor, &filter).await?;
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

pub fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// The chain checked end to end: the row count and the first row whose
/// hash does not match (None: intact).
pub struct ChainCheck {
    pub rows: usize,
    pub first_broken: Option<AuditRow>,
}

pub async fn check_chain(cp: &ControlPlane, actor: &Actor) -> Result<ChainCheck, ApiError> {
    may_audit(actor)?;
    let rows = cp.store.audit_chain().await?;
    let chain: Vec<_> = rows
        .iter()
        .map(|r| (r.entry.clone(), r.prev_hash.clone(), r.hash.clone()))
        .collect();
    let first_broken = domain::audit::first_broken(&chain).map(|i| rows[i].clone());
    Ok(ChainCheck {
        rows: rows.len(),
        first_broken,
    })
}

/// Recomputes the whole chain; names the first row that does not match.
pub async fn verify(
    State(cp): State<Arc<ControlPlane>>,
    Authed(actor): Authed,
) -> Result<Json<Value>, ApiError> {
    let c = check_chain(&cp, &actor).await?;
    Ok(Json(match c.first_broken {
        None => json!({"intact": true, "rows": c.rows}),
        Some(r) => json!({"intact": false, "rows": c.rows, "first_broken_id": r.id,
            "first_broken": {"action": r.entry.action, "target": r.entry.target}}),
    }))
}
