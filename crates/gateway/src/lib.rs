//! The data plane: OpenAI-compatible `/v1/*`, virtual-key auth, admission
//! through the hold engine, forwarding to the provider, metering and settling.
// A dependency nothing uses fails CI (clippy -D warnings).
#![cfg_attr(not(test), warn(unused_crate_dependencies))]

pub mod admission;
mod anomaly;
pub mod attribution;
pub mod catalog;
pub mod day_cost;
pub mod decisions;
mod dialect;
mod errors;
mod estimate;
mod extras;
mod forward;
mod headers;
pub mod key_index;
mod key_usage;
mod meters;
mod metrics_names;
mod models;
pub mod open_streams;
mod proxy;
pub mod queue;
mod refused_key;
pub mod replay_check;
mod routes;
pub mod routing;
mod sched;
mod settle;
mod sharing;
mod sse;
pub mod state;
mod stream;
mod tenants;
mod tokenize;
mod upstream;

pub use metrics_names::{CLOCK_SKEW_SECONDS, REDIS_EVICTION_POLICY_OK};

use axum::routing::{any, get, post};
use axum::Router;
use domain::period::PlatformClock;
use quota::QuotaEngine;
use state::CatalogCache;
use std::sync::Arc;
use std::time::Duration;
use store::Store;

/// The gateway's own pricing and metering steps as plain functions, for
/// the hold engine's property test (`tests/tests/hold_engine_cost_props.rs`),
/// which drives the engine without a server: the hold's price
/// (`extras::hold_price`), the stream meter's count of one chat event, and
/// what a settle books. The request path calls the same functions. Not an
/// API.
#[doc(hidden)]
pub mod steps {
    pub use crate::dialect::native::reported;
    pub use crate::extras::hold_price_of;
    pub use crate::settle::settle_amounts;
    pub use crate::stream::chat_event_tokens;
}

// The back office lives in `settlement`; these keep the gateway's paths.
pub use settlement::{abandoned, borrow, ledger, ledger_source, LedgerWriter};

#[derive(Clone)]
pub struct GatewayConfig {
    /// Request bodies above this are refused with 413, unless the model's
    /// context window needs more (`domain::tokens::body_limit`).
    pub max_body_bytes: usize,
    /// Long inputs (`domain::tokens::LONG_INPUT_BYTES`): bounded from above
    /// (`Bound`) or counted exactly (`Exact`, the default); either way an exact count
    /// runs in the tokenize pool, never on the async workers.
    pub long_input: LongInput,
    /// Threads of the tokenize pool (at least 1).
    pub tokenize_threads: usize,
    /// The tokenize pool's threads run this much below the async workers
    /// (a nice increment; 0 = the same priority).
    pub tokenize_nice: i32,
    /// Whole-request timeout for non-streaming upstream calls.
    pub upstream_timeout: Duration,
    /// A non-stream upstream answer larger than this is a 502
    /// (`upstream_response_too_large`), never buffered whole.
    pub max_upstream_body_bytes: usize,
    /// A stream event (the SSE buffer between blank lines) larger than this
    /// ends the stream with `upstream_response_too_large`.
    pub max_sse_event_bytes: usize,
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
    /// Tokens one key may have counted (`count_tokens`) a minute on this
    /// replica.
    pub count_tokens_per_minute: i64,
    /// A non-stream request clamped to its budget must still be allowed at
    /// least this many output tokens per choice, or it is refused.
    pub min_clamped_output_tokens: i64,
    /// How requests reserve quota: leases, per request, or (benchmark
    /// ablation only) not at all.
    pub admission: admission::AdmissionMode,
    pub lease: quota::LeaseTuning,
    pub fair: FairTuning,
    /// Retries before the first byte and deployment health (docs/routing.md).
    pub routing: routing::RoutingTuning,
}

/// How the input of a long request is estimated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LongInput {
    /// The constant-time upper bound; an exact count (in the pool) only when
    /// the bound is above the key's context cap.
    Bound,
    /// Always the exact count, in the pool.
    Exact,
}

