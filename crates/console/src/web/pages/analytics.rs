//! Usage analytics over a range of platform days: spend, requests and
//! tokens per day (three small server-rendered SVG charts and a table),
//! and the top groups of the range (by key, app, model, tag value or end
//! user) with the rest summed as "others". Platform admins, finance and
//! auditors read every tenant (or one, picked); a tenant admin reads their
//! own tenant only (the scope of their session, narrowed, never widened).

use super::bills::{Dot, Series};
use super::nice_top;
use super::thousands;
use crate::web::{Chrome, PageError, Session};
use crate::ControlPlane;
use askama::Template;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use chrono::NaiveDate;
use domain::roles::Role;
use domain::MicroUsd;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::sync::Arc;
use store::{DayUsage, GroupUsage, UsageBy, UsageSums};

/// The longest range the page reads, in days.
pub const MAX_DAYS: i64 = 366;
/// The top-N choices.
pub const TOPS: [i64; 3] = [5, 10, 25];
/// The groupings, in the form's order: (value, label key).
pub const GROUPS: [(&str, &str); 5] = [
    ("key", "analytics.by_key"),
    ("app", "analytics.by_app"),
    ("model", "analytics.by_model"),
    ("tag", "analytics.by_tag"),
    ("end_user", "analytics.by_end_user"),
];
/// The ranges: (value, label key).
pub const RANGES: [(&str, &str); 3] = [
    ("7", "analytics.last_7"),
    ("30", "analytics.last_30"),
    ("custom", "analytics.custom"),
];

/// The form as typed (every field echoed back as typed).
#[derive(Deserialize, Default, Clone)]
#[serde(default)]
pub struct AnalyticsForm {
    pub range: String,
    pub from: String,
    pub to: String,
    pub group: String,
    pub tag: String,
    pub top: String,
    pub tenant: String,
}

/// What the form asks for, once read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ask {
    pub from: NaiveDate,
    pub to: NaiveDate,
    pub by: UsageBy,
    pub top: i64,
}

/// The form read against `today` (a platform day): the range (last 7 or 30
/// days to today, or From–To as typed), the grouping and the top-N; each
/// field in error with its message key, all at once.
pub fn read_form(
    f: &AnalyticsForm,
    today: NaiveDate,
) -> Result<Ask, Vec<(&'static str, &'static str)>> {
    let mut errs: Vec<(&'static str, &'static str)> = Vec::new();
    let day = |v: &str| NaiveDate::parse_from_str(v.trim(), "%Y-%m-%d").ok();
    let last = |n: i64| (today - chrono::Duration::days(n - 1), today);
    let range = match f.range.trim() {
        "" | "7" => Some(last(7)),
        "30" => Some(last(30)),
        "custom" => match domain::period::check_range(
            day(&f.from).ok_or(()).map(Some),
            day(&f.to).ok_or(()).map(Some),
        ) {
            Ok((Some(a), Some(b))) if (b - a).num_days() + 1 > MAX_DAYS => {
                errs.push(("to", "analytics.err_too_long"));
                None
            }
            Ok((Some(a), Some(b))) => Some((a, b)),
            Ok(_) => None,
            Err(faults) => {
                errs.extend(super::range_errors(
                    &faults,
                    "analytics.err_date",
                    "analytics.err_from_after_to",
                ));
                None
            }
        },
        _ => {
            errs.push(("range", "analytics.err_range"));
            None
        }
    };
    let tag = f.tag.trim();
    if !tag.is_empty() && !domain::attribution::valid_key(tag) {
        errs.push(("tag", "analytics.err_tag"));
    }
    let by = match f.group.trim() {
        "key" => Some(UsageBy::Key),
        "app" => Some(UsageBy::App),
        "" | "model" => Some(UsageBy::Model),
        "end_user" => Some(UsageBy::EndUser),
        "tag" if tag.is_empty() => {
            errs.push(("tag", "analytics.err_tag_needed"));
            None
        }
        "tag" => Some(UsageBy::Tag(tag.to_string())),
        _ => {
            errs.push(("group", "analytics.err_group"));
            None
        }
    };
    let top = match f.top.trim() {
        "" => Some(10),
        t => t.parse::<i64>().ok().filter(|n| TOPS.contains(n)),
    };
    if top.is_none() {
        errs.push(("top", "analytics.err_top"));
    }
    match (range, by, top) {
        (Some((from, to)), Some(by), Some(top)) if errs.is_empty() => Ok(Ask { from, to, by, top }),
        _ => Err(errs),
    }
}

