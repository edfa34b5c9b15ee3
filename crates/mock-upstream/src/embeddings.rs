//! `POST /v1/embeddings`: deterministic unit vectors derived from each input.

use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::Json;
use base64::Engine as _;
use bytes::Bytes;
use serde::Deserialize;
use serde_json::{json, Value};

use crate::chat::Input;
use crate::{bad_request, latency_and_faults, Directives, Shared};

const MAX_DIMS: usize = 8192;

#[derive(Deserialize)]
struct EmbeddingRequest {
    #[serde(default)]
    model: String,
    input: Option<Input>,
    encoding_format: Option<String>,
    dimensions: Option<usize>,
}

pub(crate) async fn embeddings(
    State(app): State<Shared>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    app.stats.request(&headers, Some(&body));
    app.stats.embedding();
    let req: EmbeddingRequest = match serde_json::from_slice(&body) {
        Ok(r) => r,
        Err(e) => return bad_request(e),
    };
    app.stats.model(&req.model);
    let input = req.input.unwrap_or(Input::Texts(Vec::new()));
    let dir = input.last_text().map(Directives::parse).unwrap_or_default();
    if let Some(r) = latency_and_faults(&app, &dir, false).await {
        return r;
    }
    let dims = req
        .dimensions
        .unwrap_or(app.cfg.embedding_dims)
        .clamp(1, MAX_DIMS);
    let base64 = req.encoding_format.as_deref() == Some("base64");
    let seeds: Vec<u64> = match &input {
        Input::Text(s) => vec![fnv(s.as_bytes())],
        Input::Texts(v) => v.iter().map(|s| fnv(s.as_bytes())).collect(),
        Input::Tokens(t) => vec![fnv_tokens(t)],
        Input::TokenLists(v) => v.iter().map(|t| fnv_tokens(t)).collect(),
    };
    let data: Vec<Value> = seeds
        .iter()
        .enumerate()
        .map(|(index, &seed)| {
            let v = vector(seed, dims);
            let embedding = if base64 {
                let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
                Value::String(base64::engine::general_purpose::STANDARD.encode(bytes))
            } else {
                json!(v)
            };
            json!({"object": "embedding", "index": index, "embedding": embedding})
        })
        .collect();
    let prompt_tokens: u32 = input.item_tokens().iter().sum();
    app.stats.prompt_tokens(prompt_tokens);
    Json(json!({
        "object": "list",
        "data": data,
        "model": req.model,
        "usage": {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens},
    }))
    .into_response()
}

fn fnv(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    })
}

fn fnv_tokens(tokens: &[u32]) -> u64 {
    let bytes: Vec<u8> = tokens.iter().flat_map(|t| t.to_le_bytes()).collect();
    fnv(&bytes)
}

/// A unit-length vector from a xorshift64* sequence seeded by `seed`.
pub(crate) fn vector(seed: u64, dims: usize) -> Vec<f32> {
    let mut x = seed | 1;
    let mut v: Vec<f32> = (0..dims)
        .map(|_| {
            x ^= x >> 12;
            x ^= x << 25;
            x ^= x >> 27;
            let r = x.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 40; // 24 random bits
            r as f32 / (1u32 << 23) as f32 - 1.0
        })
        .collect();
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    if norm > 0.0 {
        v.iter_mut().for_each(|x| *x /= norm);
    }
    v
}
