//! The limits a scope may carry (DESIGN §3). Absent means unlimited.

use crate::money::MicroUsd;
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
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("limit {field} must not be negative")]
pub struct LimitsError {
    pub field: &'static str,
}

impl Limits {
    pub fn validate(&self) -> Result<(), LimitsError> {
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
                return Err(LimitsError { field });
            }
        }
        Ok(())
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

/// The nested scopes a request is held against, outermost first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ScopeKind {
    Tenant,
    App,
    Key,
}

impl ScopeKind {
    pub const ALL: [ScopeKind; 3] = [ScopeKind::Tenant, ScopeKind::App, ScopeKind::Key];

    pub fn as_str(self) -> &'static str {
        match self {
            ScopeKind::Tenant => "tenant",
            ScopeKind::App => "app",
            ScopeKind::Key => "key",
        }
    }

    pub fn from_index(i: usize) -> Option<Self> {
        Self::ALL.get(i).copied()
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

    pub fn from_index(i: usize) -> Option<Self> {
        Self::ALL.get(i).copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert_eq!(l.validate(), Err(LimitsError { field: "rpm" }));
    }
}