/// A chart of days, laid out in SVG units for a narrow card: its text is
/// drawn at `FONT` units in a `WIDTH`-wide viewBox, so on a 390 px phone
/// (a card about 350 px wide) a label is about 11 px high.
pub struct DayChart {
    /// The card's id (`spend-chart` …) and its title's key.
    pub id: &'static str,
    pub title: &'static str,
    pub width: i64,
    pub height: i64,
    pub font: i64,
    /// The plot's edges: left (y labels to its left), right, top, and the
    /// x axis.
    pub left: i64,
    pub right: i64,
    pub top: i64,
    pub axis: i64,
    pub series: Vec<Series>,
    /// (x, label) under the axis.
    pub x_labels: Vec<(i64, String)>,
    /// (y, label), bottom to top, each with a grid line.
    pub y_ticks: Vec<(i64, String)>,
}

const WIDTH: i64 = 400;
const HEIGHT: i64 = 230;
const FONT: i64 = 13;
const LEFT: i64 = 64;
const RIGHT: i64 = WIDTH - 26;
const TOP: i64 = 14;
const AXIS: i64 = HEIGHT - 34;
const COLORS: [&str; 3] = ["#2563eb", "#dc2626", "#16a34a"];

/// A count as an axis label: `950`, `12k`, `1.5M`.
fn short_count(v: i64) -> String {
    match v {
        v if v >= 10_000_000 => format!("{}M", v / 1_000_000),
        v if v >= 1_000_000 => format!("{:.1}M", v as f64 / 1e6),
        v if v >= 10_000 => format!("{}k", v / 1000),
        v => thousands(v),
    }
}

/// Money as an axis label: whole dollars from $10 up (`$4,000`), else as
/// the console shows money (`$0.04`).
fn short_money(v: i64) -> String {
    if v >= 10_000_000 {
        format!(
            "${}",
            domain::money::group_thousands((v / 1_000_000) as u64)
        )
    } else {
        MicroUsd(v).shown()
    }
}

/// Days `from..=to` as `MM-DD` labels at five places at most.
fn x_labels(days: &[NaiveDate]) -> Vec<(i64, String)> {
    let n = days.len();
    if n == 0 {
        return vec![];
    }
    let mut at = vec![0, n / 4, n / 2, 3 * n / 4, n - 1];
    at.sort_unstable();
    at.dedup();
    at.into_iter()
        .map(|i| (x_of(i, n), days[i].format("%m-%d").to_string()))
        .collect()
}

fn x_of(i: usize, n: usize) -> i64 {
    if n <= 1 {
        return (LEFT + RIGHT) / 2;
    }
    LEFT + (i as i64 * (RIGHT - LEFT)) / (n as i64 - 1)
}

fn y_of(v: i64, top: i64) -> i64 {
    AXIS - ((v as f64 / top.max(1) as f64) * (AXIS - TOP) as f64).round() as i64
}

/// One chart of `lines` (name, value of each day) over `days`; `money`:
/// micro-USD (else counts). Hover titles name the day and the exact value.
fn day_chart(
    (id, title): (&'static str, &'static str),
    days: &[NaiveDate],
    lines: Vec<(String, Vec<i64>)>,
    money: bool,
) -> DayChart {
    let max = lines
        .iter()
        .flat_map(|(_, v)| v.iter().copied())
        .max()
        .unwrap_or(0);
    let top = if money {
        nice_top(max, 10_000)
    } else {
        nice_top(max, 4)
    };
    let fmt_exact = |v: i64| {
        if money {
            MicroUsd(v).shown()
        } else {
            thousands(v)
        }
    };
    let series = lines
        .into_iter()
        .enumerate()
        .map(|(k, (name, values))| {
            let dots: Vec<Dot> = values
                .iter()
                .enumerate()
                .map(|(i, v)| Dot {
                    x: x_of(i, days.len()),
                    y: y_of(*v, top),
                    title: format!("{name} · {}: {}", days[i], fmt_exact(*v)),
                })
                .collect();
            Series {
                points: dots
                    .iter()
                    .map(|d| format!("{},{}", d.x, d.y))
                    .collect::<Vec<_>>()
                    .join(" "),
                name,
                color: COLORS[k % COLORS.len()],
                dashed: k > 0,
                dots,
            }
        })
        .collect();
    DayChart {
        id,
        title,
        width: WIDTH,
        height: HEIGHT,
        font: FONT,
        left: LEFT,
        right: RIGHT,
        top: TOP,
        axis: AXIS,
        series,
        x_labels: x_labels(days),
        y_ticks: (0..=4)
            .map(|i| {
                let v = top * i / 4;
                let label = if money {
                    short_money(v)
                } else {
                    short_count(v)
                };
                (y_of(v, top), label)
            })
            .collect(),
    }
}

