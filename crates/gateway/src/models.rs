//! `GET /v1/models` and `GET /v1/models/{id}`: the models this key may use,
//! in OpenAI's shape — or in Anthropic's for an Anthropic client, told by
//! the `anthropic-version` header its SDKs (and Claude Code) send on every
//! request (docs/clients.md).

use crate::dialect::{error_response, Dialect};
use crate::errors::ApiError;
use crate::proxy::authenticate;
use crate::Gateway;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue};
use axum::response::{IntoResponse, Response};
use domain::reason::ReasonCode;
use serde_json::{json, Value};
use std::sync::Arc;

/// The catalog has no creation time of its own: every model is dated at
/// the epoch (OpenAI's `created: 0`, Anthropic's `created_at`).
const EPOCH: &str = "1970-01-01T00:00:00Z";

/// Which shape the client reads.
fn dialect_of(headers: &HeaderMap) -> Dialect {
    if headers.contains_key("anthropic-version") {
        Dialect::Messages
    } else {
        Dialect::Chat
    }
}

/// One model in the client's shape.
fn model_object(dialect: Dialect, id: &str) -> Value {
    match dialect {
        Dialect::Messages => {
            json!({"type": "model", "id": id, "display_name": id, "created_at": EPOCH})
        }
        _ => json!({"id": id, "object": "model", "created": 0, "owned_by": "tollgate"}),
    }
}

pub(crate) fn with_request_id(rid: &str, body: Value) -> Response {
    let mut r = axum::Json(body).into_response();
    if let Ok(v) = HeaderValue::from_str(rid) {
        r.headers_mut().insert(crate::headers::REQUEST_ID, v);
    }
    r
}

/// The names this key may call, sorted: the catalog models it may use, and
/// the exact aliases of its tenant (or global) whose model it may use (a
/// pattern names no one model to list).
fn callable(gw: &Gateway, key: &crate::key_index::KeyEntry) -> Vec<String> {
    let index = gw.catalog.get();
    let mut ids: Vec<String> = index
        .models
        .keys()
        .filter(|m| key.may_use(m))
        .cloned()
        .collect();
    for a in index.aliases.iter().filter(|a| !a.is_pattern()) {
        let served = index.model_for(&key.tenant.id, &a.alias);
        if served.is_some_and(|m| key.may_use(&m.id)) && !ids.contains(&a.alias) {
            ids.push(a.alias.clone());
        }
    }
    ids.sort();
    ids
}

pub async fn list(State(gw): State<Arc<Gateway>>, headers: HeaderMap) -> Response {
    let rid = gw.new_request_id().0;
    let dialect = dialect_of(&headers);
    let key = match authenticate(&gw, &headers).await {
        Ok(k) => k,
        Err(e) => return error_response(dialect, e.for_request(&rid)),
    };
    let ids = callable(&gw, &key);
    let data: Vec<Value> = ids.iter().map(|id| model_object(dialect, id)).collect();
    let body = match dialect {
        // One page holds them all.
        Dialect::Messages => json!({"data": data, "has_more": false,
            "first_id": ids.first(), "last_id": ids.last()}),
        _ => json!({"object": "list", "data": data}),
    };
    with_request_id(&rid, body)
}

/// `models.retrieve`: a model this key may call, by id or alias (a pattern
/// alias too); any other id (unknown or not allowed for the key, as the
/// list would not show it) is 404 `model_not_found`.
pub async fn retrieve(
    State(gw): State<Arc<Gateway>>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Response {
    let rid = gw.new_request_id().0;
    let dialect = dialect_of(&headers);
    let key = match authenticate(&gw, &headers).await {
        Ok(k) => k,
        Err(e) => return error_response(dialect, e.for_request(&rid)),
    };
    let served = gw.catalog.get().model_for(&key.tenant.id, &id).cloned();
    if !served.is_some_and(|m| key.may_use(&m.id)) {
        let e = ApiError::new(
            ReasonCode::ModelNotFound,
            format!("the model `{id}` does not exist or this key may not use it"),
        )
        .param("model");
        return error_response(dialect, e.for_request(&rid));
    }
    with_request_id(&rid, model_object(dialect, &id))
}

/// A Gemini call's request id and key (from `x-goog-api-key`, `?key=` or a
/// bearer token), or its refusal in Google's shape.
async fn gemini_caller(
    gw: &Gateway,
    uri: &axum::http::Uri,
    headers: HeaderMap,
) -> Result<(String, Arc<crate::key_index::KeyEntry>), Response> {
    let rid = gw.new_request_id().0;
    let headers = crate::dialect::gemini::gemini_key(headers, uri.query());
    match authenticate(gw, &headers).await {
        Ok(k) => Ok((rid, k)),
        Err(e) => Err(error_response(Dialect::Gemini, e.for_request(&rid))),
    }
}

/// `GET /v1beta/models`: the models this key may call, in Gemini's shape.
pub async fn gemini_list(
    State(gw): State<Arc<Gateway>>,
    uri: axum::http::Uri,
    headers: HeaderMap,
) -> Response {
    let (rid, key) = match gemini_caller(&gw, &uri, headers).await {
        Ok(c) => c,
        Err(r) => return r,
    };
    let models: Vec<Value> = callable(&gw, &key)
        .iter()
        .map(|id| crate::dialect::gemini::model_object(id))
        .collect();
    with_request_id(&rid, json!({"models": models}))
}

/// `GET /v1beta/models/{model}`.
pub async fn gemini_one(
    State(gw): State<Arc<Gateway>>,
    Path(id): Path<String>,
    uri: axum::http::Uri,
    headers: HeaderMap,
) -> Response {
    let (rid, key) = match gemini_caller(&gw, &uri, headers).await {
        Ok(c) => c,
        Err(r) => return r,
    };
    let served = gw.catalog.get().model_for(&key.tenant.id, &id).cloned();
    if !served.is_some_and(|m| key.may_use(&m.id)) {
        let e = ApiError::new(
            ReasonCode::ModelNotFound,
            format!("models/{id} does not exist or this key may not use it"),
        );
        return error_response(Dialect::Gemini, e.for_request(&rid));
    }
    with_request_id(&rid, crate::dialect::gemini::model_object(&id))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn anthropic_clients_get_anthropics_model_shape() {
        let mut h = HeaderMap::new();
        assert_eq!(dialect_of(&h), Dialect::Chat);
        assert_eq!(model_object(Dialect::Chat, "m")["object"], "model");
        h.insert("anthropic-version", HeaderValue::from_static("2023-06-01"));
        let d = dialect_of(&h);
        assert_eq!(d, Dialect::Messages);
        let m = model_object(d, "m");
        assert_eq!(
            (m["type"].as_str(), m["display_name"].as_str()),
            (Some("model"), Some("m"))
        );
        assert_eq!(m["created_at"], EPOCH);
    }
}
