//! Bills (docs/design.md §9): what a department spent in a month, from whichever
//! book holds the month (Postgres while open, ClickHouse once closed). The
//! books hand over rows at fixed grains; everything a reader sees — tenant
//! lines, drill-downs, totals, CSV and FOCUS exports, forecasts — is computed
//! here, so an open and a closed month are rendered by the same code.

use crate::money::{apportion, micro_rounded, signed_micro_rounded, MicroUsd};
use crate::pricing::{Charges, Component};
use serde::Serialize;
use std::collections::BTreeMap;

mod attributed;
mod export;
mod trend;

pub use attributed::*;
pub use export::*;
pub use trend::*;

/// Requests, tokens and money of some set of usage events.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Totals {
    pub requests: i64,
    pub input_tokens: i64,
    pub output_tokens: i64,
    /// Each request's cost rounded up to the micro-USD, summed: what the
    /// budgets counted.
    pub cost_micro: i64,
    /// The exact cost, pico-USD: what bills round, once per line.
    pub cost_pico: i64,
    /// The exact cost by charge component (adds up to `cost_pico` but for
    /// events from before components were kept: [`Totals::unsplit_pico`]).
    pub charges: Charges,
}

impl Totals {
    pub fn add(&mut self, o: &Totals) {
        self.requests = self.requests.saturating_add(o.requests);
        self.input_tokens = self.input_tokens.saturating_add(o.input_tokens);
        self.output_tokens = self.output_tokens.saturating_add(o.output_tokens);
        self.cost_micro = self.cost_micro.saturating_add(o.cost_micro);
        self.cost_pico = self.cost_pico.saturating_add(o.cost_pico);
        self.charges.add(&o.charges);
    }

    /// These totals less `o`'s (a tenant's rest after its tagged rows).
    pub fn sub(&mut self, o: &Totals) {
        self.requests -= o.requests;
        self.input_tokens -= o.input_tokens;
        self.output_tokens -= o.output_tokens;
        self.cost_micro -= o.cost_micro;
        self.cost_pico -= o.cost_pico;
        for i in 0..crate::charges::N_COMPONENTS {
            self.charges.quantity[i] -= o.charges.quantity[i];
            self.charges.pico[i] -= o.charges.pico[i];
        }
    }

    /// Whether these totals are still what a month's closing record says
    /// (`closing`: requests, tokens, `cost_micro`, and the exact cost when
    /// it was recorded, ≥ 0; a closing record keeps no components).
    pub fn matches_closing(&self, closing: &Totals) -> bool {
        let recorded = |t: &Totals| (t.requests, t.input_tokens, t.output_tokens, t.cost_micro);
        recorded(self) == recorded(closing)
            && (closing.cost_pico < 0 || self.cost_pico == closing.cost_pico)
    }

    /// The part of the exact cost in no component: events from before
    /// components were kept, and holds that expired (billed at their
    /// estimate, which has no split).
    pub fn unsplit_pico(&self) -> i128 {
        (i128::from(self.cost_pico) - self.charges.total_pico()).max(0)
    }

    /// The exact cost by component, with the unsplit part last (None),
    /// for the components present.
    pub fn component_weights(&self) -> Vec<(Option<Component>, i64, i128)> {
        let mut v: Vec<(Option<Component>, i64, i128)> = self
            .charges
            .present()
            .map(|(c, q, p)| (Some(c), q, i128::from(p)))
            .collect();
        let rest = self.unsplit_pico();
        if rest > 0 {
            v.push((None, 0, rest));
        }
        v
    }

    pub fn tokens(&self) -> i64 {
        self.input_tokens + self.output_tokens
    }
}

/// The cost of lines that belong to tenants, rounded by the bill's rule
/// (docs/billing.md, "Exact cost, and the rounding rule"): each tenant's
/// exact cost is rounded **once**, half up to the micro-USD — its bill line
/// — and that amount is split across the tenant's lines in `lines` by the
/// largest-remainder rule ([`apportion`]) weighted by their exact costs, so
/// a tenant's lines (apps, models, days, components, tags, FOCUS rows) add
/// up to its bill line in every view. `lines` are (tenant, exact pico-USD);
/// the result is in the same order. The bill's total is the sum of the
/// tenants' lines.
pub fn line_costs(lines: &[(&str, i128)]) -> Vec<i64> {
    let mut by_tenant: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for (i, (t, _)) in lines.iter().enumerate() {
        by_tenant.entry(t).or_default().push(i);
    }
    let mut out = vec![0i64; lines.len()];
    for idx in by_tenant.values() {
        let weights: Vec<i128> = idx.iter().map(|&i| lines[i].1.max(0)).collect();
        let line = i128::from(micro_rounded(weights.iter().sum()));
        for (&i, share) in idx.iter().zip(apportion(line, &weights)) {
            out[i] = i64::try_from(share).unwrap_or(i64::MAX);
        }
    }
    out
}

