//! Where a key stands against every limit that applies to it: the document
//! `GET /v1/usage` answers (docs/clients.md, "What a key has left"), and the
//! words a refusal names its limit with. Pure: the gateway reads the
//! counters (the hold engine's own, in Redis) and the effective limits
//! (`limits::effective`, through the catalog) and passes them in.

use crate::limits::{LimitKind, Limits, ScopeKind};
use crate::money::MicroUsd;
use crate::period::PlatformClock;
use crate::reason::ReasonCode;
use chrono::{DateTime, TimeZone, Utc};
use serde::Serialize;

/// What a limit counts, as the document names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    Tokens,
    Cost,
    Requests,
    InputTokens,
    OutputTokens,
    InFlight,
    EndUsers,
}

/// The window a limit counts over, on the platform calendar; `None` (JSON
/// `null`) for in-flight requests, which count at an instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Period {
    Minute,
    Day,
    Week,
    Month,
    Quarter,
}

impl From<crate::budgets::BudgetPeriod> for Period {
    fn from(p: crate::budgets::BudgetPeriod) -> Self {
        use crate::budgets::BudgetPeriod as B;
        match p {
            B::Day => Period::Day,
            B::Week => Period::Week,
            B::Month => Period::Month,
            B::Quarter => Period::Quarter,
        }
    }
}

/// How a limit is kept: a hard one refuses (402 or 429), a soft one
/// degrades (the daily cost soft limit).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Enforcement {
    Hard,
    Soft,
}

/// Which models a limit counts: every one (`{"kind": "all"}`), or those a
/// budget names (`{"kind": "models", "models": ["gpt-4o", "o3"]}`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ModelScope {
    All,
    Models { models: Vec<String> },
}

/// One budget of `Limits::budgets` and its counters: tokens, µUSD and
/// requests, each used and held (`ut, ht, uc, hc, uq, hq`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BudgetCounters {
    pub budget: crate::chain_budgets::Applied,
    pub counters: [i64; 6],
}

/// What an engine limit counts and over which window.
pub fn kind_and_period(l: LimitKind) -> (Kind, Option<Period>) {
    match l {
        LimitKind::MonthlyTokens => (Kind::Tokens, Some(Period::Month)),
        LimitKind::MonthlyCost => (Kind::Cost, Some(Period::Month)),
        LimitKind::MaxInflight => (Kind::InFlight, None),
        LimitKind::Rpm => (Kind::Requests, Some(Period::Minute)),
        LimitKind::InputTpm => (Kind::InputTokens, Some(Period::Minute)),
        LimitKind::OutputTpm => (Kind::OutputTokens, Some(Period::Minute)),
        LimitKind::EndUsersPerMinute => (Kind::EndUsers, Some(Period::Minute)),
        // Each budget names its own kind and period (`budget_line`).
        LimitKind::Budget => (Kind::Tokens, None),
    }
}

/// A limit in words, naming its level, kind and period: "the key's token
/// budget for the month", "the tenant's requests per minute". What a 402
/// or 429 (and a stream cut at its budget) says it was refused by.
pub fn describe(scope: ScopeKind, limit: LimitKind) -> String {
    let whose = match scope {
        ScopeKind::Tenant => "the tenant's",
        ScopeKind::App => "the app's",
        ScopeKind::Key => "the key's",
        ScopeKind::EndUser => "the end user's",
    };
    let what = match limit {
        LimitKind::MonthlyTokens => "token budget for the month",
        LimitKind::MonthlyCost => "cost budget for the month",
        LimitKind::MaxInflight => "limit on requests in flight",
        LimitKind::Rpm => "requests per minute",
        LimitKind::InputTpm => "input tokens per minute",
        LimitKind::OutputTpm => "output tokens per minute",
        LimitKind::EndUsersPerMinute => return "the app's distinct end users per minute".into(),
        LimitKind::Budget => "budget",
    };
    format!("{whose} {what}")
}

/// A token bucket as the hold engine stores it: its level and the Redis
/// time (ms) it was last written.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Bucket {
    pub level: f64,
    pub at_ms: i64,
}

/// A bucket's level at `now_ms`: refilled continuously at `per_minute` a
/// minute, never above it, full when never written. The rule of
/// `refill` in `crates/quota/lua/prelude.lua`, which the scripts enforce.
pub fn bucket_level(b: Option<Bucket>, per_minute: i64, now_ms: i64) -> f64 {
    let full = per_minute as f64;
    match b {
        None => full,
        Some(b) => full.min(b.level + (now_ms - b.at_ms).max(0) as f64 * full / 60_000.0),
    }
}

