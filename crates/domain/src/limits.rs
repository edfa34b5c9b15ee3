//! The limits a scope may carry (docs/design.md §3). Absent means unlimited.

use crate::money::MicroUsd;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Limits {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub monthly_tokens: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub monthly_cost_usd: Option<MicroUsd>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub daily_cost_soft_usd: Option<MicroUsd>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rpm: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_tpm: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_tpm: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_inflight: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_context_tokens: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_output_tokens: Option<i64>,
    /// Service tiers beyond the provider's default this scope may ask for
    /// (`priority`, `flex`, `scale`, Anthropic's `fast` speed …); none: the
    /// default only (docs/billing.md, "Service tiers and hosted tools").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allowed_service_tiers: Option<Vec<String>>,
    /// Hosted (provider-run) tools this scope may use (`web_search`,
    /// `file_search`, `code_interpreter`, …); none: every one when no
    /// scope of the request has a monthly budget, else none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allowed_tools: Option<Vec<String>>,
    /// Budgets over a day, week, month or quarter, on every model or on
    /// some (`domain::budgets`; docs/limits.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budgets: Option<Vec<crate::budgets::Budget>>,
}

/// The names of a limits object's fields (its JSON keys), as its checks
/// name them.
pub const FIELDS: [&str; 12] = [
    "monthly_tokens",
    "monthly_cost_usd",
    "daily_cost_soft_usd",
    "rpm",
    "input_tpm",
    "output_tpm",
    "max_inflight",
    "max_context_tokens",
    "max_output_tokens",
    "allowed_service_tiers",
    "allowed_tools",
    "budgets",
];

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("limit {field} must not be negative (a list: at most 32 names of 1 to 32 letters, digits, '_' or '-')")]
pub struct LimitsError {
    pub field: &'static str,
    /// The bad element of a list field (the 33rd of a list too long).
    pub index: Option<usize>,
}

impl Limits {
    /// No limit at all (every field absent): what most keys carry.
    pub const NONE: Limits = Limits {
        monthly_tokens: None,
        monthly_cost_usd: None,
        daily_cost_soft_usd: None,
        rpm: None,
        input_tpm: None,
        output_tpm: None,
        max_inflight: None,
        max_context_tokens: None,
        max_output_tokens: None,
        allowed_service_tiers: None,
        allowed_tools: None,
        budgets: None,
    };