/// A tenant's bill line: its exact cost rounded once, half up.
pub fn tenant_line(t: &Totals) -> MicroUsd {
    MicroUsd(micro_rounded(i128::from(t.cost_pico)))
}

/// One charge component of a tenant's bill line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ComponentLine {
    /// The component's name (`cached_input`, `web_search` …); `unsplit`
    /// for cost kept without a split (see [`Totals::unsplit_pico`]).
    pub component: &'static str,
    /// `tokens` or `calls` (empty for `unsplit`).
    pub unit: &'static str,
    pub quantity: i64,
    pub cost_usd: MicroUsd,
}

/// A tenant's bill line by component: the line's amount split across its
/// components by their exact costs (they add up to the line).
pub fn component_lines(t: &Totals) -> Vec<ComponentLine> {
    let weights = t.component_weights();
    let line = i128::from(tenant_line(t).0);
    let shares = apportion(line, &weights.iter().map(|w| w.2).collect::<Vec<_>>());
    weights
        .into_iter()
        .zip(shares)
        .map(|((c, q, _), share)| ComponentLine {
            component: c.map_or("unsplit", Component::name),
            unit: c.map_or("", Component::unit),
            quantity: q,
            cost_usd: MicroUsd(i64::try_from(share).unwrap_or(i64::MAX)),
        })
        .collect()
}

/// A month's usage of one tenant × app × model: the archived bill grain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BillRow {
    pub tenant_id: String,
    pub app_id: String,
    pub model: String,
    pub totals: Totals,
}

/// One day of one tenant × app × model (day drill-down and FOCUS export).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DayRow {
    pub tenant_id: String,
    pub app_id: String,
    pub model: String,
    /// `YYYY-MM-DD`, platform time.
    pub day: String,
    /// The requests' tags (FOCUS `Tags`); rows differing only in tags are
    /// separate rows.
    pub tags: crate::attribution::Tags,
    pub totals: Totals,
}

/// An approved provider-invoice adjustment's share on a department's bill
/// (docs/billing.md, "Adjustments"); tenant `""` is the unallocated line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AdjustmentLine {
    #[serde(skip)]
    pub tenant_id: String,
    pub adjustment_id: String,
    pub account: String,
    /// `YYYY-MM-DD` (UTC, the provider's day).
    pub day: String,
    /// The provider's model name.
    pub model: String,
    /// The share, rounded once to the micro-USD (half away from zero).
    pub cost_usd: MicroUsd,
    /// The exact share.
    #[serde(skip)]
    pub pico: i128,
}

impl AdjustmentLine {
    pub fn new(
        tenant_id: String,
        adjustment_id: String,
        account: String,
        day: String,
        model: String,
        pico: i128,
    ) -> Self {
        AdjustmentLine {
            tenant_id,
            adjustment_id,
            account,
            day,
            model,
            cost_usd: MicroUsd(signed_micro_rounded(pico)),
            pico,
        }
    }
}

/// The sum of adjustment lines, saturated.
fn adjustments_sum<'a>(lines: impl Iterator<Item = &'a AdjustmentLine>) -> MicroUsd {
    MicroUsd(lines.fold(0i64, |a, l| a.saturating_add(l.cost_usd.0)))
}

/// Refused (or degraded) requests of one tenant × app × model by reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefusalRow {
    pub tenant_id: String,
    pub app_id: String,
    pub model: String,
    /// `refused` or `degraded`.
    pub decision: String,
    pub reason: String,
    pub requests: i64,
}

/// Tokens and money of quota added to a tenant in the month: temporary
/// grants approved in it, or borrows from the shared pool taken in it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct QuotaAmount {
    pub tokens: i64,
    pub cost_micro: i64,
}

/// A tenant's name and cost center, for bill lines and exports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TenantInfo {
    pub id: String,
    pub name: String,
    pub cost_center: String,
}

