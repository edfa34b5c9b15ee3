//! Metric names in one place (Prometheus text at `/metrics`).

pub const REQUESTS: &str = "tollgate_requests_total";
pub const TOKENS: &str = "tollgate_tokens_total";
pub const COST: &str = "tollgate_cost_micro_usd_total";
pub const HOLD_SECONDS: &str = "tollgate_hold_seconds";
pub const UPSTREAM_SECONDS: &str = "tollgate_upstream_seconds";
pub const QUOTA_STORE_ERRORS: &str = "tollgate_quota_store_errors_total";
pub const OVERRUN_TOKENS: &str = "tollgate_overrun_tokens_total";
pub const EXTEND_SECONDS: &str = "tollgate_extend_seconds";
pub const STREAM_CUTOFFS: &str = "tollgate_stream_cutoffs_total";
pub const STREAM_TOKENS_COUNTED: &str = "tollgate_stream_output_tokens_counted_total";
pub const STREAM_TOKENS_REPORTED: &str = "tollgate_stream_output_tokens_reported_total";
/// Provider usage reports overruled by the sanity bound, by model and kind.
pub const USAGE_ANOMALIES: &str = "tollgate_usage_anomalies_total";
/// Admissions by path: `lease` (from a lease, no Redis call) or
/// `per_request` (a hold script), and `off` (benchmark ablation).
pub const ADMISSIONS: &str = "tollgate_admissions_total";
pub const QUEUE_DEPTH: &str = "tollgate_queue_depth";
pub const QUEUE_WAIT_SECONDS: &str = "tollgate_queue_wait_seconds";
pub const DECISIONS_STORED: &str = "tollgate_decisions_stored_total";
pub const DECISIONS_DROPPED: &str = "tollgate_decisions_dropped_total";
/// Keys the index did not know, by `result`: `found`, `unknown`,
/// `unknown_tenant`, `negative_cache` (no lookup), `refused` (rate bound, no
/// lookup), `error`.
pub const KEY_MISSES: &str = "tollgate_key_miss_lookups_total";
/// 1 while every Redis node runs `maxmemory-policy noeviction`, 0 when one
/// does not (the books are then at risk: see docs/reliability.md).
pub const REDIS_EVICTION_POLICY_OK: &str = "tollgate_redis_eviction_policy_ok";
/// Redis time less this replica's clock, in seconds, as last measured
/// (0 within the measurement's noise): periods are Redis time's.
pub const CLOCK_SKEW_SECONDS: &str = "tollgate_clock_skew_seconds";
