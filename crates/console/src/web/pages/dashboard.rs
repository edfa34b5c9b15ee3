//! The start page, one per role: what that person looks at first.

use super::audit::AuditLine;
use super::bills::{books_error, secs_into_day, trend_chart, LineChart};
use super::quota::{self, QuotaLine};
use super::thousands;
use crate::api::{audit, quota_requests, tenants, usage};
use crate::web::{render, Chrome, PageError, Session};
use crate::ControlPlane;
use askama::Template;
use axum::extract::State;
use axum::response::Html;
use domain::bill::{cumulative, spend_by_day, spend_trend};
use domain::period::{days_in_month, previous_month};
use domain::roles::Role;
use domain::{limits, MicroUsd};
use std::collections::BTreeMap;
use std::sync::Arc;
use store::AuditFilter;

/// One tenant's month, formatted.
pub struct UsageLine {
    pub tenant: String,
    pub period: String,
    pub used: String,
    pub held: String,
    pub limit: String,
    /// Share of the token budget used, 0–100 (0 when unlimited).
    pub pct: i64,
    pub cost: String,
    pub limit_cost: String,
    /// Share of the cost budget used, 0–100 (0 when unlimited).
    pub cost_pct: i64,
    /// The token / cost budget is spent: the tenant's requests are
    /// refused (402) until it is raised or the month turns
    /// (`domain::limits::budget_spent`).
    pub tokens_spent: bool,
    pub cost_spent: bool,
    pub granted: String,
    /// Effective limit = base + grants + borrowed (docs/design.md §3).
    pub base: String,
    pub borrowed: String,
}

impl UsageLine {
    /// `refusal`: the tenant's latest refusal for its own budget, when no
    /// request was admitted after it (`Store::budget_refusals`).
    pub fn of(u: &usage::MonthUsage, refusal: Option<&store::BudgetRefusal>) -> UsageLine {
        // The limit that refused the tenant's latest request, per measure.
        let refused_at = |reason: &str| {
            let r = refusal.filter(|r| r.reason == reason)?;
            match &r.detail["limit_value"] {
                serde_json::Value::String(v) => MicroUsd::from_usd_str(v).ok().map(|m| m.0),
                v => v.as_i64(),
            }
        };
        let tokens = u.used_tokens + u.held_tokens;
        let cost = u.cost.0 + u.held_cost.0;
        let limit_cost = u.limit_cost.map(|c| c.0);
        UsageLine {
            tenant: u.tenant_id.clone(),
            period: u.period.clone(),
            used: thousands(u.used_tokens),
            held: thousands(u.held_tokens),
            limit: u.limit_tokens.map(thousands).unwrap_or_default(),
            pct: limits::used_percent(tokens, u.limit_tokens),
            cost: u.cost.shown(),
            limit_cost: u.limit_cost.map(|c| c.shown()).unwrap_or_default(),
            cost_pct: limits::used_percent(cost, limit_cost),
            tokens_spent: limits::budget_spent(
                tokens,
                u.limit_tokens,
                refused_at("tenant_monthly_budget_exhausted"),
            ),
            cost_spent: limits::budget_spent(
                cost,
                limit_cost,
                refused_at("tenant_monthly_cost_exhausted"),
            ),
            granted: thousands(u.granted_tokens),
            base: u.base_limit_tokens.map(thousands).unwrap_or_default(),
            borrowed: thousands(u.borrowed_tokens),
        }
    }

    pub fn spent(&self) -> bool {
        self.tokens_spent || self.cost_spent
    }
}

/// A tenant's month with its spent-budget flags.
pub async fn usage_line(
    cp: &ControlPlane,
    a: &store::Principal,
    tenant: &str,
) -> Result<UsageLine, crate::error::ApiError> {
    let u = usage::month_usage(cp, a, tenant, None).await?;
    let narrow = a
        .scope()
        .narrow_to(tenant)
        .ok_or_else(|| crate::error::ApiError::NotFound(format!("tenant {tenant}")))?;
    let refusals = cp.store.budget_refusals(&narrow, &u.period).await?;
    Ok(UsageLine::of(&u, refusals.first()))
}

/// One of the month's biggest spenders.
pub struct TopLine {
    pub tenant: String,
    pub name: String,
    pub this_month: String,
    pub last_month: String,
    /// Share of this month's spend, e.g. `42.0 %`.
    pub share: String,
}

