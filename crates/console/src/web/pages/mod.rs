//! One module per console page. Handlers: take the `Session`, parse the
//! form, call the service function the JSON API uses, render.

pub mod analytics;
pub mod apps;
pub mod audit;
pub mod bills;
pub mod borrowing;
pub mod dashboard;
pub mod deployments;
pub mod fairness;
pub mod limits;
pub mod models;
pub mod prices;
pub mod quota;
pub mod reconciliation;
pub mod requests;
pub mod tenants;
pub mod users;

use crate::error::ApiError;
use crate::i18n::Lang;
use crate::web::PageError;
use chrono::{DateTime, NaiveDateTime, Utc};
use domain::period::PlatformClock;
use domain::{Limits, MicroUsd};
use serde::Deserialize;

/// What is wrong with a form: each field in error and a translation key
/// (all of them at once, in the order found; one per field).
#[derive(Default, Debug)]
pub struct FieldError {
    items: Vec<(&'static str, &'static str)>,
}

impl FieldError {
    /// The message key for `field`, if that field is in error.
    pub fn on(&self, field: &str) -> Option<&'static str> {
        self.items
            .iter()
            .find(|(f, _)| *f == field)
            .map(|(_, k)| *k)
    }

    pub fn any(&self) -> bool {
        !self.items.is_empty()
    }

    pub fn at(field: &'static str, key: &'static str) -> FieldError {
        FieldError {
            items: vec![(field, key)],
        }
    }

    /// Adds the problems of `more` for fields not already in error.
    pub fn and(mut self, more: Vec<ApiError>) -> FieldError {
        for e in more {
            if let ApiError::Field { field, key } | ApiError::Element { field, key, .. } = e {
                if self.on(field).is_none() {
                    self.items.push((field, key));
                }
            }
        }
        self
    }
}

/// A service error a form can show next to a field, or a page error.
pub fn form_error(e: ApiError) -> Result<FieldError, PageError> {
    match e {
        ApiError::Field { field, key } | ApiError::Element { field, key, .. } => {
            Ok(FieldError::at(field, key))
        }
        ApiError::Conflict(_) => Ok(FieldError::at("id", "err.exists")),
        e => Err(e.into()),
    }
}

/// Every problem of a form, each beside its field (the first per field,
/// in the order found). A problem no field shows (a 404, a 403, a store
/// failure) is the page's error instead.
pub fn form_errors(problems: Vec<ApiError>) -> Result<FieldError, PageError> {
    let mut out = FieldError::default();
    for e in problems {
        for (field, key) in form_error(e)?.items {
            if out.on(field).is_none() {
                out.items.push((field, key));
            }
        }
    }
    Ok(out)
}

/// The value of a field as read, or `None` with its problem noted (a
/// lenient read: the rest of the form is still checked).
pub fn noted<T>(problems: &mut Vec<ApiError>, r: Result<Option<T>, ApiError>) -> Option<T> {
    r.unwrap_or_else(|e| {
        problems.push(e);
        None
    })
}

/// An optional whole number; empty means absent.
pub fn int(field: &'static str, v: &str) -> Result<Option<i64>, ApiError> {
    let v = v.trim().replace(['_', ','], "");
    if v.is_empty() {
        return Ok(None);
    }
    v.parse().map(Some).map_err(|_| {
        // All digits but past i64: too large, not "not a number".
        let digits = v.strip_prefix('-').unwrap_or(&v);
        if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) {
            ApiError::field(field, "err.too_large")
        } else {
            ApiError::field(field, "err.not_a_number")
        }
    })
}

/// An optional amount of USD ("12.50"); empty means absent.
pub fn usd(field: &'static str, v: &str) -> Result<Option<MicroUsd>, ApiError> {
    let v = v.trim().replace(['$', ','], "");
    if v.is_empty() {
        return Ok(None);
    }
    MicroUsd::from_usd_str(&v)
        .map(Some)
        .map_err(|_| ApiError::field(field, "err.not_money"))
}

