//! A settled request as the ledger stores it. It travels as JSON from the
//! gateway through the Redis outbox (so a crash loses nothing) to Postgres.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UsageEvent {
    pub request_id: String,
    pub tenant_id: String,
    pub app_id: String,
    pub key_id: String,
    pub model: String,
    /// `YYYY-MM` of the hold, platform time.
    pub period: String,
    /// `YYYY-MM-DD` of the settle, platform time.
    pub day: String,
    pub input_tokens: i64,
    pub output_tokens: i64,
    pub cost_micro: i64,
    pub est_tokens: i64,
    pub est_cost_micro: i64,
    pub overrun_tokens: i64,
    pub overrun_cost_micro: i64,
    /// `ok`, `upstream_error`, `client_closed`, `cut_off`, `expired`.
    pub status: String,
    pub stream: bool,
    /// Whose count was settled: `provider` (the provider's usage),
    /// `counted` (tokens the gateway counted), `estimated` (the estimate).
    #[serde(default = "provider")]
    pub usage_source: String,
    pub replica: String,
    pub started_at_ms: i64,
    pub settled_at_ms: i64,
    /// The deployment of the model that answered (None before deployments
    /// existed, and for requests no deployment answered).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deployment: Option<String>,
}

impl UsageEvent {
    pub fn total_tokens(&self) -> i64 {
        self.input_tokens + self.output_tokens
    }
}

fn provider() -> String {
    "provider".into()
}
