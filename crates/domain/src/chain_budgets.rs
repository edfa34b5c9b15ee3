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

/// The budget a reason code of [`reason_code`] names: (level, model
/// scoped, period, kind); None for any other code.
pub fn parse_reason(code: &str) -> Option<(ScopeKind, bool, BudgetPeriod, BudgetKind)> {
    if !code.ends_with("_exhausted") {
        return None;
    }
    ScopeKind::ALL.into_iter().find_map(|level| {
        [false, true].into_iter().find_map(|scoped| {
            BudgetPeriod::ALL.into_iter().find_map(|p| {
                BudgetKind::ALL
                    .into_iter()
                    .find(|k| reason_code(level, scoped, p, *k) == code)
                    .map(|k| (level, scoped, p, k))
            })
        })
    })
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
    use crate::budgets::tests::{at, budget, clock};
    use crate::budgets::Budget;

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
        for code in &all {
            let (l, m, p, k) = parse_reason(code).unwrap();
            assert_eq!(reason_code(l, m, p, k), *code);
        }
        assert_eq!(parse_reason("key_monthly_budget_exhausted"), None);
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
