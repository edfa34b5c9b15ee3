//! Forwarding an admitted request: the body rewritten for the provider,
//! sent through its deployments, and the answer (a metered stream, or a
//! read body settled in the background) or the provider's refusal.

use crate::catalog::ModelEntry;
use crate::dialect::Edge;
use crate::errors::ApiError;
use crate::settle::HeldRequest;
use crate::{stream, upstream, Gateway};
use axum::http::{HeaderMap, HeaderValue};
use axum::response::Response;
use domain::provider::CapField;
use domain::reason::ReasonCode;
use domain::request::{Endpoint, RequestSummary};
use http_body_util::BodyExt;
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Instant;

/// The upstream's model name; usage always requested on streams; the cap
/// held, in the field(s) the provider reads (its profile), whatever field
/// the client used: a provider that ignores the field it was sent would
/// generate its own default length past the hold.
pub(crate) fn rewrite_for_upstream(
    body: &mut Value,
    model: &ModelEntry,
    endpoint: Endpoint,
    s: &RequestSummary,
    per_choice: i64,
) {
    body["model"] = Value::String(model.upstream_model.clone());
    if s.stream {
        body["stream_options"] = json!({"include_usage": true});
    }
    if endpoint == Endpoint::Embeddings {
        return;
    }
    set_cap(body, model.profile.cap_field, per_choice);
}

/// Sends `per_choice` in exactly the fields `cap_field` names and drops the
/// other cap field (a provider refusing `max_tokens` must not see it).
fn set_cap(body: &mut Value, cap_field: CapField, per_choice: i64) {
    let Some(obj) = body.as_object_mut() else {
        return;
    };
    for field in ["max_tokens", "max_completion_tokens"] {
        obj.remove(field);
    }
    for field in cap_field.fields() {
        obj.insert((*field).to_string(), json!(per_choice));
    }
}

#[allow(clippy::too_many_arguments)]
pub(crate) async fn forward(
    gw: &Arc<Gateway>,
    mut held: HeldRequest,
    endpoint: Endpoint,
    s: &RequestSummary,
    mut body: Value,
    mut headers: HeaderMap,
    edge: Edge,
    large_body: bool,
) -> Result<Response, ApiError> {
    let t0 = Instant::now();
    // A non-stream request has the whole upstream timeout for headers and
    // body; a stream has no whole-request timeout, but its headers must
    // come within the idle timeout, like every later chunk.
    let deadline = tokio::time::Instant::now()
        + if s.stream {
            gw.cfg.stream_idle_timeout
        } else {
            gw.cfg.upstream_timeout
        };
    // Tried on the model's deployments until one answers (docs/routing.md).
    let model = held.model.clone();
    let header_timeout = deadline - tokio::time::Instant::now();
    let key = held.key.clone();
    let sent = crate::routing::send(
        gw,
        &model,
        endpoint,
        &mut body,
        header_timeout,
        edge.native.then_some(edge.dialect),
        large_body.then_some(key.tenant.id.as_str()),
    )
    .await;
    let resp = match sent {
        crate::routing::Routed::Response(r, taken) => {
            held.route = Some(taken);
            r
        }
        crate::routing::Routed::Unreachable(e) => {
            // The error never carries the URL: a base URL may hold credentials.
            tracing::warn!(model = %held.model.id, error = %e, "upstream unreachable");
            held.release().await;
            let reason = ReasonCode::UpstreamUnavailable;
            return Err(
                ApiError::new(reason, "the upstream provider could not be reached")
                    .retry_after(Some(1)),
            );
        }
    };
    let status = resp.status();
    if !status.is_success() {
        let retry_after = resp
            .headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok()?.parse().ok());
        let text = upstream::error_text(resp, ERROR_TEXT_LIMIT, gw.cfg.stream_idle_timeout).await;
        held.release().await;
        return Err(upstream_refusal(status, retry_after, &text));
    }
    if s.stream {
        let kind = if edge.json_array {
            "application/json"
        } else {
            "text/event-stream"
        };
        headers.insert(
            axum::http::header::CONTENT_TYPE,
            HeaderValue::from_static(kind),
        );
        headers.insert(
            axum::http::header::CACHE_CONTROL,
            HeaderValue::from_static("no-cache"),
        );
        let body = if edge.translated() {
            let est_input = held.est_input;
            // The meter reads the provider's chat chunks (`edge.wire()`).
            let chat = stream::metered(held, resp, s.client_wants_usage, edge.clone());
            crate::dialect::stream::translate(edge, est_input, chat)
        } else {
            stream::metered(held, resp, s.client_wants_usage, edge)
        };
        return Ok(answer(headers, body));
    }
    let limit = gw.cfg.max_upstream_body_bytes;
    let body = http_body_util::Limited::new(resp.into_body(), limit);
    let read = tokio::time::timeout_at(deadline, body.collect()).await;
    let bytes = match read {
        Ok(Ok(b)) => b.to_bytes(),
        Ok(Err(e)) if e.is::<http_body_util::LengthLimitError>() => {
            return Err(oversized_answer(held, limit).await)
        }
        Ok(Err(e)) => return Err(broken_answer(held, &upstream::error_chain(&*e)).await),
        Err(_) => return Err(broken_answer(held, "no whole answer within the timeout").await),
    };
    gw.meters
        .model(&held.model.id)
        .upstream_seconds
        .record(t0.elapsed().as_secs_f64());
    // No usage from the provider: charged the estimate (what was held);
    // usage it sent (in the dialect the provider answered in): billed
    // within the sanity bound.
    let (bytes, usage) = edge.answer(bytes);
    held.provider_usage = usage;
    let actual = held.best_known("ok");
    // The answer does not wait for the settle: the settle command is queued
    // on this replica's Redis connection before the answer is written, so
    // this client's next request (on this replica) is held after it.
    held.settle_in_background(actual);
    headers.insert(
        axum::http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    Ok(answer(headers, axum::body::Body::from(bytes)))
}