/// `id` as one path segment: every byte but a-z, A-Z, 0-9, '-', '_', '.'
/// and '~' percent-encoded (a model id may hold '/' and ':').
pub fn path_segment(id: &str) -> String {
    id.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// A percentage as typed ("5", "5.5", "5 %"), as a share of 1 (0.05);
/// empty means absent. Range checks are the service's.
pub fn percent(field: &'static str, v: &str) -> Result<Option<f64>, ApiError> {
    let v = v.trim().trim_end_matches('%').trim();
    if v.is_empty() {
        return Ok(None);
    }
    v.parse::<f64>()
        .ok()
        .filter(|p| p.is_finite())
        .map(|p| Some(p / 100.0))
        .ok_or(ApiError::field(field, "err.percent"))
}

/// A `datetime-local` input, read in the platform's zone (the form's
/// label names it); an RFC 3339 time with its own offset as it says.
pub fn time(
    clock: PlatformClock,
    field: &'static str,
    v: &str,
) -> Result<Option<DateTime<Utc>>, ApiError> {
    let v = v.trim();
    if v.is_empty() {
        return Ok(None);
    }
    if let Ok(t) = DateTime::parse_from_rfc3339(v) {
        return Ok(Some(t.with_timezone(&Utc)));
    }
    ["%Y-%m-%dT%H:%M", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%d %H:%M"]
        .iter()
        .find_map(|f| NaiveDateTime::parse_from_str(v, f).ok())
        .and_then(|n| clock.from_wall(n))
        .map(Some)
        .ok_or_else(|| ApiError::field(field, "err.bad_time"))
}

/// A time as a `datetime-local` input holds it: the platform's wall clock.
pub fn picker(clock: PlatformClock, t: DateTime<Utc>) -> String {
    clock.wall(t).format("%Y-%m-%dT%H:%M").to_string()
}

/// A filter's refusals: (field, message key), each shown beside its field.
pub type FieldErrors = Vec<(&'static str, &'static str)>;

/// The two ends of a From–To filter of times (`None`: no bound).
pub type TimeRange = (Option<DateTime<Utc>>, Option<DateTime<Utc>>);

/// A From–To filter's faults (`domain::period::check_range`) as (field,
/// message key) pairs to show beside the fields: `unreadable` beside an end
/// that could not be read, `after` beside the From when it is after the To.
pub fn range_errors(
    faults: &[domain::period::RangeFault],
    unreadable: &'static str,
    after: &'static str,
) -> FieldErrors {
    use domain::period::RangeFault;
    faults
        .iter()
        .map(|f| match f {
            RangeFault::From => ("from", unreadable),
            RangeFault::To => ("to", unreadable),
            RangeFault::FromAfterTo => ("from", after),
        })
        .collect()
}

/// A From–To filter of times as typed (see `time`, in the platform's
/// zone): both ends, or each
/// field in error with its message key (`err.bad_time`,
/// `err.from_after_to`), all at once.
pub fn time_range(clock: PlatformClock, from: &str, to: &str) -> Result<TimeRange, FieldErrors> {
    domain::period::check_range(
        time(clock, "from", from).map_err(|_| ()),
        time(clock, "to", to).map_err(|_| ()),
    )
    .map_err(|faults| range_errors(&faults, "err.bad_time", "err.from_after_to"))
}

/// The message key of `field` in a filter's errors, if it has one.
pub fn field_error(errors: &[(&'static str, &'static str)], field: &str) -> Option<&'static str> {
    errors.iter().find(|(f, _)| *f == field).map(|(_, k)| *k)
}

/// The scope of a page filtered to the tenant `asked` (none: the reader's
/// whole scope). A tenant the reader cannot see is refused as no such
/// tenant: one that does not exist and, to a tenant admin, another
/// tenant's alike (the scope narrows, never widens, and never tells
/// whether another tenant exists).
pub async fn tenant_filter(
    cp: &crate::ControlPlane,
    actor: &store::Principal,
    asked: Option<&str>,
) -> Result<store::TenantScope, PageError> {
    let Some(t) = asked else {
        return Ok(actor.scope().clone());
    };
    let no_such = || PageError::NoSuchTenant(t.to_string());
    let scope = crate::api::bills::bill_scope(actor, Some(t)).map_err(|_| no_such())?;
    if cp.store.tenant(&scope, t).await?.is_none() {
        return Err(no_such());
    }
    Ok(scope)
}

/// A comma- or space-separated list; empty means "not restricted".
pub fn split_list(v: &str) -> Option<Vec<String>> {
    let items: Vec<String> = v
        .split([',', ' ', '\n'])
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(String::from)
        .collect();
    (!items.is_empty()).then_some(items)
}

/// The refusal of an allowed-models field as typed, if it names a model
/// the gateway does not serve (to show beside the form's other errors).
pub async fn model_problems(cp: &crate::ControlPlane, v: &str) -> Vec<ApiError> {
    crate::api::known_models(cp, split_list(v).as_deref())
        .await
        .err()
        .into_iter()
        .collect()
}

/// The limit fields every limits form carries, as typed.
#[derive(Deserialize, Default, Clone)]
#[serde(default)]
pub struct LimitsForm {
    pub monthly_tokens: String,
    pub monthly_cost_usd: String,
    pub daily_cost_soft_usd: String,
    pub rpm: String,
    pub input_tpm: String,
    pub output_tpm: String,
    pub max_inflight: String,
    pub max_context_tokens: String,
    pub max_output_tokens: String,
    /// Comma- or space-separated names (docs/billing.md, "Service tiers
    /// and hosted tools").
    pub allowed_service_tiers: String,
    pub allowed_tools: String,
    /// Budgets by period and model, as `domain::budgets::to_text` writes
    /// them (docs/limits.md).
    pub budgets: String,
}

impl LimitsForm {
    /// The limits as typed, every field that does not read left unset and
    /// its problem noted (the form then shows them all at once).
    pub fn read(&self) -> (Limits, Vec<ApiError>) {
        let mut p = Vec::new();
        let limits = Limits {
            monthly_tokens: noted(&mut p, int("monthly_tokens", &self.monthly_tokens)),
            monthly_cost_usd: noted(&mut p, usd("monthly_cost_usd", &self.monthly_cost_usd)),
            daily_cost_soft_usd: noted(
                &mut p,
                usd("daily_cost_soft_usd", &self.daily_cost_soft_usd),
            ),
            rpm: noted(&mut p, int("rpm", &self.rpm)),
            input_tpm: noted(&mut p, int("input_tpm", &self.input_tpm)),
            output_tpm: noted(&mut p, int("output_tpm", &self.output_tpm)),
            max_inflight: noted(&mut p, int("max_inflight", &self.max_inflight)),
            max_context_tokens: noted(&mut p, int("max_context_tokens", &self.max_context_tokens)),
            max_output_tokens: noted(&mut p, int("max_output_tokens", &self.max_output_tokens)),
            allowed_service_tiers: split_list(&self.allowed_service_tiers),
            allowed_tools: split_list(&self.allowed_tools),
            budgets: noted(&mut p, budgets("budgets", &self.budgets)),
        };
        (limits, p)
    }

    pub fn parse(&self) -> Result<Limits, ApiError> {
        Ok(Limits {
            monthly_tokens: int("monthly_tokens", &self.monthly_tokens)?,
            monthly_cost_usd: usd("monthly_cost_usd", &self.monthly_cost_usd)?,
            daily_cost_soft_usd: usd("daily_cost_soft_usd", &self.daily_cost_soft_usd)?,
            rpm: int("rpm", &self.rpm)?,
            input_tpm: int("input_tpm", &self.input_tpm)?,
            output_tpm: int("output_tpm", &self.output_tpm)?,
            max_inflight: int("max_inflight", &self.max_inflight)?,
            max_context_tokens: int("max_context_tokens", &self.max_context_tokens)?,
            max_output_tokens: int("max_output_tokens", &self.max_output_tokens)?,
            allowed_service_tiers: split_list(&self.allowed_service_tiers),
            allowed_tools: split_list(&self.allowed_tools),
            budgets: budgets("budgets", &self.budgets)?,
        })
    }

    /// Every field that does not read as a number or an amount, not only
    /// the first (a form shows all its errors at once).
    pub fn problems(&self) -> Vec<ApiError> {
        let ints = [
            ("monthly_tokens", &self.monthly_tokens),
            ("rpm", &self.rpm),
            ("input_tpm", &self.input_tpm),
            ("output_tpm", &self.output_tpm),
            ("max_inflight", &self.max_inflight),
            ("max_context_tokens", &self.max_context_tokens),
            ("max_output_tokens", &self.max_output_tokens),
        ];
        let usds = [
            ("monthly_cost_usd", &self.monthly_cost_usd),
            ("daily_cost_soft_usd", &self.daily_cost_soft_usd),
        ];
        let mut out: Vec<ApiError> = ints.iter().filter_map(|(f, v)| int(f, v).err()).collect();
        out.extend(usds.iter().filter_map(|(f, v)| usd(f, v).err()));
        out.extend(budgets("budgets", &self.budgets).err());
        out
    }

    pub fn of(l: &Limits) -> LimitsForm {
        let i = |v: Option<i64>| v.map(|v| v.to_string()).unwrap_or_default();
        let m = |v: Option<MicroUsd>| v.map(|v| v.shown()).unwrap_or_default();
        LimitsForm {
            monthly_tokens: i(l.monthly_tokens),
            monthly_cost_usd: m(l.monthly_cost_usd),
            daily_cost_soft_usd: m(l.daily_cost_soft_usd),
            rpm: i(l.rpm),
            input_tpm: i(l.input_tpm),
            output_tpm: i(l.output_tpm),
            max_inflight: i(l.max_inflight),
            max_context_tokens: i(l.max_context_tokens),
            max_output_tokens: i(l.max_output_tokens),
            allowed_service_tiers: l
                .allowed_service_tiers
                .as_deref()
                .map(|v| v.join(", "))
                .unwrap_or_default(),
            allowed_tools: l
                .allowed_tools
                .as_deref()
                .map(|v| v.join(", "))
                .unwrap_or_default(),
            budgets: l
                .budgets
                .as_deref()
                .map(domain::budgets::to_text)
                .unwrap_or_default(),
        }
    }

    /// (field, label key, value) for the template's loop.
    pub fn fields(&self) -> [(&'static str, &'static str, &str); 12] {
        [
            (
                "monthly_tokens",
                "limits.monthly_tokens",
                &self.monthly_tokens,
            ),
            (
                "monthly_cost_usd",
                "limits.monthly_cost_usd",
                &self.monthly_cost_usd,
            ),
            (
                "daily_cost_soft_usd",
                "limits.daily_cost_soft_usd",
                &self.daily_cost_soft_usd,
            ),
            ("rpm", "limits.rpm", &self.rpm),
            ("input_tpm", "limits.input_tpm", &self.input_tpm),
            ("output_tpm", "limits.output_tpm", &self.output_tpm),
            ("max_inflight", "limits.max_inflight", &self.max_inflight),
            (
                "max_context_tokens",
                "limits.max_context_tokens",
                &self.max_context_tokens,
            ),
            (
                "max_output_tokens",
                "limits.max_output_tokens",
                &self.max_output_tokens,
            ),
            (
                "allowed_service_tiers",
                "limits.allowed_service_tiers",
                &self.allowed_service_tiers,
            ),
            ("allowed_tools", "limits.allowed_tools", &self.allowed_tools),
            ("budgets", "limits.budgets", &self.budgets),
        ]
    }
}

/// A budgets field (`domain::budgets::from_text`): none when empty.
fn budgets(field: &'static str, v: &str) -> Result<Option<Vec<domain::budgets::Budget>>, ApiError> {
    let b = domain::budgets::from_text(v).map_err(|e| ApiError::Element {
        field,
        index: e.index,
        key: "err.budget_text",
    })?;
    Ok((!b.is_empty()).then_some(b))
}

/// Limits as one short line for tables ("" when unlimited), with the
/// units in the reader's language.
pub fn limits_summary(lang: Lang, l: &Limits) -> String {
    let n = |key: &str, v: String| lang.t(key).replace("{n}", &v);
    let mut parts = Vec::new();
    if let Some(v) = l.monthly_tokens {
        parts.push(n("unit.tok_month", thousands(v)));
    }
    if let Some(v) = l.monthly_cost_usd {
        parts.push(n("unit.per_month", v.shown()));
    }
    if let Some(v) = l.daily_cost_soft_usd {
        parts.push(n("unit.per_day_soft", v.shown()));
    }
    if let Some(v) = l.rpm {
        parts.push(n("unit.rpm", thousands(v)));
    }
    if let Some(v) = l.input_tpm {
        parts.push(n("unit.input_tpm", thousands(v)));
    }
    if let Some(v) = l.output_tpm {
        parts.push(n("unit.output_tpm", thousands(v)));
    }
    if let Some(v) = l.max_inflight {
        parts.push(n("unit.in_flight", thousands(v)));
    }
    parts.join(" · ")
}

/// 1234567 → "1,234,567" (the rule is `domain::money::group_thousands`).
pub fn thousands(v: i64) -> String {
    let sign = if v < 0 { "-" } else { "" };
    format!("{sign}{}", domain::money::group_thousands(v.unsigned_abs()))
}

/// Free text as a page shows it: at most `limit`'s maximum characters (a
/// row stored before the limit existed cannot make a page huge), `…` when
/// cut. The cell shows a few lines of it with an ellipsis, and all of it on
/// demand (its `title`, or a click: `.clip` in console.css).
pub fn clipped(text: &str, limit: domain::text::TextLimit) -> String {
    match domain::text::clip(text, limit.max_chars) {
        (t, true) => format!("{t}…"),
        (t, false) => t.to_string(),
    }
}

/// A time as the console shows it: the platform's wall clock to the
/// minute, the zone named ("2026-12-31 18:00 Asia/Shanghai"; pickers and
/// bills use the same zone).
pub fn when(clock: PlatformClock, t: DateTime<Utc>) -> String {
    format!(
        "{} {}",
        clock.wall(t).format("%Y-%m-%d %H:%M"),
        clock.tz.name()
    )
}

/// A time to the second, the zone named ("2026-11-03 14:03:22 UTC").
pub fn when_secs(clock: PlatformClock, t: DateTime<Utc>) -> String {
    format!(
        "{} {}",
        clock.wall(t).format("%Y-%m-%d %H:%M:%S"),
        clock.tz.name()
    )
}

/// A stored RFC 3339 time (an audit row's `at`) to the second, as
/// `when_secs` shows it; text that does not read, as it is.
pub fn when_text(clock: PlatformClock, at: &str) -> String {
    DateTime::parse_from_rfc3339(at)
        .map(|t| when_secs(clock, t.with_timezone(&Utc)))
        .unwrap_or_else(|_| at.get(..19).unwrap_or(at).replace('T', " "))
}

/// Time left until `t`, like "2d 3h", "3h 12m", "45m" (in the reader's
/// language); "" when past.
pub fn time_left(lang: Lang, t: DateTime<Utc>, now: DateTime<Utc>) -> String {
    let secs = (t - now).num_seconds();
    if secs <= 0 {
        return String::new();
    }
    let (d, h, m) = (secs / 86_400, secs % 86_400 / 3600, secs % 3600 / 60);
    let (key, a, b) = match (d, h) {
        (0, 0) => ("dur.m", m.max(1), 0),
        (0, _) => ("dur.hm", h, m),
        _ => ("dur.dh", d, h),
    };
    lang.t(key)
        .replace("{a}", &a.to_string())
        .replace("{b}", &b.to_string())
}

/// The smallest of 1, 2, 4, 5, 8 × 10^k at or above `v` (and `min`): an
/// axis top whose quarters read as round numbers.
pub(super) fn nice_top(v: i64, min: i64) -> i64 {
    let v = v.max(min).max(1);
    let mut p: i64 = 1;
    loop {
        for m in [1, 2, 4, 5, 8] {
            if m * p >= v {
                return m * p;
            }
        }
        match p.checked_mul(10) {
            Some(n) if n < i64::MAX / 10 => p = n,
            _ => return v,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_and_money_parse_with_field_errors() {
        assert_eq!(int("rpm", " 1,000 ").unwrap(), Some(1000));
        assert_eq!(int("rpm", "").unwrap(), None);
        assert!(matches!(
            int("rpm", "12345678901234567890123"),
            Err(ApiError::Field {
                field: "rpm",
                key: "err.too_large"
            })
        ));
        assert!(matches!(
            int("rpm", "ten"),
            Err(ApiError::Field {
                field: "rpm",
                key: "err.not_a_number"
            })
        ));
        assert_eq!(usd("c", "$12.5").unwrap(), Some(MicroUsd(12_500_000)));
        assert!(usd("c", "12.1234567").is_err());
        assert_eq!(thousands(1_234_567), "1,234,567");
        assert_eq!(thousands(-1000), "-1,000");
        assert_eq!(split_list(" a, b  c ").unwrap(), vec!["a", "b", "c"]);
        assert_eq!(split_list(" "), None);
    }

    #[test]
    fn times() {
        let utc = PlatformClock::parse("UTC").unwrap();
        let t = time(utc, "expires_at", "2026-12-31T18:00")
            .unwrap()
            .unwrap();
        assert_eq!(when(utc, t), "2026-12-31 18:00 UTC");
        assert!(time(utc, "expires_at", "tomorrow").is_err());
        // In the platform's zone: shown, picked and read alike.
        let sh = PlatformClock::parse("Asia/Shanghai").unwrap();
        let picked = time(sh, "expires_at", "2026-12-31T18:00").unwrap().unwrap();
        assert_eq!(picked, t - chrono::Duration::hours(8));
        assert_eq!(when(sh, picked), "2026-12-31 18:00 Asia/Shanghai");
        assert_eq!(when_secs(sh, picked), "2026-12-31 18:00:00 Asia/Shanghai");
        assert_eq!(picker(sh, picked), "2026-12-31T18:00");
        assert_eq!(
            when_text(sh, "2026-12-31T10:00:00.123+00:00"),
            "2026-12-31 18:00:00 Asia/Shanghai"
        );
        let now = t - chrono::Duration::minutes(135);
        assert_eq!(time_left(Lang::En, t, now), "2h 15m");
        assert_eq!(time_left(Lang::Zh, t, now), "2 小时 15 分钟");
        assert_eq!(time_left(Lang::En, t, t), "");
        assert_eq!(
            time_left(Lang::En, t, t - chrono::Duration::days(3)),
            "3d 0h"
        );
        let l = Limits {
            monthly_tokens: Some(1_000_000),
            rpm: Some(60),
            max_inflight: Some(4),
            ..Default::default()
        };
        assert_eq!(
            limits_summary(Lang::En, &l),
            "1,000,000 tok/mo · 60 rpm · 4 in flight"
        );
        assert_eq!(
            limits_summary(Lang::Zh, &l),
            "每月 1,000,000 token · 每分钟 60 次请求 · 最多 4 个并发"
        );
    }
}

#[cfg(test)]
mod path_tests {
    use super::*;

    #[test]
    fn a_model_id_is_one_path_segment() {
        assert_eq!(path_segment("deepseek/chat:v3"), "deepseek%2Fchat%3Av3");
        assert_eq!(path_segment("gpt-4o_mini.2"), "gpt-4o_mini.2");
    }
}

/// One change someone else made to what a form edits, after the version the
/// form was opened at: who, when, each field before → after.
pub struct StaleLine {
    pub actor: String,
    pub at: String,
    pub changes: Vec<domain::audit::FieldChange>,
}

/// "Changed since you opened it": the changes to `target` (as the audit log
/// names it) since version `since`, newest last. The form that was refused
/// shows them above what was typed, which stays.
pub async fn stale_notice(
    cp: &crate::ControlPlane,
    target: &str,
    since: i64,
) -> Result<Vec<StaleLine>, PageError> {
    let rows = cp.store.changes_since(target, since).await?;
    Ok(rows
        .iter()
        .map(|r| StaleLine {
            actor: r.entry.actor.clone(),
            at: when_text(cp.clock, &r.entry.at),
            changes: domain::audit::field_changes(&r.entry.before, &r.entry.after)
                .into_iter()
                .filter(|c| c.field != "version")
                .map(|mut c| {
                    c.before = clipped(&c.before, domain::text::NAME);
                    c.after = clipped(&c.after, domain::text::NAME);
                    c
                })
                .collect(),
        })
        .collect())
}