/// Queues, model pools and degrade (docs/design.md §7, docs/fair.md).
#[derive(Debug, Clone)]
pub struct FairTuning {
    pub queue: domain::fairq::QueuePolicy,
    /// The dispatcher polls for slots freed by other replicas, backing off
    /// from `poll_min` to `poll_max` while nothing frees.
    pub poll_min: Duration,
    pub poll_max: Duration,
    /// A model-pool slot whose replica died is dropped after this.
    pub slot_lifetime: Duration,
    /// Output cap (per choice) of a request past the daily soft limit.
    pub degrade_max_output_tokens: Option<i64>,
    pub borrow: borrow::BorrowTuning,
    /// A 429 or 402 refusal is answered after this long (at most its
    /// Retry-After): a client that ignores Retry-After then gets at most one
    /// refusal per connection per delay, and cannot spend the CPU other
    /// tenants need (`domain::reason::refusal_pause`).
    pub refusal_delay: Duration,
    /// Open streamed answers per tenant on one replica, unless the tenant
    /// sets its own `max_open_streams` (None: no cap).
    pub max_open_streams_per_tenant: Option<usize>,
    /// Streams of one tenant being started at once on one replica (held,
    /// forwarded, the provider's headers not yet in); the others wait
    /// their turn (None: unpaced) …
    pub stream_starts_per_tenant: Option<usize>,
    /// … at most this long, then start without one.
    pub stream_start_wait: Duration,
}

impl Default for FairTuning {
    fn default() -> Self {
        Self {
            queue: Default::default(),
            poll_min: Duration::from_millis(10),
            poll_max: Duration::from_millis(100),
            slot_lifetime: Duration::from_secs(3600),
            degrade_max_output_tokens: Some(1024),
            borrow: Default::default(),
            refusal_delay: Duration::from_millis(100),
            max_open_streams_per_tenant: None,
            stream_starts_per_tenant: Some(8),
            stream_start_wait: Duration::from_millis(1000),
        }
    }
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
    pub(crate) cfg: GatewayConfig,
    pub(crate) catalog: Arc<CatalogCache>,
    pub(crate) quota: Arc<QuotaEngine>,
    /// Hold / extend / settle / release, per request or from leases.
    pub(crate) admission: admission::Admission,
    pub(crate) store: Store,
    pub(crate) ledger: LedgerWriter,
    pub(crate) queue: Arc<queue::AdmissionQueue>,
    pub(crate) borrower: Arc<borrow::Borrowing>,
    /// Refused and degraded requests, for the request lookup.
    pub(crate) decisions: decisions::DecisionWriter,
    /// Each tenant's cost of the day, for the daily soft limit.
    pub(crate) day_costs: Arc<day_cost::DayCosts>,
    /// Each tenant's open streams on this replica (its `max_open_streams`).
    pub(crate) open_streams: Arc<open_streams::OpenStreams>,
    /// Each tenant's streams being started (`fair.stream_starts_per_tenant`).
    pub(crate) stream_starts: open_streams::StreamStarts,
    /// Metric handles of the hot path.
    meters: meters::Meters,
    /// Exact counts of long inputs, off the async workers.
    tokenize: tokenize::TokenizePool,
    /// What each key may still have counted by `count_tokens` this minute.
    count_allowance: std::sync::Mutex<domain::tokens::CountAllowances>,
    upstream: upstream::Upstream,
    /// The keyed hash of virtual keys, keyed once with `cfg.pepper`.
    key_hasher: domain::keys::KeyHasher,
}

impl Gateway {
    pub fn new(
        cfg: GatewayConfig,
        catalog: Arc<CatalogCache>,
        quota: Arc<QuotaEngine>,
        store: Store,
        ledger: LedgerWriter,
    ) -> Self {
        let upstream = upstream::Upstream::new(&cfg);
        let queue = queue::AdmissionQueue::new(
            cfg.fair.queue.clone(),
            cfg.fair.poll_min,
            cfg.fair.poll_max,
        );
        let borrower = Arc::new(borrow::Borrowing::new(
            store.clone(),
            quota.clone(),
            catalog.clone(),
            cfg.clock,
            cfg.replica.clone(),
            cfg.fair.borrow.clone(),
        ));
        // Its task ends when the last Gateway handle is dropped.
        let (decisions, _task) = decisions::DecisionWriter::start(store.clone(), cfg.clock);
        let admission = admission::Admission::new(cfg.admission, quota.clone(), cfg.lease.clone());
        let tokenize = tokenize::TokenizePool::new(cfg.tokenize_threads, cfg.tokenize_nice);
        let day_costs = day_cost::DayCosts::start(quota.clone(), store.clone());
        Self {
            key_hasher: domain::keys::KeyHasher::new(&cfg.pepper),
            day_costs,
            open_streams: Default::default(),
            stream_starts: Default::default(),
            meters: Default::default(),
            tokenize,
            count_allowance: Default::default(),
            cfg,
            catalog,
            admission,
            quota,
            store,
            ledger,
            queue,
            borrower,
            decisions,
            upstream,
        }
    }
}