/// A 200 answer with `headers` as its header map, whole: the map built
/// for it becomes the response's, not copied into a second one (which
/// hashed every name again: ~1,600 instructions a request).
fn answer(headers: HeaderMap, body: axum::body::Body) -> Response {
    let mut r = Response::new(body);
    *r.headers_mut() = headers;
    r
}

/// At most this much of a provider's error body is read.
const ERROR_TEXT_LIMIT: usize = 64 * 1024;

/// The provider started answering and broke off (or ran out of time):
/// the request is charged what is best known of it.
async fn broken_answer(held: HeldRequest, error: &str) -> ApiError {
    tracing::warn!(model = %held.model.id, error, "upstream body broke");
    let actual = held.best_known("upstream_error");
    held.settle(actual).await;
    ApiError::new(
        ReasonCode::UpstreamError,
        "the upstream provider broke off its answer",
    )
}

/// The provider's answer is larger than the gateway reads: a clean 502.
/// Nothing was counted of an answer not read, and the provider generated
/// (and bills) it whole: settled at the estimate, like a broken answer.
async fn oversized_answer(held: HeldRequest, limit: usize) -> ApiError {
    tracing::warn!(model = %held.model.id, limit, "upstream answer too large");
    let actual = held.best_known("upstream_error");
    held.settle(actual).await;
    ApiError::new(
        ReasonCode::UpstreamResponseTooLarge,
        format!(
            "the upstream provider's answer is larger than the gateway accepts ({limit} bytes)"
        ),
    )
}

/// The provider refused before generating: the client is told the status
/// and a reason code, never the provider's own words — they can name the
/// upstream model, the gateway's organisation or account. The provider's
/// message (at most 500 characters) is kept in the request log's detail
/// (`upstream_error`), shown to platform admins only.
fn upstream_refusal(status: http::StatusCode, retry_after: Option<u64>, body: &str) -> ApiError {
    let upstream_msg = serde_json::from_str::<Value>(body)
        .ok()
        .and_then(|v| match &v["error"] {
            Value::String(s) => Some(s.clone()),
            e => e["message"].as_str().map(str::to_string),
        })
        .unwrap_or_else(|| body.to_string());
    let upstream_msg: String = upstream_msg.chars().take(500).collect();
    let kept = json!({"upstream_status": status.as_u16(), "upstream_error": upstream_msg});
    let refused = match status.as_u16() {
        // The provider's 429 text can name the gateway's own organisation.
        429 => ApiError::new(
            ReasonCode::UpstreamRateLimited,
            "the upstream provider is rate limiting; retry later",
        )
        .retry_after(Some(retry_after.unwrap_or(1))),
        401 | 403 => ApiError::new(
            ReasonCode::UpstreamError,
            "the upstream provider refused the gateway's credentials",
        ),
        s @ (400 | 404 | 413 | 422) => ApiError::new(
            ReasonCode::UpstreamRejectedRequest,
            format!(
                "the upstream provider refused the request (status {s}); the request log keeps its reason for the platform admins"
            ),
        )
        .status(s),
        s => ApiError::new(
            ReasonCode::UpstreamError,
            format!("the upstream provider failed with status {s}"),
        ),
    };
    refused.counters(kept)
}

#[cfg(test)]
mod cap_tests {
    use super::*;

    #[test]
    fn the_held_cap_goes_in_the_profiles_fields_only() {
        let cases = [
            (CapField::MaxTokens, json!({"max_tokens": 7})),
            (
                CapField::MaxCompletionTokens,
                json!({"max_completion_tokens": 7}),
            ),
            (
                CapField::Both,
                json!({"max_tokens": 7, "max_completion_tokens": 7}),
            ),
        ];
        for client in [
            json!({"max_completion_tokens": 40}),
            json!({"max_tokens": 40}),
            json!({"max_tokens": 40, "max_completion_tokens": 50}),
            json!({}),
        ] {
            for (field, want) in &cases {
                let mut body = client.clone();
                set_cap(&mut body, *field, 7);
                assert_eq!(&body, want, "{client} with {field:?}");
            }
        }
    }
}
