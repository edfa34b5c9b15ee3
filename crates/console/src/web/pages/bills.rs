//! Bills (per department per month, drill-down, CSV and FOCUS links, daily
//! spend and budget burn-down charts as server-rendered SVG), job runs with
//! the months' rollover states and the latest reconcile check, and notices.

use super::thousands;
use crate::api::bills::bill_scope;
use crate::error::ApiError;
use crate::web::{render, Chrome, PageError, Session};
use crate::ControlPlane;
use askama::Template;
use axum::extract::{Query, State};
use axum::http::header;
use axum::response::{Html, IntoResponse, Response};
use billing::BillingError;
use domain::bill::{attributed_lines, forecast_month_end, DayRow, DrillBy, GroupBy};
use domain::roles::Role;
use domain::MicroUsd;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::sync::Arc;

fn books_error(e: BillingError) -> ApiError {
    match e {
        BillingError::Invalid(m) => ApiError::BadRequest(m),
        BillingError::Store(s) => s.into(),
        other => {
            tracing::warn!(error = %other, "closed-month archive unavailable");
            ApiError::Unavailable
        }
    }
}

#[derive(Deserialize, Default)]
#[serde(default)]
pub struct BillForm {
    period: String,
    tenant: String,
    by: String,
    /// `tag:<key>` or `end_user` (anything else: no such drill-down).
    group_by: String,
}

pub struct TenantLine {
    pub tenant: String,
    pub name: String,
    pub requests: String,
    pub input: String,
    pub output: String,
    pub cost: String,
    pub borrowed: String,
    pub granted: String,
    pub refused: String,
}

pub struct DrillRow {
    pub tenant: String,
    pub key: String,
    pub requests: String,
    pub input: String,
    pub output: String,
    pub cost: String,
}

/// A line of the drill-down by tag value or end user (None: without one).
pub struct AttributedRow {
    pub tenant: String,
    pub value: Option<String>,
    pub requests: String,
    pub input: String,
    pub output: String,
    pub cost: String,
}

/// One line of a chart: an SVG `points` list ("x,y x,y …", numbers only).
pub struct Series {
    pub name: String,
    pub color: &'static str,
    pub points: String,
    pub dashed: bool,
}

/// A line chart, already laid out in SVG units.
pub struct LineChart {
    pub width: i64,
    pub height: i64,
    pub series: Vec<Series>,
    /// (x, label) under the axis.
    pub x_labels: Vec<(i64, String)>,
    pub y_top: String,
    pub y_bottom: String,
}

const W: i64 = 640;
const H: i64 = 220;
const PAD: i64 = 40;
const COLORS: [&str; 8] = [
    "#2563eb", "#dc2626", "#16a34a", "#9333ea", "#ea580c", "#0891b2", "#ca8a04", "#4b5563",
];

/// Lays out day-indexed values (day 1..=days) between `lo` and `hi`.
fn points(values: &[(u32, i64)], days: u32, lo: i64, hi: i64) -> String {
    let span = (hi - lo).max(1) as f64;
    values
        .iter()
        .map(|(d, v)| {
            let x = PAD + ((*d as i64 - 1) * (W - 2 * PAD)) / (days.max(2) as i64 - 1);
            let y = H - PAD - (((*v - lo) as f64 / span) * (H - 2 * PAD) as f64).round() as i64;
            format!("{x},{y}")
        })
        .collect::<Vec<_>>()
        .join(" ")
}

fn x_labels(days: u32) -> Vec<(i64, String)> {
    [1, 8, 15, 22, days]
        .into_iter()
        .filter(|d| *d <= days)
        .map(|d| {
            let x = PAD + ((d as i64 - 1) * (W - 2 * PAD)) / (days.max(2) as i64 - 1);
            (x, d.to_string())
        })
        .collect()
}

/// Daily spend per department: one line per tenant.
pub fn daily_spend_chart(rows: &[DayRow], days: u32) -> LineChart {
    let mut by: BTreeMap<&str, BTreeMap<u32, i64>> = BTreeMap::new();
    for r in rows {
        let d: u32 = r.day.get(8..).and_then(|d| d.parse().ok()).unwrap_or(1);
        *by.entry(&r.tenant_id).or_default().entry(d).or_default() += r.totals.cost_micro;
    }
    let max = by
        .values()
        .flat_map(|m| m.values().copied())
        .max()
        .unwrap_or(0)
        .max(1);
    let series = by
        .iter()
        .enumerate()
        .map(|(i, (t, m))| {
            let vals: Vec<(u32, i64)> = (1..=days)
                .map(|d| (d, m.get(&d).copied().unwrap_or(0)))
                .collect();
            Series {
                name: t.to_string(),
                color: COLORS[i % COLORS.len()],
                points: points(&vals, days, 0, max),
                dashed: false,
            }
        })
        .collect();
    LineChart {
        width: W,
        height: H,
        series,
        x_labels: x_labels(days),
        y_top: MicroUsd(max).shown(),
        y_bottom: MicroUsd::ZERO.shown(),
    }
}

