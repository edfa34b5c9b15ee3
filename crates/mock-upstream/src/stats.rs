//! Shared counters, readable by tests in-process (`MockStats::snapshot`) or over HTTP
//! (`GET /mock/stats`).

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};

use axum::http::{header::AUTHORIZATION, HeaderMap};
use bytes::Bytes;
use serde::{Deserialize, Serialize};

/// Cheap to clone; every clone shares the same counters.
#[derive(Clone, Default)]
pub struct MockStats(Arc<Inner>);

#[derive(Default)]
struct Inner {
    requests: AtomicU64,
    chat: AtomicU64,
    completions: AtomicU64,
    streams: AtomicU64,
    embeddings: AtomicU64,
    responses: AtomicU64,
    messages: AtomicU64,
    streams_completed: AtomicU64,
    streams_closed_early: AtomicU64,
    faults: AtomicU64,
    prompt_tokens: AtomicU64,
    completion_tokens: AtomicU64,
    last: Mutex<Last>,
}

#[derive(Default)]
struct Last {
    authorization: Option<String>,
    model: Option<String>,
    body: Option<Bytes>,
}

/// A point-in-time copy of the counters.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct StatsSnapshot {
    /// Every `/v1/*` request, valid or not.
    pub requests: u64,
    /// `POST /v1/chat/completions` requests (stream or not).
    pub chat: u64,
    /// `POST /v1/completions` requests (stream or not).
    pub completions: u64,
    /// Requests that asked for `"stream": true`.
    pub streams: u64,
    pub embeddings: u64,
    /// Native `POST /v1/responses` requests.
    #[serde(default)]
    pub responses: u64,
    /// Native `POST /v1/messages` requests.
    #[serde(default)]
    pub messages: u64,
    /// Streams that sent `data: [DONE]`.
    pub streams_completed: u64,
    /// Streams whose body was dropped before finishing (the peer went away).
    pub streams_closed_early: u64,
    /// `[mock:fault=...]` directives acted on.
    pub faults: u64,
    /// Sum of `usage.prompt_tokens` over answered requests.
    pub prompt_tokens: u64,
    /// Completion tokens handed to the connection (per chunk for streams).
    pub completion_tokens: u64,
    /// `Authorization` header of the last `/v1/*` request.
    pub last_authorization: Option<String>,
    /// `model` of the last parsed request.
    pub last_model: Option<String>,
    /// Body of the last `/v1/*` POST, as JSON (`null` if it was not JSON).
    pub last_body: Option<serde_json::Value>,
}

impl MockStats {
    pub fn snapshot(&self) -> StatsSnapshot {
        let s = &*self.0;
        let last = s.last.lock().unwrap();
        StatsSnapshot {
            requests: s.requests.load(Relaxed),
            chat: s.chat.load(Relaxed),
            completions: s.completions.load(Relaxed),
            streams: s.streams.load(Relaxed),
            embeddings: s.embeddings.load(Relaxed),
            responses: s.responses.load(Relaxed),
            messages: s.messages.load(Relaxed),
            streams_completed: s.streams_completed.load(Relaxed),
            streams_closed_early: s.streams_closed_early.load(Relaxed),
            faults: s.faults.load(Relaxed),
            prompt_tokens: s.prompt_tokens.load(Relaxed),
            completion_tokens: s.completion_tokens.load(Relaxed),
            last_authorization: last.authorization.clone(),
            last_model: last.model.clone(),
            last_body: last
                .body
                .as_ref()
                .map(|b| serde_json::from_slice(b).unwrap_or(serde_json::Value::Null)),
        }
    }

    pub fn reset(&self) {
        let s = &*self.0;
        for c in [
            &s.requests,
            &s.chat,
            &s.completions,
            &s.streams,
            &s.embeddings,
            &s.responses,
            &s.messages,
            &s.streams_completed,
            &s.streams_closed_early,
            &s.faults,
            &s.prompt_tokens,
            &s.completion_tokens,
        ] {
            c.store(0, Relaxed);
        }
        *s.last.lock().unwrap() = Last::default();
    }

    /// Count a `/v1/*` request and remember its auth header and body.
    pub(crate) fn request(&self, headers: &HeaderMap, body: Option<&Bytes>) {
        self.0.requests.fetch_add(1, Relaxed);
        let auth = headers
            .get(AUTHORIZATION)
            .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
        let mut last = self.0.last.lock().unwrap();
        last.authorization = auth;
        last.model = None;
        last.body = body.cloned();
    }

    pub(crate) fn model(&self, model: &str) {
        self.0.last.lock().unwrap().model = Some(model.to_owned());
    }

    pub(crate) fn chat(&self) {
        self.0.chat.fetch_add(1, Relaxed);
    }
    pub(crate) fn completion(&self) {
        self.0.completions.fetch_add(1, Relaxed);
    }
    pub(crate) fn embedding(&self) {
        self.0.embeddings.fetch_add(1, Relaxed);
    }
    pub(crate) fn responses(&self) {
        self.0.responses.fetch_add(1, Relaxed);
    }
    pub(crate) fn messages(&self) {
        self.0.messages.fetch_add(1, Relaxed);
    }
    pub(crate) fn stream(&self) {
        self.0.streams.fetch_add(1, Relaxed);
    }
    pub(crate) fn fault(&self) {
        self.0.faults.fetch_add(1, Relaxed);
    }
    pub(crate) fn stream_completed(&self) {
        self.0.streams_completed.fetch_add(1, Relaxed);
    }
    pub(crate) fn stream_closed_early(&self) {
        self.0.streams_closed_early.fetch_add(1, Relaxed);
    }
    pub(crate) fn prompt_tokens(&self, n: u32) {
        self.0.prompt_tokens.fetch_add(n.into(), Relaxed);
    }
    pub(crate) fn completion_tokens(&self, n: u32) {
        self.0.completion_tokens.fetch_add(n.into(), Relaxed);
    }
}
