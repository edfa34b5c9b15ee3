//! Wiring: one process serving the data plane, `/metrics` and health, with
//! its background tasks (catalog listener, ledger writer, outbox sweeper).

use crate::config::Config;
use crate::metrics_endpoint::metrics_handle;
use anyhow::Context;
use axum::extract::State;
use axum::response::IntoResponse;
use axum::routing::get;
use axum::serve::ListenerExt;
use axum::Router;
use gateway::state::CatalogCache;
use gateway::{Gateway, GatewayConfig, LedgerWriter};
use quota::QuotaEngine;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use store::Store;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

pub struct Running {
    pub addr: SocketAddr,
    /// `/metrics`' own listener (`metrics.listen`), when configured.
    pub metrics_addr: Option<SocketAddr>,
    pub gateway: Arc<Gateway>,
    stop: watch::Sender<bool>,
    server: JoinHandle<()>,
    ledger_task: JoinHandle<()>,
    background: Vec<JoinHandle<()>>,
    schedule: jobs::schedule::Schedule,
}

impl Running {
    /// Stops accepting, finishes in-flight requests, drains the ledger.
    pub async fn shutdown(self) {
        let _ = self.stop.send(true);
        self.schedule.shutdown().await;
        let _ = tokio::time::timeout(Duration::from_secs(10), self.server).await;
        // Leases go back to the scopes before the process ends.
        let background = &self.background;
        self.gateway
            .shut_down(Duration::from_secs(5), async {
                for b in background {
                    b.abort();
                }
            })
            .await;
        drop(self.gateway);
        let _ = tokio::time::timeout(Duration::from_secs(5), self.ledger_task).await;
    }
}

