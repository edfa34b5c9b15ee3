//! Bills and the calendar's records: `/api/v1/bills` (+ CSV and FOCUS
//! exports), job runs, notices. Finance, auditors and platform admins read
//! every tenant; a tenant admin reads only their own (others answer 404).

use crate::auth::Authed;
use crate::{ApiError, ControlPlane};
use axum::extract::{Query, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use billing::BillingError;
use domain::bill::{DrillBy, GroupBy};
use domain::roles::Role;
use serde::Deserialize;
use serde_json::{json, Value};
use std::sync::Arc;
use store::{Principal, TenantScope};

#[derive(Deserialize)]
pub struct BillQuery {
    period: Option<String>,
    tenant: Option<String>,
    by: Option<String>,
    /// `tag:<key>`, `end_user` or `asked_model`.
    group_by: Option<String>,
}

/// The `group_by` asked for, if any (400 when it is not one).
fn group_by_of(q: &BillQuery) -> Result<Option<GroupBy>, ApiError> {
    match q.group_by.as_deref() {
        None | Some("") => Ok(None),
        Some(g) => GroupBy::parse(g).map(Some).ok_or_else(|| {
            ApiError::BadRequest(
                "group_by must be tag:<key> (a tag key), end_user or asked_model".into(),
            )
        }),
    }
}

/// A bills endpoint's failure: the admin API's errors, or the archive of a
/// closed month being out of reach (503, retry later).
pub enum BillsError {
    Api(ApiError),
    ArchiveUnavailable,
}

impl From<ApiError> for BillsError {
    fn from(e: ApiError) -> Self {
        BillsError::Api(e)
    }
}

impl From<store::StoreError> for BillsError {
    fn from(e: store::StoreError) -> Self {
        BillsError::Api(e.into())
    }
}

impl From<BillingError> for BillsError {
    fn from(e: BillingError) -> Self {
        match e {
            BillingError::Invalid(m) => BillsError::Api(ApiError::BadRequest(m)),
            BillingError::Store(s) => BillsError::Api(s.into()),
            other => {
                tracing::warn!(error = %other, "closed-month archive unavailable");
                BillsError::ArchiveUnavailable
            }
        }
    }
}

impl IntoResponse for BillsError {
    fn into_response(self) -> Response {
        match self {
            BillsError::Api(e) => e.into_response(),
            BillsError::ArchiveUnavailable => (
                StatusCode::SERVICE_UNAVAILABLE,
                [(header::RETRY_AFTER, "30")],
                Json(json!({"error": {
                    "message": "this month is closed and its archive (ClickHouse) is unreachable; retry shortly",
                    "code": "archive_unavailable"}})),
            )
                .into_response(),
        }
    }
}

/// The tenants a bill covers: the actor's scope, narrowed to the tenant
/// asked for (404 when it is outside the scope).
pub(crate) fn bill_scope(actor: &Principal, asked: Option<&str>) -> Result<TenantScope, ApiError> {
    match asked {
        Some(t) => actor
            .scope()
            .narrow_to(t)
            .ok_or_else(|| ApiError::NotFound(format!("tenant {t}"))),
        None => Ok(actor.scope().clone()),
    }
}

fn period_of(cp: &ControlPlane, q: &BillQuery) -> Result<String, ApiError> {
    let p = q
        .period
        .clone()
        .unwrap_or_else(|| cp.clock.month(chrono::Utc::now()));
    domain::period::parse_month(&p)
        .map(|_| p)
        .ok_or_else(|| ApiError::BadRequest("period must be YYYY-MM".into()))
}

/// `GET /api/v1/bills?period=YYYY-MM[&tenant=T][&by=app|model|day][&group_by=tag:K|end_user|asked_model]`
pub async fn show(
    State(cp): State<Arc<ControlPlane>>,
    Authed(actor): Authed,
    Query(q): Query<BillQuery>,
) -> Result<Response, BillsError> {
    let period = period_of(&cp, &q)?;
    let scope = bill_scope(&actor, q.tenant.as_deref())?;
    let by = match q.by.as_deref() {
        None | Some("") => None,
        Some(b) => Some(DrillBy::parse(b).ok_or_else(|| {
            ApiError::BadRequest("by must be app, model, day or component".into())
        })?),
    };
    let group_by = group_by_of(&q)?;
    if by.is_some() && group_by.is_some() {
        return Err(ApiError::BadRequest("give by or group_by, not both".into()).into());
    }
    let bill = cp.books.bill(&period, &scope).await?;
    if by.is_none() && group_by.is_none() {
        // The plain bill written straight from its type, not through a
        // JSON tree first (2,000 departments' lines: a tree of ~100k nodes).
        return Ok(Json(bill).into_response());
    }
    let mut v = serde_json::to_value(&bill).map_err(|_| ApiError::Internal)?;
    if let Some(g) = group_by {
        let rows = cp.books.attributed(&period, &scope, &g).await?;
        v["group_by"] = json!(g.as_param());
        v["lines"] = json!(domain::bill::attributed_lines(&rows));
    }
    if let Some(by) = by {
        let lines = cp.books.drill_down(&period, &scope, by).await?;
        v["by"] = json!(by);
        v["lines"] = json!(lines);
    }
    Ok(Json(v).into_response())
}

/// A CSV download named `name` (a whole body, or a stream of it).
pub(crate) fn csv_response(name: String, body: impl Into<axum::body::Body>) -> Response {
    (
        [
            (header::CONTENT_TYPE, "text/csv; charset=utf-8".to_string()),
            (
                header::CONTENT_DISPOSITION,
                format!("attachment; filename=\"{name}\""),
            ),
        ],
        body.into(),
    )
        .into_response()
}

/// A CSV download from the console's pages, which a person opens in a
/// spreadsheet: the body starts with a UTF-8 byte-order mark, without which
/// Excel reads the file in the system's code page and garbles 中文. The
/// API's CSVs, read by programs, start with their header line.
pub(crate) fn console_csv_response(name: String, body: impl Into<axum::body::Body>) -> Response {
    use futures::StreamExt;
    const BOM: &[u8] = "\u{feff}".as_bytes();
    let bom =
        futures::stream::once(async { Ok::<_, axum::Error>(axum::body::Bytes::from_static(BOM)) });
    let body = axum::body::Body::from_stream(bom.chain(body.into().into_data_stream()));
    csv_response(name, body)
}

/// The FOCUS export's chunks (`Books::focus_chunks`) as a response body,
/// sent as they are written. A read that fails midway, or chunks that stop
/// without their end mark, are logged and cut the response short (the
/// client sees an incomplete transfer, never a file that looks whole).
pub(crate) fn focus_body(
    rx: tokio::sync::mpsc::Receiver<billing::Result<billing::FocusChunk>>,
) -> axum::body::Body {
    let chunks = futures::stream::unfold(Some(rx), |rx| async move {
        let mut rx = rx?;
        let cut = |why: &str| {
            tracing::warn!(reason = why, "FOCUS export: response cut short");
            Some((
                Err(std::io::Error::other(
                    "the FOCUS export could not be read to its end",
                )),
                None,
            ))
        };
        match rx.recv().await {
            Some(Ok(billing::FocusChunk::Csv(c))) => Some((Ok(c), Some(rx))),
            Some(Ok(billing::FocusChunk::End)) => None,
            Some(Err(e)) => cut(&e.to_string()),
            None => cut("the export stopped without its end"),
        }
    });
    axum::body::Body::from_stream(chunks)
}

/// `GET /api/v1/bills.csv?period=YYYY-MM[&tenant=T][&group_by=tag:K|end_user|asked_model]`: tenant × app × model, or tenant × tag value / end user.
pub async fn csv(
    State(cp): State<Arc<ControlPlane>>,
    Authed(actor): Authed,
    Query(q): Query<BillQuery>,
) -> Result<Response, BillsError> {
    let period = period_of(&cp, &q)?;
    let scope = bill_scope(&actor, q.tenant.as_deref())?;
    let body = match group_by_of(&q)? {
        Some(g) => cp.books.attributed_csv(&period, &scope, &g).await?,
        None => cp.books.csv(&period, &scope).await?,
    };
    Ok(csv_response(format!("tollgate-bill-{period}.csv"), body))
}

/// `GET /api/v1/bills.focus.csv?period=YYYY-MM[&tenant=T]`: FOCUS columns,
/// one row per tenant × app × model × day.
pub async fn focus_csv(
    State(cp): State<Arc<ControlPlane>>,
    Authed(actor): Authed,
    Query(q): Query<BillQuery>,
) -> Result<Response, BillsError> {
    let period = period_of(&cp, &q)?;
    let scope = bill_scope(&actor, q.tenant.as_deref())?;
    let chunks = cp.books.focus_chunks(&period, &scope).await?;
    Ok(csv_response(
        format!("tollgate-focus-{period}.csv"),
        focus_body(chunks),
    ))
}

#[derive(Deserialize)]
pub struct RunsQuery {
    job: Option<String>,
    limit: Option<i64>,
}

/// `GET /api/v1/job-runs[?job=rollover][&limit=N]`: platform staff only.
pub async fn job_runs(
    State(cp): State<Arc<ControlPlane>>,
    Authed(actor): Authed,
    Query(q): Query<RunsQuery>,
) -> Result<Json<Value>, ApiError> {
    if actor.role == Role::TenantAdmin {
        return Err(ApiError::Forbidden(
            "job runs are for platform staff".into(),
        ));
    }
    let runs = cp
        .store
        .job_runs(
            actor.scope(),
            q.job.as_deref(),
            q.limit.unwrap_or(100).clamp(1, 1000),
        )
        .await?;
    let months = cp.store.closed_months().await?;
    let months: Vec<Value> = months
        .into_iter()
        .map(|m| {
            json!({"period": m.period, "state": m.state, "events": m.totals.requests,
                   "cost_usd": domain::MicroUsd(m.totals.cost_micro), "closed_at": m.closed_at,
                   "purge_after": m.purge_after, "purged_at": m.purged_at, "attempts": m.attempts})
        })
        .collect();
    Ok(Json(json!({"runs": runs, "months": months})))
}

/// `GET /api/v1/notices`: a tenant admin's own tenant's, staff's all.
pub async fn notices(
    State(cp): State<Arc<ControlPlane>>,
    Authed(actor): Authed,
) -> Result<Json<Value>, ApiError> {
    let n = cp.store.notices(actor.scope(), 200).await?;
    Ok(Json(json!({"notices": n})))
}