/// Where a month's numbers were read from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum BillSource {
    Postgres,
    Clickhouse,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TenantBill {
    pub tenant_id: String,
    pub name: String,
    pub cost_center: String,
    pub requests: i64,
    pub input_tokens: i64,
    pub output_tokens: i64,
    /// The tenant's exact cost rounded once ([`tenant_line`]).
    pub cost_usd: MicroUsd,
    /// The cost by charge component; adds up to `cost_usd`.
    pub components: Vec<ComponentLine>,
    /// Borrowed from the shared pool in the month (docs/design.md §7), gross of
    /// later reclaims.
    pub borrowed_tokens: i64,
    pub borrowed_cost_usd: MicroUsd,
    pub granted_tokens: i64,
    pub granted_cost_usd: MicroUsd,
    pub refused_requests: i64,
    /// Refused requests by reason code.
    pub refused: BTreeMap<String, i64>,
    /// Approved provider-invoice adjustments billed to the department in
    /// the month (signed), and their lines.
    pub adjustment_usd: MicroUsd,
    pub adjustments: Vec<AdjustmentLine>,
    /// `cost_usd` + `adjustment_usd`: what the department is charged.
    pub billed_usd: MicroUsd,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct BillTotal {
    pub requests: i64,
    pub input_tokens: i64,
    pub output_tokens: i64,
    pub cost_usd: MicroUsd,
    pub refused_requests: i64,
    /// Every adjustment of the bill's departments (and, on the platform's
    /// bill, the unallocated ones).
    pub adjustment_usd: MicroUsd,
    /// Adjustments finance left unallocated (platform's bill only).
    pub unallocated_adjustment_usd: MicroUsd,
    /// `cost_usd` + `adjustment_usd`.
    pub billed_usd: MicroUsd,
}

/// Drill-down dimension.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DrillBy {
    App,
    Model,
    Day,
    /// Charge components (cached input, cache writes, output, tool calls …).
    Component,
}

impl DrillBy {
    pub fn parse(s: &str) -> Option<DrillBy> {
        match s {
            "app" => Some(DrillBy::App),
            "model" => Some(DrillBy::Model),
            "day" => Some(DrillBy::Day),
            "component" => Some(DrillBy::Component),
            _ => None,
        }
    }
}

/// One line of a drill-down: a tenant and the app, model, day or charge
/// component. A component line has its quantity and unit, and no request
/// or token counts (0).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DrillLine {
    pub tenant_id: String,
    pub key: String,
    pub requests: i64,
    pub input_tokens: i64,
    pub output_tokens: i64,
    pub cost_usd: MicroUsd,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub quantity: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unit: Option<&'static str>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Bill {
    pub period: String,
    /// `open` or `closed`.
    pub state: String,
    pub source: BillSource,
    pub billing_currency: &'static str,
    pub tenants: Vec<TenantBill>,
    pub total: BillTotal,
}

/// The books' rows for one month, as read from either store.
#[derive(Debug, Clone, Default)]
pub struct MonthRows {
    pub bill_rows: Vec<BillRow>,
    pub refusals: Vec<RefusalRow>,
    /// Approved adjustments billed in the month (always from Postgres).
    pub adjustments: Vec<AdjustmentLine>,
}

