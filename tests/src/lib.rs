//! End-to-end test harness: a fresh Postgres database per test, a random
//! Redis key prefix (or a private redis-server for tests that flush or stop
//! it), the mock upstream, and the real server on port 0.

pub mod books;
pub mod console_web;
pub mod hostile;
pub mod oidc;
mod procs;
pub mod redis_clock;

pub use procs::{faketime_env, PgProc, RedisCluster, RedisProc, TEST_REDIS_TITLE};

use domain::{keys, Limits};
use mock_upstream::{MockConfig, MockStats};
use server::app::{self, Running};
use server::config::Config;
use std::time::{Duration, Instant};
/// Tests read as the platform does: `TenantScope::system()`.
pub use store::TenantScope;
use store::{AppRow, NewKey, NewModel, Store, TenantRow};

pub const PEPPER: &str = "e2e-test-pepper-0123456789abcdef0123456789";
pub const ENC_KEY: &str = "aa112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";
pub const JWT_SECRET: &str = "e2e-jwt-secret-0123456789abcdef0123456789";
/// The provider's API key every test model is configured with.
pub const PROVIDER_KEY: &str = "sk-provider-secret";
/// The mock provider's admin (usage and cost API) key, as provider accounts hold it.
pub const PROVIDER_ADMIN_KEY: &str = "sk-admin-provider-secret-7f3a";
/// The bearer token of `/metrics` on every test server (`metrics.token`):
/// read it with [`metrics`].
pub const METRICS_TOKEN: &str = "e2e-metrics-token-0123456789abcdef012345";
/// Every test user's password.
pub const PASSWORD: &str = "correct horse battery staple";

/// The secrets of the suite that must never appear in a log, a metric, an
/// error body or a database (scanned by `secrets-scan` after the suite). Plain
/// virtual keys are found by their format instead.
pub const SUITE_SECRETS: [(&str, &str); 6] = [
    ("key pepper", PEPPER),
    ("encryption key", ENC_KEY),
    ("JWT secret", JWT_SECRET),
    ("provider key", PROVIDER_KEY),
    ("user password", PASSWORD),
    ("provider admin key", PROVIDER_ADMIN_KEY),
];

/// Where the suite leaves what the secrets scan reads (`TOLLGATE_TEST_LOG_DIR`,
/// set by scripts/test.sh); `None` when unset.
pub fn log_dir() -> Option<std::path::PathBuf> {
    let dir = std::path::PathBuf::from(std::env::var_os("TOLLGATE_TEST_LOG_DIR")?);
    std::fs::create_dir_all(&dir).ok()?;
    Some(dir)
}

/// A file in the log directory named after this test process.
pub fn log_file(what: &str) -> Option<std::fs::File> {
    let exe = std::env::current_exe().ok()?;
    let stem = exe.file_stem()?.to_string_lossy().into_owned();
    let path = log_dir()?.join(format!("{stem}-{}-{what}.log", std::process::id()));
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .ok()
}

/// The in-process servers' logs go to the log directory at `info` (or
/// `TOLLGATE_LOG`), so the secrets scan reads what production would log.
fn init_test_logging() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let Some(file) = log_file("server") else {
            return;
        };
        let filter = tracing_subscriber::EnvFilter::try_from_env("TOLLGATE_LOG")
            .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
        let _ = tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_ansi(false)
            .with_writer(std::sync::Mutex::new(file))
            .try_init();
    });
}

