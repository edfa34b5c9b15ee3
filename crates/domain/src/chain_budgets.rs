//! The budgets of a request's chain (tenant, app, key): which of
//! `Limits::budgets` count a request, as the hold engine takes them, and
//! the words and reason codes of a refusal by one (docs/limits.md). The
//! budgets themselves, their periods and calendar: `domain::budgets`.

use crate::budgets::{period_of, span_of, BudgetKind, BudgetPeriod, Days};
use crate::limits::{Limits, ScopeKind};
use crate::period::PlatformClock;
use chrono::{DateTime, TimeZone, Utc};
use std::sync::OnceLock;

/// A budget that applies to one request, as the hold engine takes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Applied {
    pub level: ScopeKind,
    /// Its place in its scope's `budgets`.
    pub index: usize,
    pub period: BudgetPeriod,
    /// Whether it counts some models only.
    pub model_scoped: bool,
    /// The period it is counted in (`d:2026-12-07`, `w:2026-12-07` for the
    /// week starting then, `m:2026-12`, `q:2026-10` for the quarter
    /// starting then): part of its counters' Redis key.
    pub period_id: String,
    /// Its counters' field prefix in the period's hash: the scope as the
    /// scripts name it and the models it counts (`k:<key>|gpt-4o,o3`).
    pub field: String,
    /// Tokens, micro-USD, requests; -1 = none.
    pub limits: [i64; 3],
    /// The models it counts (None: every one): what a rebuild from the
    /// ledger sums.
    pub models: Option<Vec<String>>,
    /// The period's first platform day and the day after its last: the
    /// ledger's days a rebuild sums.
    pub days: Days,
    /// When the period ends (the next one starts).
    pub resets_at: DateTime<Utc>,
}

impl Applied {
    /// The first amount it sets that has no room for a request of
    /// `tokens` and `cost` µUSD (and one request), by `counters`: tokens,
    /// µUSD and requests, each used then held. What a model's budget
    /// fallback asks before the request is held (docs/limits.md, "When a
    /// model's budget is spent").
    pub fn short_for(&self, counters: &[i64; 6], tokens: i64, cost: i64) -> Option<BudgetKind> {
        let need = [tokens, cost, 1];
        (0..3)
            .find(|&i| {
                let l = self.limits[i];
                l >= 0
                    && counters[2 * i]
                        .saturating_add(counters[2 * i + 1])
                        .saturating_add(need[i])
                        > l
            })
            .and_then(BudgetKind::from_index)
    }

    /// The reason code of a refusal (or a fallback) by it for `kind`.
    pub fn reason(&self, kind: BudgetKind) -> &'static str {
        reason_code(self.level, self.model_scoped, self.period, kind)
    }

    /// Seconds its counters are kept in Redis.
    pub fn ttl_secs(&self) -> i64 {
        self.period.ttl_secs()
    }
}

/// The budgets of tenant, app and key (`limits`, in that order) that count
/// a request to `model` at `now`. `app` and `key` are the ids the hold
/// engine names the scopes with.
pub fn applicable(
    limits: [&Limits; 3],
    app: &str,
    key: &str,
    model: &str,
    clock: &PlatformClock,
    now: DateTime<Utc>,
) -> Vec<Applied> {
    of_chain(limits, app, key, Some(model), clock, now)
}

