//! The engine's vocabulary: its error, the requests and outcomes of hold,
//! extend and settle, open holds, and the ledger traits the caller
//! implements so this crate stays free of SQL.

use domain::{Limits, Refusal};
use std::collections::HashMap;
use std::future::Future;

#[derive(Debug, thiserror::Error)]
pub enum QuotaError {
    /// Redis is down, refused, or slower than the timeout: fail closed.
    #[error("quota store unavailable: {0}")]
    Unavailable(String),
    #[error("ledger unavailable for rebuild: {0}")]
    Ledger(String),
    #[error("unexpected reply from the hold engine: {0}")]
    Protocol(String),
    /// An amount outside what the counters can hold exactly (see
    /// `domain::counter`): refused before any Lua runs, and by the scripts.
    #[error("amount out of range: {0}")]
    OutOfRange(String),
    /// Redis is set up so that the books cannot stay exact (an eviction
    /// policy other than `noeviction`).
    #[error("{0}")]
    Misconfigured(String),
}

impl From<redis::RedisError> for QuotaError {
    fn from(e: redis::RedisError) -> Self {
        // The prelude's `amount` refuses an argument with this code.
        if e.code() == Some("TGRANGE") {
            return QuotaError::OutOfRange(e.detail().unwrap_or_default().to_string());
        }
        QuotaError::Unavailable(e.to_string())
    }
}

impl From<domain::counter::OutOfRange> for QuotaError {
    fn from(e: domain::counter::OutOfRange) -> Self {
        QuotaError::OutOfRange(e.to_string())
    }
}

/// One request's reservation across its three scopes.
#[derive(Debug, Clone)]
pub struct HoldRequest<'a> {
    pub request_id: &'a str,
    pub tenant: &'a str,
    pub app: &'a str,
    pub key: &'a str,
    pub month: &'a str,
    pub est_input: i64,
    pub est_output: i64,
    pub est_cost: i64,
    pub model: &'a str,
    /// Limits of tenant, app and key, in that order.
    pub limits: [&'a Limits; 3],
    /// The budgets of `Limits::budgets` that count this request
    /// (`domain::chain_budgets::applicable`); taken in the same step.
    pub budgets: &'a [domain::chain_budgets::Applied],
}

/// The fourth scope of a hold: the request's end user, under its app, when
/// the app limits its end users (docs/billing.md).
#[derive(Debug, Clone, Copy)]
pub struct EndUserScope<'a> {
    /// As the client sent it (the ledger rebuild looks it up).
    pub id: &'a str,
    pub limits: &'a domain::attribution::EndUserLimits,
}