    /// The first rule these limits break (see [`Limits::problems`]).
    pub fn validate(&self) -> Result<(), LimitsError> {
        match self.problems().into_iter().next() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Every field that breaks a rule, in field order, one problem per
    /// field: a negative number, or a list's first bad element (a name of
    /// 1–32 letters, digits, `_` or `-`; at most 32 names).
    pub fn problems(&self) -> Vec<LimitsError> {
        let mut out = Vec::new();
        let ints = [
            ("monthly_tokens", self.monthly_tokens),
            ("monthly_cost_usd", self.monthly_cost_usd.map(|m| m.0)),
            ("daily_cost_soft_usd", self.daily_cost_soft_usd.map(|m| m.0)),
            ("rpm", self.rpm),
            ("input_tpm", self.input_tpm),
            ("output_tpm", self.output_tpm),
            ("max_inflight", self.max_inflight),
            ("max_context_tokens", self.max_context_tokens),
            ("max_output_tokens", self.max_output_tokens),
        ];
        for (field, v) in ints {
            if v.is_some_and(|v| v < 0) {
                out.push(LimitsError { field, index: None });
            }
        }
        let lists = [
            ("allowed_service_tiers", &self.allowed_service_tiers),
            ("allowed_tools", &self.allowed_tools),
        ];
        for (field, list) in lists {
            let bad = |n: &String| {
                n.is_empty()
                    || n.len() > 32
                    || !n
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
            };
            let list = list.as_deref().unwrap_or_default();
            if let Some(index) = list
                .iter()
                .position(bad)
                .or((list.len() > 32).then_some(32))
            {
                out.push(LimitsError {
                    field,
                    index: Some(index),
                });
            }
        }
        if let Some(b) = &self.budgets {
            if let Err(e) = crate::budgets::validate(b) {
                out.push(LimitsError {
                    field: "budgets",
                    index: Some(e.index),
                });
            }
        }
        out
    }

    /// These limits raised by temporary grants (tokens, micro-USD). A grant
    /// raises a budget that exists; on an unlimited scope it changes nothing.
    pub fn raised_by(&self, tokens: i64, cost_micro: i64) -> Limits {
        let mut l = self.clone();
        l.monthly_tokens = l.monthly_tokens.map(|b| b.saturating_add(tokens));
        l.monthly_cost_usd = l
            .monthly_cost_usd
            .map(|b| MicroUsd(b.0.saturating_add(cost_micro)));
        l
    }

    /// The limits the hold engine checks, in its fixed order; -1 = unlimited.
    pub fn hold_args(&self) -> [i64; 6] {
        let u = |v: Option<i64>| v.unwrap_or(-1);
        [
            u(self.monthly_tokens),
            u(self.monthly_cost_usd.map(|m| m.0)),
            u(self.max_inflight),
            u(self.rpm),
            u(self.input_tpm),
            u(self.output_tpm),
        ]
    }
}

/// Whether every scope that lists names (`list`) lists `name`; when no
/// scope lists any, `unlisted`. The one rule for the allowed service tiers
/// and hosted tools of tenant, app and key (as for allowed models: each
/// scope that says must agree).
pub fn allows(
    scopes: [&Limits; 3],
    list: impl Fn(&Limits) -> Option<&Vec<String>>,
    name: &str,
    unlisted: bool,
) -> bool {
    let mut listed = false;
    for l in scopes {
        if let Some(names) = list(l) {
            listed = true;
            if !names.iter().any(|n| n == name) {
                return false;
            }
        }
    }
    listed || unlisted
}

/// An approved temporary grant: it counts until `expires_at`, checked by
/// time wherever limits are computed (no job is needed for it to stop).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    pub tokens: i64,
    pub cost_micro: i64,
    pub expires_at: DateTime<Utc>,
}

/// Quota a tenant borrowed from the platform pool and still holds in a
/// month (only tenants borrow; an app's is always zero).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Borrowed {
    pub tokens: i64,
    pub cost_micro: i64,
}

/// The limits of `inner` (an app's, a key's) set higher than the same limit
/// of `outer` (its tenant's, its app's): (field, inner, outer), amounts in
/// micro-USD. Accepted as set — the lower limit applies first — but worth
/// a word to whoever set them.
pub fn above(inner: &Limits, outer: &Limits) -> Vec<(&'static str, i64, i64)> {
    let m = |v: Option<MicroUsd>| v.map(|m| m.0);
    let pairs = [
        ("monthly_tokens", inner.monthly_tokens, outer.monthly_tokens),
        (
            "monthly_cost_usd",
            m(inner.monthly_cost_usd),
            m(outer.monthly_cost_usd),
        ),
        (
            "daily_cost_soft_usd",
            m(inner.daily_cost_soft_usd),
            m(outer.daily_cost_soft_usd),
        ),
        ("rpm", inner.rpm, outer.rpm),
        ("input_tpm", inner.input_tpm, outer.input_tpm),
        ("output_tpm", inner.output_tpm, outer.output_tpm),
        ("max_inflight", inner.max_inflight, outer.max_inflight),
        (
            "max_context_tokens",
            inner.max_context_tokens,
            outer.max_context_tokens,
        ),
        (
            "max_output_tokens",
            inner.max_output_tokens,
            outer.max_output_tokens,
        ),
    ];
    pairs
        .into_iter()
        .filter_map(|(f, i, o)| match (i, o) {
            (Some(i), Some(o)) if i > o => Some((f, i, o)),
            _ => None,
        })
        .collect()
}

/// The latest a temporary grant asked at `now` may expire: `max_days`
/// later (`auth.max_grant_days`).
pub fn latest_grant_expiry(now: DateTime<Utc>, max_days: u32) -> DateTime<Utc> {
    now + chrono::Duration::days(i64::from(max_days))
}

