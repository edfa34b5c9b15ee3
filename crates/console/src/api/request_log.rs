//! `GET /api/v1/requests`: the request log, newest first, one page at a
//! time. Admitted, degraded and refused requests alike; a tenant admin
//! reads only their tenant's (another tenant answers 404, like an unknown
//! one).

use crate::auth::Authed;
use crate::{ApiError, ControlPlane};
use axum::extract::{Query, State};
use axum::Json;
use chrono::{DateTime, Utc};
use domain::MicroUsd;
use serde::Deserialize;
use serde_json::{json, Value};
use std::sync::Arc;
use store::{Principal, RequestCursor, RequestLogFilter, RequestLogRow};

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LogQuery {
    pub tenant: Option<String>,
    pub app: Option<String>,
    pub key: Option<String>,
    pub model: Option<String>,
    pub status: Option<String>,
    pub reason: Option<String>,
    /// `key=value` (or `key:value`): requests carrying that tag.
    pub tag: Option<String>,
    pub end_user: Option<String>,
    pub from: Option<String>,
    pub to: Option<String>,
    pub cursor: Option<String>,
    pub limit: Option<i64>,
}

const DEFAULT_LIMIT: i64 = 100;
const MAX_LIMIT: i64 = 1000;

fn time(field: &'static str, v: &Option<String>) -> Result<Option<DateTime<Utc>>, ApiError> {
    v.as_deref()
        .map(|s| {
            DateTime::parse_from_rfc3339(s)
                .map(|t| t.with_timezone(&Utc))
                .map_err(|_| ApiError::invalid(field, "expected an RFC 3339 time"))
        })
        .transpose()
}

/// `project=apollo` → ("project", "apollo"), the `x-tollgate-tags`
/// header's syntax; `project:apollo` is read too
/// (`domain::attribution::parse_tag_filter`).
fn tag(v: &Option<String>) -> Result<Option<(String, String)>, ApiError> {
    v.as_deref()
        .map(|s| {
            domain::attribution::parse_tag_filter(s)
                .ok_or_else(|| ApiError::invalid("tag", "expected key=value, e.g. project=apollo"))
        })
        .transpose()
}

/// One page and the cursor of the next (older) one, if any.
pub async fn page(
    cp: &ControlPlane,
    actor: &Principal,
    q: LogQuery,
) -> Result<(Vec<RequestLogRow>, Option<String>), ApiError> {
    let scope = match &q.tenant {
        Some(t) => actor
            .scope()
            .narrow_to(t)
            .ok_or_else(|| ApiError::NotFound(format!("tenant {t}")))?,
        None => actor.scope().clone(),
    };
    let limit = q.limit.unwrap_or(DEFAULT_LIMIT);
    if !(1..=MAX_LIMIT).contains(&limit) {
        return Err(ApiError::invalid("limit", "must be between 1 and 1000"));
    }
    let after = q
        .cursor
        .as_deref()
        .map(|c| {
            RequestCursor::decode(c)
                .ok_or_else(|| ApiError::invalid("cursor", "not a cursor this API gave"))
        })
        .transpose()?;
    let f = RequestLogFilter {
        from: time("from", &q.from)?,
        to: time("to", &q.to)?,
        tenant: q.tenant,
        app: q.app,
        key: q.key,
        model: q.model,
        status: q.status,
        reason: q.reason,
        tag: tag(&q.tag)?,
        end_user: q.end_user.filter(|e| !e.is_empty()),
        after,
        limit: limit + 1,
    };
    let mut rows = cp.store.request_log(&scope, &f).await?;
    let more = rows.len() as i64 > limit;
    rows.truncate(limit as usize);
    let next = if more {
        rows.last().map(|r| r.cursor().encode())
    } else {
        None
    };
    Ok((rows, next))
}

pub fn render(r: &RequestLogRow) -> Value {
    json!({"request_id": r.request_id, "at": r.at, "tenant_id": r.tenant_id, "app_id": r.app_id,
        "key_id": r.key_id, "model": r.model, "outcome": r.outcome, "status": r.status,
        "reason": r.reason, "queued_ms": r.queued_ms, "queue_reason": r.queue_reason,
        "http_status": r.http_status, "input_tokens": r.input_tokens,
        "output_tokens": r.output_tokens, "cost_usd": MicroUsd(r.cost_micro),
        "deployment": r.deployment, "tags": r.attribution.tags,
        "end_user": r.attribution.end_user})
}

pub async fn list(
    State(cp): State<Arc<ControlPlane>>,
    Authed(actor): Authed,
    q: Result<Query<LogQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    let Query(q) = q.map_err(|e| ApiError::invalid("query", e.body_text()))?;
    let (rows, next) = page(&cp, &actor, q).await?;
    let data: Vec<Value> = rows.iter().map(render).collect();
    Ok(Json(json!({"data": data, "next_cursor": next})))
}
