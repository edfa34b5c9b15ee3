//! The data plane: OpenAI-compatible `/v1/*`, virtual-key auth, admission
//! through the hold engine, forwarding to the provider, metering and settling.

pub mod admission;
pub mod catalog;
mod errors;
pub mod ledger;
pub mod ledger_source;
mod metrics_names;
mod models;
mod proxy;
pub mod reconcile;
mod settle;
mod sse;
mod stream;
mod upstream;

use axum::routing::{get, post};
use axum::Router;
use catalog::CatalogCache;
use domain::period::PlatformClock;
use quota::QuotaEngine;
use std::sync::Arc;
use std::time::Duration;
use store::Store;

pub use ledger::LedgerWriter;

#[derive(Clone)]
pub struct GatewayConfig {
    /// Request bodies above this are refused with 413.
    pub max_body_bytes: usize,
    /// Whole-request timeout for non-streaming upstream calls.
    pub upstream_timeout: Duration,
    pub upstream_connect_timeout: Duration,
    /// This replica's name, recorded on every hold and usage event.
    pub replica: String,
    /// Pepper of the keyed hash of virtual keys.
    pub pepper: Vec<u8>,
    pub clock: PlatformClock,
    /// A stream whose upstream sends nothing for this long is closed.
    pub stream_idle_timeout: Duration,
    /// A stream running this long is cut off (finish_reason "length").
    pub stream_max_duration: Duration,
    /// Output tokens a stream holds at a time: the first hold covers one
    /// slice, and the hold is extended a slice ahead as output is counted.
    pub stream_slice_tokens: i64,
    /// A non-stream request clamped to its budget must still be allowed at
    /// least this many output tokens per choice, or it is refused.
    pub min_clamped_output_tokens: i64,
    /// How requests reserve quota: leases, per request, or (benchmark
    /// ablation only) not at all.
    pub admission: admission::AdmissionMode,
    pub lease: quota::LeaseTuning,
}

impl std::fmt::Debug for GatewayConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GatewayConfig")
            .field("max_body_bytes", &self.max_body_bytes)
            .field("upstream_timeout", &self.upstream_timeout)
            .field("replica", &self.replica)
            .field("admission", &self.admission)
            .field("pepper", &"***")
            .finish_non_exhaustive()
    }
}

pub struct Gateway {
    pub cfg: GatewayConfig,
    pub catalog: Arc<CatalogCache>,
    pub quota: Arc<QuotaEngine>,
    /// Hold / extend / settle / release, per request or from leases.
    pub admission: admission::Admission,
    pub store: Store,
    pub ledger: LedgerWriter,
    http: reqwest::Client,
}

impl Gateway {
    pub fn new(
        cfg: GatewayConfig,
        catalog: Arc<CatalogCache>,
        quota: Arc<QuotaEngine>,
        store: Store,
        ledger: LedgerWriter,
    ) -> Self {
        let http = upstream::client(&cfg);
        let admission = admission::Admission::new(cfg.admission, quota.clone(), cfg.lease.clone());
        Self {
            cfg,
            catalog,
            admission,
            quota,
            store,
            ledger,
            http,
        }
    }
}

/// The `/v1` routes. Body limits are enforced by the handlers themselves so
/// that an oversized body gets an OpenAI-shaped 413.
pub fn router(gw: Arc<Gateway>) -> Router {
    Router::new()
        .route("/v1/chat/completions", post(proxy::chat_completions))
        .route("/v1/completions", post(proxy::completions))
        .route("/v1/embeddings", post(proxy::embeddings))
        .route("/v1/models", get(models::list))
        .layer(axum::extract::DefaultBodyLimit::disable())
        .with_state(gw)
}
