//! The names of the headers the gateway adds to its answers (admitted and
//! refused alike), parsed once rather than per request.

use axum::http::HeaderName;

pub(crate) const REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");
pub(crate) const DECISION: HeaderName = HeaderName::from_static("x-tollgate-decision");
pub(crate) const REASON: HeaderName = HeaderName::from_static("x-tollgate-reason");
pub(crate) const MODEL: HeaderName = HeaderName::from_static("x-tollgate-model");
pub(crate) const QUEUE_WAIT: HeaderName = HeaderName::from_static("x-tollgate-queue-wait-ms");
pub(crate) const REMAINING_REQUESTS: HeaderName =
    HeaderName::from_static("x-ratelimit-remaining-requests");
pub(crate) const REMAINING_TOKENS: HeaderName =
    HeaderName::from_static("x-ratelimit-remaining-tokens");