/// The platform's spend: this month so far beside last month, its trend
/// and the month's biggest spenders (platform admins and finance).
pub struct Spend {
    pub period: String,
    pub previous: String,
    pub zone: String,
    pub month_to_date: String,
    pub last_month: String,
    /// Days of the month that are over, and what last month spent in them.
    pub complete_days: u32,
    pub last_complete: String,
    /// `+12 %` / `−75 %`; empty on the first day or when last month had
    /// spent nothing by then.
    pub change: String,
    /// "up", "down" or "" (CSS class of the change).
    pub direction: &'static str,
    pub forecast: String,
    pub chart: LineChart,
    pub top: Vec<TopLine>,
    /// Last month could not be read (its archive is unavailable).
    pub last_missing: bool,
}

/// How many spenders the dashboard lists.
const TOP: usize = 10;

/// The spend section, read from the rollups (or the archive for a closed
/// last month): one row a day and one a tenant per month, whatever the
/// number of events.
async fn spend(
    cp: &ControlPlane,
    s: &Session,
    now: chrono::DateTime<chrono::Utc>,
) -> Result<Spend, PageError> {
    // Platform admins and finance: every tenant.
    let all = s.actor.scope();
    let period = cp.clock.month(now);
    let previous = previous_month(&period).unwrap_or_default();
    let day_costs =
        |m: &BTreeMap<String, i64>| spend_by_day(m.iter().map(|(d, c)| (d.as_str(), *c)));
    let this = day_costs(
        &cp.books
            .day_costs(&period, all)
            .await
            .map_err(books_error)?,
    );
    // Last month may be closed into an archive that is down: the
    // dashboard still shows this month, and says last month is missing.
    let (last_days_t, last_t) = match (
        cp.books.day_costs(&previous, all).await,
        cp.books.tenant_totals(&previous, all).await,
    ) {
        (Ok(d), Ok(t)) => (Some(d), t),
        (Err(e), _) | (_, Err(e)) => {
            tracing::warn!(error = %e, period = %previous, "dashboard: last month unreadable");
            (None, BTreeMap::new())
        }
    };
    let last_missing = last_days_t.is_none();
    let last = last_days_t.as_ref().map(day_costs).unwrap_or_default();
    let today = cp.clock.day_of_month(now);
    let days = days_in_month(&period).unwrap_or(30);
    let last_days = days_in_month(&previous).unwrap_or(30);
    let t = spend_trend(
        &this,
        &last,
        today,
        days,
        secs_into_day(cp, &period, today, now),
    );
    let (change, direction) = match t.change_pct {
        Some(p) if p > 0 => (format!("+{p} %"), "up"),
        Some(p) if p < 0 => (format!("\u{2212}{} %", p.unsigned_abs()), "down"),
        Some(_) => ("0 %".to_string(), ""),
        None => (String::new(), ""),
    };
    let chart = trend_chart(
        (
            s.lang.t("dash.this_month"),
            &period,
            &cumulative(&this, today),
        ),
        (
            s.lang.t("dash.last_month"),
            &previous,
            &cumulative(&last, last_days),
        ),
        days.max(last_days),
    );
    let this_t = cp
        .books
        .tenant_totals(&period, all)
        .await
        .map_err(books_error)?;
    let names: BTreeMap<String, String> = cp
        .store
        .tenant_infos(all)
        .await?
        .into_iter()
        .map(|i| (i.id, i.name))
        .collect();
    let mut top: Vec<(&String, i64)> = this_t.iter().map(|(k, v)| (k, v.cost_micro)).collect();
    top.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    let total = t.month_to_date.max(1) as f64;
    let top = top
        .into_iter()
        .take(TOP)
        .map(|(id, cost)| TopLine {
            tenant: id.clone(),
            name: names.get(id).cloned().unwrap_or_else(|| id.clone()),
            this_month: MicroUsd(cost).shown(),
            last_month: MicroUsd(last_t.get(id).map_or(0, |t| t.cost_micro)).shown(),
            share: format!("{:.1} %", cost as f64 * 100.0 / total),
        })
        .collect();
    let start = cp.clock.month_bounds(&period).map_or(now, |b| b.0);
    Ok(Spend {
        zone: cp.clock.zone_label(start),
        month_to_date: MicroUsd(t.month_to_date).shown(),
        last_month: MicroUsd(t.last_month).shown(),
        complete_days: t.complete_days,
        last_complete: MicroUsd(t.last_complete).shown(),
        change,
        direction,
        forecast: t
            .forecast
            .map(|f| MicroUsd(f.month_end).shown())
            .unwrap_or_default(),
        chart,
        top,
        last_missing,
        period,
        previous,
    })
}