/// One scope's counters, as the hold engine keeps them (month hash and
/// rates hash): `used` is settled, `held` reserved by open holds and
/// leases.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ScopeCounters {
    pub used_tokens: i64,
    pub held_tokens: i64,
    pub used_cost: i64,
    pub held_cost: i64,
    pub inflight: i64,
    /// Requests, input tokens and output tokens per minute.
    pub rpm: Option<Bucket>,
    pub input_tpm: Option<Bucket>,
    pub output_tpm: Option<Bucket>,
}

/// An amount of a limit: a count, or money (a decimal USD string in JSON,
/// as everywhere in tollgate).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(untagged)]
pub enum Amount {
    Count(i64),
    Usd(MicroUsd),
}

/// One limit that applies to a key, and where the key stands against it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LimitLine {
    pub level: ScopeKind,
    pub scope: ModelScope,
    pub period: Option<Period>,
    pub kind: Kind,
    pub enforcement: Enforcement,
    /// The effective limit: base + unexpired grants + borrowed quota
    /// (`limits::effective`).
    pub limit: Amount,
    pub used: Amount,
    pub held: Amount,
    /// `limit − used − held`, never below zero.
    pub remaining: Amount,
    /// RFC 3339 in the platform's time zone: the start of the next period
    /// (budgets), the instant the bucket is full again if nothing more is
    /// taken (rates); none for in-flight requests.
    pub resets_at: Option<String>,
    /// The reason code a request refused (or degraded) by this limit carries.
    pub reason: &'static str,
}

/// Everything a key's standing is computed from.
pub struct Inputs<'a> {
    /// Effective limits of tenant, app and key, in that order.
    pub limits: [&'a Limits; 3],
    /// Their counters, in the same order.
    pub counters: [ScopeCounters; 3],
    /// The tenant's settled cost today (platform day), when it has a daily
    /// soft limit.
    pub day_cost: Option<i64>,
    /// The platform's time (Redis time: buckets are stamped with it).
    pub now: DateTime<Utc>,
    pub clock: PlatformClock,
    /// Every budget of `Limits::budgets` of the three, with its counters
    /// (`chain_budgets::of_chain`'s order).
    pub budgets: Vec<BudgetCounters>,
}

/// An instant as RFC 3339 with the platform zone's offset (`2026-12-01T00:00:00+08:00`).
pub fn rfc3339(clock: &PlatformClock, at: DateTime<Utc>) -> String {
    clock
        .tz
        .from_utc_datetime(&at.naive_utc())
        .to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true)
}

/// A budget's line: used and held from the month hash.
fn budget(l: i64, used: i64, held: i64, money: bool) -> [Amount; 4] {
    let remaining = l.saturating_sub(used).saturating_sub(held).max(0);
    let a = |v: i64| {
        if money {
            Amount::Usd(MicroUsd(v))
        } else {
            Amount::Count(v)
        }
    };
    [a(l), a(used), a(held), a(remaining)]
}

/// Every limit that applies to a key (tenant, app and key; each absent one
/// is unlimited and not listed), tenant first, each level in the engine's
/// order of limits, the daily soft limit after the tenant's monthly cost.
pub fn lines(i: &Inputs<'_>) -> Vec<LimitLine> {
    let now_ms = i.now.timestamp_millis();
    let month = i.clock.month(i.now);
    let month_end = i.clock.month_bounds(&month).map(|(_, end)| end);
    let day = i.clock.day(i.now);
    let day_end = i.clock.day_bounds(&day).map(|(_, end)| end);
    let mut out = Vec::new();
    for (s, (limits, c)) in i.limits.iter().zip(i.counters.iter()).enumerate() {
        let level = ScopeKind::ALL[s];
        let args = limits.hold_args();
        for (li, kind) in LimitKind::ALL.into_iter().enumerate() {
            let l = args[li];
            if l < 0 {
                continue;
            }
            let (k, period) = kind_and_period(kind);
            let (amounts, resets_at) = match kind {
                LimitKind::MonthlyTokens => {
                    (budget(l, c.used_tokens, c.held_tokens, false), month_end)
                }
                LimitKind::MonthlyCost => (budget(l, c.used_cost, c.held_cost, true), month_end),
                LimitKind::MaxInflight => (budget(l, c.inflight, 0, false), None),
                LimitKind::Rpm | LimitKind::InputTpm | LimitKind::OutputTpm => {
                    let b = match kind {
                        LimitKind::Rpm => c.rpm,
                        LimitKind::InputTpm => c.input_tpm,
                        _ => c.output_tpm,
                    };
                    let level = bucket_level(b, l, now_ms);
                    // Taken: what the bucket is short of full, whole
                    // (a request needs a whole token of the bucket).
                    let taken = ((l as f64 - level).ceil() as i64).clamp(0, i64::MAX);
                    let refill_ms = if l > 0 {
                        ((l as f64 - level).max(0.0) * 60_000.0 / l as f64).ceil() as i64
                    } else {
                        0
                    };
                    (
                        budget(l, taken, 0, false),
                        Some(i.now + chrono::Duration::milliseconds(refill_ms)),
                    )
                }
                LimitKind::EndUsersPerMinute | LimitKind::Budget => continue,
            };
            let [limit, used, held, remaining] = amounts;
            out.push(LimitLine {
                level,
                scope: ModelScope::All,
                period,
                kind: k,
                enforcement: Enforcement::Hard,
                limit,
                used,
                held,
                remaining,
                resets_at: resets_at.map(|t| rfc3339(&i.clock, t)),
                reason: ReasonCode::Limit(level, kind).as_str(),
            });
            // The daily soft limit is the tenant's (docs/fair.md): listed
            // after its monthly cost budget.
            if level == ScopeKind::Tenant && kind == LimitKind::MonthlyCost {
                out.extend(soft_line(i, day_end));
            }
        }
        if level == ScopeKind::Tenant && limits.monthly_cost_usd.is_none() {
            out.extend(soft_line(i, day_end));
        }
        // Then the level's budgets, each amount it sets a line.
        for b in i.budgets.iter().filter(|b| b.budget.level == level) {
            out.extend(budget_lines(i, b));
        }
    }
    out
}