pub async fn start(cfg: &Config, listener: TcpListener) -> anyhow::Result<Running> {
    // The recorder first: whatever is counted before it exists is lost
    // (metrics' default recorder drops everything).
    metrics_handle();
    let addr = listener.local_addr()?;
    let store = Store::connect(&cfg.database.url, cfg.database.max_connections)
        .await
        .context("cannot connect to PostgreSQL (database.url)")?;
    store.migrate().await.context("migrations failed")?;
    let clock = cfg.platform.clock().map_err(anyhow::Error::msg)?;
    let replica = cfg.replica();
    let quota = Arc::new(
        cfg.quota_engine(&replica, Duration::from_millis(cfg.redis.timeout_ms))?
            .with_booked_check(Arc::new(gateway::replay_check::LedgerBooked(store.clone()))),
    );
    if !quota.warm_up(Duration::from_secs(2)).await {
        tracing::warn!("Redis is not answering yet: requests fail closed (503) until it does");
    }
    crate::redis_policy::check_at_start(&quota).await?;
    // Periods are Redis time's: measure this replica's skew before serving.
    sync_clock(&quota).await;
    let catalog = Arc::new(CatalogCache::with_miss_tuning(
        cfg.encryption_key()?,
        cfg.miss_tuning(),
    ));
    // LISTEN first, then load once: the listener starts from this load
    // without a second one, and misses no change made in between.
    let listening = match store.config_listener().await {
        Ok(l) => Some(l),
        Err(e) => {
            tracing::warn!(error = %e, "cannot listen for config changes yet (retrying)");
            None
        }
    };
    catalog
        .reload(&store)
        .await
        .context("cannot load the catalog")?;
    domain::tokens::TokenizerFamily::warm_up(catalog.get().models.values().map(|m| m.tokenizer));
    return_freed_memory();

    let (ledger, ledger_task) = LedgerWriter::start(
        store.clone(),
        quota.clone(),
        cfg.gateway.ledger_batch,
        Duration::from_millis(cfg.gateway.ledger_linger_ms),
    );
    let background = vec![
        spawn_metrics_upkeep(Duration::from_secs(5)),
        spawn_heartbeat(
            quota.clone(),
            Duration::from_secs(cfg.gateway.heartbeat_ttl_secs.max(1)),
        ),
        catalog.clone().spawn_listener(store.clone(), listening),
        crate::redis_policy::spawn_watch(store.clone(), quota.clone()),
        settlement::ledger::spawn_sweeper(
            store.clone(),
            quota.clone(),
            catalog.clone(),
            Duration::from_secs(cfg.gateway.outbox_sweep_secs.max(1)),
            cfg.writer_grace(),
        ),
    ];
    let gw_cfg = GatewayConfig {
        max_body_bytes: cfg.gateway.max_body_bytes,
        long_input: cfg.gateway.long_input()?,
        tokenize_threads: cfg.gateway.tokenize_threads(),
        tokenize_nice: cfg.gateway.tokenize_nice.clamp(0, 19),
        max_upstream_body_bytes: cfg.gateway.max_upstream_body_bytes,
        max_sse_event_bytes: cfg.gateway.max_sse_event_bytes,
        upstream_timeout: Duration::from_secs(cfg.gateway.upstream_timeout_secs),
        upstream_connect_timeout: Duration::from_millis(cfg.gateway.upstream_connect_timeout_ms),
        replica,
        pepper: cfg.pepper()?,
        clock,
        stream_idle_timeout: Duration::from_secs(cfg.gateway.stream_idle_timeout_secs.max(1)),
        stream_max_duration: Duration::from_secs(cfg.gateway.stream_max_duration_secs.max(1)),
        stream_slice_tokens: cfg.gateway.stream_slice_tokens.max(1),
        count_tokens_per_minute: cfg.gateway.count_tokens_per_minute.max(0),
        min_clamped_output_tokens: cfg.gateway.min_clamped_output_tokens.max(1),
        fair: cfg.fair.tuning(&cfg.gateway),
        admission: cfg.gateway.admission.mode(),
        lease: cfg.gateway.lease_tuning(),
        routing: cfg.routing.tuning(),
    };
    // No ClickHouse connection at start: a ClickHouse that is down must not
    // keep the gateway from serving. `migrate` and every rollover apply the
    // archive's schema; only closed months' bills read it.
    let archive = cfg.archive()?;
    let books = billing::Books::new(store.clone(), Some(archive.clone()), clock);
    let sso = match &cfg.auth.oidc {
        Some(o) => Some(Arc::new(
            console::sso::Sso::new(o.settings()).map_err(anyhow::Error::msg)?,
        )),
        None => None,
    };
    let trusted_proxies = cfg.trusted_proxies()?;
    let control = cfg.auth.jwt_secret.as_ref().map(|secret| {
        Arc::new(console::ControlPlane {
            store: store.clone(),
            quota: quota.clone(),
            sessions: store::Sessions::new(secret.as_bytes(), cfg.auth.session_secs),
            pepper: gw_cfg.pepper.clone(),
            encryption_key: cfg.encryption_key().expect("validated above"),
            clock,
            logins: Default::default(),
            books: books.clone(),
            cookie_secure: cfg.auth.cookie_secure,
            password_login: cfg.auth.password_login,
            client_ip_header: cfg.auth.client_ip_header.clone(),
            trusted_proxies: trusted_proxies.clone(),
            four_eyes_days: cfg.auth.four_eyes_days,
            max_grant_days: cfg.auth.max_grant_days,
            sso: sso.clone(),
            routes: catalog.board.clone(),
        })
    });
    if control.is_none() {
        tracing::warn!("auth.jwt_secret is not set: the admin API (/api/v1) is off");
    }
    let gw = Arc::new(Gateway::new(
        gw_cfg,
        catalog,
        quota.clone(),
        store.clone(),
        ledger,
    ));
    // Housekeeping (abandoned holds, borrowing, reclaim) always; the
    // calendar when `billing.scheduler` is on. Each fire runs once across
    // replicas and is recorded in `job_runs` (crates/jobs/src/schedule.rs).
    let ctx = jobs::JobContext::new(store, quota, Some(archive), clock, cfg.job_settings())
        .with_borrowing(gw.borrower().clone());
    let plan = jobs::schedule::plan(cfg.billing.scheduler, cfg.housekeeping());
    let schedule =
        jobs::schedule::Schedule::start(jobs::JobRunner::new(ctx, gw.cfg().replica.clone()), plan)
            .await
            .context("cannot start the job scheduler")?;
    let mut background = background;
    background.push(gw.queue().spawn_dispatcher());
    if let Some(every) = gw.cfg().routing.probe_every {
        background.push(gateway::routing::spawn_prober(gw.clone(), every));
    }
    let metrics_addr = match &cfg.metrics.listen {
        Some(at) => Some(crate::metrics_endpoint::serve_own_listener(at).await?),
        None => None,
    };
    let app = Router::new()
        .route("/healthz", get(health))
        .with_state(gw.clone())
        .merge(crate::metrics_endpoint::on_main_listener(
            cfg.metrics.token.clone(),
        ))
        .merge(gateway::router(gw.clone()));
    let app = match control {
        Some(cp) => app.merge(console::router(cp)),
        None => app,
    };

    let (stop, mut stopped) = watch::channel(false);
    let server = tokio::spawn(async move {
        let shutdown = async move {
            let _ = stopped.wait_for(|s| *s).await;
        };
        // Small SSE events must leave at once, not wait for the previous
        // write's ACK (Nagle + delayed ACK stalls a stream by up to 40 ms).
        let listener = listener.tap_io(|tcp| {
            let _ = tcp.set_nodelay(true);
        });
        // The peer address feeds the console's per-IP sign-in back-off.
        let app = app.into_make_service_with_connect_info::<SocketAddr>();
        if let Err(e) = axum::serve(listener, app)
            .with_graceful_shutdown(shutdown)
            .await
        {
            tracing::error!(error = %e, "server stopped");
        }
    });
    Ok(Running {
        addr,
        metrics_addr,
        gateway: gw,
        stop,
        server,
        ledger_task,
        background,
        schedule,
    })
}