/// Budget burn-down of one tenant: remaining budget after each day so far
/// (solid) and, from today, the forecast at the average complete day
/// (dashed). `today` = days shown as actual (the whole month once closed).
pub fn burndown_chart(daily: &BTreeMap<u32, i64>, budget: i64, today: u32, days: u32) -> LineChart {
    let mut remaining = budget;
    let mut actual: Vec<(u32, i64)> = vec![];
    for d in 1..=today.min(days) {
        remaining -= daily.get(&d).copied().unwrap_or(0);
        actual.push((d, remaining));
    }
    let mut forecast = vec![];
    if today < days {
        if let Some(end) = forecast_month_end(daily, today, days) {
            let spent: i64 = daily.range(..=today).map(|(_, v)| *v).sum();
            let left = (end - spent) as f64 / (days - today) as f64;
            forecast.push((today, budget - spent));
            for d in today + 1..=days {
                forecast.push((
                    d,
                    budget - spent - (left * (d - today) as f64).round() as i64,
                ));
            }
        }
    }
    let lo = actual
        .iter()
        .chain(forecast.iter())
        .map(|(_, v)| *v)
        .min()
        .unwrap_or(0)
        .min(0);
    let mut series = vec![Series {
        name: "remaining".into(),
        color: COLORS[0],
        points: points(&actual, days, lo, budget),
        dashed: false,
    }];
    if !forecast.is_empty() {
        series.push(Series {
            name: "forecast".into(),
            color: COLORS[1],
            points: points(&forecast, days, lo, budget),
            dashed: true,
        });
    }
    series.push(Series {
        name: "zero".into(),
        color: "#9ca3af",
        points: points(&[(1, 0), (days, 0)], days, lo, budget),
        dashed: true,
    });
    LineChart {
        width: W,
        height: H,
        series,
        x_labels: x_labels(days),
        y_top: MicroUsd(budget).shown(),
        y_bottom: MicroUsd(lo).shown(),
    }
}

#[derive(Template)]
#[template(path = "pages/bills.html")]
struct BillsPage {
    c: Chrome,
    period: String,
    /// What was typed for a period that is not a month.
    bad_period: Option<String>,
    /// (id, selected) for staff's tenant picker; empty for tenant admins.
    tenants: Vec<(String, bool)>,
    /// The bill's state in plain words (an i18n key), empty when there is
    /// nothing to say (a future month, an old month not closed).
    state: &'static str,
    /// The period's start and end in platform time, and the zone's name.
    span: String,
    zone: String,
    lines: Vec<TenantLine>,
    total: TenantLine,
    by: String,
    drill: Vec<DrillRow>,
    /// `tag`, `end_user` or empty; its label (`tag:project`) and lines.
    group_by: String,
    group_label: String,
    attributed: Vec<AttributedRow>,
    /// Tag keys the month's requests carry (links to their drill-down).
    tag_keys: Vec<String>,
    query: String,
    daily: LineChart,
    burndown: Option<LineChart>,
    burndown_tenant: String,
    forecast: String,
    budget: String,
}

fn money(m: MicroUsd) -> String {
    m.shown()
}