/// A budget's lines: one per amount it sets (tokens, cost, requests).
fn budget_lines(i: &Inputs<'_>, b: &BudgetCounters) -> Vec<LimitLine> {
    use crate::budgets::BudgetKind;
    let a = &b.budget;
    let c = b.counters;
    let kinds = [
        (BudgetKind::Tokens, Kind::Tokens, c[0], c[1], false),
        (BudgetKind::Cost, Kind::Cost, c[2], c[3], true),
        (BudgetKind::Requests, Kind::Requests, c[4], c[5], false),
    ];
    let scope = match &a.models {
        Some(m) => ModelScope::Models { models: m.clone() },
        None => ModelScope::All,
    };
    kinds
        .into_iter()
        .zip(a.limits)
        .filter(|(_, l)| *l >= 0)
        .map(|((bk, k, used, held, money), l)| {
            let [limit, used, held, remaining] = budget(l, used, held, money);
            LimitLine {
                level: a.level,
                scope: scope.clone(),
                period: Some(a.period.into()),
                kind: k,
                enforcement: Enforcement::Hard,
                limit,
                used,
                held,
                remaining,
                resets_at: Some(rfc3339(&i.clock, a.resets_at)),
                reason: crate::chain_budgets::reason_code(a.level, a.model_scoped, a.period, bk),
            }
        })
        .collect()
}

