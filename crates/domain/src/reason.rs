//! Admission decisions and the reason codes clients, metrics and bills see.

use crate::budgets::{BudgetKind, BudgetPeriod};
use crate::limits::{LimitKind, ScopeKind};
use std::fmt;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Decision {
    Allow,
    Queue,
    Degrade,
    Reject,
}

impl Decision {
    pub fn as_str(self) -> &'static str {
        match self {
            Decision::Allow => "allow",
            Decision::Queue => "queue",
            Decision::Degrade => "degrade",
            Decision::Reject => "reject",
        }
    }
}

/// Why a request was refused, queued or degraded. Stable strings: clients and
/// dashboards match on them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ReasonCode {
    Limit(ScopeKind, LimitKind),
    /// A budget of `Limits::budgets` (`domain::budgets`): its level,
    /// whether it counts some models only, its period and what it counts.
    Budget {
        level: ScopeKind,
        model_scoped: bool,
        period: BudgetPeriod,
        kind: BudgetKind,
    },
    InvalidApiKey,
    InvalidRequest,
    ModelNotFound,
    ModelNotAllowed,
    ContextTooLong,
    QuotaStoreUnavailable,
    UpstreamError,
    UpstreamRateLimited,
    UpstreamUnavailable,
    /// The provider's answer (or one stream event) was larger than the
    /// gateway reads (`gateway.max_upstream_body_bytes`,
    /// `gateway.max_sse_event_bytes`).
    UpstreamResponseTooLarge,
    /// A degrade: the request went through with a smaller max_tokens.
    MaxTokensClampedToBudget,
    /// A degrade: past the tenant's daily cost soft limit, the request went
    /// to the model's cheaper model and/or with a smaller max_tokens.
    DailyCostSoftLimit,
    /// Waited in the tenant's queue for its maximum wait without a slot.
    QueueTimeout,
    /// The tenant's queue (on this replica) is full: its own
    /// `max_queued_requests`, or the platform's `fair.queue_max_per_tenant`.
    TenantQueueFull,
    /// The tenant already has its `max_open_streams` streamed answers open
    /// (on this replica): a new stream is refused before it is forwarded.
    TenantStreamCap,
    /// A tag of the request is malformed, too long, repeated, or one too many.
    InvalidTag,
    /// The app or key requires a tag the request does not carry.
    MissingRequiredTag,
    /// The end user identifier is too long or has control characters.
    InvalidEndUser,
    /// The key has had its minute's allowance of tokens counted by
    /// `count_tokens` on this replica (`gateway.count_tokens_per_minute`).
    CountTokensExceeded,
    /// The provider refused the request as it was (its 400, 404, 413 or
    /// 422); its words are kept in the request log, not sent on.
    UpstreamRejectedRequest,
    /// No route of the API at this path (404).
    RouteNotFound,
    /// The path is served, not with this method (405).
    MethodNotAllowed,
    /// The request asks for a service tier (or Anthropic speed) its
    /// tenant, app or key may not use (403).
    ServiceTierNotAllowed,
    /// The request offers a hosted tool its tenant, app or key may not
    /// use (403).
    ToolNotAllowed,
}