pub async fn show(
    State(cp): State<Arc<ControlPlane>>,
    s: Session,
    Query(f): Query<BillForm>,
) -> Result<Html<String>, PageError> {
    let now = chrono::Utc::now();
    // A period that is not a month: this month's bill, and a message
    // naming what was typed (not a dead-end error page).
    let typed = f.period.trim();
    let bad_period = (!typed.is_empty() && domain::period::parse_month(typed).is_none())
        .then(|| typed.chars().take(40).collect::<String>());
    let period = if typed.is_empty() || bad_period.is_some() {
        cp.clock.month(now)
    } else {
        typed.to_string()
    };
    let asked = Some(f.tenant.trim()).filter(|t| !t.is_empty());
    let scope = bill_scope(&s.actor, asked)?;
    let tenant = scope.tenant().map(String::from);
    let bill = cp.books.bill(&period, &scope).await.map_err(books_error)?;
    let by = DrillBy::parse(f.by.trim());
    let drill = match by {
        Some(b) => cp
            .books
            .drill_down(&period, &scope, b)
            .await
            .map_err(books_error)?,
        None => vec![],
    };
    let day_rows = cp
        .books
        .day_rows(&period, &scope)
        .await
        .map_err(books_error)?;
    let group_by = if by.is_none() {
        GroupBy::parse(f.group_by.trim())
    } else {
        None
    };
    let attributed = match &group_by {
        Some(g) => attributed_lines(
            &cp.books
                .attributed(&period, &scope, g)
                .await
                .map_err(books_error)?,
        ),
        None => vec![],
    };
    let tag_keys = cp.store.tag_keys(&scope, &period).await?;
    let days = domain::period::days_in_month(&period).unwrap_or(30);
    let lines = bill
        .tenants
        .iter()
        .map(|t| TenantLine {
            tenant: t.tenant_id.clone(),
            name: t.name.clone(),
            requests: thousands(t.requests),
            input: thousands(t.input_tokens),
            output: thousands(t.output_tokens),
            cost: money(t.cost_usd),
            borrowed: thousands(t.borrowed_tokens),
            granted: thousands(t.granted_tokens),
            refused: t
                .refused
                .iter()
                .map(|(r, n)| format!("{r}: {n}"))
                .collect::<Vec<_>>()
                .join(", "),
        })
        .collect();
    let total = TenantLine {
        tenant: String::new(),
        name: String::new(),
        requests: thousands(bill.total.requests),
        input: thousands(bill.total.input_tokens),
        output: thousands(bill.total.output_tokens),
        cost: money(bill.total.cost_usd),
        borrowed: String::new(),
        granted: String::new(),
        refused: thousands(bill.total.refused_requests),
    };
    // Burn-down: the chosen (or only) tenant with a monthly cost budget.
    let burn_tenant = tenant
        .clone()
        .or_else(|| bill.tenants.first().map(|t| t.tenant_id.clone()));
    let (mut burndown, mut forecast, mut budget) = (None, String::new(), String::new());
    if let Some(t) = &burn_tenant {
        if let Some(row) = cp.store.tenant(&scope, t).await? {
            if let Some(b) = row.limits.monthly_cost_usd {
                let mut daily: BTreeMap<u32, i64> = BTreeMap::new();
                for r in day_rows.iter().filter(|r| &r.tenant_id == t) {
                    let d: u32 = r.day.get(8..).and_then(|d| d.parse().ok()).unwrap_or(1);
                    *daily.entry(d).or_default() += r.totals.cost_micro;
                }
                let today = if cp.clock.month(now) == period {
                    cp.clock.day_of_month(now)
                } else {
                    days
                };
                if let Some(fc) = forecast_month_end(&daily, today, days) {
                    forecast = money(MicroUsd(fc));
                }
                budget = money(b);
                burndown = Some(burndown_chart(&daily, b.0, today, days));
            }
        }
    }
    let staff = s.actor.role != Role::TenantAdmin;
    let tenants = if staff {
        cp.store
            .tenant_ids(s.actor.scope())
            .await?
            .into_iter()
            .map(|t| {
                let sel = tenant.as_deref() == Some(t.as_str());
                (t, sel)
            })
            .collect()
    } else {
        vec![]
    };
    let tenant_q = tenant.clone().unwrap_or_default();
    let query = if tenant_q.is_empty() {
        format!("period={period}")
    } else {
        format!("period={period}&tenant={tenant_q}")
    };
    use domain::period::MonthPhase;
    let state = match domain::period::month_phase(&cp.clock.month(now), &period) {
        _ if bill.state == "closed" => "bills.state_closed",
        Some(MonthPhase::Current) => "bills.state_current",
        Some(MonthPhase::Previous) => "bills.state_previous",
        _ => "",
    };
    let start = cp.clock.month_bounds(&period).map_or(now, |b| b.0);
    render(BillsPage {
        c: Chrome::new(&s, "nav.bills", "/console/bills"),
        state,
        bad_period,
        span: cp.clock.month_span(&period).unwrap_or_default(),
        zone: cp.clock.zone_label(start),
        period,
        tenants,
        lines,
        total,
        by: by
            .map(|b| match b {
                DrillBy::App => "app",
                DrillBy::Model => "model",
                DrillBy::Day => "day",
            })
            .unwrap_or("")
            .to_string(),
        drill: drill
            .iter()
            .map(|l| DrillRow {
                tenant: l.tenant_id.clone(),
                key: l.key.clone(),
                requests: thousands(l.requests),
                input: thousands(l.input_tokens),
                output: thousands(l.output_tokens),
                cost: money(l.cost_usd),
            })
            .collect(),
        group_by: match &group_by {
            Some(GroupBy::EndUser) => "end_user".into(),
            Some(GroupBy::Tag(_)) => "tag".into(),
            None => String::new(),
        },
        group_label: group_by.as_ref().map(GroupBy::as_param).unwrap_or_default(),
        attributed: attributed
            .iter()
            .map(|l| AttributedRow {
                tenant: l.tenant_id.clone(),
                value: l.value.clone(),
                requests: thousands(l.requests),
                input: thousands(l.input_tokens),
                output: thousands(l.output_tokens),
                cost: money(l.cost_usd),
            })
            .collect(),
        tag_keys,
        query,
        daily: daily_spend_chart(&day_rows, days),
        burndown,
        burndown_tenant: burn_tenant.unwrap_or_default(),
        forecast,
        budget,
    })
}