/// The tenant's daily cost soft limit: settled cost of the platform day,
/// nothing held (it is checked before a request, not reserved).
fn soft_line(i: &Inputs<'_>, day_end: Option<DateTime<Utc>>) -> Option<LimitLine> {
    let soft = i.limits[0].daily_cost_soft_usd?;
    let [limit, used, held, remaining] = budget(soft.0, i.day_cost.unwrap_or(0), 0, true);
    Some(LimitLine {
        level: ScopeKind::Tenant,
        scope: ModelScope::All,
        period: Some(Period::Day),
        kind: Kind::Cost,
        enforcement: Enforcement::Soft,
        limit,
        used,
        held,
        remaining,
        resets_at: day_end.map(|t| rfc3339(&i.clock, t)),
        reason: ReasonCode::DailyCostSoftLimit.as_str(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn clock() -> PlatformClock {
        PlatformClock::parse("Asia/Shanghai").unwrap()
    }

    #[test]
    fn buckets_refill_by_the_minute_up_to_full() {
        assert_eq!(bucket_level(None, 60, 0), 60.0);
        let b = Some(Bucket {
            level: 10.0,
            at_ms: 1_000,
        });
        assert_eq!(bucket_level(b, 60, 1_000), 10.0);
        assert_eq!(bucket_level(b, 60, 11_000), 20.0);
        assert_eq!(bucket_level(b, 60, 10_000_000), 60.0);
        // A clock behind the stamp refills nothing.
        assert_eq!(bucket_level(b, 60, 0), 10.0);
    }

    #[test]
    fn every_limit_of_every_level_is_listed_with_what_is_left() {
        let now = Utc.with_ymd_and_hms(2026, 11, 30, 15, 59, 30).unwrap(); // 23:59:30 in Shanghai
        let tenant = Limits {
            monthly_tokens: Some(1_000),
            monthly_cost_usd: Some(MicroUsd(5_000_000)),
            daily_cost_soft_usd: Some(MicroUsd(1_000_000)),
            ..Limits::NONE
        };
        let app = Limits {
            rpm: Some(60),
            max_inflight: Some(4),
            ..Limits::NONE
        };
        let key = Limits {
            monthly_tokens: Some(100),
            output_tpm: Some(600),
            ..Limits::NONE
        };
        let counters = [
            ScopeCounters {
                used_tokens: 700,
                held_tokens: 200,
                used_cost: 1_500_000,
                held_cost: 250_000,
                ..Default::default()
            },
            ScopeCounters {
                inflight: 1,
                rpm: Some(Bucket {
                    level: 50.5,
                    at_ms: now.timestamp_millis(),
                }),
                ..Default::default()
            },
            ScopeCounters {
                used_tokens: 90,
                held_tokens: 30,
                ..Default::default()
            },
        ];
        let lines = lines(&Inputs {
            limits: [&tenant, &app, &key],
            counters,
            day_cost: Some(1_200_000),
            now,
            clock: clock(),
            budgets: Vec::new(),
        });
        let v = serde_json::to_value(&lines).unwrap();
        let got: Vec<(String, String, String)> = v
            .as_array()
            .unwrap()
            .iter()
            .map(|l| {
                (
                    l["level"].as_str().unwrap().to_string(),
                    l["kind"].as_str().unwrap().to_string(),
                    l["period"].as_str().unwrap_or("-").to_string(),
                )
            })
            .collect();
        let want = [
            ("tenant", "tokens", "month"),
            ("tenant", "cost", "month"),
            ("tenant", "cost", "day"),
            ("app", "in_flight", "-"),
            ("app", "requests", "minute"),
            ("key", "tokens", "month"),
            ("key", "output_tokens", "minute"),
        ];
        let want: Vec<(String, String, String)> = want
            .iter()
            .map(|(a, b, c)| (a.to_string(), b.to_string(), c.to_string()))
            .collect();
        assert_eq!(got, want);
        let t = &v[0];
        assert_eq!(
            (&t["limit"], &t["used"], &t["held"], &t["remaining"]),
            (&1000.into(), &700.into(), &200.into(), &100.into())
        );
        assert_eq!(t["scope"], serde_json::json!({"kind": "all"}));
        assert_eq!(t["resets_at"], "2026-12-01T00:00:00+08:00");
        assert_eq!(t["reason"], "tenant_monthly_budget_exhausted");
        assert_eq!(t["enforcement"], "hard");
        let cost = &v[1];
        assert_eq!(cost["remaining"], "3.250000", "money as USD strings");
        let soft = &v[2];
        assert_eq!(
            (&soft["enforcement"], &soft["remaining"], &soft["reason"]),
            (
                &"soft".into(),
                &"0.000000".into(),
                &"daily_cost_soft_limit".into()
            )
        );
        assert_eq!(soft["resets_at"], "2026-12-01T00:00:00+08:00");
        let inflight = &v[3];
        assert_eq!(inflight["period"], serde_json::Value::Null);
        assert_eq!(inflight["resets_at"], serde_json::Value::Null);
        assert_eq!(
            (&inflight["used"], &inflight["remaining"]),
            (&1.into(), &3.into())
        );
        let rpm = &v[4];
        // 50.5 left: 10 taken (a whole one for the half), 50 remaining; full
        // again in 9.5 s.
        assert_eq!((&rpm["used"], &rpm["remaining"]), (&10.into(), &50.into()));
        assert_eq!(rpm["resets_at"], "2026-11-30T23:59:39.500+08:00");
        let key_tokens = &v[5];
        assert_eq!(
            key_tokens["remaining"], 0,
            "used + held past the limit (an overrun) leaves nothing, never a negative"
        );
        let otpm = &v[6];
        assert_eq!(
            (&otpm["used"], &otpm["remaining"]),
            (&0.into(), &600.into())
        );
        assert_eq!(otpm["resets_at"], "2026-11-30T23:59:30+08:00", "full now");
    }

    #[test]
    fn a_scope_without_limits_lists_nothing() {
        let none = Limits::NONE;
        let lines = lines(&Inputs {
            limits: [&none, &none, &none],
            counters: Default::default(),
            day_cost: None,
            now: Utc::now(),
            clock: clock(),
            budgets: Vec::new(),
        });
        assert!(lines.is_empty());
    }

    #[test]
    fn a_limit_is_named_by_level_kind_and_period() {
        assert_eq!(
            describe(ScopeKind::Key, LimitKind::MonthlyTokens),
            "the key's token budget for the month"
        );
        assert_eq!(
            describe(ScopeKind::Tenant, LimitKind::Rpm),
            "the tenant's requests per minute"
        );
        assert_eq!(
            describe(ScopeKind::App, LimitKind::MonthlyCost),
            "the app's cost budget for the month"
        );
    }
}