#[derive(Template)]
#[template(path = "pages/dashboard.html")]
struct Dashboard {
    c: Chrome,
    role: &'static str,
    /// (label key, value, link)
    counts: Vec<(&'static str, String, &'static str)>,
    usage: Vec<UsageLine>,
    /// Platform admins: the tenants whose budget is spent (refusing with
    /// 402 now).
    spent: Vec<UsageLine>,
    requests: Vec<QuotaLine>,
    audit: Vec<AuditLine>,
    show_verify: bool,
    spend: Option<Spend>,
}

pub async fn show(
    State(cp): State<Arc<ControlPlane>>,
    s: Session,
) -> Result<Html<String>, PageError> {
    let a = &s.actor;
    let now = chrono::Utc::now();
    let mut d = Dashboard {
        c: Chrome::new(&s, "nav.dashboard", "/console"),
        role: crate::web::role_key(a.role),
        counts: Vec::new(),
        usage: Vec::new(),
        spent: Vec::new(),
        requests: Vec::new(),
        audit: Vec::new(),
        show_verify: false,
        spend: None,
    };
    let requests = quota_requests::visible_requests(&cp, a).await?;
    let pending = requests.iter().filter(|q| q.state == "pending").count();
    match a.role {
        Role::PlatformAdmin => {
            let ts = tenants::visible_tenants(&cp, a).await?;
            d.counts = vec![
                ("dash.tenants", ts.len().to_string(), "/console/tenants"),
                (
                    "dash.pending",
                    pending.to_string(),
                    "/console/quota-requests",
                ),
                (
                    "dash.models",
                    cp.store.models().await?.len().to_string(),
                    "/console/models",
                ),
                (
                    "dash.users",
                    cp.store.users().await?.len().to_string(),
                    "/console/users",
                ),
            ];
            let pending: Vec<_> = requests
                .iter()
                .filter(|q| q.state == "pending")
                .take(5)
                .cloned()
                .collect();
            d.requests = quota::lines(&cp, a, s.lang, &pending, now).await?;
            d.audit = recent_audit(&cp, &s, 5).await?;
            d.spend = Some(spend(&cp, &s, now).await?);
            // Only the tenants refusing for their budget are read live.
            let period = cp.clock.month(now);
            for r in cp.store.budget_refusals(a.scope(), &period).await? {
                let u = usage::month_usage(&cp, a, &r.tenant_id, None).await?;
                let line = UsageLine::of(&u, Some(&r));
                if line.spent() {
                    d.spent.push(line);
                }
            }
        }
        Role::TenantAdmin => {
            let t = a.tenant.clone().unwrap_or_default();
            d.usage = vec![usage_line(&cp, a, &t).await?];
            d.counts = vec![
                (
                    "dash.apps",
                    cp.store.apps_of(a.scope(), &t).await?.len().to_string(),
                    "/console/apps",
                ),
                (
                    "dash.pending",
                    pending.to_string(),
                    "/console/quota-requests",
                ),
            ];
            let recent: Vec<_> = requests.iter().take(5).cloned().collect();
            d.requests = quota::lines(&cp, a, s.lang, &recent, now).await?;
        }
        Role::Finance => {
            d.spend = Some(spend(&cp, &s, now).await?);
            let period = cp.clock.month(now);
            let refusals = cp.store.budget_refusals(a.scope(), &period).await?;
            for t in tenants::visible_tenants(&cp, a).await? {
                let u = usage::month_usage(&cp, a, &t.id, None).await?;
                let r = refusals.iter().find(|r| r.tenant_id == t.id);
                d.usage.push(UsageLine::of(&u, r));
            }
        }
        Role::Auditor => {
            d.show_verify = true;
            d.audit = recent_audit(&cp, &s, 10).await?;
        }
    }
    render(d)
}

async fn recent_audit(cp: &ControlPlane, s: &Session, n: i64) -> Result<Vec<AuditLine>, PageError> {
    let f = AuditFilter {
        limit: n,
        ..Default::default()
    };
    let rows = audit::search(cp, &s.actor, &f).await?;
    let names = super::audit::AuditNames::of(cp, s, &rows).await?;
    Ok(rows
        .iter()
        .map(|r| AuditLine::shown(r, cp.clock, s.lang, &names))
        .collect())
}