/// Whether a grant asked at `now` may expire at `expires_at` (in the
/// future is checked apart: a past expiry has its own message).
pub fn grant_expiry_allowed(expires_at: DateTime<Utc>, now: DateTime<Utc>, max_days: u32) -> bool {
    expires_at <= latest_grant_expiry(now, max_days)
}

/// The grants unexpired at `now`, summed (tokens, micro-USD); saturating.
pub fn granted(grants: &[Grant], now: DateTime<Utc>) -> (i64, i64) {
    grants
        .iter()
        .filter(|g| g.expires_at > now)
        .fold((0, 0), |(t, c), g| {
            (t.saturating_add(g.tokens), c.saturating_add(g.cost_micro))
        })
}

/// What a scope's monthly budgets are checked against at `now`: the base
/// limits + the grants unexpired at `now` + the quota borrowed in the month.
/// The gateway enforces it, the console shows it, the budget alerts measure
/// against it: this is its only copy.
pub fn effective(
    base: &Limits,
    grants: &[Grant],
    borrowed: Borrowed,
    now: DateTime<Utc>,
) -> Limits {
    let (t, c) = granted(grants, now);
    let (t, c) = (
        t.saturating_add(borrowed.tokens),
        c.saturating_add(borrowed.cost_micro),
    );
    if t == 0 && c == 0 {
        base.clone()
    } else {
        base.raised_by(t, c)
    }
}

/// The nested scopes a request is held against, outermost first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ScopeKind {
    Tenant,
    App,
    Key,
    /// The request's end user, within its app (docs/billing.md): a fourth
    /// scope, held only when the app limits its end users.
    EndUser,
}

impl ScopeKind {
    /// The scopes every request is held against (the end user's is extra).
    pub const ALL: [ScopeKind; 3] = [ScopeKind::Tenant, ScopeKind::App, ScopeKind::Key];

    pub fn as_str(self) -> &'static str {
        match self {
            ScopeKind::Tenant => "tenant",
            ScopeKind::App => "app",
            ScopeKind::Key => "key",
            ScopeKind::EndUser => "end_user",
        }
    }

    /// The scripts' scope index (0-based): 0-2 as `ALL`, 3 the end user.
    pub fn from_index(i: usize) -> Option<Self> {
        match i {
            3 => Some(ScopeKind::EndUser),
            _ => Self::ALL.get(i).copied(),
        }
    }
}

/// The limits the hold engine enforces, in the order of `Limits::hold_args`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LimitKind {
    MonthlyTokens,
    MonthlyCost,
    MaxInflight,
    Rpm,
    InputTpm,
    OutputTpm,
    /// The cap on distinct end users an app admits per minute (what keeps
    /// the end-user counters' memory bounded).
    EndUsersPerMinute,
    /// One of the scope's `budgets` (`domain::budgets`): the refusal's
    /// `budget` says which.
    Budget,
}

impl LimitKind {
    pub const ALL: [LimitKind; 6] = [
        LimitKind::MonthlyTokens,
        LimitKind::MonthlyCost,
        LimitKind::MaxInflight,
        LimitKind::Rpm,
        LimitKind::InputTpm,
        LimitKind::OutputTpm,
    ];

    /// The scripts' limit index (0-based): 0-5 as `ALL`, 6 the end-user
    /// cap, 7 a budget.
    pub fn from_index(i: usize) -> Option<Self> {
        match i {
            6 => Some(LimitKind::EndUsersPerMinute),
            7 => Some(LimitKind::Budget),
            _ => Self::ALL.get(i).copied(),
        }
    }
}

/// Whether a monthly budget (tokens or micro-USD) refuses requests now:
/// what is used and held reaches the limit, or the scope's latest request
/// was refused for this budget at the limit in force now (`refused_at`:
/// the limit that refused it) — less was left than a request needs. A
/// limit raised since that refusal (a grant, a change) clears it.
pub fn budget_spent(used_and_held: i64, limit: Option<i64>, refused_at: Option<i64>) -> bool {
    match limit {
        Some(l) => used_and_held >= l || refused_at == Some(l),
        None => false,
    }
}