impl EndUserScope<'_> {
    pub fn digest(&self) -> String {
        domain::attribution::end_user_digest(self.id)
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HoldOutcome {
    Admitted {
        remaining_requests: Option<i64>,
        remaining_tokens: Option<i64>,
    },
    /// The same request_id was held before; the first answer stands.
    Duplicate {
        state: String,
    },
    Refused(Refusal),
}

#[derive(Debug, Clone)]
pub struct SettleRequest<'a> {
    pub request_id: &'a str,
    pub tenant: &'a str,
    pub app: &'a str,
    pub key: &'a str,
    /// The month the hold was taken in.
    pub month: &'a str,
    pub input_tokens: i64,
    pub output_tokens: i64,
    pub cost: i64,
    /// The usage event, stored verbatim in the outbox for the ledger writer.
    pub event_json: &'a str,
    pub status: &'a str,
    pub limits: [&'a Limits; 3],
    /// The most this settle may book (`domain::usage::Bound`): amounts are
    /// clamped to it before any script runs.
    pub bound: domain::usage::Bound,
}

/// More output for an open hold (a stream past its slice).
#[derive(Debug, Clone)]
pub struct ExtendRequest<'a> {
    pub request_id: &'a str,
    pub tenant: &'a str,
    pub app: &'a str,
    pub key: &'a str,
    /// The month the hold was taken in.
    pub month: &'a str,
    pub add_output: i64,
    pub add_cost: i64,
    pub limits: [&'a Limits; 3],
    /// The budgets the hold took, in its order (the hold's record keeps
    /// them; these only name a budget that refuses).
    pub budgets: &'a [domain::chain_budgets::Applied],
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExtendOutcome {
    Extended {
        remaining_tokens: Option<i64>,
    },
    Refused(Refusal),
    /// No open hold under this id (settled, released, or lost with Redis).
    NotHeld {
        state: String,
    },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SettleOutcome {
    Settled {
        overrun_tokens: i64,
        overrun_cost: i64,
    },
    /// Already settled or released: nothing changed.
    AlreadyClosed { state: String },
}

/// An open hold, as recorded by the hold script.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpenHold {
    pub request_id: String,
    pub app: String,
    pub key: String,
    pub month: String,
    pub est_input: i64,
    pub est_output: i64,
    pub est_cost: i64,
    pub model: String,
    pub replica: String,
    /// Redis time of the hold, ms since the epoch.
    pub at_ms: i64,
    /// The end user's digest when the hold took the end user's scope.
    pub end_user_digest: Option<String>,
}

/// Settled usage of one (app, key) pair in a month, as the ledger has it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScopeUsage {
    pub app: String,
    pub key: String,
    pub tokens: i64,
    pub cost: i64,
    pub overrun_tokens: i64,
    pub overrun_cost: i64,
}

/// Where a lost month is rebuilt from: the Postgres ledger, implemented by
/// the caller so this crate stays free of SQL.
pub trait LedgerSource: Send + Sync {
    fn month_usage(
        &self,
        tenant: &str,
        month: &str,
    ) -> impl Future<Output = Result<Vec<ScopeUsage>, String>> + Send;

    /// Settled tokens, cost and requests of a tenant (of one app or key
    /// when given) on `models` (None: every model) over platform days
    /// `[days.0, days.1)`: what a budget's counters are rebuilt from.
    /// Sources that keep no ledger (tools, most tests) keep this default.
    fn window_usage(
        &self,
        _tenant: &str,
        _app: Option<&str>,
        _key: Option<&str>,
        _models: Option<&[String]>,
        _days: domain::budgets::Days,
    ) -> impl Future<Output = Result<(i64, i64, i64), String>> + Send {
        async { Ok((0, 0, 0)) }
    }

    /// One end user's settled (tokens, cost) of an app in a month. Sources
    /// that never see end users (tools, most tests) keep this default.
    fn end_user_month_usage(
        &self,
        _tenant: &str,
        _app: &str,
        _end_user: &str,
        _month: &str,
    ) -> impl Future<Output = Result<(i64, i64), String>> + Send {
        async { Ok((0, 0)) }
    }
}

/// The ledger's answer to "is this request booked already?" — asked only
/// when a settle finds no hold record. Object-safe (a boxed future) so the
/// engine can carry one.
pub trait BookedCheck: Send + Sync {
    fn is_booked<'a>(
        &'a self,
        tenant: &'a str,
        request_id: &'a str,
    ) -> std::pin::Pin<Box<dyn Future<Output = Result<bool, String>> + Send + 'a>>;
}

/// Raw counters of a tenant's month, by field (`t:ut`, `a:<app>:ht`, …).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MonthCounters(pub HashMap<String, i64>);

impl MonthCounters {
    fn field(&self, scope: &str, f: &str) -> i64 {
        self.0.get(&format!("{scope}:{f}")).copied().unwrap_or(0)
    }
    pub fn used_tokens(&self, scope: &str) -> i64 {
        self.field(scope, "ut")
    }
    pub fn held_tokens(&self, scope: &str) -> i64 {
        self.field(scope, "ht")
    }
    pub fn used_cost(&self, scope: &str) -> i64 {
        self.field(scope, "uc")
    }
    pub fn held_cost(&self, scope: &str) -> i64 {
        self.field(scope, "hc")
    }
    pub fn overrun_tokens(&self, scope: &str) -> i64 {
        self.field(scope, "ot")
    }
    pub fn is_rebuilt(&self) -> bool {
        self.0.contains_key("_rb")
    }
}