impl ReasonCode {
    pub fn as_str(self) -> &'static str {
        use LimitKind::*;
        use ScopeKind::*;
        match self {
            ReasonCode::Limit(s, l) => match (s, l) {
                (Tenant, MonthlyTokens) => "tenant_monthly_budget_exhausted",
                (App, MonthlyTokens) => "app_monthly_budget_exhausted",
                (Key, MonthlyTokens) => "key_monthly_budget_exhausted",
                (Tenant, MonthlyCost) => "tenant_monthly_cost_exhausted",
                (App, MonthlyCost) => "app_monthly_cost_exhausted",
                (Key, MonthlyCost) => "key_monthly_cost_exhausted",
                (Tenant, MaxInflight) => "tenant_inflight_exceeded",
                (App, MaxInflight) => "app_inflight_exceeded",
                (Key, MaxInflight) => "key_inflight_exceeded",
                (Tenant, Rpm) => "tenant_rpm_exceeded",
                (App, Rpm) => "app_rpm_exceeded",
                (Key, Rpm) => "key_rpm_exceeded",
                (Tenant, InputTpm) => "tenant_input_tpm_exceeded",
                (App, InputTpm) => "app_input_tpm_exceeded",
                (Key, InputTpm) => "key_input_tpm_exceeded",
                (Tenant, OutputTpm) => "tenant_output_tpm_exceeded",
                (App, OutputTpm) => "app_output_tpm_exceeded",
                (Key, OutputTpm) => "key_output_tpm_exceeded",
                (EndUser, MonthlyTokens) => "end_user_monthly_budget_exhausted",
                (EndUser, MonthlyCost) => "end_user_monthly_cost_exhausted",
                (EndUser, Rpm) => "end_user_rpm_exceeded",
                // End users carry budgets and an rpm only.
                (EndUser, MaxInflight) => "end_user_inflight_exceeded",
                (EndUser, InputTpm) => "end_user_input_tpm_exceeded",
                (EndUser, OutputTpm) => "end_user_output_tpm_exceeded",
                (_, EndUsersPerMinute) => "app_end_users_per_minute_exceeded",
                // A budget refusal carries its budget (`Refusal::budget`)
                // and answers `ReasonCode::Budget`; this is never sent.
                (_, Budget) => "budget_exhausted",
            },
            ReasonCode::Budget {
                level,
                model_scoped,
                period,
                kind,
            } => crate::chain_budgets::reason_code(level, model_scoped, period, kind),
            ReasonCode::InvalidApiKey => "invalid_api_key",
            ReasonCode::InvalidRequest => "invalid_request",
            ReasonCode::ModelNotFound => "model_not_found",
            ReasonCode::ModelNotAllowed => "model_not_allowed",
            ReasonCode::ContextTooLong => "context_length_exceeded",
            ReasonCode::QuotaStoreUnavailable => "quota_store_unavailable",
            ReasonCode::UpstreamError => "upstream_error",
            ReasonCode::UpstreamRateLimited => "upstream_rate_limited",
            ReasonCode::UpstreamUnavailable => "upstream_unavailable",
            ReasonCode::UpstreamResponseTooLarge => "upstream_response_too_large",
            ReasonCode::MaxTokensClampedToBudget => "max_tokens_clamped_to_budget",
            ReasonCode::DailyCostSoftLimit => "daily_cost_soft_limit",
            ReasonCode::QueueTimeout => "queue_timeout",
            ReasonCode::TenantQueueFull => "tenant_queue_full",
            ReasonCode::TenantStreamCap => "tenant_stream_cap",
            ReasonCode::InvalidTag => "invalid_tag",
            ReasonCode::MissingRequiredTag => "missing_required_tag",
            ReasonCode::InvalidEndUser => "invalid_end_user",
            ReasonCode::CountTokensExceeded => "key_count_tokens_exceeded",
            ReasonCode::UpstreamRejectedRequest => "upstream_rejected_request",
            ReasonCode::RouteNotFound => "route_not_found",
            ReasonCode::MethodNotAllowed => "method_not_allowed",
            ReasonCode::ServiceTierNotAllowed => "service_tier_not_allowed",
            ReasonCode::ToolNotAllowed => "tool_not_allowed",
        }
    }

    /// HTTP status of a refusal for this reason.
    pub fn http_status(self) -> u16 {
        match self {
            ReasonCode::Limit(_, LimitKind::MonthlyTokens | LimitKind::MonthlyCost) => 402,
            ReasonCode::Budget {
                kind: BudgetKind::Requests,
                ..
            } => 429,
            ReasonCode::Budget { .. } | ReasonCode::Limit(_, LimitKind::Budget) => 402,
            ReasonCode::Limit(_, _) => 429,
            ReasonCode::InvalidApiKey => 401,
            ReasonCode::InvalidRequest
            | ReasonCode::ContextTooLong
            | ReasonCode::InvalidTag
            | ReasonCode::MissingRequiredTag
            | ReasonCode::InvalidEndUser
            | ReasonCode::UpstreamRejectedRequest => 400,
            ReasonCode::ModelNotFound | ReasonCode::RouteNotFound => 404,
            ReasonCode::MethodNotAllowed => 405,
            ReasonCode::ModelNotAllowed
            | ReasonCode::ServiceTierNotAllowed
            | ReasonCode::ToolNotAllowed => 403,
            ReasonCode::QuotaStoreUnavailable | ReasonCode::UpstreamUnavailable => 503,
            ReasonCode::UpstreamRateLimited => 429,
            ReasonCode::UpstreamError | ReasonCode::UpstreamResponseTooLarge => 502,
            ReasonCode::MaxTokensClampedToBudget | ReasonCode::DailyCostSoftLimit => 200,
            ReasonCode::QueueTimeout => 503,
            ReasonCode::TenantQueueFull
            | ReasonCode::TenantStreamCap
            | ReasonCode::CountTokensExceeded => 429,
        }
    }

    /// The OpenAI error `type` for this reason.
    pub fn error_type(self) -> &'static str {
        match self.http_status() {
            401 => "authentication_error",
            402 => "insufficient_quota",
            403 => "permission_error",
            404 => "not_found_error",
            429 => "rate_limit_error",
            400 | 405 => "invalid_request_error",
            _ => "api_error",
        }
    }
}

impl fmt::Display for ReasonCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A hold the engine refused: which scope and limit, and when to retry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Refusal {
    pub scope: ScopeKind,
    pub limit: LimitKind,
    /// Milliseconds until a retry can pass (rate limits); None for budgets.
    pub retry_after_ms: Option<u64>,
    /// On budget refusals: what the tightest token / cost budget still has
    /// room for (None where no budget of that kind is set).
    pub headroom_tokens: Option<i64>,
    pub headroom_cost: Option<i64>,
    /// Set when a budget of `Limits::budgets` refused (`limit` is then
    /// `LimitKind::Budget`).
    pub budget: Option<BudgetRefusal>,
}