pub fn admin_db_url() -> String {
    std::env::var("TOLLGATE_TEST_DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into())
}

pub fn shared_redis_url() -> String {
    std::env::var("TOLLGATE_TEST_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into())
}

fn with_db(url: &str, db: &str) -> String {
    let (base, _) = url.rsplit_once('/').expect("database url has a path");
    format!("{base}/{db}")
}

pub struct TestEnv {
    pub db_url: String,
    pub store: Store,
    pub redis_url: String,
    pub prefix: String,
    pub mock_url: String,
    pub mock: MockStats,
}

impl TestEnv {
    pub async fn new() -> Self {
        Self::with_redis(shared_redis_url(), MockConfig::default()).await
    }

    pub async fn with_redis(redis_url: String, mock: MockConfig) -> Self {
        Self::with_services(&admin_db_url(), redis_url, mock).await
    }

    /// On a given Postgres (admin URL) and Redis.
    pub async fn with_services(admin_url: &str, redis_url: String, mock: MockConfig) -> Self {
        init_test_logging();
        let name = format!("tollgate_t_{}", uuid::Uuid::new_v4().simple());
        let admin = Store::connect(admin_url, 1)
            .await
            .expect("postgres reachable");
        sqlx::query(&format!("CREATE DATABASE {name}"))
            .execute(admin.pool())
            .await
            .expect("create database");
        let db_url = with_db(admin_url, &name);
        let store = Store::connect(&db_url, 8)
            .await
            .expect("connect test database");
        store.migrate().await.expect("migrate");
        let (mock_url, mock) = mock_upstream::spawn(mock).await;
        Self {
            db_url,
            store,
            redis_url,
            prefix: format!("tge2e{}", &name[11..23]),
            mock_url,
            mock,
        }
    }

    pub fn config(&self) -> Config {
        let mut c = Config::default();
        c.database.url = self.db_url.clone();
        c.database.max_connections = 8;
        c.redis.url = self.redis_url.clone();
        c.redis.key_prefix = self.prefix.clone();
        c.keys.pepper = Some(PEPPER.into());
        c.keys.encryption_key = Some(ENC_KEY.into());
        c.auth.jwt_secret = Some(JWT_SECRET.into());
        c.metrics.token = Some(METRICS_TOKEN.into());
        c.platform.timezone = "UTC".into();
        c.gateway.outbox_sweep_secs = 1;
        // Tests run jobs themselves, at the instants they choose.
        c.billing.scheduler = false;
        c
    }

    pub async fn server(&self) -> Running {
        self.server_with(self.config()).await
    }

    pub async fn server_with(&self, cfg: Config) -> Running {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        self.server_on(cfg, listener).await
    }

    /// On a listener the test bound (when the configuration must name the
    /// server's own address, as an SSO redirect URL does).
    pub async fn server_on(&self, mut cfg: Config, listener: tokio::net::TcpListener) -> Running {
        cfg.server.replica = Some(format!("replica-{}", uuid::Uuid::new_v4().simple()));
        app::start(&cfg, listener).await.expect("server starts")
    }

    pub async fn model(&self, id: &str, kind: &str, in_price: i64, out_price: i64) {
        self.store
            .create_model(
                "test",
                &NewModel {
                    id: id.into(),
                    kind: kind.into(),
                    upstream_base_url: self.mock_url.clone(),
                    upstream_model: id.into(),
                    upstream_api_key_enc: Some(domain::secret::encrypt(
                        &hex::decode(ENC_KEY).unwrap().try_into().unwrap(),
                        PROVIDER_KEY,
                    )),
                    input_price_micro_per_mtok: in_price,
                    output_price_micro_per_mtok: out_price,
                    tokenizer: None,
                    default_max_output_tokens: 256,
                    profile: domain::provider::ProviderProfile::suggested_for(id),
                },
            )
            .await
            .unwrap();
    }

    /// Sets a model's provider profile (as `PATCH /api/v1/models/{id}` does).
    pub async fn profile(&self, id: &str, profile: domain::provider::ProviderProfile) {
        self.store
            .set_model_profile("test", id, &profile)
            .await
            .unwrap();
    }

    pub async fn tenant(&self, id: &str, limits: Limits, allowed: Option<Vec<&str>>) {
        self.tenant_with_policy(id, limits, allowed, false).await
    }

    /// A tenant whose policy may clamp max_tokens to the budget.
    pub async fn tenant_with_policy(
        &self,
        id: &str,
        limits: Limits,
        allowed: Option<Vec<&str>>,
        clamp: bool,
    ) {
        let t = TenantRow {
            id: id.into(),
            name: id.into(),
            cost_center: "CC-1".into(),
            priority: "standard".into(),
            limits,
            may_borrow: false,
            borrow_cap_tokens: 0,
            allowed_models: allowed.map(|v| v.into_iter().map(String::from).collect()),
            clamp_max_tokens: clamp,
            max_queued_requests: None,
            max_open_streams: None,
        };
        self.store.create_tenant("test", &t).await.unwrap();
    }

    pub async fn app(&self, tenant: &str, id: &str, limits: Limits) {
        let a = AppRow {
            tenant_id: tenant.into(),
            id: id.into(),
            name: id.into(),
            limits,
            allowed_models: None,
            attribution: Default::default(),
        };
        self.store.create_app("test", &a).await.unwrap();
    }

    /// Issues a key; returns (key id, key).
    pub async fn key(&self, tenant: &str, app: &str, limits: Limits) -> (String, String) {
        self.named_key(tenant, app, "k", limits).await
    }

    /// Issues a key named `name`; returns (key id, key).
    pub async fn named_key(
        &self,
        tenant: &str,
        app: &str,
        name: &str,
        limits: Limits,
    ) -> (String, String) {
        let key = keys::generate();
        let id = self
            .store
            .create_key(
                "test",
                &NewKey {
                    tenant_id: tenant.into(),
                    app_id: app.into(),
                    name: name.into(),
                    prefix: keys::display_prefix(&key),
                    key_hash: keys::keyed_hash(PEPPER.as_bytes(), &key),
                    limits,
                    allowed_models: None,
                    expires_at: None,
                    attribution: Default::default(),
                },
            )
            .await
            .unwrap();
        (id.to_string(), key)
    }

    /// A tenant `t` with app `a`, model `gpt-4o-mini` (and an embedding
    /// model), and one key; returns the key.
    pub async fn simple_tenant(&self, tenant_limits: Limits) -> (String, String) {
        self.model("gpt-4o-mini", "chat", 150_000, 600_000).await;
        self.model("text-embedding-3-small", "embedding", 20_000, 0)
            .await;
        self.tenant("t", tenant_limits, None).await;
        self.app("t", "a", Limits::default()).await;
        self.key("t", "a", Limits::default()).await
    }

    pub async fn redis(&self) -> redis::aio::MultiplexedConnection {
        redis::Client::open(self.redis_url.as_str())
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .unwrap()
    }

    /// A tenant's month counters straight from Redis.
    pub async fn counters(
        &self,
        tenant: &str,
        month: &str,
    ) -> std::collections::HashMap<String, i64> {
        let mut c = self.redis().await;
        let key = format!("{}:{{t:{}}}:m:{}", self.prefix, tenant, month);
        let raw: std::collections::HashMap<String, String> = redis::cmd("HGETALL")
            .arg(key)
            .query_async(&mut c)
            .await
            .unwrap();
        raw.into_iter()
            .filter_map(|(k, v)| v.parse().ok().map(|v| (k, v)))
            .collect()
    }

    /// A request's stored usage event, read as the platform does.
    pub async fn usage_event(&self, request_id: &str) -> Option<domain::usage::UsageEvent> {
        self.store
            .usage_event(&TenantScope::system(), request_id)
            .await
            .unwrap()
    }

    /// Sum of a tenant's tokens in the Postgres ledger for a month.
    pub async fn ledger_tokens(&self, tenant: &str, month: &str) -> (i64, i64) {
        let rows = self
            .store
            .month_usage(&TenantScope::system(), tenant, month)
            .await
            .unwrap();
        (
            rows.iter().map(|r| r.tokens).sum(),
            rows.iter().map(|r| r.requests).sum(),
        )
    }
}

/// The `tollgate` binary `cargo build -p tollgate-server --bin tollgate`
/// puts beside this test (scripts/test.sh builds it first).
pub fn tollgate_bin() -> std::path::PathBuf {
    let exe = std::env::current_exe().unwrap();
    let bin = exe
        .parent()
        .and_then(|deps| deps.parent())
        .unwrap()
        .join("tollgate");
    assert!(
        bin.exists(),
        "{} missing: cargo build -p tollgate-server --bin tollgate",
        bin.display()
    );
    bin
}

/// A port free on 127.0.0.1 now.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// `tollgate serve` as its own process on `port`, on this test's database
/// and Redis prefix, with the suite's secrets and metrics token; its stderr
/// kept for the secrets scan. Add settings with `.env(..)`, then spawn.
pub fn replica_command(env: &TestEnv, port: u16) -> std::process::Command {
    let mut c = std::process::Command::new(tollgate_bin());
    c.args(["serve", "--listen", &format!("127.0.0.1:{port}")])
        .env("TOLLGATE__DATABASE__URL", &env.db_url)
        .env("TOLLGATE__REDIS__URL", &env.redis_url)
        .env("TOLLGATE__REDIS__KEY_PREFIX", &env.prefix)
        .env("TOLLGATE__KEYS__PEPPER", PEPPER)
        .env("TOLLGATE__KEYS__ENCRYPTION_KEY", ENC_KEY)
        .env("TOLLGATE__METRICS__TOKEN", METRICS_TOKEN)
        .env("TOLLGATE__PLATFORM__TIMEZONE", "UTC")
        .env("TOLLGATE_LOG", "warn")
        .stdout(std::process::Stdio::null())
        .stderr(
            log_file("replica").map_or_else(std::process::Stdio::null, std::process::Stdio::from),
        );
    c
}

/// Waits until the server on `port` answers `/healthz` (panics after 30 s).
pub async fn wait_healthy(port: u16) {
    let up = eventually(Duration::from_secs(30), || async {
        reqwest::get(format!("http://127.0.0.1:{port}/healthz"))
            .await
            .is_ok_and(|r| r.status() == 200)
    })
    .await;
    assert!(up, "replica on {port} did not start");
}

/// A test server's `/metrics` text (`/metrics` is not public: this sends
/// the suite's metrics token).
pub async fn metrics(addr: std::net::SocketAddr) -> String {
    let r = reqwest::Client::new()
        .get(format!("http://{addr}/metrics"))
        .bearer_auth(METRICS_TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "/metrics with the suite's token");
    r.text().await.unwrap()
}

/// A whole SSE answer's events (the blank-line-separated blocks, trimmed).
pub async fn sse_events(r: reqwest::Response) -> Vec<String> {
    use futures::StreamExt;
    let mut body = String::new();
    let mut s = r.bytes_stream();
    while let Some(b) = s.next().await {
        body.push_str(&String::from_utf8_lossy(&b.unwrap()));
    }
    body.split("\n\n")
        .filter(|e| !e.trim().is_empty())
        .map(|e| e.trim().to_string())
        .collect()
}

/// A temporary grant's expiry `days` from now (RFC 3339): within the
/// longest a grant may run (`auth.max_grant_days`, 90 by default).
pub fn days_ahead(days: i64) -> String {
    (chrono::Utc::now() + chrono::Duration::days(days)).to_rfc3339()
}

/// The same, as a `datetime-local` input takes it (UTC, to the minute).
pub fn days_ahead_local(days: i64) -> String {
    (chrono::Utc::now() + chrono::Duration::days(days))
        .format("%Y-%m-%dT%H:%M")
        .to_string()
}

pub fn this_month() -> String {
    chrono_month(chrono_now())
}

fn chrono_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

fn chrono_month(ms: i64) -> String {
    domain::period::PlatformClock::parse("UTC")
        .unwrap()
        .month_of_unix_ms(ms)
}

pub fn chat_body(content: &str, max_tokens: Option<i64>) -> serde_json::Value {
    let mut b = serde_json::json!({"model": "gpt-4o-mini", "messages": [{"role": "user", "content": content}]});
    if let Some(m) = max_tokens {
        b["max_tokens"] = m.into();
    }
    b
}

pub async fn post(url: &str, key: &str, body: &serde_json::Value) -> reqwest::Response {
    reqwest::Client::new()
        .post(url)
        .bearer_auth(key)
        .json(body)
        .send()
        .await
        .unwrap()
}

/// Polls until `f` is true or the timeout passes.
pub async fn eventually<F, Fut>(timeout: Duration, mut f: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let t0 = Instant::now();
    while t0.elapsed() < timeout {
        if f().await {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    f().await
}

/// A console user, created straight in the store; returns its id.
pub async fn user(env: &TestEnv, email: &str, role: &str, tenant: Option<&str>) -> String {
    let hash = store::passwords::hash(PASSWORD).unwrap();
    env.store
        .create_user("test", email, &hash, role, tenant)
        .await
        .unwrap()
        .to_string()
}

/// Logs in through the API; returns the bearer token.
pub async fn login(base: &str, email: &str) -> String {
    let r = reqwest::Client::new()
        .post(format!("{base}/api/v1/auth/login"))
        .json(&serde_json::json!({"email": email, "password": PASSWORD}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "login {email}");
    r.json::<serde_json::Value>().await.unwrap()["token"]
        .as_str()
        .unwrap()
        .to_string()
}

/// An admin API call: (status, body).
pub async fn api(
    method: &str,
    url: &str,
    token: Option<&str>,
    body: Option<serde_json::Value>,
) -> (u16, serde_json::Value) {
    let c = reqwest::Client::new();
    let mut rb = c.request(method.parse().unwrap(), url);
    if let Some(t) = token {
        rb = rb.bearer_auth(t);
    }
    if let Some(b) = body {
        rb = rb.json(&b);
    }
    let r = rb.send().await.unwrap();
    let status = r.status().as_u16();
    let text = r.text().await.unwrap();
    if status >= 400 {
        keep_error_body(method, url, status, &text);
    }
    (
        status,
        serde_json::from_str(&text).unwrap_or(serde_json::Value::Null),
    )
}

/// Error bodies go to the log directory for the secrets scan.
pub fn keep_error_body(method: &str, url: &str, status: u16, body: &str) {
    use std::io::Write;
    if let Some(mut f) = log_file("error-bodies") {
        let _ = writeln!(f, "{method} {url} -> {status}\n{body}");
    }
}

/// Whether the ledger holds `n` usage events within `timeout` (the ledger
/// writer stores them a little after the answers).
pub async fn ledger_reaches(env: &TestEnv, n: i64, timeout: Duration) -> bool {
    eventually(timeout, || async {
        sqlx::query_scalar::<_, i64>("SELECT count(*) FROM usage_events")
            .fetch_one(env.store.pool())
            .await
            .unwrap()
            == n
    })
    .await
}

/// The one usage event of a test's ledger, once the ledger writer stored it.
pub async fn only_usage_event(env: &TestEnv) -> domain::usage::UsageEvent {
    let one = ledger_reaches(env, 1, Duration::from_secs(5)).await;
    assert!(one, "expected exactly one usage event in the ledger");
    let rid: String = sqlx::query_scalar("SELECT request_id FROM usage_events")
        .fetch_one(env.store.pool())
        .await
        .unwrap();
    env.usage_event(&rid).await.unwrap()
}

/// A ledger row for tests that write the ledger directly: a plain served
/// request of `tenant` (app `a`, key `k`, gpt-4o-mini, replica `r`) with no
/// tokens, cost or attribution; set what the test is about with `..`.
pub fn ledger_event(
    request_id: &str,
    tenant: &str,
    period: &str,
    day: &str,
) -> domain::usage::UsageEvent {
    domain::usage::UsageEvent {
        request_id: request_id.into(),
        tenant_id: tenant.into(),
        app_id: "a".into(),
        key_id: "k".into(),
        model: "gpt-4o-mini".into(),
        period: period.into(),
        day: day.into(),
        input_tokens: 0,
        output_tokens: 0,
        cost_micro: 0,
        cost_pico: 0,
        est_tokens: 0,
        est_cost_micro: 0,
        overrun_tokens: 0,
        overrun_cost_micro: 0,
        status: "ok".into(),
        stream: false,
        usage_source: "provider".into(),
        replica: "r".into(),
        started_at_ms: 0,
        settled_at_ms: 0,
        deployment: None,
        breakdown: None,
        charges: None,
        raw_usage: None,
        attribution: Default::default(),
        anomaly: None,
    }
}
