//! Control-plane errors, rendered in one place. Database texts never leave.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::json;

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("{0}")]
    BadRequest(String),
    /// A form or JSON field is wrong; `key` names the message in the
    /// translation table (the API answers in English, the console in the
    /// reader's language, next to the field).
    #[error("{field}: {}", crate::i18n::english(key))]
    Field {
        field: &'static str,
        key: &'static str,
    },
    /// One element of a list field is wrong (`allowed_models[1]`): the API
    /// names the element, the console shows the message by the field.
    #[error("{field}[{index}]: {}", crate::i18n::english(key))]
    Element {
        field: &'static str,
        index: usize,
        key: &'static str,
    },
    /// A request body or path parameter that does not parse; `param` names
    /// where (`limits.monthly_cost_usd`, `guarantees[0].tenant_id`, `id`).
    #[error("{param}: {message}")]
    Invalid { param: String, message: String },
    #[error("authentication required")]
    Unauthenticated,
    #[error("{0}")]
    Forbidden(String),
    /// Four eyes refuses this decider this decision (403
    /// `four_eyes_violation`; the console says the rule in the reader's
    /// language).
    #[error("{}", .0.message())]
    FourEyes(domain::roles::DecisionRefusal),
    #[error("{0} not found")]
    NotFound(String),
    #[error("{0}")]
    Conflict(String),
    /// A change based on an older version of what it changes (409
    /// `version_conflict`): someone else changed it since the client read
    /// it (`If-Match` / `version`, docs/console.md, "Versions").
    #[error("{what} changed since version {expected} (now version {current}): read it again and reapply your change")]
    Stale {
        what: String,
        expected: i64,
        current: i64,
    },
    /// The sign-in back-off (per email or per client IP): retry after
    /// this many seconds.
    #[error("too many login attempts; retry in {0} s")]
    TooManyAttempts(u64),
    #[error("the database is unreachable; retry shortly")]
    Unavailable,
    #[error("internal error")]
    Internal,
}

impl ApiError {
    pub fn field(field: &'static str, key: &'static str) -> Self {
        ApiError::Field { field, key }
    }

    /// The same refusal about a field nested under `prefix` (e.g.
    /// `deployments[0].`), so the client learns which element was wrong.
    pub fn within(self, prefix: &str) -> Self {
        match self {
            ApiError::Field { field, key } => ApiError::Invalid {
                param: format!("{prefix}{field}"),
                message: crate::i18n::english(key).to_string(),
            },
            ApiError::Invalid { param, message } => ApiError::Invalid {
                param: format!("{prefix}{param}"),
                message,
            },
            ApiError::Element { field, index, key } => ApiError::Invalid {
                param: format!("{prefix}{field}[{index}]"),
                message: crate::i18n::english(key).to_string(),
            },
            other => other,
        }
    }

    pub fn invalid(param: impl Into<String>, message: impl Into<String>) -> Self {
        ApiError::Invalid {
            param: param.into(),
            message: message.into(),
        }
    }

    pub(crate) fn status_code(&self) -> (StatusCode, &'static str) {
        match self {
            ApiError::BadRequest(_)
            | ApiError::Field { .. }
            | ApiError::Element { .. }
            | ApiError::Invalid { .. } => (StatusCode::BAD_REQUEST, "invalid_request"),
            ApiError::Unauthenticated => (StatusCode::UNAUTHORIZED, "unauthenticated"),
            ApiError::Forbidden(_) => (StatusCode::FORBIDDEN, "forbidden"),
            ApiError::FourEyes(_) => (StatusCode::FORBIDDEN, "four_eyes_violation"),
            ApiError::NotFound(_) => (StatusCode::NOT_FOUND, "not_found"),
            ApiError::Conflict(_) => (StatusCode::CONFLICT, "conflict"),
            ApiError::Stale { .. } => (StatusCode::CONFLICT, "version_conflict"),
            ApiError::TooManyAttempts(_) => (StatusCode::TOO_MANY_REQUESTS, "too_many_attempts"),
            ApiError::Unavailable => (StatusCode::SERVICE_UNAVAILABLE, "database_unavailable"),
            ApiError::Internal => (StatusCode::INTERNAL_SERVER_ERROR, "internal_error"),
        }
    }
}

/// A row version as an entity tag (`"3"`): what `ETag` answers and
/// `If-Match` sends back.
pub fn etag(version: i64) -> axum::http::HeaderValue {
    axum::http::HeaderValue::from_str(&format!("\"{version}\"")).expect("digits")
}

impl From<store::StoreError> for ApiError {
    fn from(e: store::StoreError) -> Self {
        match e {
            store::StoreError::Conflict(what) => {
                ApiError::Conflict(format!("{what} already exists or changed"))
            }
            store::StoreError::NotFound(what) => ApiError::NotFound(what),
            store::StoreError::Stale {
                what,
                expected,
                current,
            } => ApiError::Stale {
                what,
                expected,
                current,
            },
            e if e.is_bad_text() => {
                ApiError::BadRequest("text must not contain NUL (U+0000) characters".into())
            }
            e if e.is_unreachable() => {
                tracing::warn!(error = %e, "database unreachable");
                ApiError::Unavailable
            }
            other => {
                tracing::error!(error = %other, "store error");
                ApiError::Internal
            }
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (status, code) = self.status_code();
        let param = match &self {
            ApiError::Field { field, .. } => Some(field.to_string()),
            ApiError::Element { field, index, .. } => Some(format!("{field}[{index}]")),
            ApiError::Invalid { param, .. } => Some(param.clone()),
            _ => None,
        };
        let mut r = (
            status,
            axum::Json(
                json!({"error": {"message": self.to_string(), "code": code, "param": param}}),
            ),
        )
            .into_response();
        match self {
            ApiError::TooManyAttempts(secs) => {
                r.headers_mut()
                    .insert("retry-after", axum::http::HeaderValue::from(secs));
            }
            ApiError::Unavailable => {
                r.headers_mut()
                    .insert("retry-after", axum::http::HeaderValue::from_static("5"));
            }
            ApiError::Stale { current, .. } => {
                r.headers_mut()
                    .insert(axum::http::header::ETAG, etag(current));
            }
            _ => {}
        }
        r
    }
}