/// Sums as a table row shows them.
pub struct SumsLine {
    pub requests: String,
    pub input: String,
    pub output: String,
    pub cost: String,
}

impl SumsLine {
    fn of(s: &UsageSums) -> SumsLine {
        SumsLine {
            requests: thousands(s.requests),
            input: thousands(s.input_tokens),
            output: thousands(s.output_tokens),
            cost: MicroUsd(s.cost_micro).shown(),
        }
    }
}

pub struct DayLine {
    pub day: String,
    pub sums: SumsLine,
}

/// One of the top groups, as the table shows it.
pub struct GroupLine {
    pub rank: usize,
    /// The tenant's name (its id when it has none); empty across tenants.
    pub tenant: String,
    /// The group's name (a key's or app's name, else the value itself);
    /// None: requests without a tag value or end user.
    pub name: Option<String>,
    /// The id behind the name (a key's id, an app's id), for its title.
    pub id: String,
    pub sums: SumsLine,
    /// Share of the range's spend, `42.0 %`.
    pub share: String,
}

#[derive(Template)]
#[template(path = "pages/analytics.html")]
struct AnalyticsPage {
    c: Chrome,
    f: AnalyticsForm,
    /// (field, message key) of each field in error.
    errors: Vec<(&'static str, &'static str)>,
    /// (id, name, selected) for staff's tenant picker; empty for a
    /// tenant admin.
    tenants: Vec<(String, String, bool)>,
    /// The tenant read: its name, or "" for every tenant of the scope.
    tenant_name: String,
    tag_keys: Vec<String>,
    /// The range read (empty when the form is in error).
    from: String,
    to: String,
    days_count: usize,
    zone: String,
    total: SumsLine,
    charts: Vec<DayChart>,
    days: Vec<DayLine>,
    /// The grouping's label key and whether lines name their tenant.
    group_label: &'static str,
    /// The tag key when grouped by tag, else "".
    tag_label: String,
    show_tenant: bool,
    top: Vec<GroupLine>,
    /// The rest of the range, summed, and how many groups it is.
    others: Option<(usize, SumsLine)>,
    /// Months in the range whose ledger was purged after archiving (their
    /// days are not in the figures).
    purged: Vec<String>,
}

impl AnalyticsPage {
    fn ranges(&self) -> &'static [(&'static str, &'static str)] {
        &RANGES
    }

    fn groups(&self) -> &'static [(&'static str, &'static str)] {
        &GROUPS
    }

    fn tops(&self) -> &'static [i64] {
        &TOPS
    }

    fn error(&self, field: &str) -> Option<&'static str> {
        self.errors
            .iter()
            .find(|(f, _)| *f == field)
            .map(|(_, k)| *k)
    }
}

