//! `GET /v1/models`: the models this key may use.

use crate::proxy::authenticate;
use crate::Gateway;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use serde_json::json;
use std::sync::Arc;

pub async fn list(State(gw): State<Arc<Gateway>>, headers: HeaderMap) -> Response {
    let key = match authenticate(&gw, &headers).await {
        Ok(k) => k,
        Err(e) => return e.for_request(&gw.new_request_id().0).into_response(),
    };
    let index = gw.catalog.get();
    let mut ids: Vec<&String> = index.models.keys().filter(|m| key.may_use(m)).collect();
    ids.sort();
    let data: Vec<_> = ids
        .into_iter()
        .map(|id| json!({"id": id, "object": "model", "created": 0, "owned_by": "tollgate"}))
        .collect();
    axum::Json(json!({"object": "list", "data": data})).into_response()
}