/// What the server, the jobs and the tests read of a running gateway (its
/// fields are the crate's own).
impl Gateway {
    pub fn cfg(&self) -> &GatewayConfig {
        &self.cfg
    }

    pub fn catalog(&self) -> &CatalogCache {
        &self.catalog
    }

    pub fn queue(&self) -> &Arc<queue::AdmissionQueue> {
        &self.queue
    }

    pub fn borrower(&self) -> &Arc<borrow::Borrowing> {
        &self.borrower
    }

    pub fn open_streams(&self) -> &open_streams::OpenStreams {
        &self.open_streams
    }

    /// Redis and Postgres both answer (the readiness probe).
    pub async fn ready(&self) -> (bool, bool) {
        let redis = self.quota.ping().await.is_ok();
        let postgres = self.store.ping().await.is_ok();
        (redis, postgres)
    }

    /// At shutdown: leases back to their scopes within `within`, then what
    /// the writers still hold (ledger, decisions, day costs) written out.
    pub async fn shut_down(
        &self,
        within: Duration,
        before_flush: impl std::future::Future<Output = ()>,
    ) {
        self.admission.shutdown(within).await;
        before_flush.await;
        self.ledger.flush().await;
        self.decisions.flush().await;
        self.day_costs.flush().await;
    }
}

impl Gateway {
    /// The Postgres ledger as the hold engine's rebuild source, waiting for
    /// this replica's ledger writer first.
    pub(crate) fn ledger_source(&self) -> ledger_source::StoreLedger<'_> {
        ledger_source::StoreLedger {
            store: &self.store,
            quota: &self.quota,
            writer: Some(&self.ledger),
        }
    }

    /// The platform's time: this replica's clock corrected by its measured
    /// skew from Redis' (`QuotaEngine::sync_clock`). Periods, expiries and
    /// receipt times are read from it, so replicas whose clocks disagree
    /// book a month's last seconds in the same month.
    pub fn now(&self) -> chrono::DateTime<chrono::Utc> {
        domain::period::skewed(chrono::Utc::now(), self.quota.clock_skew_ms())
    }

    /// A new request id and its receipt time, on the platform's clock.
    pub(crate) fn new_request_id(&self) -> (String, chrono::DateTime<chrono::Utc>) {
        domain::request_id::new_skewed(self.quota.clock_skew_ms())
    }
}

/// The `/v1` routes. Body limits are enforced by the handlers themselves so
/// that an oversized body gets an OpenAI-shaped 413. A path not served under
/// `/v1` or `/v1beta`, or a method a path does not take, is answered in the
/// path's dialect with a request id (never a bare 404 / 405).
pub fn router(gw: Arc<Gateway>) -> Router {
    use routes::{method_not_allowed, unknown_route};
    let post_only = |h| axum::routing::MethodRouter::fallback(h, method_not_allowed("POST"));
    Router::new()
        .route(
            "/v1/chat/completions",
            post_only(post(proxy::chat_completions)),
        )
        .route("/v1/completions", post_only(post(proxy::completions)))
        .route("/v1/embeddings", post_only(post(proxy::embeddings)))
        .route("/v1/responses", post_only(post(routes::responses)))
        .route("/v1/messages", post_only(post(routes::messages)))
        .route(
            "/v1/messages/count_tokens",
            post_only(post(routes::count_tokens)),
        )
        .route(
            "/v1/models",
            get(models::list).fallback(method_not_allowed("GET")),
        )
        // What the key has left: tollgate's own, in no provider's API.
        .route(
            "/v1/usage",
            get(key_usage::usage).fallback(method_not_allowed("GET")),
        )
        // GET: OpenAI's and Anthropic's model retrieval; POST: Google's
        // `v1` calls (`/v1/models/{model}:generateContent`, as the
        // google-genai SDKs send them).
        .route(
            "/v1/models/{*id}",
            get(models::retrieve)
                .post(routes::gemini_call)
                .fallback(method_not_allowed("GET, POST")),
        )
        .route(
            "/v1beta/models",
            get(models::gemini_list).fallback(method_not_allowed("GET")),
        )
        .route(
            "/v1beta/models/{*rest}",
            get(models::gemini_one)
                .post(routes::gemini_call)
                .fallback(method_not_allowed("GET, POST")),
        )
        .route("/v1", any(unknown_route))
        .route("/v1/{*rest}", any(unknown_route))
        .route("/v1beta", any(unknown_route))
        .route("/v1beta/{*rest}", any(unknown_route))
        .layer(axum::extract::DefaultBodyLimit::disable())
        .with_state(gw)
}