fn csv(name: String, body: String) -> Response {
    (
        [
            (header::CONTENT_TYPE, "text/csv; charset=utf-8".to_string()),
            (
                header::CONTENT_DISPOSITION,
                format!("attachment; filename=\"{name}\""),
            ),
        ],
        body,
    )
        .into_response()
}

/// The CSV export for the console (a session, not a bearer token).
pub async fn csv_export(
    State(cp): State<Arc<ControlPlane>>,
    s: Session,
    Query(f): Query<BillForm>,
) -> Result<Response, PageError> {
    let scope = bill_scope(&s.actor, Some(f.tenant.trim()).filter(|t| !t.is_empty()))?;
    let body = cp
        .books
        .csv(f.period.trim(), &scope)
        .await
        .map_err(books_error)?;
    Ok(csv(format!("tollgate-bill-{}.csv", f.period.trim()), body))
}

pub async fn focus_export(
    State(cp): State<Arc<ControlPlane>>,
    s: Session,
    Query(f): Query<BillForm>,
) -> Result<Response, PageError> {
    let scope = bill_scope(&s.actor, Some(f.tenant.trim()).filter(|t| !t.is_empty()))?;
    let body = cp
        .books
        .focus_csv(f.period.trim(), &scope)
        .await
        .map_err(books_error)?;
    Ok(csv(format!("tollgate-focus-{}.csv", f.period.trim()), body))
}

pub struct RunLine {
    pub job: String,
    pub started: String,
    pub finished: String,
    pub outcome: String,
    pub counts: String,
    pub error: String,
    pub replica: String,
}

pub struct MonthLine {
    pub period: String,
    pub state: String,
    pub events: String,
    pub cost: String,
    pub closed: String,
    pub purge_after: String,
}

pub struct DiffLine {
    pub period: String,
    pub tenant: String,
    pub scope: String,
    pub field: String,
    pub redis: String,
    pub postgres: String,
    pub clickhouse: String,
}

#[derive(Template)]
#[template(path = "pages/jobs.html")]
struct JobsPage {
    c: Chrome,
    runs: Vec<RunLine>,
    months: Vec<MonthLine>,
    reconcile_at: String,
    diffs: Vec<DiffLine>,
}

