//! Billing test helpers: a private ClickHouse database per test (so tests
//! run in parallel), the jobs' context on a test's services, and a local
//! webhook receiver.

use crate::TestEnv;
use axum::http::{HeaderMap, StatusCode};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

pub fn clickhouse_url() -> String {
    std::env::var("TOLLGATE_TEST_CLICKHOUSE_URL").unwrap_or_else(|_| "http://127.0.0.1:8123".into())
}

/// A ClickHouse database of its own (`tollgate_t_<random>`), schema applied.
pub async fn test_archive() -> billing::Archive {
    let db = format!("tollgate_t_{}", uuid::Uuid::new_v4().simple());
    let a = billing::Archive::new(&clickhouse_url(), &db, None, None).unwrap();
    a.apply_schema()
        .await
        .expect("ClickHouse reachable (scripts/test.sh starts it)");
    a
}

/// An archive client pointed at a port nothing listens on.
pub fn unreachable_archive(database: &str) -> billing::Archive {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    billing::Archive::new(&format!("http://127.0.0.1:{port}"), database, None, None).unwrap()
}

impl TestEnv {
    /// The server's config, with this test's ClickHouse database and the
    /// scheduler off (tests run jobs themselves, at the time they choose).
    pub fn billing_config(&self, archive: &billing::Archive) -> server::config::Config {
        let mut c = self.config();
        c.clickhouse.url = clickhouse_url();
        c.clickhouse.database = archive.database().to_string();
        c.billing.scheduler = false;
        c
    }

    /// The jobs' context on this test's Postgres, Redis prefix and archive.
    pub fn job_context(
        &self,
        archive: Option<billing::Archive>,
        settings: jobs::JobSettings,
    ) -> jobs::JobContext {
        let quota = quota::QuotaEngine::new(
            &self.redis_url,
            &self.prefix,
            std::time::Duration::from_secs(2),
            "jobs-test",
        )
        .unwrap();
        jobs::JobContext::new(
            self.store.clone(),
            Arc::new(quota),
            archive,
            domain::period::PlatformClock::parse("UTC").unwrap(),
            settings,
        )
    }

    /// A runner as a replica would have (its own Postgres pool).
    pub async fn job_runner(
        &self,
        archive: Option<billing::Archive>,
        settings: jobs::JobSettings,
        replica: &str,
    ) -> jobs::JobRunner {
        let mut ctx = self.job_context(archive, settings);
        ctx.store = store::Store::connect(&self.db_url, 4).await.unwrap();
        jobs::JobRunner::new(ctx, replica)
    }
}

/// One call the webhook receiver got.
#[derive(Debug, Clone)]
pub struct WebhookCall {
    pub alert_id: String,
    pub body: serde_json::Value,
    pub answered: u16,
}

/// A local webhook receiver: fails the first `fail_first` calls with 500,
/// answers later ones 200 after `delay`.
#[derive(Clone)]
pub struct WebhookReceiver {
    pub url: String,
    pub calls: Arc<Mutex<Vec<WebhookCall>>>,
    seen: Arc<AtomicUsize>,
}

impl WebhookReceiver {
    pub async fn start(fail_first: usize, delay: std::time::Duration) -> Self {
        let calls: Arc<Mutex<Vec<WebhookCall>>> = Arc::default();
        let seen = Arc::new(AtomicUsize::new(0));
        let (c, s) = (calls.clone(), seen.clone());
        let app = axum::Router::new().route(
            "/hook",
            axum::routing::post(
                move |headers: HeaderMap, body: axum::Json<serde_json::Value>| {
                    let (c, s) = (c.clone(), s.clone());
                    async move {
                        tokio::time::sleep(delay).await;
                        let n = s.fetch_add(1, Ordering::SeqCst);
                        let status = if n < fail_first {
                            StatusCode::INTERNAL_SERVER_ERROR
                        } else {
                            StatusCode::OK
                        };
                        c.lock().unwrap().push(WebhookCall {
                            alert_id: headers
                                .get("x-tollgate-alert-id")
                                .and_then(|v| v.to_str().ok())
                                .unwrap_or_default()
                                .to_string(),
                            body: body.0,
                            answered: status.as_u16(),
                        });
                        status
                    }
                },
            ),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/hook", listener.local_addr().unwrap());
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Self { url, calls, seen }
    }

    pub fn calls(&self) -> Vec<WebhookCall> {
        self.calls.lock().unwrap().clone()
    }
}