impl Bill {
    /// Assembles the bill: one line per tenant that has usage, refusals or
    /// grants in the month (sorted by id), and the total.
    pub fn assemble(
        period: &str,
        closed: bool,
        source: BillSource,
        rows: &MonthRows,
        granted: &BTreeMap<String, QuotaAmount>,
        borrowed: &BTreeMap<String, QuotaAmount>,
        tenants: &[TenantInfo],
    ) -> Bill {
        let mut usage: BTreeMap<&str, Totals> = BTreeMap::new();
        for r in &rows.bill_rows {
            usage.entry(&r.tenant_id).or_default().add(&r.totals);
        }
        let mut refused: BTreeMap<&str, BTreeMap<String, i64>> = BTreeMap::new();
        for r in rows.refusals.iter().filter(|r| r.decision == "refused") {
            *refused
                .entry(&r.tenant_id)
                .or_default()
                .entry(r.reason.clone())
                .or_default() += r.requests;
        }
        let mut ids: Vec<&str> = usage.keys().copied().collect();
        ids.extend(refused.keys().copied());
        ids.extend(granted.keys().map(String::as_str));
        ids.extend(borrowed.keys().map(String::as_str));
        ids.extend(
            rows.adjustments
                .iter()
                .map(|a| a.tenant_id.as_str())
                .filter(|t| !t.is_empty()),
        );
        ids.sort_unstable();
        ids.dedup();
        let by_id = tenants_by_id(tenants);
        let info = |id: &str| by_id.get(id).copied();
        let mut total = BillTotal {
            requests: 0,
            input_tokens: 0,
            output_tokens: 0,
            cost_usd: MicroUsd::ZERO,
            refused_requests: 0,
            adjustment_usd: MicroUsd::ZERO,
            unallocated_adjustment_usd: adjustments_sum(
                rows.adjustments.iter().filter(|a| a.tenant_id.is_empty()),
            ),
            billed_usd: MicroUsd::ZERO,
        };
        let lines = ids
            .into_iter()
            .map(|id| {
                let u = usage.get(id).copied().unwrap_or_default();
                let r = refused.get(id).cloned().unwrap_or_default();
                let g = granted.get(id).cloned().unwrap_or_default();
                let b = borrowed.get(id).cloned().unwrap_or_default();
                let refused_requests = r.values().sum();
                total.requests += u.requests;
                total.input_tokens += u.input_tokens;
                total.output_tokens += u.output_tokens;
                let line = tenant_line(&u);
                total.cost_usd.0 = total.cost_usd.0.saturating_add(line.0);
                total.refused_requests += refused_requests;
                let adjustments: Vec<AdjustmentLine> = rows
                    .adjustments
                    .iter()
                    .filter(|a| a.tenant_id == id)
                    .cloned()
                    .collect();
                let adjustment = adjustments_sum(adjustments.iter());
                TenantBill {
                    tenant_id: id.to_string(),
                    name: info(id).map(|t| t.name.clone()).unwrap_or_default(),
                    cost_center: info(id).map(|t| t.cost_center.clone()).unwrap_or_default(),
                    requests: u.requests,
                    input_tokens: u.input_tokens,
                    output_tokens: u.output_tokens,
                    cost_usd: line,
                    components: component_lines(&u),
                    borrowed_tokens: b.tokens,
                    borrowed_cost_usd: MicroUsd(b.cost_micro),
                    granted_tokens: g.tokens,
                    granted_cost_usd: MicroUsd(g.cost_micro),
                    refused_requests,
                    refused: r,
                    adjustment_usd: adjustment,
                    adjustments,
                    billed_usd: MicroUsd(line.0.saturating_add(adjustment.0)),
                }
            })
            .collect::<Vec<TenantBill>>();
        total.adjustment_usd = MicroUsd(
            lines
                .iter()
                .fold(total.unallocated_adjustment_usd.0, |a, t| {
                    a.saturating_add(t.adjustment_usd.0)
                }),
        );
        total.billed_usd = MicroUsd(total.cost_usd.0.saturating_add(total.adjustment_usd.0));
        Bill {
            period: period.to_string(),
            state: if closed { "closed" } else { "open" }.into(),
            source,
            billing_currency: "USD",
            tenants: lines,
            total,
        }
    }
}

/// The tenants by id, for the lines that name them: a search of the list
/// per line was quadratic (2,000 departments × 20,000 bill rows: tens of
/// millions of comparisons, most of a bill's or CSV's time).
pub fn tenants_by_id(tenants: &[TenantInfo]) -> std::collections::HashMap<&str, &TenantInfo> {
    tenants.iter().map(|t| (t.id.as_str(), t)).collect()
}

fn drill_line(tenant: &str, key: &str, t: &Totals, cost: i64) -> DrillLine {
    DrillLine {
        tenant_id: tenant.to_string(),
        key: key.to_string(),
        requests: t.requests,
        input_tokens: t.input_tokens,
        output_tokens: t.output_tokens,
        cost_usd: MicroUsd(cost),
        quantity: None,
        unit: None,
    }
}

/// Drill-down by app, model or component from bill rows, by day from day
/// rows; sorted by tenant then key. A tenant's lines add up to its bill
/// line ([`line_costs`]).
pub fn drill_down(by: DrillBy, bill_rows: &[BillRow], day_rows: &[DayRow]) -> Vec<DrillLine> {
    let mut m: BTreeMap<(String, String), Totals> = BTreeMap::new();
    if by == DrillBy::Component {
        let mut per_tenant: BTreeMap<&str, Totals> = BTreeMap::new();
        for r in bill_rows {
            per_tenant.entry(&r.tenant_id).or_default().add(&r.totals);
        }
        return per_tenant
            .iter()
            .flat_map(|(t, totals)| {
                component_lines(totals).into_iter().map(|c| DrillLine {
                    tenant_id: t.to_string(),
                    key: c.component.to_string(),
                    requests: 0,
                    input_tokens: 0,
                    output_tokens: 0,
                    cost_usd: c.cost_usd,
                    quantity: Some(c.quantity),
                    unit: Some(c.unit),
                })
            })
            .collect();
    }
    match by {
        DrillBy::App | DrillBy::Model => {
            for r in bill_rows {
                let k = if by == DrillBy::App {
                    &r.app_id
                } else {
                    &r.model
                };
                m.entry((r.tenant_id.clone(), k.clone()))
                    .or_default()
                    .add(&r.totals);
            }
        }
        DrillBy::Day => {
            for r in day_rows {
                m.entry((r.tenant_id.clone(), r.day.clone()))
                    .or_default()
                    .add(&r.totals);
            }
        }
        DrillBy::Component => {}
    }
    let weights: Vec<(&str, i128)> = m
        .iter()
        .map(|((t, _), v)| (t.as_str(), i128::from(v.cost_pico)))
        .collect();
    let costs = line_costs(&weights);
    m.iter()
        .zip(costs)
        .map(|(((t, k), v), cost)| drill_line(t, k, v, cost))
        .collect()
}