pub async fn jobs(
    State(cp): State<Arc<ControlPlane>>,
    s: Session,
) -> Result<Html<String>, PageError> {
    if s.actor.role == Role::TenantAdmin {
        return Err(ApiError::Forbidden("job runs are for platform staff".into()).into());
    }
    let scope = s.actor.scope();
    let runs = cp.store.job_runs(scope, None, 100).await?;
    let last_reconcile = cp.store.job_runs(scope, Some("reconcile"), 1).await?;
    let v = |x: &serde_json::Value| match x {
        serde_json::Value::Null => "-".to_string(),
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    let diffs = last_reconcile
        .first()
        .and_then(|r| {
            r.detail
                .get("differences")
                .and_then(|d| d.as_array())
                .cloned()
        })
        .unwrap_or_default()
        .iter()
        .map(|d| DiffLine {
            period: v(&d["period"]),
            tenant: v(&d["tenant_id"]),
            scope: v(&d["scope"]),
            field: v(&d["field"]),
            redis: v(&d["redis"]),
            postgres: v(&d["postgres"]),
            clickhouse: v(&d["clickhouse"]),
        })
        .collect();
    render(JobsPage {
        c: Chrome::new(&s, "nav.jobs", "/console/jobs"),
        reconcile_at: last_reconcile
            .first()
            .map(|r| {
                let outcome = s.lang.tv("outcome", &r.outcome);
                format!("{} ({outcome})", super::when(r.started_at))
            })
            .unwrap_or_default(),
        diffs,
        runs: runs
            .into_iter()
            .map(|r| RunLine {
                job: r.job,
                started: super::when(r.started_at),
                finished: r.finished_at.map(super::when).unwrap_or_default(),
                outcome: r.outcome,
                counts: r.counts.to_string(),
                error: r.error.unwrap_or_default(),
                replica: r.replica,
            })
            .collect(),
        months: cp
            .store
            .closed_months()
            .await?
            .into_iter()
            .map(|m| MonthLine {
                period: m.period,
                state: m.state,
                events: thousands(m.totals.requests),
                cost: money(MicroUsd(m.totals.cost_micro)),
                closed: m.closed_at.map(super::when).unwrap_or_default(),
                purge_after: m.purge_after.map(super::when).unwrap_or_default(),
            })
            .collect(),
    })
}

pub struct NoticeLine {
    pub at: String,
    pub tenant: String,
    pub kind: String,
    pub message: String,
}

#[derive(Template)]
#[template(path = "pages/notices.html")]
struct NoticesPage {
    c: Chrome,
    rows: Vec<NoticeLine>,
}

pub async fn notices(
    State(cp): State<Arc<ControlPlane>>,
    s: Session,
) -> Result<Html<String>, PageError> {
    let rows = cp.store.notices(s.actor.scope(), 200).await?;
    render(NoticesPage {
        c: Chrome::new(&s, "nav.notices", "/console/notices"),
        rows: rows
            .into_iter()
            .map(|n| NoticeLine {
                at: super::when(n.at),
                message: notice_message(s.lang, &n),
                tenant: n.tenant_id.unwrap_or_default(),
                kind: n.kind,
            })
            .collect(),
    })
}

/// A notice in the reader's language, written from its kind and detail
/// (the stored message is English); a kind the table does not know shows
/// its stored message.
fn notice_message(lang: crate::i18n::Lang, n: &store::NoticeRow) -> String {
    let d = &n.detail;
    let s = |k: &str| match &d[k] {
        serde_json::Value::String(v) => v.clone(),
        serde_json::Value::Null => String::new(),
        v => v.to_string(),
    };
    let n_of = |k: &str| d[k].as_i64().map(thousands).unwrap_or_default();
    let fill = |key: &str, args: &[(&str, String)]| {
        args.iter().fold(lang.t(key).to_string(), |t, (k, v)| {
            t.replace(&format!("{{{k}}}"), v)
        })
    };
    match n.kind.as_str() {
        "usage_anomaly" => fill(
            "notice.usage_anomaly_text",
            &[
                ("model", s("model")),
                ("kind", s("kind")),
                ("request", s("request_id")),
                ("in", n_of("billed_input_tokens")),
                ("out", n_of("billed_output_tokens")),
            ],
        ),
        "job_failed" => fill(
            "notice.job_failed_text",
            &[("job", lang.tv("job", &s("job")))],
        ),
        "redis_eviction_policy" => lang.t("notice.redis_eviction_policy_text").into(),
        _ => n.message.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn burndown_falls_by_the_daily_spend_and_forecasts_the_rest() {
        let mut d = BTreeMap::new();
        d.insert(1, 100);
        d.insert(2, 100);
        let c = burndown_chart(&d, 1000, 3, 10);
        assert_eq!(c.series.len(), 3);
        assert_eq!(c.series[0].points.split(' ').count(), 3, "days 1..=3");
        assert_eq!(c.series[1].points.split(' ').count(), 8, "today..=10");
        assert!(c.series.iter().all(|s| s
            .points
            .bytes()
            .all(|b| b.is_ascii_digit() || b == b',' || b == b' ' || b == b'-')));
        let daily = daily_spend_chart(&[], 30);
        assert!(daily.series.is_empty());
    }
}