/// Every budget of tenant, app and key at `now`, whatever models it counts
/// (what `GET /v1/usage` lists), or those counting `model` when given.
pub fn of_chain(
    limits: [&Limits; 3],
    app: &str,
    key: &str,
    model: Option<&str>,
    clock: &PlatformClock,
    now: DateTime<Utc>,
) -> Vec<Applied> {
    let mut out = Vec::new();
    for (s, l) in limits.iter().enumerate() {
        let Some(budgets) = l.budgets.as_deref() else {
            continue;
        };
        let level = ScopeKind::ALL[s];
        let scope = match level {
            ScopeKind::Tenant => "t".to_string(),
            ScopeKind::App => format!("a:{app}"),
            _ => format!("k:{key}"),
        };
        for (index, b) in budgets.iter().enumerate() {
            if model.is_some_and(|m| !b.counts(m)) {
                continue;
            }
            let Some((period_id, _, resets_at)) = period_of(clock, b.period, now) else {
                continue;
            };
            let local = clock.tz.from_utc_datetime(&now.naive_utc()).date_naive();
            let Some(days) = span_of(clock, b.period, local) else {
                continue;
            };
            out.push(Applied {
                level,
                index,
                period: b.period,
                model_scoped: b.models.is_some(),
                period_id,
                field: format!("{scope}|{}", b.model_key()),
                limits: b.engine_limits(),
                models: b.models.clone(),
                days,
                resets_at,
            });
        }
    }
    out
}

/// The reason code of a refusal by a budget: `{level}_{model_}{period}_{kind}_exhausted`,
/// e.g. `key_daily_cost_exhausted`, `tenant_model_monthly_tokens_exhausted`.
/// A finite set (3 levels × 2 × 4 periods × 3 kinds): clients, dashboards and
/// metric labels match on them.
pub fn reason_code(
    level: ScopeKind,
    model_scoped: bool,
    period: BudgetPeriod,
    kind: BudgetKind,
) -> &'static str {
    static CODES: OnceLock<Vec<&'static str>> = OnceLock::new();
    let codes = CODES.get_or_init(|| {
        let mut v = Vec::with_capacity(72);
        for level in ScopeKind::ALL {
            for scoped in [false, true] {
                for p in BudgetPeriod::ALL {
                    for k in BudgetKind::ALL {
                        let model = if scoped { "model_" } else { "" };
                        let code = format!(
                            "{}_{model}{}_{}_exhausted",
                            level.as_str(),
                            p.adjective(),
                            k.as_str()
                        );
                        v.push(&*Box::leak(code.into_boxed_str()));
                    }
                }
            }
        }
        v
    });
    let l = match level {
        ScopeKind::Tenant => 0,
        ScopeKind::App => 1,
        // Budgets sit on tenants, apps and keys only.
        _ => 2,
    };
    let p = BudgetPeriod::ALL
        .iter()
        .position(|x| *x == period)
        .unwrap_or(0);
    let k = BudgetKind::ALL.iter().position(|x| *x == kind).unwrap_or(0);
    codes[((l * 2 + usize::from(model_scoped)) * 4 + p) * 3 + k]
}