pub async fn show(
    State(cp): State<Arc<ControlPlane>>,
    s: Session,
    Query(f): Query<AnalyticsForm>,
) -> Result<Response, PageError> {
    let now = chrono::Utc::now();
    let today = domain::period::parse_day(&cp.clock.day(now)).unwrap_or_else(|| now.date_naive());
    let staff = s.actor.role != Role::TenantAdmin;
    let asked = Some(f.tenant.trim()).filter(|t| !t.is_empty());
    // The tenants staff may pick from; a tenant admin asking for another
    // tenant is told it is not found (the scope narrows, never widens).
    let infos = if staff {
        cp.store.tenant_infos(s.actor.scope()).await?
    } else {
        vec![]
    };
    let mut read = read_form(&f, today);
    if let Some(t) = asked {
        if staff && !infos.iter().any(|i| i.id == t) {
            let mut e = read.err().unwrap_or_default();
            e.push(("tenant", "analytics.err_tenant"));
            read = Err(e);
        }
    }
    let scope = if staff && read.is_err() {
        s.actor.scope().clone()
    } else {
        // Another tenant's id reads as no such tenant, as on every page.
        super::tenant_filter(&cp, &s.actor, asked).await?
    };
    let tenant_name = match scope.tenant() {
        Some(t) if staff => infos
            .iter()
            .find(|i| i.id == t)
            .map(|i| i.name.clone())
            .unwrap_or_else(|| t.to_string()),
        Some(t) => cp
            .store
            .tenant_infos(&scope)
            .await?
            .into_iter()
            .next()
            .map(|i| i.name)
            .unwrap_or_else(|| t.to_string()),
        None => String::new(),
    };
    let tenants = infos
        .into_iter()
        .map(|t| {
            let sel = asked == Some(t.id.as_str());
            (t.id, t.name, sel)
        })
        .collect();
    let mut page = AnalyticsPage {
        c: Chrome::new(&s, "nav.analytics", "/console/analytics"),
        f: f.clone(),
        errors: vec![],
        tenants,
        tenant_name,
        tag_keys: vec![],
        from: String::new(),
        to: String::new(),
        days_count: 0,
        zone: cp.clock.zone_label(now),
        total: SumsLine::of(&UsageSums::default()),
        charts: vec![],
        days: vec![],
        group_label: "analytics.by_model",
        tag_label: String::new(),
        show_tenant: false,
        top: vec![],
        others: None,
        purged: vec![],
    };
    // Empty fields read as their defaults, and the form shows them so
    // (a refused form too).
    for (field, default) in [
        (&mut page.f.range, "7"),
        (&mut page.f.group, "model"),
        (&mut page.f.top, "10"),
    ] {
        if field.trim().is_empty() {
            *field = default.into();
        }
    }
    let ask = match read {
        Ok(a) => a,
        Err(errors) => {
            page.errors = errors;
            let html = page.render().map_err(PageError::from)?;
            return Ok(
                (StatusCode::UNPROCESSABLE_ENTITY, axum::response::Html(html)).into_response(),
            );
        }
    };
    // A range of 7 or 30 days shows its dates in the form.
    if f.range.trim() != "custom" {
        page.f.from = ask.from.to_string();
        page.f.to = ask.to.to_string();
    }
    page.from = ask.from.to_string();
    page.to = ask.to.to_string();
    page.zone = cp
        .clock
        .day_bounds(&page.from)
        .map_or_else(|| cp.clock.zone_label(now), |b| cp.clock.zone_label(b.0));
    let rows = cp.store.usage_days(&scope, ask.from, ask.to).await?;
    let top = cp
        .store
        .usage_top(&scope, ask.from, ask.to, &ask.by, ask.top)
        .await?;
    page.tag_keys = cp.store.usage_tag_keys(&scope, ask.from, ask.to).await?;
    let months = store::months_between(ask.from, ask.to);
    page.purged = cp
        .store
        .closed_months()
        .await?
        .into_iter()
        .filter(|m| m.purged_at.is_some() && months.contains(&m.period))
        .map(|m| m.period)
        .collect();
    page.purged.sort();
    // Days that have been: to today at the latest (days to come are not
    // drawn as zero).
    let last = ask.to.min(today);
    let days: Vec<NaiveDate> = ask.from.iter_days().take_while(|d| *d <= last).collect();
    let by_day: BTreeMap<NaiveDate, UsageSums> = rows.iter().map(|r| (r.day, r.sums)).collect();
    let sums: Vec<UsageSums> = days
        .iter()
        .map(|d| by_day.get(d).copied().unwrap_or_default())
        .collect();
    let total = rows
        .iter()
        .fold(UsageSums::default(), |a, r: &DayUsage| a.plus(r.sums));
    page.total = SumsLine::of(&total);
    page.days_count = days.len();
    let lang = s.lang;
    let pick = |f: fn(&UsageSums) -> i64| sums.iter().map(f).collect::<Vec<i64>>();
    page.charts = vec![
        day_chart(
            ("spend-chart", "analytics.spend_per_day"),
            &days,
            vec![(
                lang.t("analytics.spend").to_string(),
                pick(|s| s.cost_micro),
            )],
            true,
        ),
        day_chart(
            ("requests-chart", "analytics.requests_per_day"),
            &days,
            vec![(
                lang.t("analytics.requests").to_string(),
                pick(|s| s.requests),
            )],
            false,
        ),
        day_chart(
            ("tokens-chart", "analytics.tokens_per_day"),
            &days,
            vec![
                (
                    lang.t("analytics.input").to_string(),
                    pick(|s| s.input_tokens),
                ),
                (
                    lang.t("analytics.output").to_string(),
                    pick(|s| s.output_tokens),
                ),
            ],
            false,
        ),
    ];
    page.days = days
        .iter()
        .zip(&sums)
        .map(|(d, s)| DayLine {
            day: d.to_string(),
            sums: SumsLine::of(s),
        })
        .collect();
    page.group_label = GROUPS
        .iter()
        .find(|(g, _)| *g == page.f.group.trim())
        .map_or("analytics.by_model", |g| g.1);
    if let UsageBy::Tag(k) = &ask.by {
        page.tag_label = k.clone();
    }
    page.show_tenant = staff && ask.by.per_tenant();
    let groups = top.first().map_or(0, |g| g.groups.max(0) as usize);
    let shown = top
        .iter()
        .fold(UsageSums::default(), |a, g: &GroupUsage| a.plus(g.sums));
    let spend = total.cost_micro.max(1) as f64;
    page.top = top
        .iter()
        .enumerate()
        .map(|(i, g)| GroupLine {
            rank: i + 1,
            tenant: g
                .tenant_name
                .clone()
                .filter(|n| !n.is_empty())
                .unwrap_or_else(|| g.tenant_id.clone()),
            name: g
                .name
                .clone()
                .filter(|n| !n.is_empty())
                .or_else(|| g.value.clone()),
            id: g.value.clone().unwrap_or_default(),
            sums: SumsLine::of(&g.sums),
            share: format!("{:.1} %", g.sums.cost_micro as f64 * 100.0 / spend),
        })
        .collect();
    if groups > top.len() {
        page.others = Some((groups - top.len(), SumsLine::of(&total.minus(shown))));
    }
    let html = page.render().map_err(PageError::from)?;
    Ok(axum::response::Html(html).into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn form(range: &str, from: &str, to: &str) -> AnalyticsForm {
        AnalyticsForm {
            range: range.into(),
            from: from.into(),
            to: to.into(),
            ..Default::default()
        }
    }

    #[test]
    fn ranges_are_read_and_a_from_after_to_is_refused() {
        let today = NaiveDate::from_ymd_opt(2026, 12, 7).unwrap();
        let a = read_form(&form("", "", ""), today).unwrap();
        assert_eq!((a.from.to_string(), a.to), ("2026-12-01".into(), today));
        assert_eq!(a.by, UsageBy::Model);
        assert_eq!(a.top, 10);
        let a = read_form(&form("30", "", ""), today).unwrap();
        assert_eq!(a.from.to_string(), "2026-11-08");
        let a = read_form(&form("custom", "2026-11-20", "2026-12-03"), today).unwrap();
        assert_eq!(a.from.to_string(), "2026-11-20");
        assert_eq!(
            read_form(&form("custom", "2026-12-04", "2026-12-03"), today).unwrap_err(),
            [("from", "analytics.err_from_after_to")]
        );
        assert_eq!(
            read_form(&form("custom", "x", ""), today).unwrap_err(),
            [("from", "analytics.err_date"), ("to", "analytics.err_date")]
        );
        assert_eq!(
            read_form(&form("custom", "2024-01-01", "2026-01-01"), today).unwrap_err(),
            [("to", "analytics.err_too_long")]
        );
        let mut f = form("7", "", "");
        f.group = "tag".into();
        f.top = "11".into();
        assert_eq!(
            read_form(&f, today).unwrap_err(),
            [
                ("tag", "analytics.err_tag_needed"),
                ("top", "analytics.err_top")
            ]
        );
        f.tag = "Bad Key".into();
        f.top = "25".into();
        assert_eq!(
            read_form(&f, today).unwrap_err(),
            [("tag", "analytics.err_tag")]
        );
        f.tag = "project".into();
        assert_eq!(
            read_form(&f, today).unwrap().by,
            UsageBy::Tag("project".into())
        );
    }

    #[test]
    fn chart_labels_fit_and_values_are_exact() {
        let days: Vec<NaiveDate> = NaiveDate::from_ymd_opt(2026, 11, 1)
            .unwrap()
            .iter_days()
            .take(30)
            .collect();
        let c = day_chart(
            ("x", "analytics.spend_per_day"),
            &days,
            vec![("Spend".into(), (0..30).map(|i| i * 1_234_567).collect())],
            true,
        );
        assert_eq!(c.x_labels.len(), 5);
        assert_eq!(c.x_labels[0].1, "11-01");
        assert!(c.x_labels.iter().all(|(x, _)| *x >= LEFT && *x <= RIGHT));
        assert_eq!(c.y_ticks.len(), 5);
        assert_eq!(c.y_ticks[4].1, "$40");
        assert_eq!(c.series[0].dots[2].title, "Spend · 2026-11-03: $2.469134");
        assert_eq!(short_count(1_500_000), "1.5M");
        assert_eq!(short_count(950), "950");
        assert_eq!(nice_top(0, 4), 4);
    }
}
