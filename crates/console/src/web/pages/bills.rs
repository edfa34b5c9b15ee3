//! Bills (per department per month, drill-down, CSV and FOCUS links, daily
//! spend and budget burn-down charts as server-rendered SVG), job runs with
//! the months' rollover states and the latest reconcile check, and notices.

use super::thousands;
use crate::api::bills::{console_csv_response, focus_body};
use crate::error::ApiError;
use crate::web::{render, Chrome, PageError, Session};
use crate::ControlPlane;
use askama::Template;
use axum::extract::{Query, State};
use axum::response::{Html, Response};
use billing::BillingError;
use domain::bill::{
    attributed_lines, forecast_while_running, spend_by_day, DayRow, DrillBy, Forecast,
    ForecastBasis, GroupBy,
};
use domain::roles::Role;
use domain::MicroUsd;
use serde::Deserialize;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

pub(super) fn books_error(e: BillingError) -> ApiError {
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
    /// `tag:<key>`, `end_user` or `asked_model` (anything else: no such
    /// drill-down).
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
    /// Refused requests by reason: (code, the reason in the reader's
    /// language, count).
    pub refused_by: Vec<(String, String, String)>,
}

pub struct DrillRow {
    pub tenant: String,
    pub key: String,
    pub requests: String,
    pub input: String,
    pub output: String,
    pub cost: String,
    /// A charge component's quantity and unit (by component only).
    pub quantity: String,
    pub unit: String,
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

/// One value of a chart, where it is drawn and what hovering it says.
pub struct Dot {
    pub x: i64,
    pub y: i64,
    /// The SVG `<title>`: the day and the amount ("2026-12-03: $12.34").
    pub title: String,
}

/// One line of a chart: an SVG `points` list ("x,y x,y …", numbers only)
/// and a dot with a hover title at each value.
pub struct Series {
    /// Shown on hover of the line ("" for none).
    pub name: String,
    pub color: &'static str,
    pub points: String,
    pub dashed: bool,
    pub dots: Vec<Dot>,
}

/// A line chart, already laid out in SVG units (the SVG scales to its
/// container: viewBox, width 100%).
pub struct LineChart {
    pub width: i64,
    pub height: i64,
    pub series: Vec<Series>,
    /// (x, label) under the axis.
    pub x_labels: Vec<(i64, String)>,
    /// (y, label) beside the axis, bottom to top, with a grid line each.
    pub y_ticks: Vec<(i64, String)>,
}

const W: i64 = 640;
const H: i64 = 220;
const PAD: i64 = 40;
/// Left of the plot: room for the amounts of the y axis.
const LEFT: i64 = 72;
const COLORS: [&str; 8] = [
    "#2563eb", "#dc2626", "#16a34a", "#9333ea", "#ea580c", "#0891b2", "#ca8a04", "#4b5563",
];

/// Where day `d` (1-based) and value `v` are drawn, between `lo` and `hi`.
fn xy(d: u32, v: i64, days: u32, lo: i64, hi: i64) -> (i64, i64) {
    let span = (hi - lo).max(1) as f64;
    let x = LEFT + ((d as i64 - 1) * (W - LEFT - PAD)) / (days.max(2) as i64 - 1);
    let y = H - PAD - (((v - lo) as f64 / span) * (H - 2 * PAD) as f64).round() as i64;
    (x, y)
}

/// A series of day-indexed values; each dot's title is its day and amount.
fn series(
    name: String,
    color: &'static str,
    dashed: bool,
    values: &[(u32, i64)],
    (days, lo, hi): (u32, i64, i64),
    title: impl Fn(u32, i64) -> String,
) -> Series {
    let dots: Vec<Dot> = values
        .iter()
        .map(|(d, v)| {
            let (x, y) = xy(*d, *v, days, lo, hi);
            Dot {
                x,
                y,
                title: title(*d, *v),
            }
        })
        .collect();
    Series {
        name,
        color,
        points: dots
            .iter()
            .map(|p| format!("{},{}", p.x, p.y))
            .collect::<Vec<_>>()
            .join(" "),
        dashed,
        dots,
    }
}

fn x_labels(days: u32) -> Vec<(i64, String)> {
    [1, 8, 15, 22, days]
        .into_iter()
        .filter(|d| *d <= days)
        .map(|d| (xy(d, 0, days, 0, 1).0, d.to_string()))
        .collect()
}

/// Five amounts from `lo` to `hi` (quarters), where they are drawn.
fn y_ticks(lo: i64, hi: i64) -> Vec<(i64, String)> {
    (0..=4)
        .map(|i| {
            let v = lo + (hi - lo) * i / 4;
            (xy(1, v, 2, lo, hi).1, MicroUsd(v).shown())
        })
        .collect()
}

/// An axis top in micro-USD whose quarters read as round amounts, at
/// least a cent.
fn nice_top(v: i64) -> i64 {
    super::nice_top(v, 10_000)
}

/// `2026-12-03`: the period's day `d`.
fn day_of(period: &str, d: u32) -> String {
    format!("{period}-{d:02}")
}

/// Daily spend per department: one line per tenant, named by `names`
/// (its id when it has none), for the days that have been (`shown` =
/// today in the current month, the whole month once over, none for a
/// future month) — days to come are not drawn as $0.
pub fn daily_spend_chart(
    rows: &[DayRow],
    names: &BTreeMap<String, String>,
    period: &str,
    days: u32,
    shown: u32,
) -> LineChart {
    let mut per_tenant: BTreeMap<&str, Vec<(&str, i64)>> = BTreeMap::new();
    for r in rows {
        per_tenant
            .entry(&r.tenant_id)
            .or_default()
            .push((&r.day, r.totals.cost_micro));
    }
    let by: BTreeMap<&str, BTreeMap<u32, i64>> = per_tenant
        .into_iter()
        .map(|(t, days)| (t, spend_by_day(days)))
        .collect();
    let max = by
        .values()
        .flat_map(|m| m.values().copied())
        .max()
        .unwrap_or(0);
    let max = nice_top(max);
    let lines = by
        .iter()
        .enumerate()
        .map(|(i, (t, m))| {
            let vals: Vec<(u32, i64)> = (1..=shown.min(days))
                .map(|d| (d, m.get(&d).copied().unwrap_or(0)))
                .collect();
            let name = names.get(*t).map_or(*t, String::as_str);
            series(
                name.to_string(),
                COLORS[i % COLORS.len()],
                false,
                &vals,
                (days, 0, max),
                |d, v| format!("{name} · {}: {}", day_of(period, d), MicroUsd(v).shown()),
            )
        })
        .collect();
    LineChart {
        width: W,
        height: H,
        series: lines,
        x_labels: x_labels(days),
        y_ticks: y_ticks(0, max),
    }
}

/// The dashboards' trend: spend so far this month, day by day (a solid
/// line to today), beside last month's (dashed, the whole month), each
/// named in the reader's language. `days`: the longer month's days.
pub fn trend_chart(
    this: (&str, &str, &[(u32, i64)]),
    last: (&str, &str, &[(u32, i64)]),
    days: u32,
) -> LineChart {
    let max = this
        .2
        .iter()
        .chain(last.2)
        .map(|(_, v)| *v)
        .max()
        .unwrap_or(0);
    let max = nice_top(max);
    let line = |(name, period, vals): (&str, &str, &[(u32, i64)]), color, dashed| {
        series(
            name.to_string(),
            color,
            dashed,
            vals,
            (days, 0, max),
            |d, v| format!("{name} · {}: {}", day_of(period, d), MicroUsd(v).shown()),
        )
    };
    LineChart {
        width: W,
        height: H,
        series: vec![line(last, COLORS[7], true), line(this, COLORS[0], false)],
        x_labels: x_labels(days),
        y_ticks: y_ticks(0, max),
    }
}

/// The burn-down's two lines, named in the reader's language.
pub struct BurnNames<'a> {
    pub remaining: &'a str,
    pub forecast: &'a str,
}

