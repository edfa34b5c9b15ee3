//! `POST /v1/responses`, `POST /v1/messages` — the chat path's handler in
//! another dialect — and `POST /v1/messages/count_tokens`, answered from
//! the model's tokenizer without calling the provider or holding anything.

use super::{messages, Dialect};
use crate::proxy::{self, Refused};
use crate::Gateway;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue};
use axum::response::{IntoResponse, Response};
use domain::reason::ReasonCode;
use domain::request::{self, Endpoint};
use serde_json::json;
use std::sync::Arc;

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
    let rid = proxy::new_request_id();
    match count(&gw, &headers, body, &rid).await {
        Ok(n) => {
            let mut h = HeaderMap::new();
            if let Ok(v) = HeaderValue::from_str(&rid) {
                h.insert("x-request-id", v);
            }
            (h, axum::Json(json!({"input_tokens": n}))).into_response()
        }
        Err((e, _, _)) => super::error_response(Dialect::Messages, e),
    }
}

async fn count(
    gw: &Arc<Gateway>,
    headers: &HeaderMap,
    body: Body,
    rid: &str,
) -> Result<i64, Refused> {
    let (key, bytes) = proxy::read_body(gw, headers, body, rid).await?;
    let k = Some(&key);
    let json = proxy::parse_json(&bytes, &key, rid)?;
    let invalid = |f: request::InvalidField| {
        let e =
            crate::errors::ApiError::new(rid, ReasonCode::InvalidRequest, f.message).param(f.param);
        proxy::refuse(e, k, "")
    };
    let chat = messages::to_chat(&json, false).map_err(invalid)?;
    let summary = request::validate(Endpoint::ChatCompletions, &chat).map_err(invalid)?;
    let model = proxy::resolve_model(gw, &key, Endpoint::ChatCompletions, &summary, rid)
        .map_err(|e| proxy::refuse(e, k, &summary.model))?;
    crate::estimate::check_body_size(gw, &model, bytes.len(), rid)
        .map_err(|e| proxy::refuse(e, k, &model.id))?;
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
        rid,
    )
    .await;
    let (input, _) = est.map_err(|e| proxy::refuse(e, k, &model.id))?;
    Ok(input)
}