/// Which budget refused a hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BudgetRefusal {
    /// Its place in the request's applicable budgets (`chain_budgets::applicable`).
    pub index: usize,
    pub period: BudgetPeriod,
    pub kind: BudgetKind,
    pub model_scoped: bool,
}

impl Refusal {
    pub fn reason(&self) -> ReasonCode {
        match self.budget {
            Some(b) => ReasonCode::Budget {
                level: self.scope,
                model_scoped: b.model_scoped,
                period: b.period,
                kind: b.kind,
            },
            None => ReasonCode::Limit(self.scope, self.limit),
        }
    }

    /// `Retry-After` in whole seconds, rounded up, at least 1.
    pub fn retry_after_secs(&self) -> Option<u64> {
        self.retry_after_ms.map(|ms| ms.div_ceil(1000).max(1))
    }
}

/// How long a refusal waits before it is answered. A client that ignores
/// `Retry-After` and resends every 429 or 402 at once would otherwise turn
/// refusals into a loop bound only by CPU — the CPU the other tenants'
/// requests need. Paced, it gets at most one refusal per connection per
/// `delay` (never past its own `Retry-After`). Other refusals (a bad
/// request, an unknown key, a quota store that is down) answer at once.
pub fn refusal_pause(
    http_status: u16,
    retry_after_secs: Option<u64>,
    delay: std::time::Duration,
) -> std::time::Duration {
    if http_status != 429 && http_status != 402 {
        return std::time::Duration::ZERO;
    }
    match retry_after_secs {
        Some(s) => delay.min(std::time::Duration::from_secs(s)),
        None => delay,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn budget_refusals_are_402_and_rates_429() {
        let r = ReasonCode::Limit(ScopeKind::Tenant, LimitKind::MonthlyTokens);
        assert_eq!(
            (r.as_str(), r.http_status()),
            ("tenant_monthly_budget_exhausted", 402)
        );
        let r = ReasonCode::Limit(ScopeKind::Key, LimitKind::Rpm);
        assert_eq!((r.as_str(), r.http_status()), ("key_rpm_exceeded", 429));
        assert_eq!(ReasonCode::QuotaStoreUnavailable.http_status(), 503);
        assert_eq!(
            (
                ReasonCode::QueueTimeout.as_str(),
                ReasonCode::QueueTimeout.http_status()
            ),
            ("queue_timeout", 503)
        );
        assert_eq!(ReasonCode::TenantQueueFull.http_status(), 429);
        assert_eq!(
            (
                ReasonCode::TenantStreamCap.as_str(),
                ReasonCode::TenantStreamCap.http_status(),
                ReasonCode::TenantStreamCap.error_type()
            ),
            ("tenant_stream_cap", 429, "rate_limit_error")
        );
    }

    #[test]
    fn end_user_refusals_have_their_own_codes() {
        let r = |s, l| ReasonCode::Limit(s, l);
        use LimitKind::*;
        use ScopeKind::EndUser;
        assert_eq!(
            (r(EndUser, Rpm).as_str(), r(EndUser, Rpm).http_status()),
            ("end_user_rpm_exceeded", 429)
        );
        assert_eq!(
            (
                r(EndUser, MonthlyTokens).as_str(),
                r(EndUser, MonthlyTokens).http_status()
            ),
            ("end_user_monthly_budget_exhausted", 402)
        );
        assert_eq!(
            (
                r(EndUser, EndUsersPerMinute).as_str(),
                r(EndUser, EndUsersPerMinute).http_status()
            ),
            ("app_end_users_per_minute_exceeded", 429)
        );
        assert_eq!(ScopeKind::from_index(3), Some(EndUser));
        assert_eq!(LimitKind::from_index(6), Some(EndUsersPerMinute));
        assert_eq!(ScopeKind::from_index(4), None);
    }

    #[test]
    fn retry_after_rounds_up() {
        let r = Refusal {
            budget: None,
            scope: ScopeKind::App,
            limit: LimitKind::Rpm,
            retry_after_ms: Some(1200),
            headroom_tokens: None,
            headroom_cost: None,
        };
        assert_eq!(r.retry_after_secs(), Some(2));
        let r = Refusal {
            budget: None,
            retry_after_ms: Some(3),
            ..r
        };
        assert_eq!(r.retry_after_secs(), Some(1));
    }

    #[test]
    fn rate_and_budget_refusals_are_paced_others_answer_at_once() {
        use std::time::Duration;
        let d = Duration::from_millis(100);
        assert_eq!(refusal_pause(429, Some(1), d), d);
        assert_eq!(refusal_pause(402, None, d), d);
        assert_eq!(
            refusal_pause(429, Some(0), d),
            Duration::ZERO,
            "never past Retry-After"
        );
        for status in [400, 401, 403, 404, 413, 503] {
            assert_eq!(
                refusal_pause(status, Some(1), d),
                Duration::ZERO,
                "{status}"
            );
        }
        assert_eq!(refusal_pause(429, None, Duration::ZERO), Duration::ZERO);
    }
}