/// Budget burn-down of one tenant: remaining budget after each day so far
/// (solid) and, from today, the forecast's remaining budget to the month's
/// end (dashed). `budget` is the month's effective budget (base + approved
/// grants + borrowed); `today` = days shown as actual (the whole month once
/// closed).
pub fn burndown_chart(
    daily: &BTreeMap<u32, i64>,
    budget: i64,
    (period, today, days): (&str, u32, u32),
    fc: Option<Forecast>,
    names: BurnNames<'_>,
) -> LineChart {
    let mut remaining = budget;
    let mut actual: Vec<(u32, i64)> = vec![];
    for d in 1..=today.min(days) {
        remaining -= daily.get(&d).copied().unwrap_or(0);
        actual.push((d, remaining));
    }
    let mut forecast = vec![];
    if let Some(end) = fc.filter(|_| today < days).map(|f| f.month_end) {
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
    let lo = actual
        .iter()
        .chain(forecast.iter())
        .map(|(_, v)| *v)
        .min()
        .unwrap_or(0)
        .min(0);
    let frame = (days, lo, budget);
    let title = |d: u32, v: i64| format!("{}: {}", day_of(period, d), MicroUsd(v).shown());
    let mut out = vec![series(
        names.remaining.to_string(),
        COLORS[0],
        false,
        &actual,
        frame,
        title,
    )];
    if !forecast.is_empty() {
        out.push(series(
            names.forecast.to_string(),
            COLORS[1],
            true,
            &forecast,
            frame,
            title,
        ));
    }
    let mut zero = series(
        String::new(),
        "#9ca3af",
        true,
        &[(1, 0), (days, 0)],
        frame,
        title,
    );
    zero.dots.clear();
    out.push(zero);
    LineChart {
        width: W,
        height: H,
        series: out,
        x_labels: x_labels(days),
        y_ticks: y_ticks(lo, budget),
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
    /// (id, name, selected)
    tenants: Vec<(String, String, bool)>,
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
    /// `tag`, `end_user`, `asked_model` or empty; its label (`tag:project`) and lines.
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
    /// Translation key of the forecast's basis ("" without a forecast).
    forecast_basis: &'static str,
    forecast_hours: u32,
    budget: String,
    budget_grants: String,
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
    // A tenant that does not exist is said so (not an empty bill); to a
    // tenant admin another tenant's id reads the same.
    let scope = super::tenant_filter(&cp, &s.actor, asked).await?;
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
            refused: thousands(t.refused_requests),
            refused_by: t
                .refused
                .iter()
                .map(|(r, n)| (r.clone(), s.lang.tv("reason", r), thousands(*n)))
                .collect(),
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
        refused_by: Vec::new(),
    };
    // Burn-down: the chosen (or only) tenant with a monthly cost budget.
    let burn_tenant = tenant
        .clone()
        .or_else(|| bill.tenants.first().map(|t| t.tenant_id.clone()));
    // Days that have been: today in the current month, all of a past one,
    // none of a future one (not drawn as $0).
    use domain::period::MonthPhase;
    let phase = domain::period::month_phase(&cp.clock.month(now), &period);
    let today = match phase {
        Some(MonthPhase::Current) => cp.clock.day_of_month(now),
        Some(MonthPhase::Future) => 0,
        _ => days,
    };
    let mut burn = Burn::default();
    if let Some(t) = &burn_tenant {
        if let Some(row) = cp.store.tenant(&scope, t).await? {
            burn = burn_down(
                &cp,
                &s,
                &scope,
                &row,
                &day_rows,
                (&period, today, days),
                now,
            )
            .await?;
        }
    }
    let staff = s.actor.role != Role::TenantAdmin;
    let tenants = if staff {
        cp.store
            .tenant_infos(s.actor.scope())
            .await?
            .into_iter()
            .map(|t| {
                let sel = tenant.as_deref() == Some(t.id.as_str());
                (t.id, t.name, sel)
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
    let state = match phase {
        _ if bill.state == "closed" => "bills.state_closed",
        Some(MonthPhase::Current) => "bills.state_current",
        Some(MonthPhase::Previous) => "bills.state_previous",
        _ => "",
    };
    let start = cp.clock.month_bounds(&period).map_or(now, |b| b.0);
    let names: BTreeMap<String, String> = bill
        .tenants
        .iter()
        .map(|t| (t.tenant_id.clone(), t.name.clone()))
        .collect();
    let daily = daily_spend_chart(&day_rows, &names, &period, days, today);
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
                DrillBy::Component => "component",
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
                quantity: l.quantity.map(thousands).unwrap_or_default(),
                unit: l.unit.unwrap_or_default().to_string(),
            })
            .collect(),
        group_by: match &group_by {
            Some(GroupBy::EndUser) => "end_user".into(),
            Some(GroupBy::AskedModel) => "asked_model".into(),
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
        daily,
        burndown: burn.chart,
        burndown_tenant: burn_tenant.unwrap_or_default(),
        forecast: burn.forecast,
        forecast_basis: burn.basis,
        forecast_hours: burn.hours,
        budget: burn.budget,
        budget_grants: burn.grants,
    })
}

/// The burn-down of one tenant and what the page says under it.
#[derive(Default)]
struct Burn {
    chart: Option<LineChart>,
    budget: String,
    /// The approved grants in the budget ("" when none).
    grants: String,
    forecast: String,
    /// Translation key of what the forecast is based on.
    basis: &'static str,
    /// Complete days or hours of today the forecast reads.
    hours: u32,
}

/// Seconds of day `today` of `period` gone at `now`, in platform time.
pub(super) fn secs_into_day(
    cp: &ControlPlane,
    period: &str,
    today: u32,
    now: chrono::DateTime<chrono::Utc>,
) -> u32 {
    let start = cp
        .clock
        .day_bounds(&format!("{period}-{today:02}"))
        .map_or(now, |b| b.0);
    (now - start).num_seconds().clamp(0, 86_400) as u32
}

/// The tenant's burn-down against its effective monthly cost budget (base
/// + approved grants + borrowed, as the gateway enforces it), if it has one.
async fn burn_down(
    cp: &ControlPlane,
    s: &Session,
    scope: &store::TenantScope,
    t: &store::TenantRow,
    day_rows: &[DayRow],
    (period, today, days): (&str, u32, u32),
    now: chrono::DateTime<chrono::Utc>,
) -> Result<Burn, PageError> {
    let b = crate::api::usage::budgets(cp, scope, t, period, now).await?;
    let Some(budget) = b.effective.monthly_cost_usd else {
        return Ok(Burn::default());
    };
    let daily = spend_by_day(
        day_rows
            .iter()
            .filter(|r| r.tenant_id == t.id)
            .map(|r| (r.day.as_str(), r.totals.cost_micro)),
    );
    // A forecast only while the month runs: seconds of today gone, in
    // platform time.
    let fc: Option<Forecast> =
        forecast_while_running(&daily, today, days, secs_into_day(cp, period, today, now));
    let (basis, hours) = match fc.map(|f| f.basis) {
        Some(ForecastBasis::CompleteDays(n)) => ("bills.forecast_days", n),
        Some(ForecastBasis::TodaySoFar { hours }) => ("bills.forecast_today", hours),
        None => ("", 0),
    };
    let names = BurnNames {
        remaining: s.lang.t("bills.remaining"),
        forecast: s.lang.t("bills.forecast"),
    };
    Ok(Burn {
        chart: Some(burndown_chart(
            &daily,
            budget.0,
            (period, today, days),
            fc,
            names,
        )),
        budget: money(budget),
        grants: if b.granted.1 > 0 {
            money(MicroUsd(b.granted.1))
        } else {
            String::new()
        },
        forecast: fc.map(|f| money(MicroUsd(f.month_end))).unwrap_or_default(),
        basis,
        hours,
    })
}

/// The CSV export for the console (a session, not a bearer token).
pub async fn csv_export(
    State(cp): State<Arc<ControlPlane>>,
    s: Session,
    Query(f): Query<BillForm>,
) -> Result<Response, PageError> {
    let scope = super::tenant_filter(
        &cp,
        &s.actor,
        Some(f.tenant.trim()).filter(|t| !t.is_empty()),
    )
    .await?;
    let body = cp
        .books
        .csv(f.period.trim(), &scope)
        .await
        .map_err(books_error)?;
    Ok(console_csv_response(export_name("bill", &f), body))
}

pub async fn focus_export(
    State(cp): State<Arc<ControlPlane>>,
    s: Session,
    Query(f): Query<BillForm>,
) -> Result<Response, PageError> {
    let scope = super::tenant_filter(
        &cp,
        &s.actor,
        Some(f.tenant.trim()).filter(|t| !t.is_empty()),
    )
    .await?;
    let chunks = cp
        .books
        .focus_chunks(f.period.trim(), &scope)
        .await
        .map_err(books_error)?;
    Ok(console_csv_response(
        export_name("focus", &f),
        focus_body(chunks),
    ))
}

/// A download's file name: `tollgate-{kind}[-{tenant}]-{period}.csv`, the
/// tenant filter named (one tenant's bill is not saved as everyone's); only
/// letters, digits, '-', '_' and '.' are kept.
fn export_name(kind: &str, f: &BillForm) -> String {
    let safe = |v: &str| -> String {
        v.chars()
            .filter(|c| c.is_ascii_alphanumeric() || "-_.".contains(*c))
            .collect()
    };
    let tenant = safe(f.tenant.trim());
    let period = safe(f.period.trim());
    if tenant.is_empty() {
        format!("tollgate-{kind}-{period}.csv")
    } else {
        format!("tollgate-{kind}-{tenant}-{period}.csv")
    }
}

pub struct RunLine {
    pub job: String,
    pub started: String,
    pub finished: String,
    pub outcome: String,
    /// What the run counted, (label, number) in the reader's language.
    pub counts: Vec<(String, String)>,
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
    /// The runs' newest page, when this is not it.
    newest: bool,
    /// The id the next (older) page of runs starts below, if any.
    older: Option<i64>,
    months: Vec<MonthLine>,
    reconcile_at: String,
    diffs: Vec<DiffLine>,
}

/// Runs per page of the jobs page.
const RUNS_PAGE: i64 = 50;

#[derive(Deserialize, Default)]
#[serde(default)]
pub struct JobsForm {
    /// The page of runs below this id ("" = the newest page).
    before: String,
}

/// A run's counts (`{"closed": 1, "deferred": 0}`), each with its label in
/// `lang` (a count the table does not name: its words), numbers grouped.
fn run_counts(lang: crate::i18n::Lang, counts: &serde_json::Value) -> Vec<(String, String)> {
    let Some(m) = counts.as_object() else {
        return Vec::new();
    };
    m.iter()
        .map(|(k, v)| {
            let label = match lang.tv("count", k) {
                l if l == *k => k.replace('_', " "),
                l => l,
            };
            let value = match v {
                serde_json::Value::Number(n) => n.as_i64().map(thousands).unwrap_or(n.to_string()),
                serde_json::Value::String(t) => t.clone(),
                serde_json::Value::Array(a) => thousands(a.len() as i64),
                other => other.to_string(),
            };
            (label, value)
        })
        .collect()
}

pub async fn jobs(
    State(cp): State<Arc<ControlPlane>>,
    s: Session,
    Query(f): Query<JobsForm>,
) -> Result<Html<String>, PageError> {
    if s.actor.role == Role::TenantAdmin {
        return Err(ApiError::Forbidden("job runs are for platform staff".into()).into());
    }
    let scope = s.actor.scope();
    let before = f.before.trim().parse::<i64>().ok();
    let mut runs = cp.store.job_runs_page(scope, before, RUNS_PAGE + 1).await?;
    let older = if runs.len() as i64 > RUNS_PAGE {
        runs.truncate(RUNS_PAGE as usize);
        runs.last().map(|r| r.id)
    } else {
        None
    };
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
                format!("{} ({outcome})", super::when(cp.clock, r.started_at))
            })
            .unwrap_or_default(),
        diffs,
        newest: before.is_some(),
        older,
        runs: runs
            .into_iter()
            .map(|r| RunLine {
                job: r.job,
                started: super::when(cp.clock, r.started_at),
                finished: r
                    .finished_at
                    .map(|t| super::when(cp.clock, t))
                    .unwrap_or_default(),
                outcome: r.outcome,
                counts: run_counts(s.lang, &r.counts),
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
                closed: m
                    .closed_at
                    .map(|t| super::when(cp.clock, t))
                    .unwrap_or_default(),
                purge_after: m
                    .purge_after
                    .map(|t| super::when(cp.clock, t))
                    .unwrap_or_default(),
            })
            .collect(),
    })
}

