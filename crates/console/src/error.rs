//! Control-plane errors, rendered in one place. Database texts never leave.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::json;

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("{0}")]
    BadRequest(String),
    #[error("authentication required")]
    Unauthenticated,
    #[error("{0}")]
    Forbidden(String),
    #[error("{0} not found")]
    NotFound(String),
    #[error("{0}")]
    Conflict(String),
    #[error("too many login attempts; retry in a minute")]
    TooManyAttempts,
    #[error("internal error")]
    Internal,
}

impl ApiError {
    fn status_code(&self) -> (StatusCode, &'static str) {
        match self {
            ApiError::BadRequest(_) => (StatusCode::BAD_REQUEST, "invalid_request"),
            ApiError::Unauthenticated => (StatusCode::UNAUTHORIZED, "unauthenticated"),
            ApiError::Forbidden(_) => (StatusCode::FORBIDDEN, "forbidden"),
            ApiError::NotFound(_) => (StatusCode::NOT_FOUND, "not_found"),
            ApiError::Conflict(_) => (StatusCode::CONFLICT, "conflict"),
            ApiError::TooManyAttempts => (StatusCode::TOO_MANY_REQUESTS, "too_many_attempts"),
            ApiError::Internal => (StatusCode::INTERNAL_SERVER_ERROR, "internal_error"),
        }
    }
}

impl From<store::StoreError> for ApiError {
    fn from(e: store::StoreError) -> Self {
        match e {
            store::StoreError::Conflict(what) => {
                ApiError::Conflict(format!("{what} already exists or changed"))
            }
            store::StoreError::NotFound(what) => ApiError::NotFound(what),
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
        let mut r = (
            status,
            axum::Json(json!({"error": {"message": self.to_string(), "code": code}})),
        )
            .into_response();
        if matches!(self, ApiError::TooManyAttempts) {
            r.headers_mut()
                .insert("retry-after", axum::http::HeaderValue::from_static("60"));
        }
        r
    }
}