async fn health(State(gw): State<Arc<Gateway>>) -> impl IntoResponse {
    let (redis, postgres) = gw.ready().await;
    let status = if redis && postgres {
        axum::http::StatusCode::OK
    } else {
        axum::http::StatusCode::SERVICE_UNAVAILABLE
    };
    (
        status,
        axum::Json(serde_json::json!({"redis": redis, "postgres": postgres})),
    )
}

/// Drains the histograms' recorded samples into their buckets. The
/// recorder keeps every sample of a histogram until this runs (or /metrics
/// is scraped): without it a gateway nobody scrapes grew by 8 bytes per
/// sample, three samples a request (bench/results/2026-12-03-metrics-upkeep.md).
fn spawn_metrics_upkeep(every: Duration) -> JoinHandle<()> {
    let handle = metrics_handle();
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            handle.run_upkeep();
        }
    })
}

/// Measures this replica's clock against Redis' (`QuotaEngine::sync_clock`):
/// a gauge, and a warning when it is a second or more off.
async fn sync_clock(quota: &QuotaEngine) {
    match quota.sync_clock().await {
        Ok(skew_ms) => {
            metrics::gauge!(gateway::CLOCK_SKEW_SECONDS).set(skew_ms as f64 / 1000.0);
            // Once per change of a second or more, not every heartbeat.
            static WARNED: std::sync::atomic::AtomicI64 = std::sync::atomic::AtomicI64::new(0);
            let warned = WARNED.load(std::sync::atomic::Ordering::Relaxed);
            if skew_ms.abs() >= 1000 && (skew_ms - warned).abs() >= 1000 {
                WARNED.store(skew_ms, std::sync::atomic::Ordering::Relaxed);
                tracing::warn!(
                    skew_ms,
                    "this replica's clock is off Redis' time; periods and expiries follow Redis' (fix NTP)"
                );
            }
        }
        Err(e) => tracing::warn!(error = %e, "cannot read Redis time to measure clock skew"),
    }
}

/// Every sixth of the TTL (1 s after a failure): this replica is alive (its
/// holds become orphans once the heartbeat lapses), and its clock's skew
/// from Redis' is measured again.
fn spawn_heartbeat(quota: Arc<QuotaEngine>, ttl: Duration) -> JoinHandle<()> {
    let every = (ttl / 6).max(Duration::from_millis(200));
    tokio::spawn(async move {
        loop {
            sync_clock(&quota).await;
            let pause = match quota.heartbeat(ttl).await {
                Ok(()) => every,
                Err(e) => {
                    tracing::warn!(error = %e, "heartbeat failed");
                    every.min(Duration::from_secs(1))
                }
            };
            tokio::time::sleep(pause).await;
        }
    })
}

/// Gives the pages freed so far back to the OS. Building a tokenizer table
/// frees a temporary tiktoken `CoreBPE` of ~46 MB; mimalloc returns freed
/// pages only after a delay, on a later allocation of the same thread, so
/// without this the idle gateway kept them: 75 MB resident instead of ~35
/// (bench/results/2026-11-30-bench.md, "Memory"). A no-op where mimalloc is not the
/// allocator (the tests).
fn return_freed_memory() {
    // SAFETY: mi_collect takes no pointers; it frees only memory mimalloc
    // itself holds as unused.
    unsafe { libmimalloc_sys::mi_collect(true) }
}