pub struct NoticeLine {
    pub at: String,
    pub tenant: String,
    pub kind: String,
    pub message: String,
    /// The request the notice is about ("" for none), linked to its
    /// lookup after the message.
    pub request: String,
    pub request_href: String,
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
    let names = NoticeNames::of(&cp, &s, &rows).await?;
    render(NoticesPage {
        c: Chrome::new(&s, "nav.notices", "/console/notices"),
        rows: rows
            .into_iter()
            .map(|n| NoticeLine {
                at: super::when(cp.clock, n.at),
                message: notice_message(s.lang, &n, &names),
                request: notice_request(&n).into(),
                request_href: format!(
                    "/console/requests?{}",
                    serde_urlencoded::to_string([("id", notice_request(&n))]).unwrap_or_default()
                ),
                tenant: n
                    .tenant_id
                    .as_deref()
                    .map(|t| names.tenant(t))
                    .unwrap_or_default(),
                kind: n.kind,
            })
            .collect(),
    })
}

/// The request a notice is about, if any ("").
fn notice_request(n: &store::NoticeRow) -> &str {
    match n.kind.as_str() {
        "usage_anomaly" => n.detail["request_id"].as_str().unwrap_or_default(),
        _ => "",
    }
}

/// The names of the tenants and apps notices speak of (a notice shows
/// names, not ids; an id without a name shows as itself).
#[derive(Default)]
pub struct NoticeNames {
    tenants: HashMap<String, String>,
    /// (tenant, app) → the app's name
    apps: HashMap<(String, String), String>,
}

