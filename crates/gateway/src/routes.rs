//! `POST /v1/responses`, `POST /v1/messages` — the chat path's handler in
//! another dialect — and `POST /v1/messages/count_tokens`, answered from
//! the model's tokenizer without calling the provider or holding anything;
//! and the answer, in the path's dialect, to a path or method not served.

use crate::dialect::gemini::{self, gemini_key};
use crate::dialect::{messages, Dialect, PathCall};
use crate::errors::ApiError;
use crate::proxy::{self, RequestCtx};
use crate::Gateway;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, Method, Uri};
use axum::response::Response;
use domain::reason::ReasonCode;
use domain::request::{self, Endpoint};
use serde_json::json;
use std::sync::Arc;
use tracing::Instrument;

pub async fn responses(State(gw): State<Arc<Gateway>>, headers: HeaderMap, body: Body) -> Response {
    proxy::handle(
        gw,
        Endpoint::ChatCompletions,
        Dialect::Responses,
        headers,
        body,
    )
    .await
}

pub async fn messages(State(gw): State<Arc<Gateway>>, headers: HeaderMap, body: Body) -> Response {
    proxy::handle(
        gw,
        Endpoint::ChatCompletions,
        Dialect::Messages,
        headers,
        body,
    )
    .await
}

pub async fn count_tokens(
    State(gw): State<Arc<Gateway>>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let mut ctx = RequestCtx::new(&gw);
    let span = ctx.span();
    let read = |j: &serde_json::Value| messages::to_chat(j, false);
    match count(&gw, &mut ctx, &headers, body, read)
        .instrument(span)
        .await
    {
        Ok(n) => crate::models::with_request_id(&ctx.id, json!({"input_tokens": n})),
        Err(e) => proxy::refusal(&gw, &ctx, Dialect::Messages, e.for_request(&ctx.id)).await,
    }
}

async fn count(
    gw: &Arc<Gateway>,
    ctx: &mut RequestCtx,
    headers: &HeaderMap,
    body: Body,
    read: impl FnOnce(&serde_json::Value) -> Result<serde_json::Value, domain::request::InvalidField>,
) -> Result<i64, ApiError> {
    let (key, bytes) = proxy::read_body(gw, ctx, headers, body).await?;
    let json = crate::errors::parse_json(&bytes)?;
    let chat = read(&json).map_err(crate::errors::invalid)?;
    let summary =
        request::validate(Endpoint::ChatCompletions, &chat).map_err(crate::errors::invalid)?;
    let model = proxy::resolve_model(gw, &key, Endpoint::ChatCompletions, &summary)?;
    crate::estimate::check_body_size(gw, &model, bytes.len())?;
    // A count is the gateway's CPU: within the key's allowance of counted
    // tokens a minute, and one request of every RPM that applies.
    let per_minute = gw.cfg.count_tokens_per_minute;
    let now_ms = ctx.received.timestamp_millis();
    let allowed = gw
        .count_allowance
        .lock()
        .expect("count allowance lock")
        .may_count(&key.id, per_minute, now_ms);
    if let Err(secs) = allowed {
        let msg = format!(
            "this key has had {per_minute} tokens counted in the last minute on this gateway; try again in {secs} s"
        );
        return Err(ApiError::new(ReasonCode::CountTokensExceeded, msg).retry_after(Some(secs)));
    }
    let month = gw.cfg.clock.month(ctx.received);
    crate::admission::take_request_rates(gw, &key, &model, &month, &ctx.id, &summary).await?;
    // Counted exactly (a count is what was asked), off the async workers
    // when long.
    let (est, _) = crate::estimate::estimate_input(
        gw,
        crate::LongInput::Exact,
        &key,
        &model,
        Endpoint::ChatCompletions,
        &summary,
        chat,
        bytes.len(),
    )
    .await;
    let (input, _) = est?;
    gw.count_allowance
        .lock()
        .expect("count allowance lock")
        .spend(&key.id, input, per_minute, now_ms);
    Ok(input)
}

