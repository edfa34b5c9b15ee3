//! Every refusal the data plane gives, rendered in one place as OpenAI's error
//! shape with tollgate's reason code and headers. Internal error texts (Redis,
//! Postgres) never reach a client.

use crate::headers;
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use domain::reason::{Decision, ReasonCode};
use domain::request::InvalidField;
use serde_json::{json, Value};

#[derive(Debug)]
pub struct ApiError {
    pub reason: ReasonCode,
    pub message: String,
    pub param: Option<String>,
    pub retry_after_secs: Option<u64>,
    /// Set where the refusal is answered (`for_request`): the steps that
    /// refuse know the request from their tracing span, not a parameter.
    pub request_id: String,
    /// Status override (e.g. 413, or an upstream 4xx passed through).
    pub status: Option<u16>,
    /// What the hold engine said when it refused (headroom, estimate …),
    /// recorded for the request lookup; never sent to the client.
    pub counters: Option<Box<serde_json::Value>>,
    /// A 401 of a key that exists but was revoked or has expired: who it
    /// was, so the refusal is filed under its tenant.
    pub refused_key: Option<std::sync::Arc<crate::refused_key::RefusedKey>>,
}

impl ApiError {
    pub fn new(reason: ReasonCode, message: impl Into<String>) -> Self {
        Self {
            reason,
            message: message.into(),
            param: None,
            retry_after_secs: None,
            request_id: String::new(),
            status: None,
            counters: None,
            refused_key: None,
        }
    }

    /// The request this refusal answers (its `x-request-id`).
    pub fn for_request(mut self, request_id: &str) -> Self {
        self.request_id = request_id.to_string();
        self
    }

    /// The quota store (Redis, or the ledger behind it) failed: fail closed.
    pub fn store_down() -> Self {
        Self::new(
            ReasonCode::QuotaStoreUnavailable,
            "quota store unavailable; retry shortly",
        )
        .retry_after(Some(1))
    }

    pub fn counters(mut self, c: serde_json::Value) -> Self {
        self.counters = Some(Box::new(c));
        self
    }

    pub fn param(mut self, p: impl Into<String>) -> Self {
        self.param = Some(p.into());
        self
    }

    pub fn retry_after(mut self, secs: Option<u64>) -> Self {
        self.retry_after_secs = secs;
        self
    }

    pub fn status(mut self, s: u16) -> Self {
        self.status = Some(s);
        self
    }

    pub fn http_status(&self) -> u16 {
        self.status.unwrap_or_else(|| self.reason.http_status())
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status =
            StatusCode::from_u16(self.http_status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let body = json!({"error": {
            "message": self.message,
            "type": self.reason.error_type(),
            "code": self.reason.as_str(),
            "param": self.param,
        }});
        let mut h = HeaderMap::new();
        if let Ok(v) = HeaderValue::from_str(&self.request_id) {
            h.insert(headers::REQUEST_ID, v);
        }
        h.insert(
            headers::DECISION,
            HeaderValue::from_static(Decision::Reject.as_str()),
        );
        h.insert(
            headers::REASON,
            HeaderValue::from_static(self.reason.as_str()),
        );
        if let Some(s) = self.retry_after_secs {
            h.insert("retry-after", HeaderValue::from(s));
        }
        (status, h, axum::Json(body)).into_response()
    }
}

/// A failure below a refusal: the quota store's or the database's error,
/// kept whole for the log (a client only ever sees the refusal it causes).
#[derive(Debug, thiserror::Error)]
pub enum Internal {
    #[error(transparent)]
    Quota(#[from] quota::QuotaError),
    #[error(transparent)]
    Store(#[from] store::StoreError),
}

pub(crate) fn parse_json(bytes: &[u8]) -> Result<Value, ApiError> {
    serde_json::from_slice(bytes).map_err(|e| {
        let msg = format!("body is not valid JSON: {e}");
        ApiError::new(ReasonCode::InvalidRequest, msg)
    })
}

/// A field the request cannot have as it is.
pub(crate) fn invalid(f: InvalidField) -> ApiError {
    ApiError::new(ReasonCode::InvalidRequest, f.message).param(f.param)
}