impl NoticeNames {
    /// The names of the tenants `s` may see (the audit's targets).
    pub(super) async fn tenants(cp: &ControlPlane, s: &Session) -> Result<NoticeNames, PageError> {
        let mut names = NoticeNames::default();
        for t in cp.store.tenant_infos(s.actor.scope()).await? {
            names.tenants.insert(t.id, t.name);
        }
        Ok(names)
    }

    async fn of(
        cp: &ControlPlane,
        s: &Session,
        rows: &[store::NoticeRow],
    ) -> Result<NoticeNames, PageError> {
        let mut names = NoticeNames::default();
        if rows.is_empty() {
            return Ok(names);
        }
        for t in cp.store.tenant_infos(s.actor.scope()).await? {
            names.tenants.insert(t.id, t.name);
        }
        let mut with_apps: Vec<&str> = rows
            .iter()
            .filter_map(|n| n.detail["scope"].as_str())
            .filter_map(|sc| match domain::bill::AlertScope::parse(sc) {
                Some(domain::bill::AlertScope::App { tenant, .. }) => Some(tenant),
                _ => None,
            })
            .collect();
        with_apps.sort_unstable();
        with_apps.dedup();
        for t in with_apps {
            for a in cp.store.apps_of(s.actor.scope(), t).await? {
                names.apps.insert((a.tenant_id, a.id), a.name);
            }
        }
        Ok(names)
    }