/// The dialect a path's refusal is written in: Anthropic's under
/// `/v1/messages`, Google's under `/v1beta` and for a `/v1/models/{m}:…`
/// call, OpenAI's otherwise.
fn path_error(path: &str, e: ApiError) -> Response {
    let e = e.for_request(&proxy::new_request_id());
    let google_call = path.starts_with("/v1/models/") && path.contains(':');
    if path == "/v1beta" || path.starts_with("/v1beta/") || google_call {
        return crate::dialect::google_error_response(e);
    }
    let dialect = if path.starts_with("/v1/messages") {
        Dialect::Messages
    } else {
        Dialect::Chat
    };
    crate::dialect::error_response(dialect, e)
}

/// A path under `/v1` or `/v1beta` that tollgate does not serve: 404
/// `route_not_found` in the path's dialect, with a request id.
pub async fn unknown_route(method: Method, uri: Uri) -> Response {
    let path = uri.path();
    let e = ApiError::new(
        ReasonCode::RouteNotFound,
        format!("tollgate serves no {method} {path}"),
    );
    path_error(path, e)
}

/// A served path asked with a method it does not take: 405
/// `method_not_allowed` in the path's dialect, naming the method it takes
/// (also in `allow`).
pub fn method_not_allowed(
    allow: &'static str,
) -> impl Fn(Method, Uri) -> std::future::Ready<Response> + Clone + Send + Sync + 'static {
    move |method: Method, uri: Uri| {
        let path = uri.path();
        let e = ApiError::new(
            ReasonCode::MethodNotAllowed,
            format!("{path} takes {allow}, not {method}"),
        );
        let mut r = path_error(path, e);
        r.headers_mut()
            .insert(axum::http::header::ALLOW, HeaderValue::from_static(allow));
        std::future::ready(r)
    }
}

fn query_has(query: Option<&str>, pair: &str) -> bool {
    query.is_some_and(|q| q.split('&').any(|kv| kv == pair))
}

/// `POST /v1beta/models/{model}:{method}` (and `/v1/models/…`): `generateContent`,
/// `streamGenerateContent` (`alt=sse`) and `countTokens`.
pub async fn gemini_call(
    State(gw): State<Arc<Gateway>>,
    axum::extract::Path(rest): axum::extract::Path<String>,
    uri: Uri,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let query = uri.query();
    let headers = gemini_key(headers, query);
    let not_found = || {
        let e = ApiError::new(
            ReasonCode::RouteNotFound,
            format!("tollgate serves no POST {}", uri.path()),
        );
        path_error(uri.path(), e)
    };
    let Some((model, method)) = gemini::split_call(&rest) else {
        return not_found();
    };
    let call = |stream| PathCall {
        model: model.to_string(),
        stream,
        json_array: !query_has(query, "alt=sse"),
    };
    // generateContent, and streamGenerateContent (over SSE with alt=sse,
    // else as a JSON array): the request's way.
    let stream = match method {
        "generateContent" => Some(false),
        "streamGenerateContent" => Some(true),
        _ => None,
    };
    if let Some(stream) = stream {
        return proxy::handle_call(
            gw,
            Endpoint::ChatCompletions,
            Dialect::Gemini,
            headers,
            body,
            Some(call(stream)),
        )
        .await;
    }
    match method {
        "countTokens" => {
            let mut ctx = RequestCtx::new(&gw);
            let span = ctx.span();
            let m = model.to_string();
            let read = move |j: &serde_json::Value| {
                // countTokens may wrap the request: `{"generateContentRequest": {...}}`.
                let inner = j.get("generateContentRequest").unwrap_or(j);
                gemini::to_chat(inner, &m, false)
            };
            match count(&gw, &mut ctx, &headers, body, read)
                .instrument(span)
                .await
            {
                Ok(n) => crate::models::with_request_id(&ctx.id, json!({"totalTokens": n})),
                Err(e) => proxy::refusal(&gw, &ctx, Dialect::Gemini, e.for_request(&ctx.id)).await,
            }
        }
        _ => not_found(),
    }
}