/// Month-end forecast from this month's daily spend: what is spent so far,
/// plus today at least the average complete day, plus the average complete
/// day for each day left. None on the first day (no complete day yet).
/// `daily` maps day of month (1-based) to spend; `today` is 1-based.
pub fn forecast_month_end(
    daily: &BTreeMap<u32, i64>,
    today: u32,
    days_in_month: u32,
) -> Option<i64> {
    let complete = today.checked_sub(1).filter(|d| *d > 0)?;
    let spent_complete: i64 = daily.range(..today).map(|(_, v)| *v).sum();
    let spent_today = daily.get(&today).copied().unwrap_or(0);
    // Round the average up: a forecast errs towards warning.
    let avg = (spent_complete + complete as i64 - 1) / complete as i64;
    let left = days_in_month.saturating_sub(today) as i64;
    Some(spent_complete + spent_today.max(avg) + avg * left)
}

/// What a month-end forecast is based on (the console says it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ForecastBasis {
    /// The average of this many complete days of the month.
    CompleteDays(u32),
    /// The first day: today's spend so far, at its rate over the hours of
    /// the day gone (at least one hour counted), for every day of the month.
    TodaySoFar { hours: u32 },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Forecast {
    /// Spend at the month's end.
    pub month_end: i64,
    pub basis: ForecastBasis,
}

/// The month-end forecast, also on the first day: from the second day on
/// it is `forecast_month_end`; on the first, today's spend so far projected
/// over the whole day at its rate (`secs_into_today`: seconds of the day
/// gone, at least an hour is counted so a first minute does not multiply
/// by 1,440), then over every day of the month. Rounded up: a forecast errs
/// towards warning.
pub fn forecast(
    daily: &BTreeMap<u32, i64>,
    today: u32,
    days_in_month: u32,
    secs_into_today: u32,
) -> Forecast {
    if let Some(month_end) = forecast_month_end(daily, today, days_in_month) {
        return Forecast {
            month_end,
            basis: ForecastBasis::CompleteDays(today - 1),
        };
    }
    let spent = daily.get(&today).copied().unwrap_or(0).max(0) as i128;
    let gone = i128::from(secs_into_today.clamp(3600, 86_400));
    let whole_day = (spent * 86_400 + gone - 1) / gone;
    let month_end = whole_day * i128::from(days_in_month.max(1));
    Forecast {
        month_end: i64::try_from(month_end).unwrap_or(i64::MAX),
        basis: ForecastBasis::TodaySoFar {
            hours: secs_into_today / 3600,
        },
    }
}

/// The forecast while the month runs: from its first day to the one
/// before its last (None for a month not begun, `today` 0, and on its
/// last day, when the month is all but spent).
pub fn forecast_while_running(
    daily: &BTreeMap<u32, i64>,
    today: u32,
    days_in_month: u32,
    secs_into_today: u32,
) -> Option<Forecast> {
    (today > 0 && today < days_in_month)
        .then(|| forecast(daily, today, days_in_month, secs_into_today))
}

/// The used-share thresholds that alert (docs/design.md §9): 70% and 90%.
pub const ALERT_THRESHOLDS: [u32; 2] = [70, 90];

/// Thresholds reached by `used` of `limit` (limit > 0), lowest first.
pub fn thresholds_reached(used: i64, limit: i64) -> Vec<u32> {
    if limit <= 0 {
        return vec![];
    }
    ALERT_THRESHOLDS
        .into_iter()
        // used / limit >= p / 100, in integers.
        .filter(|p| (used as i128) * 100 >= (limit as i128) * (*p as i128))
        .collect()
}

/// The scope a budget alert is about, as its `scope` field names it
/// (`tenant:<t>`, `app:<t>/<a>`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AlertScope<'a> {
    Tenant(&'a str),
    App { tenant: &'a str, app: &'a str },
}

