//! An OpenAI-compatible fake LLM provider for tollgate's demo, tests and benchmarks.
//!
//! Endpoints: `POST /v1/chat/completions`, `POST /v1/completions`, `POST /v1/embeddings`,
//! `GET /v1/models`, the native `POST /v1/responses` (OpenAI Responses) and
//! `POST /v1/messages` (Anthropic Messages), plus `GET /mock/stats`, `POST /mock/reset`
//! and `POST /mock/fault` (`{"fault": "500" | "429" | null}`: every request fails so
//! until cleared, as a deployment that goes bad and recovers).
//!
//! The providers' admin usage and cost APIs (`admin.rs`), computed from what the
//! mock served (`ledger.rs`: every answered chat completion, completion, Responses
//! and Messages request records the usage its answer reported, a cut stream what
//! it sent, by arrival on the mock clock, api key and model):
//! OpenAI's `GET /v1/organization/usage/completions` and `GET /v1/organization/costs`
//! (`Authorization: Bearer <admin key>`), Anthropic's
//! `GET /v1/organizations/usage_report/messages` and `GET /v1/organizations/cost_report`
//! (`x-api-key: <admin key>`, `anthropic-version`). Tests steer them with
//! `GET`/`POST /mock/admin` (`admin_key`, `keys`, `prices`, `extra_input_pct`,
//! `published_until`, `fail_next`, `page_size`) and `GET`/`POST /mock/clock`
//! (`{"offset_secs": N}`: the mock clock runs N seconds off the real one);
//! `POST /mock/reset` clears them and the recorded usage too.
//!
//! Output is `N` tokens of `" hello"` (one token in cl100k and o200k), where `N` is
//! `[mock:output_tokens=N]` or [`MockConfig::output_tokens`], capped by
//! `max_tokens`/`max_completion_tokens`. The last user message (or prompt / embedding
//! input) may carry directives: `[mock:output_tokens=N]`, `[mock:latency_ms=N]`,
//! `[mock:chunk_delay_ms=N]`, `[mock:fault=429]`, `[mock:fault=500]`, `[mock:fault=400]`,
//! `[mock:fault=disconnect_after=N]`, `[mock:tool_call]` (with tools given: call the
//! first one, until the conversation holds its result), and provider personalities
//! (`personality.rs`: which cap field is read, hidden reasoning, absurd usage).
//! `[mock:call=NAME:BASE64]` calls the tool `NAME` with the decoded
//! arguments (once a conversation, `directives::Call`).
//! `[mock:body_bytes=N]` pads a non-stream answer to N bytes;
//! `[mock:unterminated]` ends a stream without its final blank line.
// A dependency nothing uses fails CI (clippy -D warnings).
#![cfg_attr(not(test), warn(unused_crate_dependencies))]

mod admin;
#[cfg(test)]
mod admin_tests;
mod caching;
mod chat;
mod directives;
mod embeddings;
mod ledger;
mod messages;
mod native;
mod personality;
mod plan;
mod responses;
mod stats;
mod stream;
#[cfg(test)]
mod tests;

use std::io;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::serve::ListenerExt;
use axum::{Json, Router};
use bytes::Bytes;
use serde_json::json;

pub use directives::{Call, Directives, Fault};
pub use personality::{Absurd, CapReading, Personality};
pub use stats::{MockStats, StatsSnapshot};

/// Largest request body accepted.
pub const MAX_BODY_BYTES: usize = 16 << 20;

/// Model ids listed by `GET /v1/models` (any model name is accepted).
pub const MODELS: &[&str] = &[
    "gpt-4o",
    "gpt-4o-mini",
    "gpt-4.1",
    "gpt-4.1-mini",
    "gpt-3.5-turbo-instruct",
    "text-embedding-3-small",
];

#[derive(Clone, Debug)]
pub struct MockConfig {
    /// Delay before answering (non-stream) / before the response head (stream).
    pub latency_ms: u64,
    /// Completion tokens produced when the request gives no directive.
    pub output_tokens: u32,
    /// Delay before each token chunk of a stream (not before the first chunk).
    pub chunk_delay_ms: u64,
    /// Embedding length when the request has no `dimensions`.
    pub embedding_dims: usize,
    /// How this provider departs from the API (`personality.rs`); requests
    /// may add traits with directives.
    pub personality: Personality,
}

impl Default for MockConfig {
    fn default() -> Self {
        MockConfig {
            latency_ms: 0,
            output_tokens: 16,
            chunk_delay_ms: 0,
            embedding_dims: 8,
            personality: Personality::default(),
        }
    }
}

pub(crate) struct App {
    cfg: MockConfig,
    stats: MockStats,
    next_id: AtomicU64,
    /// A fault every request gets until cleared (`POST /mock/fault`).
    forced: std::sync::Mutex<Option<Fault>>,
    /// What was served, for the admin usage and cost APIs; the mock clock.
    ledger: Arc<ledger::Ledger>,
}

pub(crate) type Shared = Arc<App>;

impl App {
    /// A stream's recording of `counts` (its output added as it is sent).
    pub(crate) fn recording(
        &self,
        arrival: ledger::Arrival,
        model: &str,
        counts: ledger::Counts,
    ) -> ledger::Recording {
        ledger::Recording {
            ledger: self.ledger.clone(),
            arrival,
            model: model.to_owned(),
            counts,
        }
    }
}