/// Share of a monthly budget used and held, 0–100 (0 when unlimited).
pub fn used_percent(used_and_held: i64, limit: Option<i64>) -> i64 {
    match limit {
        Some(l) if l > 0 => ((used_and_held as i128 * 100 / l as i128).clamp(0, 100)) as i64,
        _ => 0,
    }
}

#[cfg(test)]
mod budget_tests {
    use super::*;

    #[test]
    fn a_budget_is_spent_when_used_up_or_refusing_at_its_current_limit() {
        assert!(budget_spent(100, Some(100), None));
        assert!(budget_spent(130, Some(100), None), "overrun");
        assert!(!budget_spent(96, Some(100), None));
        // 96 of 100 used, and the last request refused at this limit:
        // what is left is less than a request needs.
        assert!(budget_spent(96, Some(100), Some(100)));
        // …a grant raised the limit since: no longer spent.
        assert!(!budget_spent(96, Some(5_100), Some(100)));
        assert!(!budget_spent(10_000, None, Some(100)), "unlimited");
        assert_eq!(used_percent(96, Some(100)), 96);
        assert_eq!(used_percent(250, Some(100)), 100);
        assert_eq!(used_percent(5, None), 0);
        assert_eq!(used_percent(i64::MAX, Some(1)), 100);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grant(tokens: i64, cost_micro: i64, expires_at: DateTime<Utc>) -> Grant {
        Grant {
            tokens,
            cost_micro,
            expires_at,
        }
    }

    #[test]
    fn effective_is_base_plus_unexpired_grants_plus_borrowed() {
        use chrono::TimeZone;
        let now = Utc.with_ymd_and_hms(2026, 3, 10, 12, 0, 0).unwrap();
        let base = Limits {
            monthly_tokens: Some(1_000),
            monthly_cost_usd: Some(MicroUsd(5_000_000)),
            rpm: Some(60),
            ..Default::default()
        };
        let grants = [
            grant(100, 1_000_000, now + chrono::Duration::hours(1)),
            // Expired exactly now: no longer counts.
            grant(10_000, 9_000_000, now),
        ];
        let borrowed = Borrowed {
            tokens: 50,
            cost_micro: 250_000,
        };
        let e = effective(&base, &grants, borrowed, now);
        assert_eq!(e.monthly_tokens, Some(1_150));
        assert_eq!(e.monthly_cost_usd, Some(MicroUsd(6_250_000)));
        assert_eq!(e.rpm, Some(60), "only monthly budgets are raised");
        assert_eq!(effective(&base, &[], Borrowed::default(), now), base);
        assert_eq!(
            effective(&Limits::default(), &grants, borrowed, now),
            Limits::default(),
            "an unlimited scope stays unlimited"
        );
        let huge = [grant(i64::MAX, i64::MAX, now + chrono::Duration::days(1))];
        let e = effective(&base, &huge, borrowed, now);
        assert_eq!(e.monthly_tokens, Some(i64::MAX), "saturates, never wraps");
        assert_eq!(granted(&huge, now), (i64::MAX, i64::MAX));
    }

    #[test]
    fn limits_parse_from_admin_json() {
        let l: Limits = serde_json::from_str(
            r#"{"monthly_tokens":1000,"monthly_cost_usd":"5.000000","rpm":60}"#,
        )
        .unwrap();
        assert_eq!(l.monthly_tokens, Some(1000));
        assert_eq!(l.monthly_cost_usd, Some(MicroUsd(5_000_000)));
        assert_eq!(l.hold_args(), [1000, 5_000_000, -1, 60, -1, -1]);
    }

    #[test]
    fn grants_raise_existing_budgets_only() {
        let l = Limits {
            monthly_tokens: Some(1000),
            ..Default::default()
        };
        let r = l.raised_by(500, 2_000_000);
        assert_eq!(r.monthly_tokens, Some(1500));
        assert_eq!(r.monthly_cost_usd, None);
    }

    #[test]
    fn unknown_and_negative_limits_are_refused() {
        assert!(serde_json::from_str::<Limits>(r#"{"monthly_tokenz":1}"#).is_err());
        let l = Limits {
            rpm: Some(-1),
            ..Default::default()
        };
        assert_eq!(
            l.validate(),
            Err(LimitsError {
                field: "rpm",
                index: None
            })
        );
    }

    #[test]
    fn every_broken_limit_at_once() {
        let l = Limits {
            monthly_tokens: Some(-5),
            rpm: Some(-1),
            max_inflight: Some(3),
            allowed_tools: Some(vec!["ok".into(), "not ok".into()]),
            ..Limits::NONE
        };
        let fields: Vec<_> = l
            .problems()
            .into_iter()
            .map(|e| (e.field, e.index))
            .collect();
        assert_eq!(
            fields,
            [
                ("monthly_tokens", None),
                ("rpm", None),
                ("allowed_tools", Some(1))
            ]
        );
        assert_eq!(
            l.validate(),
            Err(LimitsError {
                field: "monthly_tokens",
                index: None
            })
        );
        assert!(Limits::NONE.problems().is_empty());
    }

    #[test]
    fn the_field_names_are_the_json_keys() {
        let all = Limits {
            monthly_tokens: Some(1),
            monthly_cost_usd: Some(crate::money::MicroUsd(1)),
            daily_cost_soft_usd: Some(crate::money::MicroUsd(1)),
            rpm: Some(1),
            input_tpm: Some(1),
            output_tpm: Some(1),
            max_inflight: Some(1),
            max_context_tokens: Some(1),
            max_output_tokens: Some(1),
            allowed_service_tiers: Some(vec!["priority".into()]),
            allowed_tools: Some(vec!["web_search".into()]),
            budgets: Some(vec![crate::budgets::Budget {
                period: crate::budgets::BudgetPeriod::Day,
                models: None,
                tokens: Some(1),
                cost_usd: None,
                requests: None,
            }]),
        };
        let v = serde_json::to_value(&all).unwrap();
        let mut keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
        let mut fields = FIELDS.to_vec();
        keys.sort_unstable();
        fields.sort_unstable();
        assert_eq!(keys, fields);
        let bad = Limits {
            allowed_tools: Some(vec!["web_search".into(), "no spaces".into()]),
            ..Limits::NONE
        };
        assert_eq!(
            bad.validate(),
            Err(LimitsError {
                field: "allowed_tools",
                index: Some(1)
            })
        );
    }
}

#[cfg(test)]
mod plausible_tests {
    use super::*;

    #[test]
    fn a_grant_runs_at_most_the_maximum() {
        let now = chrono::DateTime::parse_from_rfc3339("2026-12-07T00:00:00Z")
            .unwrap()
            .with_timezone(&Utc);
        assert_eq!(
            latest_grant_expiry(now, 90).to_rfc3339(),
            "2027-03-07T00:00:00+00:00"
        );
        assert!(grant_expiry_allowed(
            now + chrono::Duration::days(90),
            now,
            90
        ));
        assert!(!grant_expiry_allowed(
            now + chrono::Duration::days(90) + chrono::Duration::seconds(1),
            now,
            90
        ));
        let y2099 = chrono::DateTime::parse_from_rfc3339("2099-01-01T00:00:00Z")
            .unwrap()
            .with_timezone(&Utc);
        assert!(!grant_expiry_allowed(y2099, now, 90));
    }

    #[test]
    fn limits_above_the_outer_scopes_are_named() {
        let tenant = Limits {
            rpm: Some(60),
            monthly_cost_usd: Some(MicroUsd(10_000_000)),
            max_inflight: Some(4),
            ..Default::default()
        };
        let key = Limits {
            rpm: Some(500),
            monthly_cost_usd: Some(MicroUsd(10_000_000)),
            max_inflight: Some(2),
            monthly_tokens: Some(1_000),
            ..Default::default()
        };
        assert_eq!(above(&key, &tenant), vec![("rpm", 500, 60)]);
        assert!(
            above(&tenant, &Limits::default()).is_empty(),
            "unlimited outer"
        );
        assert!(above(&Limits::default(), &tenant).is_empty());
    }
}
