use crate::auth::Authed;
use crate::{ApiError, ControlPlane};
use axum::extract::{Query, State};
use axum::Json;
use domain::roles::{Actor, Role};
use serde::Deserialize;
use serde_json::{json, Value};
use std::sync::Arc;
use store::{AuditFilter, AuditRow, Principal};

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
    actor: &Principal,
    f: &AuditFilter,
) -> Result<Vec<AuditRow>, ApiError> {
    may_audit(actor)?;
    Ok(cp.store.audit_search(actor.scope(), f).await?)
}

/// One page of the log, newest first: up to `limit` rows, and the key of
/// the next (older) page when there is one.
pub async fn page(
    cp: &ControlPlane,
    actor: &Principal,
    f: &AuditFilter,
) -> Result<(Vec<AuditRow>, Option<i64>), ApiError> {
    let limit = f.limit.clamp(1, 500);
    let mut rows = search(
        cp,
        actor,
        &AuditFilter {
            limit: limit + 1,
            ..f.clone()
        },
    )
    .await?;
    let more = rows.len() as i64 > limit;
    rows.truncate(limit as usize);
    let next = more.then(|| rows.last().map(|r| r.id)).flatten();
    Ok((rows, next))
}

#[derive(Deserialize)]
pub struct PageQuery {
    before: Option<i64>,
    limit: Option<i64>,
}

/// `GET /api/v1/audit[?before=ID][&limit=N]`: newest first, `limit` rows
/// (default 500); `next_before` keys the next page.
pub async fn list(
    State(cp): State<Arc<ControlPlane>>,
    Authed(actor): Authed,
    Query(q): Query<PageQuery>,
) -> Result<Json<Value>, ApiError> {
    let filter = AuditFilter {
        before: q.before,
        limit: q.limit.unwrap_or(500),
        ..Default::default()
    };
    let (rows, next) = page(&cp, &actor, &filter).await?;
    let data: Vec<Value> = rows
        .iter()
        .map(|r| {
            json!({"id": r.id, "at": r.entry.at, "actor": r.entry.actor, "action": r.entry.action,
                "target": r.entry.target, "before": r.entry.before, "after": r.entry.after,
                "reason": r.entry.reason, "hash": hex(&r.hash)})
        })
        .collect();
    Ok(Json(json!({"data": data, "next_before": next})))
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

pub async fn check_chain(cp: &ControlPlane, actor: &Principal) -> Result<ChainCheck, ApiError> {
    may_audit(actor)?;
    let rows = cp.store.audit_chain(actor.scope()).await?;
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