pub fn router(cfg: MockConfig, stats: MockStats) -> Router {
    let app = Arc::new(App {
        cfg,
        stats,
        next_id: AtomicU64::new(1),
        forced: std::sync::Mutex::new(None),
        ledger: Arc::default(),
    });
    Router::new()
        .route("/v1/chat/completions", post(chat::chat))
        .route("/v1/completions", post(chat::completions))
        .route("/v1/embeddings", post(embeddings::embeddings))
        .route("/v1/responses", post(responses::responses))
        .route("/v1/messages", post(messages::messages))
        .route("/v1/models", get(models))
        .route("/mock/stats", get(stats_handler))
        .route("/mock/reset", post(reset))
        .route("/mock/fault", post(force_fault))
        .route(
            "/mock/admin",
            get(admin::get_settings).post(admin::set_settings),
        )
        .route("/mock/clock", get(admin::get_clock).post(admin::set_clock))
        .route(
            "/v1/organization/usage/completions",
            get(admin::openai_usage),
        )
        .route("/v1/organization/costs", get(admin::openai_costs))
        .route(
            "/v1/organizations/usage_report/messages",
            get(admin::anthropic_usage),
        )
        .route("/v1/organizations/cost_report", get(admin::anthropic_costs))
        .fallback(not_found)
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .with_state(app)
}

/// Serve until the future completes; returns when the listener is closed.
pub async fn serve(
    listener: tokio::net::TcpListener,
    cfg: MockConfig,
    stats: MockStats,
) -> io::Result<()> {
    let listener = listener.tap_io(|tcp| {
        let _ = tcp.set_nodelay(true);
    });
    axum::serve(listener, router(cfg, stats)).await
}

/// Convenience for tests: bind 127.0.0.1:0, spawn, return the base URL
/// `"http://127.0.0.1:PORT/v1"` and the stats.
pub async fn spawn(cfg: MockConfig) -> (String, MockStats) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind mock upstream");
    let addr = listener.local_addr().expect("local addr");
    let stats = MockStats::default();
    let served = stats.clone();
    tokio::spawn(async move {
        if let Err(e) = serve(listener, cfg, served).await {
            tracing::warn!("mock upstream stopped: {e}");
        }
    });
    (format!("http://{addr}/v1"), stats)
}

async fn models(State(app): State<Shared>, headers: HeaderMap) -> Response {
    app.stats.request(&headers, None);
    let data: Vec<_> = MODELS
        .iter()
        .map(
            |id| json!({"id": id, "object": "model", "created": 1_700_000_000, "owned_by": "mock"}),
        )
        .collect();
    Json(json!({"object": "list", "data": data})).into_response()
}

async fn stats_handler(State(app): State<Shared>) -> Json<StatsSnapshot> {
    Json(app.stats.snapshot())
}

async fn reset(State(app): State<Shared>) -> StatusCode {
    app.stats.reset();
    app.ledger.reset();
    StatusCode::NO_CONTENT
}

#[derive(serde::Deserialize)]
struct ForcedFault {
    fault: Option<String>,
}

async fn force_fault(State(app): State<Shared>, Json(f): Json<ForcedFault>) -> StatusCode {
    let fault = f.fault.as_deref().and_then(directives::parse_fault);
    *app.forced.lock().unwrap_or_else(|p| p.into_inner()) = fault;
    StatusCode::NO_CONTENT
}

async fn not_found() -> Response {
    error(
        StatusCode::NOT_FOUND,
        "invalid_request_error",
        "not_found",
        "unknown mock endpoint",
    )
}

/// An OpenAI-shaped error response.
pub(crate) fn error(status: StatusCode, kind: &str, code: &str, message: &str) -> Response {
    let body = json!({"error": {"message": message, "type": kind, "code": code, "param": null}});
    (status, Json(body)).into_response()
}

pub(crate) fn bad_request(e: serde_json::Error) -> Response {
    let msg = format!("invalid request body: {e}");
    error(
        StatusCode::BAD_REQUEST,
        "invalid_request_error",
        "invalid_body",
        &msg,
    )
}

/// Sleep for the request's latency, then act on a fault directive. `Some` is the
/// response to return at once; `None` means go on (a stream's disconnect fault is
/// carried out by the stream itself).
pub(crate) async fn latency_and_faults(
    app: &App,
    dir: &Directives,
    stream: bool,
) -> Option<Response> {
    pause(dir.latency_ms.unwrap_or(app.cfg.latency_ms)).await;
    let forced = *app.forced.lock().unwrap_or_else(|p| p.into_inner());
    let fault = dir.fault.or(forced)?;
    app.stats.fault();
    match fault {
        Fault::RateLimit => {
            let mut r = error(
                StatusCode::TOO_MANY_REQUESTS,
                "rate_limit_error",
                "rate_limit_exceeded",
                "mock: rate limit reached, retry after 1s",
            );
            r.headers_mut().insert("retry-after", 1.into());
            Some(r)
        }
        Fault::Server => Some(error(
            StatusCode::INTERNAL_SERVER_ERROR,
            "server_error",
            "internal_error",
            "mock: the server had an error while processing your request",
        )),
        Fault::BadRequest => Some(error(
            StatusCode::BAD_REQUEST,
            "invalid_request_error",
            "invalid_value",
            "mock: model 'acme-internal-gpt-ft:org-7Hq2' of organization org-7Hq2 does not support this request",
        )),
        Fault::DisconnectAfter(_) if stream => None,
        // A body that fails at once: hyper drops the connection without a response.
        Fault::DisconnectAfter(_) => Some(Response::new(Body::from_stream(futures::stream::once(
            async { Err::<Bytes, _>(aborted()) },
        )))),
    }
}

pub(crate) fn aborted() -> io::Error {
    io::Error::new(io::ErrorKind::ConnectionAborted, "mock fault: disconnect")
}

pub(crate) async fn pause(ms: u64) {
    if ms > 0 {
        tokio::time::sleep(Duration::from_millis(ms)).await;
    }
}

/// The mock's token estimate for text: one token per 4 characters, rounded up.
pub(crate) fn approx_tokens(s: &str) -> u32 {
    (s.chars().count() as u32).div_ceil(4)
}