/// A budget in words: "the key's daily cost budget on gpt-4o, o3".
pub fn describe(
    level: ScopeKind,
    models: Option<&[String]>,
    period: BudgetPeriod,
    kind: BudgetKind,
) -> String {
    let whose = match level {
        ScopeKind::Tenant => "the tenant's",
        ScopeKind::App => "the app's",
        _ => "the key's",
    };
    let what = match kind {
        BudgetKind::Tokens => "token budget",
        BudgetKind::Cost => "cost budget",
        BudgetKind::Requests => "request budget",
    };
    let on = match models {
        Some(m) => format!(" on {}", m.join(", ")),
        None => String::new(),
    };
    format!("{whose} {} {what}{on}", period.adjective())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::budgets::Budget;
    use crate::money::MicroUsd;

    fn clock() -> PlatformClock {
        PlatformClock::parse("Asia/Shanghai").unwrap()
    }

    fn at(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    fn budget(period: BudgetPeriod, models: Option<&[&str]>, cost: Option<i64>) -> Budget {
        Budget {
            period,
            models: models.map(|m| m.iter().map(|s| s.to_string()).collect()),
            tokens: None,
            cost_usd: cost.map(MicroUsd),
            requests: None,
        }
    }

    #[test]
    fn a_budget_applies_to_its_models_only() {
        let c = clock();
        let now = at("2026-12-06T15:30:00Z");
        let tenant = Limits {
            budgets: Some(vec![
                budget(
                    BudgetPeriod::Month,
                    Some(&["gpt-4o", "o3"]),
                    Some(500_000_000),
                ),
                budget(BudgetPeriod::Day, None, Some(20_000_000)),
            ]),
            ..Default::default()
        };
        let key = Limits {
            budgets: Some(vec![Budget {
                requests: Some(100),
                ..budget(BudgetPeriod::Day, None, None)
            }]),
            ..Default::default()
        };
        let none = Limits::default();
        let a = applicable([&tenant, &none, &key], "app1", "key1", "gpt-4o", &c, now);
        let fields: Vec<_> = a
            .iter()
            .map(|b| (b.period_id.as_str(), b.field.as_str()))
            .collect();
        assert_eq!(
            fields,
            [
                ("m:2026-12", "t|gpt-4o,o3"),
                ("d:2026-12-06", "t|*"),
                ("d:2026-12-06", "k:key1|*"),
            ]
        );
        assert_eq!(a[0].limits, [-1, 500_000_000, -1]);
        assert!(a[0].model_scoped && !a[1].model_scoped);
        assert_eq!(a[2].limits, [-1, -1, 100]);
        let small = applicable(
            [&tenant, &none, &key],
            "app1",
            "key1",
            "gpt-4o-mini",
            &c,
            now,
        );
        assert_eq!(
            small.len(),
            2,
            "the model budget does not count another model"
        );
    }

    #[test]
    fn a_budget_is_short_when_the_request_would_pass_any_amount() {
        let c = clock();
        let key = Limits {
            budgets: Some(vec![Budget {
                tokens: Some(1_000),
                requests: Some(10),
                ..budget(BudgetPeriod::Day, Some(&["gpt-4o"]), Some(500))
            }]),
            ..Default::default()
        };
        let none = Limits::default();
        let now = at("2026-12-06T00:00:00Z");
        let a = &applicable([&none, &none, &key], "a", "k", "gpt-4o", &c, now)[0];
        assert_eq!(
            a.short_for(&[600, 300, 400, 0, 8, 0], 100, 100),
            None,
            "exactly fits"
        );
        assert_eq!(
            a.short_for(&[600, 300, 0, 0, 0, 0], 101, 0),
            Some(BudgetKind::Tokens)
        );
        assert_eq!(
            a.short_for(&[0, 0, 450, 0, 0, 0], 10, 51),
            Some(BudgetKind::Cost)
        );
        assert_eq!(
            a.short_for(&[0, 0, 0, 0, 9, 1], 0, 0),
            Some(BudgetKind::Requests)
        );
        assert_eq!(a.reason(BudgetKind::Cost), "key_model_daily_cost_exhausted");
    }

    #[test]
    fn reason_codes_name_level_scope_period_and_kind() {
        assert_eq!(
            reason_code(ScopeKind::Key, false, BudgetPeriod::Day, BudgetKind::Cost),
            "key_daily_cost_exhausted"
        );
        assert_eq!(
            reason_code(
                ScopeKind::Tenant,
                true,
                BudgetPeriod::Month,
                BudgetKind::Tokens
            ),
            "tenant_model_monthly_tokens_exhausted"
        );
        assert_eq!(
            reason_code(
                ScopeKind::App,
                false,
                BudgetPeriod::Quarter,
                BudgetKind::Requests
            ),
            "app_quarterly_requests_exhausted"
        );
        let mut all = std::collections::HashSet::new();
        for l in ScopeKind::ALL {
            for s in [false, true] {
                for p in BudgetPeriod::ALL {
                    for k in BudgetKind::ALL {
                        all.insert(reason_code(l, s, p, k));
                    }
                }
            }
        }
        assert_eq!(all.len(), 72, "each combination its own code");
        assert_eq!(
            describe(
                ScopeKind::Tenant,
                Some(&["gpt-4o".into()]),
                BudgetPeriod::Month,
                BudgetKind::Cost
            ),
            "the tenant's monthly cost budget on gpt-4o"
        );
    }
}