    pub(super) fn tenant(&self, id: &str) -> String {
        match self.tenants.get(id) {
            Some(n) if !n.is_empty() => n.clone(),
            _ => id.to_string(),
        }
    }

    fn app(&self, tenant: &str, app: &str) -> String {
        match self.apps.get(&(tenant.to_string(), app.to_string())) {
            Some(n) if !n.is_empty() => n.clone(),
            _ => app.to_string(),
        }
    }

    /// "tenant Marketing China" / "app Campaigns of Marketing China".
    fn scope(&self, lang: crate::i18n::Lang, scope: &str) -> String {
        match domain::bill::AlertScope::parse(scope) {
            Some(domain::bill::AlertScope::Tenant(t)) => {
                lang.t("say.who_tenant").replace("{name}", &self.tenant(t))
            }
            Some(domain::bill::AlertScope::App { tenant, app }) => lang
                .t("notice.scope_app")
                .replace("{app}", &self.app(tenant, app))
                .replace("{tenant}", &self.tenant(tenant)),
            None => scope.to_string(),
        }
    }
}

/// A notice in the reader's language, written from its kind and detail
/// (the stored message is English); a kind the table does not know shows
/// its stored message.
fn notice_message(lang: crate::i18n::Lang, n: &store::NoticeRow, names: &NoticeNames) -> String {
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
                ("kind", lang.tv("anomaly", &s("kind"))),
                ("in", n_of("billed_input_tokens")),
                ("out", n_of("billed_output_tokens")),
            ],
        ),
        "job_failed" => fill(
            "notice.job_failed_text",
            &[("job", lang.tv("job", &s("job")))],
        ),
        "redis_eviction_policy" => lang.t("notice.redis_eviction_policy_text").into(),
        kind if kind.starts_with("budget_") => {
            // A budget alert's amounts: money as dollars, tokens grouped.
            let measure = s("measure");
            let amount = |k: &str| match (measure.as_str(), &d[k]) {
                ("cost", serde_json::Value::String(v)) => MicroUsd::from_usd_str(v)
                    .map(money)
                    .unwrap_or_else(|_| v.clone()),
                (_, v) => v.as_i64().map(thousands).unwrap_or_else(|| s(k)),
            };
            let args = [
                ("scope", names.scope(lang, &s("scope"))),
                (
                    "measure",
                    match measure.as_str() {
                        "cost" => lang.t("notice.measure_cost").to_string(),
                        "tokens" => lang.t("notice.measure_tokens").to_string(),
                        m => m.to_string(),
                    },
                ),
                ("p", s("threshold_percent")),
                ("used", amount("used")),
                ("limit", amount("limit")),
                ("forecast", amount("forecast")),
                ("period", s("period")),
            ];
            let text = if kind == "budget_forecast_over_budget" {
                fill("notice.budget_forecast_text", &args)
            } else if d["threshold_percent"].is_i64() {
                fill("notice.budget_used_text", &args)
            } else {
                return n.message.clone();
            };
            // "tenant Marketing China has used …" starts a sentence.
            let mut c = text.chars();
            c.next()
                .map(|f| f.to_uppercase().chain(c).collect())
                .unwrap_or_default()
        }
        "provider_drift" => fill(
            "notice.provider_drift_text",
            &[
                ("account", s("account")),
                ("day", s("day")),
                (
                    "drift",
                    d["drift_bps"]
                        .as_i64()
                        .map(|b| format!("{:.2}", b as f64 / 100.0))
                        .unwrap_or_default(),
                ),
            ],
        ),
        "provider_reconcile_failed" => fill(
            "notice.provider_reconcile_failed_text",
            &[("account", s("account")), ("day", s("day"))],
        ),
        "provider_day_revised" => fill(
            "notice.provider_day_revised_text",
            &[("account", s("account")), ("day", s("day"))],
        ),
        _ => n.message.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use domain::bill::forecast;

    const NAMES: BurnNames<'static> = BurnNames {
        remaining: "left",
        forecast: "fc",
    };

    #[test]
    fn burndown_falls_by_the_daily_spend_and_forecasts_the_rest() {
        let mut d = BTreeMap::new();
        d.insert(1, 100);
        d.insert(2, 100);
        let fc = forecast(&d, 3, 10, 3600);
        let c = burndown_chart(&d, 1000, ("2026-12", 3, 10), Some(fc), NAMES);
        assert_eq!(c.series.len(), 3);
        assert_eq!(c.series[0].points.split(' ').count(), 3, "days 1..=3");
        assert_eq!(c.series[1].points.split(' ').count(), 8, "today..=10");
        assert!(c.series.iter().all(|s| s
            .points
            .bytes()
            .all(|b| b.is_ascii_digit() || b == b',' || b == b' ' || b == b'-')));
        // Hover titles: the day and the budget left after it.
        assert_eq!(c.series[0].dots[1].title, "2026-12-02: $0.0008");
        assert!(c.series[2].dots.is_empty(), "the zero line has no values");
        // Five amounts on the y axis, bottom to top.
        assert_eq!(c.y_ticks.len(), 5);
        assert!(c.y_ticks.windows(2).all(|w| w[0].0 > w[1].0));
        let daily = daily_spend_chart(&[], &BTreeMap::new(), "2026-12", 30, 30);
        assert!(daily.series.is_empty());
    }

    #[test]
    fn the_daily_axis_tops_at_a_round_amount() {
        assert_eq!(nice_top(0), 10_000, "a cent at least");
        assert_eq!(nice_top(2_479_135), 4_000_000);
        assert_eq!(nice_top(5_000_000), 5_000_000);
        assert_eq!(nice_top(5_000_001), 8_000_000);
        let labels: Vec<String> = y_ticks(0, nice_top(2_479_135))
            .into_iter()
            .map(|t| t.1)
            .collect();
        assert_eq!(labels, ["$0.00", "$1.00", "$2.00", "$3.00", "$4.00"]);
    }

    #[test]
    fn the_first_days_burndown_has_a_forecast() {
        let mut d = BTreeMap::new();
        d.insert(1, 50);
        let fc = forecast(&d, 1, 30, 2 * 3600);
        let c = burndown_chart(&d, 100_000, ("2026-12", 1, 30), Some(fc), NAMES);
        assert_eq!(c.series[1].name, "fc");
        assert_eq!(c.series[1].dots.len(), 30, "today..=30");
    }

    #[test]
    fn days_to_come_are_not_drawn() {
        let row = |day: &str, cost| DayRow {
            tenant_id: "t".into(),
            app_id: "a".into(),
            model: "m".into(),
            day: day.into(),
            tags: Default::default(),
            totals: domain::bill::Totals {
                cost_micro: cost,
                ..Default::default()
            },
        };
        let rows = [row("2026-12-01", 1_000_000), row("2026-12-03", 2_500_000)];
        let c = daily_spend_chart(&rows, &BTreeMap::new(), "2026-12", 31, 3);
        let dots = &c.series[0].dots;
        assert_eq!(dots.len(), 3, "days 1..=3, none after today");
        assert_eq!(dots[0].title, "t · 2026-12-01: $1.00");
        assert_eq!(dots[1].title, "t · 2026-12-02: $0.00");
        assert_eq!(dots[2].title, "t · 2026-12-03: $2.50");
        assert!(
            daily_spend_chart(&rows, &BTreeMap::new(), "2026-12", 31, 0).series[0]
                .dots
                .is_empty()
        );
    }
}