impl<'a> AlertScope<'a> {
    pub fn parse(s: &'a str) -> Option<AlertScope<'a>> {
        if let Some(t) = s.strip_prefix("tenant:") {
            return (!t.is_empty()).then_some(AlertScope::Tenant(t));
        }
        let (tenant, app) = s.strip_prefix("app:")?.split_once('/')?;
        (!tenant.is_empty() && !app.is_empty()).then_some(AlertScope::App { tenant, app })
    }
}

/// One disagreement between the books (reconcile --check).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Difference {
    pub period: String,
    pub tenant_id: String,
    /// `tenant:<t>`, `app:<t>/<a>` or `key:<id>`.
    pub scope: String,
    /// `tokens`, `cost_micro`, `requests`.
    pub field: String,
    pub redis: Option<i64>,
    pub postgres: Option<i64>,
    pub clickhouse: Option<i64>,
}

impl std::fmt::Display for Difference {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let v = |x: Option<i64>| x.map_or("-".to_string(), |v| v.to_string());
        write!(
            f,
            "period={} tenant={} scope={} field={} redis={} postgres={} clickhouse={}",
            self.period,
            self.tenant_id,
            self.scope,
            self.field,
            v(self.redis),
            v(self.postgres),
            v(self.clickhouse)
        )
    }
}

/// The values the books hold for one (scope, field); None where a book does
/// not take part (e.g. ClickHouse for an open month). A difference when the
/// present values are not all equal.
pub fn compare(
    period: &str,
    tenant: &str,
    scope: &str,
    field: &str,
    redis: Option<i64>,
    postgres: Option<i64>,
    clickhouse: Option<i64>,
) -> Option<Difference> {
    let present: Vec<i64> = [redis, postgres, clickhouse]
        .into_iter()
        .flatten()
        .collect();
    let agree = present.windows(2).all(|w| w[0] == w[1]);
    (!agree).then(|| Difference {
        period: period.into(),
        tenant_id: tenant.into(),
        scope: scope.into(),
        field: field.into(),
        redis,
        postgres,
        clickhouse,
    })
}

#[cfg(test)]
mod alert_scope_tests {
    use super::AlertScope;

    #[test]
    fn an_alerts_scope_reads_as_tenant_or_app() {
        assert_eq!(
            AlertScope::parse("tenant:marketing-cn"),
            Some(AlertScope::Tenant("marketing-cn"))
        );
        assert_eq!(
            AlertScope::parse("app:t/a-1"),
            Some(AlertScope::App {
                tenant: "t",
                app: "a-1"
            })
        );
        for bad in ["tenant:", "app:t", "app:/a", "key:x", ""] {
            assert_eq!(AlertScope::parse(bad), None, "{bad}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(t: &str, a: &str, m: &str, req: i64, i: i64, o: i64, c: i64) -> BillRow {
        BillRow {
            tenant_id: t.into(),
            app_id: a.into(),
            model: m.into(),
            totals: Totals {
                requests: req,
                input_tokens: i,
                output_tokens: o,
                cost_micro: c,
                cost_pico: c * 1_000_000,
                charges: Default::default(),
            },
        }
    }

    #[test]
    fn bill_lines_and_total_add_up() {
        let rows = MonthRows {
            bill_rows: vec![
                row("b", "x", "m1", 2, 10, 20, 300),
                row("a", "x", "m1", 1, 1, 2, 3),
                row("a", "y", "m2", 1, 4, 5, 6),
            ],
            refusals: vec![
                RefusalRow {
                    tenant_id: "a".into(),
                    app_id: "x".into(),
                    model: "m1".into(),
                    decision: "refused".into(),
                    reason: "tenant_rpm_exceeded".into(),
                    requests: 3,
                },
                RefusalRow {
                    tenant_id: "a".into(),
                    app_id: "x".into(),
                    model: "m1".into(),
                    decision: "degraded".into(),
                    reason: "max_tokens_clamped_to_budget".into(),
                    requests: 7,
                },
                // Admitted after a wait in the fair queue: not a refusal.
                RefusalRow {
                    tenant_id: "a".into(),
                    app_id: "x".into(),
                    model: "m1".into(),
                    decision: "queued".into(),
                    reason: "tenant_inflight_exceeded".into(),
                    requests: 5,
                },
            ],
            adjustments: vec![
                AdjustmentLine::new(
                    "b".into(),
                    "j1".into(),
                    "oa".into(),
                    "2026-11-03".into(),
                    "gpt".into(),
                    2_500_000,
                ),
                AdjustmentLine::new(
                    "d".into(),
                    "j1".into(),
                    "oa".into(),
                    "2026-11-03".into(),
                    "gpt".into(),
                    -1_500_000,
                ),
                AdjustmentLine::new(
                    String::new(),
                    "j2".into(),
                    "oa".into(),
                    "2026-11-04".into(),
                    "gpt".into(),
                    7_000_000,
                ),
            ],
        };
        let mut granted = BTreeMap::new();
        granted.insert(
            "c".to_string(),
            QuotaAmount {
                tokens: 100,
                cost_micro: 0,
            },
        );
        let mut borrowed = BTreeMap::new();
        borrowed.insert(
            "a".to_string(),
            QuotaAmount {
                tokens: 40,
                cost_micro: 0,
            },
        );
        let b = Bill::assemble(
            "2026-11",
            false,
            BillSource::Postgres,
            &rows,
            &granted,
            &borrowed,
            &[],
        );
        let ids: Vec<_> = b.tenants.iter().map(|t| t.tenant_id.as_str()).collect();
        assert_eq!(
            ids,
            ["a", "b", "c", "d"],
            "a department with only an adjustment has a line"
        );
        assert_eq!(b.tenants[0].cost_usd, MicroUsd(9));
        // Adjustments: signed, rounded half away from zero, on their
        // department; the unallocated one only in the total.
        assert_eq!(b.tenants[1].adjustment_usd, MicroUsd(3));
        assert_eq!(b.tenants[1].billed_usd, MicroUsd(303));
        assert_eq!(b.tenants[3].adjustment_usd, MicroUsd(-2));
        assert_eq!(b.total.unallocated_adjustment_usd, MicroUsd(7));
        assert_eq!(b.total.adjustment_usd, MicroUsd(8));
        assert_eq!(b.total.billed_usd, MicroUsd(317));
        let csv = adjustment_csv_rows("2026-11", &rows.adjustments, &[]);
        assert_eq!(csv.lines().count(), 3);
        assert!(
            csv.lines()
                .nth(2)
                .unwrap()
                .starts_with("2026-11,,unallocated,"),
            "{csv}"
        );
        assert!(
            csv.lines()
                .nth(1)
                .unwrap()
                .ends_with(",-0.000002,adjustment"),
            "{csv}"
        );
        assert_eq!(
            b.tenants[0].refused_requests, 3,
            "degrades are not refusals"
        );
        assert_eq!(b.tenants[2].granted_tokens, 100);
        assert_eq!(b.tenants[0].borrowed_tokens, 40);
        assert_eq!(b.total.cost_usd, MicroUsd(309));
        assert_eq!(b.total.requests, 4);
        let by_app = drill_down(DrillBy::App, &rows.bill_rows, &[]);
        assert_eq!(by_app.len(), 3);
        let csv = bill_csv("2026-11", &rows.bill_rows, &[]);
        assert_eq!(csv.lines().count(), 4);
        assert!(csv.lines().nth(1).unwrap().starts_with("2026-11,a,"));
    }

    /// Rows whose exact costs are fractions of a micro-dollar, with
    /// components: every view of a tenant adds up to its bill line, which
    /// is its exact cost rounded once, half up.
    #[test]
    fn each_line_is_rounded_once_and_its_parts_add_up_to_it() {
        use crate::pricing::Component as C;
        let row = |t: &str, a: &str, m: &str, parts: &[(C, i64, i64)]| {
            let mut charges = Charges::default();
            for &(c, q, p) in parts {
                charges.set(c, q, i128::from(p));
            }
            let pico = charges.total_pico() as i64;
            BillRow {
                tenant_id: t.into(),
                app_id: a.into(),
                model: m.into(),
                totals: Totals {
                    requests: 1,
                    input_tokens: 1,
                    output_tokens: 1,
                    // Each request rounded up, as the budgets count it.
                    cost_micro: (pico + 999_999) / 1_000_000,
                    cost_pico: pico,
                    charges,
                },
            }
        };
        let rows = MonthRows {
            bill_rows: vec![
                row(
                    "a",
                    "x",
                    "m1",
                    &[(C::Input, 3, 400_000), (C::CachedInput, 7, 300_000)],
                ),
                row("a", "y", "m1", &[(C::Output, 1, 1_300_000)]),
                row("a", "y", "m2", &[(C::WebSearch, 1, 10_000_000_000)]),
                row("b", "x", "m1", &[(C::Input, 1, 499_999)]),
            ],
            refusals: vec![],
            adjustments: vec![],
        };
        let none = BTreeMap::new();
        let b = Bill::assemble(
            "2026-11",
            false,
            BillSource::Postgres,
            &rows,
            &none,
            &none,
            &[],
        );
        // a: 0.4 + 0.3 + 1.3 + 10,000 µUSD = 10,002.0 µUSD exactly; the
        // rounded-up-per-request sum would be 1 + 2 + 10,000 = 10,003.
        assert_eq!(b.tenants[0].cost_usd, MicroUsd(10_002));
        // b: 0.499999 µUSD rounds down to 0.
        assert_eq!(b.tenants[1].cost_usd, MicroUsd(0));
        assert_eq!(b.total.cost_usd, MicroUsd(10_002));
        let sum = |lines: &[DrillLine], t: &str| -> i64 {
            lines
                .iter()
                .filter(|l| l.tenant_id == t)
                .map(|l| l.cost_usd.0)
                .sum()
        };
        for by in [DrillBy::App, DrillBy::Model, DrillBy::Component] {
            let lines = drill_down(by, &rows.bill_rows, &[]);
            assert_eq!(sum(&lines, "a"), 10_002, "{by:?}");
            assert_eq!(sum(&lines, "b"), 0, "{by:?}");
        }
        let comps = &b.tenants[0].components;
        assert_eq!(
            comps
                .iter()
                .map(|c| (c.component, c.quantity))
                .collect::<Vec<_>>(),
            [
                ("input", 3),
                ("cached_input", 7),
                ("output", 1),
                ("web_search", 1)
            ]
        );
        assert_eq!(comps.iter().map(|c| c.cost_usd.0).sum::<i64>(), 10_002);
        assert_eq!(comps[3].unit, "calls");
        // The CSV's rows add up to each tenant's line too.
        let csv = bill_csv("2026-11", &rows.bill_rows, &[]);
        let csv_sum: i64 = csv
            .lines()
            .skip(1)
            .map(|l| {
                MicroUsd::from_usd_str(l.rsplit(',').nth(1).unwrap())
                    .unwrap()
                    .0
            })
            .sum();
        assert_eq!(csv_sum, b.total.cost_usd.0);
    }

    #[test]
    fn the_first_days_forecast_projects_today_so_far() {
        let mut d = BTreeMap::new();
        // Six hours into day 1, $3 spent: $12 a day, $360 in 30 days.
        d.insert(1, 3_000_000);
        let f = forecast(&d, 1, 30, 6 * 3600);
        assert_eq!(f.month_end, 360_000_000);
        assert_eq!(f.basis, ForecastBasis::TodaySoFar { hours: 6 });
        // The first minutes count as an hour; nothing spent forecasts 0.
        assert_eq!(forecast(&d, 1, 30, 60).month_end, 3_000_000 * 24 * 30);
        assert_eq!(forecast(&BTreeMap::new(), 1, 31, 60).month_end, 0);
        // From day 2 it is the complete days' average.
        d.insert(2, 0);
        let f = forecast(&d, 2, 30, 100);
        assert_eq!(Some(f.month_end), forecast_month_end(&d, 2, 30));
        assert_eq!(f.basis, ForecastBasis::CompleteDays(1));
    }

    #[test]
    fn forecast_extrapolates_complete_days() {
        let mut d = BTreeMap::new();
        assert_eq!(forecast_month_end(&d, 1, 30), None);
        d.insert(1, 100);
        d.insert(2, 200);
        // Day 3 of 30, nothing yet today: 300 + 150 (today) + 150 * 27.
        assert_eq!(forecast_month_end(&d, 3, 30), Some(300 + 150 + 150 * 27));
        // Today already above average counts as spent.
        d.insert(3, 1000);
        assert_eq!(forecast_month_end(&d, 3, 30), Some(300 + 1000 + 150 * 27));
        // Last day: nothing left after today.
        assert_eq!(forecast_month_end(&d, 30, 30), Some(1300 + 45));
    }

    #[test]
    fn thresholds_in_integers() {
        assert!(thresholds_reached(69, 100).is_empty());
        assert_eq!(thresholds_reached(70, 100), vec![70]);
        assert_eq!(thresholds_reached(95, 100), vec![70, 90]);
        assert!(thresholds_reached(5, 0).is_empty());
        assert_eq!(thresholds_reached(i64::MAX, i64::MAX), vec![70, 90]);
    }

    #[test]
    fn compare_names_disagreements_only() {
        assert!(compare("p", "t", "tenant:t", "tokens", Some(5), Some(5), None).is_none());
        assert!(compare("p", "t", "tenant:t", "tokens", None, Some(5), None).is_none());
        let d = compare(
            "p",
            "t",
            "tenant:t",
            "cost_micro",
            Some(6),
            Some(5),
            Some(5),
        )
        .unwrap();
        assert_eq!(
            d.to_string(),
            "period=p tenant=t scope=tenant:t field=cost_micro redis=6 postgres=5 clickhouse=5"
        );
    }
}
