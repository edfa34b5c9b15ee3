//! Configuration: defaults, then `tollgate.toml` (or `--config`), then
//! `TOLLGATE__<SECTION>__<KEY>` environment variables. Unknown keys are
//! refused; values are validated at start; secrets never appear in logs.

use anyhow::{bail, Context};
use figment::providers::{Env, Format, Serialized, Toml};
use figment::Figment;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::path::Path;

#[derive(Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    pub server: ServerConfig,
    pub database: DatabaseConfig,
    pub redis: RedisConfig,
    pub clickhouse: ClickhouseConfig,
    pub auth: AuthConfig,
    pub keys: KeysConfig,
    pub platform: PlatformConfig,
    pub gateway: GatewayTuning,
    pub fair: FairConfig,
    pub mock: MockUpstreamConfig,
    pub billing: BillingConfig,
    pub metrics: MetricsConfig,
    pub routing: crate::routing_config::RoutingConfig,
}

/// Who may read `/metrics` (every tenant's tokens and costs are in it):
/// nobody by default. `listen` serves it, unauthenticated, on a listener of
/// its own (bind it where only the scraper reaches); `token` lets the main
/// listener answer it to `Authorization: Bearer <token>`. Neither: 404.
#[derive(Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MetricsConfig {
    pub listen: Option<String>,
    /// At least 32 bytes.
    pub token: Option<String>,
}

/// Fair queues, borrowing and degrade (docs/fair.md).
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct FairConfig {
    /// Weighted fair queueing weights per tenant priority.
    pub weight_core: u64,
    pub weight_standard: u64,
    pub weight_batch: u64,
    /// Longest a request waits in its tenant's queue, per priority; then
    /// 503 queue_timeout.
    pub max_wait_ms_core: u64,
    pub max_wait_ms_standard: u64,
    pub max_wait_ms_batch: u64,
    /// Waiting requests per tenant on one replica; beyond: 429
    /// tenant_queue_full. A tenant's own `max_queued_requests` replaces it.
    pub queue_max_per_tenant: usize,
    /// Open streamed answers per tenant on one replica; beyond: 429
    /// tenant_stream_cap. 0 = no cap (the default). A tenant's own
    /// `max_open_streams` replaces it.
    pub max_open_streams_per_tenant: usize,
    /// Streams of one tenant started at once on one replica (from before
    /// their hold to the provider's headers); the others wait their turn,
    /// at most `stream_start_wait_ms`, then start without one (never a
    /// refusal). 0 = unpaced.
    pub stream_starts_per_tenant: usize,
    pub stream_start_wait_ms: u64,
    /// A 429 or 402 refusal (rate, in flight, budget, full queue) is
    /// answered after this many ms, at most its Retry-After (0 = at once):
    /// a flood that ignores Retry-After gets one refusal per connection per
    /// delay instead of a CPU-bound loop (docs/fair.md). Formerly
    /// `queue_full_delay_ms`, which is still read.
    #[serde(alias = "queue_full_delay_ms")]
    pub refusal_delay_ms: u64,
    /// Polling for slots freed on other replicas backs off between these.
    pub poll_min_ms: u64,
    pub poll_max_ms: u64,
    /// Output cap per choice past the daily soft limit (0 = none).
    pub degrade_max_output_tokens: i64,
    /// How long a request refused for budget waits for an on-demand borrow.
    pub borrow_wait_ms: u64,
    /// After an on-demand borrow that got nothing (the pool dry, the cap
    /// reached), the tenant does not ask again for this long.
    pub borrow_empty_backoff_ms: u64,
    /// Period of the near-limit borrow check (one replica at a time).
    pub borrow_check_secs: u64,
    /// Share of the effective token limit (used + held) that triggers it.
    pub near_limit_share: f64,
    /// Period of the reclaim job; 0 = only `tollgate jobs run reclaim`.
    pub reclaim_secs: u64,
    /// Share of each borrow's outstanding amount one reclaim run may take.
    pub reclaim_fraction: f64,
}

impl Default for FairConfig {
    fn default() -> Self {
        Self {
            weight_core: 4,
            weight_standard: 2,
            weight_batch: 1,
            max_wait_ms_core: 2_000,
            max_wait_ms_standard: 2_000,
            max_wait_ms_batch: 60_000,
            queue_max_per_tenant: 64,
            max_open_streams_per_tenant: 0,
            stream_starts_per_tenant: 8,
            stream_start_wait_ms: 1_000,
            refusal_delay_ms: 100,
            poll_min_ms: 10,
            poll_max_ms: 100,
            degrade_max_output_tokens: 1024,
            borrow_wait_ms: 2_000,
            borrow_empty_backoff_ms: 5_000,
            borrow_check_secs: 10,
            near_limit_share: 0.9,
            reclaim_secs: 60,
            reclaim_fraction: 0.5,
        }
    }
}

impl FairConfig {
    pub fn tuning(&self, g: &GatewayTuning) -> gateway::FairTuning {
        use domain::borrowing::share_ppm;
        gateway::FairTuning {
            queue: domain::fairq::QueuePolicy {
                weights: [self.weight_core, self.weight_standard, self.weight_batch],
                max_wait_ms: [
                    self.max_wait_ms_core,
                    self.max_wait_ms_standard,
                    self.max_wait_ms_batch,
                ],
                max_per_tenant: self.queue_max_per_tenant,
            },
            poll_min: std::time::Duration::from_millis(self.poll_min_ms.max(1)),
            poll_max: std::time::Duration::from_millis(
                self.poll_max_ms.max(self.poll_min_ms).max(1),
            ),
            slot_lifetime: std::time::Duration::from_secs(
                g.stream_max_duration_secs.max(g.upstream_timeout_secs) + 60,
            ),
            degrade_max_output_tokens: (self.degrade_max_output_tokens > 0)
                .then_some(self.degrade_max_output_tokens),
            borrow: settlement::borrow::BorrowTuning {
                wait: std::time::Duration::from_millis(self.borrow_wait_ms),
                near_limit_ppm: share_ppm(self.near_limit_share).unwrap_or(900_000),
                reclaim_fraction_ppm: share_ppm(self.reclaim_fraction).unwrap_or(500_000),
                empty_backoff: std::time::Duration::from_millis(self.borrow_empty_backoff_ms),
            },
            refusal_delay: std::time::Duration::from_millis(self.refusal_delay_ms),
            max_open_streams_per_tenant: (self.max_open_streams_per_tenant > 0)
                .then_some(self.max_open_streams_per_tenant),
            stream_starts_per_tenant: (self.stream_starts_per_tenant > 0)
                .then_some(self.stream_starts_per_tenant),
            stream_start_wait: std::time::Duration::from_millis(self.stream_start_wait_ms),
        }
    }
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ServerConfig {
    pub listen: String,
    /// Name of this replica in holds and usage events (default: host-pid).
    pub replica: Option<String>,
}

#[derive(Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DatabaseConfig {
    pub url: String,
    pub max_connections: u32,
}

#[derive(Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RedisConfig {
    pub url: String,
    pub key_prefix: String,
    /// Dialling Redis that takes longer fails closed (503
    /// quota_store_unavailable). A Redis that is down refuses at once.
    pub timeout_ms: u64,
    /// A call on an open connection that takes longer fails closed: the
    /// bound for a slow but answering Redis (never below `timeout_ms`).
    pub slow_timeout_ms: u64,
    /// Calls one replica has in flight to Redis at once; more wait their
    /// turn (so `timeout_ms` measures Redis, not a burst queued here).
    pub max_concurrent_calls: usize,
    /// A call that gets no turn within this fails closed (503).
    pub turn_wait_ms: u64,
    /// Redis Cluster seed nodes, comma-separated (`redis://h1:7000,redis://h2:7001`);
    /// when set, `url` is not used.
    pub cluster_nodes: Option<String>,
}

#[derive(Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ClickhouseConfig {
    pub url: String,
    pub database: String,
    pub user: Option<String>,
    pub password: Option<String>,
}

#[derive(Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct BillingConfig {
    /// Run the job schedule inside `serve` (every replica may: each job
    /// runs once across them).
    pub scheduler: bool,
    /// Days a closed month's rows stay in Postgres after the rollover.
    pub retention_days: u32,
    /// Budget alerts are POSTed here as JSON (unset: console notices only).
    pub alert_webhook_url: Option<String>,
    pub webhook_timeout_ms: u64,
    /// A webhook delivery is given up after this many failed attempts.
    pub webhook_max_attempts: i32,
}

#[derive(Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AuthConfig {
    /// HMAC secret of console sessions; at least 32 bytes.
    pub jwt_secret: Option<String>,
    pub cookie_secure: bool,
    /// Lifetime of a console or API session.
    pub session_secs: i64,
    /// Email + password sign-in (turn off when everyone uses SSO; the CLI's
    /// `admin create-user` still works).
    pub password_login: bool,
    /// The header the operator's reverse proxies append the client's IP
    /// to (`x-forwarded-for`), for the per-IP sign-in back-off. Believed
    /// only from a peer in `trusted_proxies`, and read from the right: the
    /// client is the right-most entry that is not a trusted proxy
    /// (`domain::client_ip`). Unset: the TCP peer.
    pub client_ip_header: Option<String>,
    /// The reverse proxies in front of the console, as CIDR blocks
    /// (`["10.0.0.0/8", "127.0.0.1/32"]`); needed with `client_ip_header`.
    pub trusted_proxies: Vec<String>,
    /// Four eyes (docs/console.md): nobody decides a quota request of a
    /// person who set their password, role, tenant or enabled state within
    /// this many days (or whose own account they set so).
    pub four_eyes_days: u32,
    /// The longest a temporary grant (a quota request) may run: its expiry
    /// at most this many days after it is asked (docs/console.md).
    pub max_grant_days: u32,
    /// Single sign-on with OpenID Connect (unset: off).
    pub oidc: Option<OidcConfig>,
}

/// OpenID Connect sign-in (docs/console.md, "Single sign-on").
#[derive(Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OidcConfig {
    /// The provider's issuer; its discovery document is
    /// `<issuer_url>/.well-known/openid-configuration`.
    pub issuer_url: String,
    pub client_id: String,
    pub client_secret: Option<String>,
    /// This console's callback as registered at the provider:
    /// `https://<console host>/console/sso/callback`.
    pub redirect_url: String,
    /// Scopes asked for besides `openid`.
    #[serde(default = "default_scopes")]
    pub scopes: Vec<String>,
    /// The claim listing the person's groups.
    #[serde(default = "default_groups_claim")]
    pub groups_claim: String,
    /// A claim naming the role directly (`platform_admin`, `tenant_admin`,
    /// `finance`, `auditor`), tried after the groups.
    #[serde(default)]
    pub role_claim: Option<String>,
    /// A claim naming a tenant admin's tenant (when the mapping does not).
    #[serde(default)]
    pub tenant_claim: Option<String>,
    /// Group → role: `"platform_admin"`, `"finance"`, `"auditor"`,
    /// `"tenant_admin"` (tenant from `tenant_claim`) or
    /// `"tenant_admin:<tenant>"`.
    #[serde(default)]
    pub groups: std::collections::BTreeMap<String, String>,
}

impl OidcConfig {
    pub fn settings(&self) -> console::sso::SsoSettings {
        console::sso::SsoSettings {
            issuer_url: self.issuer_url.clone(),
            client_id: self.client_id.clone(),
            client_secret: self.client_secret.clone(),
            redirect_url: self.redirect_url.clone(),
            scopes: self.scopes.clone(),
            groups_claim: self.groups_claim.clone(),
            role_claim: self.role_claim.clone(),
            tenant_claim: self.tenant_claim.clone(),
            groups: self
                .groups
                .iter()
                .map(|(g, r)| (g.clone(), r.clone()))
                .collect(),
        }
    }
}

fn default_scopes() -> Vec<String> {
    vec!["email".into(), "profile".into()]
}

fn default_groups_claim() -> String {
    "groups".into()
}

#[derive(Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct KeysConfig {
    /// Pepper of the keyed hash of virtual keys; at least 32 bytes. Changing
    /// it invalidates every issued key.
    pub pepper: Option<String>,
    /// 64 hex characters: the key that encrypts upstream provider keys.
    pub encryption_key: Option<String>,
    /// Postgres lookups a second (and burst) for keys a replica's index does
    /// not know, across all such keys: random keys cannot load Postgres.
    pub miss_lookups_per_sec: u32,
    /// An unknown key is answered 401 without a lookup for this long.
    pub miss_negative_ttl_ms: u64,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PlatformConfig {
    pub timezone: String,
    /// The first day of a weekly budget's week (`monday` … `sunday`).
    pub week_starts: String,
    /// The month (1–12) the fiscal year starts in: quarterly budgets'
    /// quarters start in it and every third month after.
    pub fiscal_year_starts: u32,
}

impl PlatformConfig {
    /// The platform calendar: time zone, week and fiscal year.
    pub fn clock(&self) -> Result<domain::period::PlatformClock, String> {
        domain::period::PlatformClock::parse(&self.timezone)?
            .with_calendar(&self.week_starts, self.fiscal_year_starts)
    }
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct GatewayTuning {
    /// Largest request body, unless a model's context window needs more.
    pub max_body_bytes: usize,
    /// Long inputs: "exact" (the tokenizer, in the tokenize pool; the
    /// default until the scenarios have measured "bound") or "bound"
    /// (constant-time upper bound).
    pub long_input_estimate: String,
    /// Threads counting long inputs exactly; 0 = half the cores (at least 1).
    pub tokenize_threads: usize,
    /// How much lower the CPU priority of long inputs' work is than the
    /// async workers': the counting threads, and the runtime that sends
    /// large bodies to the provider (a nice increment, 0–19; 0 = the same,
    /// and large bodies sent by the workers).
    pub tokenize_nice: i32,
    /// Largest non-stream upstream answer read (bigger: 502).
    pub max_upstream_body_bytes: usize,
    /// Largest single stream event buffered (bigger: the stream ends).
    pub max_sse_event_bytes: usize,
    pub upstream_timeout_secs: u64,
    pub upstream_connect_timeout_ms: u64,
    /// Most events the ledger writer stores in one transaction.
    pub ledger_batch: usize,
    /// How long the ledger writer waits for a fuller batch after its first
    /// event (events are already in the Redis outbox, so waiting loses
    /// nothing; they reach the ledger up to this much later, and larger
    /// batches cost Postgres less a request:
    /// bench/results/2026-12-03-the-ledger-writer-s-linger-at-50.md). It
    /// also sets the writers' grace
    /// (`settlement::ledger::writer_grace`: 2 s plus twice this): the outbox
    /// sweeper and the stale-holds job leave younger events to the writers,
    /// so an event a crash lost reaches the ledger that much later. Keep it
    /// the same on every replica: each sweeper judges all replicas' events
    /// by its own.
    pub ledger_linger_ms: u64,
    pub outbox_sweep_secs: u64,
    pub stream_idle_timeout_secs: u64,
    pub stream_max_duration_secs: u64,
    pub stream_slice_tokens: i64,
    pub min_clamped_output_tokens: i64,
    /// Tokens one key may have counted by `/v1/messages/count_tokens` per
    /// minute on one replica (refilled continuously; 0 = no allowance).
    /// Counting is the gateway's CPU, not the provider's: a count also
    /// takes one request of every RPM that applies to the key.
    pub count_tokens_per_minute: i64,
    /// A hold open longer than this is closed at its estimate (`expired`).
    pub stale_hold_secs: u64,
    /// A hold whose replica stopped heartbeating is closed after this.
    pub orphan_hold_secs: u64,
    /// A replica is dead once its heartbeat is this old.
    pub heartbeat_ttl_secs: u64,
    /// How requests reserve quota: `lease` (the fast path, docs/design.md §4
    /// "Leases"), `per_request` (one hold and one settle script each), or
    /// `off` (benchmark ablation only: nothing enforced; refused unless
    /// `bench_unenforced_ok` is also true).
    pub admission: AdmissionSetting,
    /// Must be true for `admission = "off"`: a deliberate, bench-only switch.
    pub bench_unenforced_ok: bool,
    /// A lease top-up asks for this many ms of the recent admission rate.
    pub lease_horizon_ms: u64,
    /// ... at most this many requests' worth.
    pub lease_max_requests: i64,
    /// A lease that admitted nothing for this long is returned.
    pub lease_idle_ms: u64,
    /// A lease this old is returned and replaced by one sized to demand.
    pub lease_max_age_ms: u64,
    /// Settles against a lease wait this long to travel in one batch.
    pub lease_flush_ms: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AdmissionSetting {
    Lease,
    PerRequest,
    Off,
}

impl AdmissionSetting {
    pub fn mode(self) -> gateway::admission::AdmissionMode {
        use gateway::admission::AdmissionMode as M;
        match self {
            AdmissionSetting::Lease => M::Lease,
            AdmissionSetting::PerRequest => M::PerRequest,
            AdmissionSetting::Off => M::Off,
        }
    }
}

impl GatewayTuning {
    pub fn long_input(&self) -> anyhow::Result<gateway::LongInput> {
        match self.long_input_estimate.as_str() {
            "bound" => Ok(gateway::LongInput::Bound),
            "exact" => Ok(gateway::LongInput::Exact),
            other => bail!("gateway.long_input_estimate must be bound or exact, not {other:?}"),
        }
    }

    pub fn tokenize_threads(&self) -> usize {
        match self.tokenize_threads {
            0 => std::thread::available_parallelism()
                .map_or(1, |n| n.get() / 2)
                .max(1),
            n => n,
        }
    }

    pub fn lease_tuning(&self) -> quota::LeaseTuning {
        use std::time::Duration;
        quota::LeaseTuning {
            horizon: Duration::from_millis(self.lease_horizon_ms.max(1)),
            max_requests: self.lease_max_requests.max(1),
            idle: Duration::from_millis(self.lease_idle_ms.max(10)),
            max_age: Duration::from_millis(self.lease_max_age_ms.max(10)),
            flush_linger: Duration::from_millis(self.lease_flush_ms),
            ..quota::LeaseTuning::default()
        }
    }
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MockUpstreamConfig {
    pub listen: String,
    pub latency_ms: u64,
    pub output_tokens: u32,
    pub chunk_delay_ms: u64,
    /// Provider personality traits, comma-separated (`max_tokens_only`,
    /// `max_completion_tokens_only`, `hidden_reasoning=N`,
    /// `absurd_usage=huge`, …; see mock-upstream's personality.rs).
    pub personality: String,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            server: ServerConfig {
                listen: "127.0.0.1:8080".into(),
                replica: None,
            },
            database: DatabaseConfig {
                url: "postgres://postgres@127.0.0.1:5432/tollgate".into(),
                max_connections: 16,
            },
            redis: RedisConfig {
                url: "redis://127.0.0.1:6379".into(),
                key_prefix: "tg".into(),
                timeout_ms: 50,
                slow_timeout_ms: 500,
                max_concurrent_calls: 64,
                turn_wait_ms: 2000,
                cluster_nodes: None,
            },
            clickhouse: ClickhouseConfig {
                url: "http://127.0.0.1:8123".into(),
                database: "tollgate".into(),
                user: None,
                password: None,
            },
            billing: BillingConfig {
                scheduler: true,
                retention_days: 90,
                alert_webhook_url: None,
                webhook_timeout_ms: 5000,
                webhook_max_attempts: 20,
            },
            auth: AuthConfig {
                jwt_secret: None,
                cookie_secure: true,
                session_secs: 8 * 3600,
                password_login: true,
                client_ip_header: None,
                trusted_proxies: Vec::new(),
                four_eyes_days: 30,
                max_grant_days: 90,
                oidc: None,
            },
            keys: KeysConfig {
                pepper: None,
                encryption_key: None,
                miss_lookups_per_sec: 100,
                miss_negative_ttl_ms: 2_000,
            },
            platform: PlatformConfig {
                timezone: "Asia/Shanghai".into(),
                week_starts: "monday".into(),
                fiscal_year_starts: 1,
            },
            gateway: GatewayTuning {
                max_body_bytes: 4 << 20,
                long_input_estimate: "exact".into(),
                tokenize_threads: 0,
                tokenize_nice: 10,
                max_upstream_body_bytes: 32 << 20,
                max_sse_event_bytes: 1 << 20,
                upstream_timeout_secs: 600,
                upstream_connect_timeout_ms: 2000,
                ledger_batch: 2000,
                ledger_linger_ms: 50,
                outbox_sweep_secs: 5,
                stream_idle_timeout_secs: 300,
                stream_max_duration_secs: 1800,
                stream_slice_tokens: 256,
                min_clamped_output_tokens: 64,
                count_tokens_per_minute: 2_000_000,
                stale_hold_secs: 24 * 3600,
                orphan_hold_secs: 120,
                heartbeat_ttl_secs: 30,
                admission: AdmissionSetting::Lease,
                bench_unenforced_ok: false,
                lease_horizon_ms: 250,
                lease_max_requests: 5_000,
                lease_idle_ms: 1_000,
                lease_max_age_ms: 10_000,
                lease_flush_ms: 1,
            },
            fair: FairConfig::default(),
            metrics: MetricsConfig::default(),
            routing: Default::default(),
            mock: MockUpstreamConfig {
                listen: "127.0.0.1:9090".into(),
                latency_ms: 0,
                output_tokens: 16,
                chunk_delay_ms: 0,
                personality: String::new(),
            },
        }
    }
}

impl Default for ServerConfig {
    fn default() -> Self {
        Config::default().server
    }
}
impl Default for DatabaseConfig {
    fn default() -> Self {
        Config::default().database
    }
}
impl Default for RedisConfig {
    fn default() -> Self {
        Config::default().redis
    }
}
impl Default for ClickhouseConfig {
    fn default() -> Self {
        Config::default().clickhouse
    }
}
impl Default for BillingConfig {
    fn default() -> Self {
        Config::default().billing
    }
}
impl Default for AuthConfig {
    fn default() -> Self {
        Config::default().auth
    }
}
impl Default for KeysConfig {
    fn default() -> Self {
        Config::default().keys
    }
}
impl Default for PlatformConfig {
    fn default() -> Self {
        Config::default().platform
    }
}
impl Default for GatewayTuning {
    fn default() -> Self {
        Config::default().gateway
    }
}
impl Default for MockUpstreamConfig {
    fn default() -> Self {
        Config::default().mock
    }
}

/// Development-only secrets used by `tollgate-dev demo` (and the benchmarks' seeding) when none are configured.
/// A production start without configured secrets is refused.
const DEMO_PEPPER: &str = "tollgate-demo-pepper-not-for-production-use-0001";
const DEMO_ENCRYPTION_KEY: &str =
    "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";

impl Config {
    pub fn load(path: Option<&Path>) -> anyhow::Result<Self> {
        let mut fig = Figment::from(Serialized::defaults(Config::default()));
        match path {
            Some(p) => {
                if !p.exists() {
                    bail!("config file {} does not exist", p.display());
                }
                fig = fig.merge(Toml::file(p));
            }
            None => fig = fig.merge(Toml::file("tollgate.toml")),
        }
        fig = fig.merge(Env::prefixed("TOLLGATE__").split("__"));
        let cfg: Config = fig.extract().context("invalid configuration")?;
        cfg.validate()?;
        Ok(cfg)
    }

    pub fn validate(&self) -> anyhow::Result<()> {
        self.platform.clock().map_err(anyhow::Error::msg)?;
        self.routing.validate()?;
        if let Some(p) = &self.keys.pepper {
            if p.len() < 32 {
                bail!("keys.pepper must be at least 32 bytes");
            }
        }
        if let Some(k) = &self.keys.encryption_key {
            parse_key(k)?;
        }
        if let Some(s) = &self.auth.jwt_secret {
            if s.len() < 32 {
                bail!("auth.jwt_secret must be at least 32 bytes");
            }
        }
        let longest_request = self
            .gateway
            .stream_max_duration_secs
            .max(self.gateway.upstream_timeout_secs);
        if self.gateway.stale_hold_secs <= longest_request {
            bail!("gateway.stale_hold_secs must exceed the longest request (stream_max_duration_secs, upstream_timeout_secs)");
        }
        if self.gateway.max_upstream_body_bytes == 0 || self.gateway.max_sse_event_bytes == 0 {
            bail!(
                "gateway.max_upstream_body_bytes and gateway.max_sse_event_bytes must be positive"
            );
        }
        if self.redis.timeout_ms == 0 || self.gateway.max_body_bytes == 0 {
            bail!("redis.timeout_ms and gateway.max_body_bytes must be positive");
        }
        let f = &self.fair;
        if domain::borrowing::share_ppm(f.near_limit_share).is_none()
            || domain::borrowing::share_ppm(f.reclaim_fraction).is_none()
        {
            bail!("fair.near_limit_share and fair.reclaim_fraction must be between 0 and 1");
        }
        if f.queue_max_per_tenant == 0 {
            bail!("fair.queue_max_per_tenant must be positive");
        }
        if self.auth.max_grant_days == 0 || self.auth.max_grant_days > 3660 {
            bail!("auth.max_grant_days must be between 1 and 3660");
        }
        if !billing::archive::valid_database(&self.clickhouse.database) {
            bail!("clickhouse.database must match [A-Za-z_][A-Za-z0-9_]*");
        }
        if let Some(t) = &self.metrics.token {
            if t.len() < 32 {
                bail!("metrics.token must be at least 32 bytes");
            }
        }
        let proxies = self.trusted_proxies()?;
        match (&self.auth.client_ip_header, proxies.is_empty()) {
            (Some(h), _) if axum::http::HeaderName::from_bytes(h.as_bytes()).is_err() => {
                bail!("auth.client_ip_header must be a header name, not {h:?}")
            }
            (Some(_), true) => bail!(
                "auth.client_ip_header needs auth.trusted_proxies: the proxies whose header is believed (CIDR blocks)"
            ),
            (None, false) => bail!(
                "auth.trusted_proxies needs auth.client_ip_header (the header they append the client's IP to, e.g. x-forwarded-for)"
            ),
            _ => {}
        }
        if let Some(o) = &self.auth.oidc {
            for (group, role) in &o.groups {
                if domain::sso::RoleGrant::parse(role).is_none() {
                    bail!("auth.oidc.groups.{group}: unknown role {role:?}");
                }
            }
            if !o.issuer_url.starts_with("https://") && !o.issuer_url.starts_with("http://") {
                bail!("auth.oidc.issuer_url must be an http(s) URL");
            }
        } else if !self.auth.password_login {
            bail!("auth.password_login = false needs auth.oidc: nobody could sign in");
        }
        if let Some(u) = &self.billing.alert_webhook_url {
            if !(u.starts_with("http://") || u.starts_with("https://")) {
                bail!("billing.alert_webhook_url must be an http(s) URL");
            }
        }
        if self.gateway.admission == AdmissionSetting::Off && !self.gateway.bench_unenforced_ok {
            bail!("gateway.admission = \"off\" enforces no budget, rate or concurrency limit: it exists for the benchmark's ablation only and also needs gateway.bench_unenforced_ok = true");
        }
        if self.redis.key_prefix.is_empty() || self.redis.key_prefix.contains(['{', '}']) {
            bail!("redis.key_prefix must be non-empty and free of braces");
        }
        Ok(())
    }

    /// `auth.trusted_proxies`, parsed (start refuses a block that does not).
    pub fn trusted_proxies(&self) -> anyhow::Result<domain::client_ip::TrustedProxies> {
        domain::client_ip::TrustedProxies::parse(&self.auth.trusted_proxies).map_err(|bad| {
            anyhow::anyhow!(
                "auth.trusted_proxies: {bad:?} is not an address or CIDR block (10.0.0.0/8)"
            )
        })
    }

    /// Fills missing secrets with the demo ones (demo mode only).
    pub fn with_demo_secrets(mut self) -> Self {
        if self.keys.pepper.is_none() {
            tracing::warn!(
                "keys.pepper not set: using the built-in demo pepper (not for production)"
            );
            self.keys.pepper = Some(DEMO_PEPPER.into());
        }
        if self.keys.encryption_key.is_none() {
            self.keys.encryption_key = Some(DEMO_ENCRYPTION_KEY.into());
        }
        if self.auth.jwt_secret.is_none() {
            // Random per run: demo sessions end when the demo restarts.
            let secret: String = (0..48)
                .map(|_| format!("{:x}", rand::random::<u8>() % 16))
                .collect();
            self.auth.jwt_secret = Some(secret);
        }
        self
    }

    pub fn pepper(&self) -> anyhow::Result<Vec<u8>> {
        self.keys
            .pepper
            .as_ref()
            .map(|p| p.as_bytes().to_vec())
            .context("keys.pepper is not set (TOLLGATE__KEYS__PEPPER, at least 32 bytes)")
    }

    /// How a replica looks up keys its index does not know.
    pub fn miss_tuning(&self) -> gateway::key_index::MissTuning {
        gateway::key_index::MissTuning {
            lookups_per_sec: self.keys.miss_lookups_per_sec,
            burst: self.keys.miss_lookups_per_sec.max(1),
            negative_ttl: std::time::Duration::from_millis(self.keys.miss_negative_ttl_ms),
            ..Default::default()
        }
    }

    pub fn encryption_key(&self) -> anyhow::Result<[u8; 32]> {
        let k = self.keys.encryption_key.as_ref().context(
            "keys.encryption_key is not set (TOLLGATE__KEYS__ENCRYPTION_KEY, 64 hex characters)",
        )?;
        parse_key(k)
    }

    /// The hold engine on one Redis or on the configured cluster.
    pub fn quota_engine(
        &self,
        replica: &str,
        timeout: std::time::Duration,
    ) -> anyhow::Result<quota::QuotaEngine> {
        let prefix = &self.redis.key_prefix;
        let t = quota::Timeouts {
            connect: timeout,
            answer: timeout.max(std::time::Duration::from_millis(self.redis.slow_timeout_ms)),
        };
        let engine = match self
            .redis
            .cluster_nodes
            .as_deref()
            .filter(|n| !n.trim().is_empty())
        {
            Some(nodes) => {
                let nodes: Vec<String> = nodes.split(',').map(|n| n.trim().to_string()).collect();
                quota::QuotaEngine::new_cluster(&nodes, prefix, t, replica)?
            }
            None => quota::QuotaEngine::new_with(&self.redis.url, prefix, t, replica)?,
        };
        Ok(engine.with_call_limit(
            self.redis.max_concurrent_calls,
            std::time::Duration::from_millis(self.redis.turn_wait_ms),
        ))
    }

    /// The ClickHouse archive client (no connection is made here).
    pub fn archive(&self) -> anyhow::Result<billing::Archive> {
        Ok(billing::Archive::new(
            &self.clickhouse.url,
            &self.clickhouse.database,
            self.clickhouse.user.as_deref(),
            self.clickhouse.password.as_deref(),
        )?)
    }

    /// How long the outbox sweeper and the stale-holds job leave a settled
    /// event to the ledger writers (`settlement::ledger::writer_grace` of
    /// this replica's linger).
    pub fn writer_grace(&self) -> std::time::Duration {
        settlement::ledger::writer_grace(std::time::Duration::from_millis(
            self.gateway.ledger_linger_ms,
        ))
    }

    /// What the background jobs need to know from the configuration.
    pub fn job_settings(&self) -> jobs::JobSettings {
        jobs::JobSettings {
            retention: chrono::Duration::days(i64::from(self.billing.retention_days)),
            webhook_url: self.billing.alert_webhook_url.clone(),
            webhook_timeout: std::time::Duration::from_millis(
                self.billing.webhook_timeout_ms.max(1),
            ),
            webhook_max_attempts: self.billing.webhook_max_attempts.max(1),
            hold_ages: std::sync::Arc::new(settlement::abandoned::HoldAges {
                stale_after: std::time::Duration::from_secs(self.gateway.stale_hold_secs),
                orphan_after: std::time::Duration::from_secs(self.gateway.orphan_hold_secs),
                writer_grace: self.writer_grace(),
            }),
            encryption_key: self.encryption_key().ok(),
            ..Default::default()
        }
    }

    /// How often the housekeeping jobs run.
    pub fn housekeeping(&self) -> jobs::schedule::Housekeeping {
        jobs::schedule::Housekeeping {
            stale_holds: std::time::Duration::from_secs(60),
            borrow_check: std::time::Duration::from_secs(self.fair.borrow_check_secs.max(1)),
            reclaim: (self.fair.reclaim_secs > 0)
                .then(|| std::time::Duration::from_secs(self.fair.reclaim_secs)),
        }
    }

    pub fn replica(&self) -> String {
        let base = self.server.replica.clone().unwrap_or_else(|| {
            let host = std::fs::read_to_string("/etc/hostname").unwrap_or_else(|_| "host".into());
            host.trim().to_string()
        });
        format!("{base}-{:08x}", rand::random::<u32>())
    }
}

fn parse_key(k: &str) -> anyhow::Result<[u8; 32]> {
    let bytes = hex::decode(k.trim()).context("keys.encryption_key must be hex")?;
    <[u8; 32]>::try_from(bytes.as_slice())
        .map_err(|_| anyhow::anyhow!("keys.encryption_key must be 32 bytes (64 hex)"))
}

/// Logs the configuration without its secrets.
impl fmt::Debug for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let set = |o: &Option<String>| if o.is_some() { "<set>" } else { "<unset>" };
        f.debug_struct("Config")
            .field("server", &self.server)
            .field("database.url", &redact_url(&self.database.url))
            .field("redis.url", &redact_url(&self.redis.url))
            .field("redis.timeout_ms", &self.redis.timeout_ms)
            .field(
                "redis.max_concurrent_calls",
                &self.redis.max_concurrent_calls,
            )
            .field("redis.slow_timeout_ms", &self.redis.slow_timeout_ms)
            .field("redis.turn_wait_ms", &self.redis.turn_wait_ms)
            .field("clickhouse.url", &redact_url(&self.clickhouse.url))
            .field("clickhouse.database", &self.clickhouse.database)
            .field("clickhouse.password", &set(&self.clickhouse.password))
            .field("billing.scheduler", &self.billing.scheduler)
            .field("billing.retention_days", &self.billing.retention_days)
            .field(
                "billing.alert_webhook_url",
                &self
                    .billing
                    .alert_webhook_url
                    .as_deref()
                    .map(redact_webhook),
            )
            .field("metrics.listen", &self.metrics.listen)
            .field("metrics.token", &set(&self.metrics.token))
            .field("auth.password_login", &self.auth.password_login)
            .field("auth.client_ip_header", &self.auth.client_ip_header)
            .field("auth.trusted_proxies", &self.auth.trusted_proxies)
            .field("auth.four_eyes_days", &self.auth.four_eyes_days)
            .field("auth.max_grant_days", &self.auth.max_grant_days)
            .field(
                "auth.oidc.issuer_url",
                &self.auth.oidc.as_ref().map(|o| redact_url(&o.issuer_url)),
            )
            .field(
                "auth.oidc.client_secret",
                &set(&self
                    .auth
                    .oidc
                    .as_ref()
                    .and_then(|o| o.client_secret.clone())),
            )
            .field("auth.jwt_secret", &set(&self.auth.jwt_secret))
            .field("keys.pepper", &set(&self.keys.pepper))
            .field("keys.encryption_key", &set(&self.keys.encryption_key))
            .field("platform", &self.platform)
            .field("gateway", &self.gateway)
            .field("fair", &self.fair)
            .finish()
    }
}

/// A URL fit for a log: `scheme://user:password@host` →
/// `scheme://user:***@host`, and the value of every query parameter that
/// names a secret (`?password=`, `token`, `secret`, `key`, `sslpassword`…)
/// → `***`.
pub fn redact_url(u: &str) -> String {
    let (base, query) = match u.split_once('?') {
        Some((b, q)) => (b, Some(q)),
        None => (u, None),
    };
    let base = match (base.find("://"), base.rfind('@')) {
        (Some(s), Some(at)) if at > s => {
            let creds = &base[s + 3..at];
            match creds.split_once(':') {
                Some((user, _)) => format!("{}{}:***{}", &base[..s + 3], user, &base[at..]),
                // `scheme://token@host`: the lone part may be a secret too.
                None if !creds.is_empty() => format!("{}***{}", &base[..s + 3], &base[at..]),
                None => base.to_string(),
            }
        }
        _ => base.to_string(),
    };
    let Some(query) = query else {
        return base;
    };
    let secret = |k: &str| {
        let k = k.to_ascii_lowercase();
        [
            "password", "passwd", "pass", "pwd", "secret", "token", "key", "auth",
        ]
        .iter()
        .any(|s| k.contains(s))
    };
    let query: Vec<String> = query
        .split('&')
        .map(|kv| match kv.split_once('=') {
            Some((k, _)) if secret(k) => format!("{k}=***"),
            _ => kv.to_string(),
        })
        .collect();
    format!("{base}?{}", query.join("&"))
}

/// A webhook URL carries its secret in the path (Slack, Teams, Discord):
/// only the scheme and host are logged.
pub fn redact_webhook(u: &str) -> String {
    let Some(s) = u.find("://") else {
        return "***".into();
    };
    let rest = &u[s + 3..];
    let host = rest.split(['/', '?', '#']).next().unwrap_or("");
    let host = host.rsplit('@').next().unwrap_or(host);
    format!("{}{host}/***", &u[..s + 3])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_proxy_header_is_believed_only_from_listed_proxies() {
        let mut c = Config::default();
        c.auth.client_ip_header = Some("x-forwarded-for".into());
        let err = c.validate().unwrap_err().to_string();
        assert!(err.contains("auth.trusted_proxies"), "{err}");
        c.auth.trusted_proxies = vec!["10.0.0.0/8".into(), "10.0.0/8".into()];
        let err = c.validate().unwrap_err().to_string();
        assert!(err.contains("\"10.0.0/8\" is not an address"), "{err}");
        c.auth.trusted_proxies = vec!["10.0.0.0/8".into(), "127.0.0.1".into()];
        assert!(c.validate().is_ok());
        c.auth.client_ip_header = None;
        assert!(c.validate().is_err());
    }

    #[test]
    fn secrets_never_print() {
        let mut c = Config::default().with_demo_secrets();
        c.database.url = "postgres://app:hunter2@db/x".into();
        let s = format!("{c:?}");
        assert!(!s.contains("hunter2") && !s.contains(DEMO_PEPPER), "{s}");
        assert!(s.contains("app:***@db"));
    }

    #[test]
    fn urls_in_logs_lose_their_secrets() {
        let mut c = Config::default().with_demo_secrets();
        c.database.url = "postgres://db/x?sslmode=require&password=hunter2".into();
        c.redis.url = "redis://:s3cret-redis@cache:6379/0".into();
        c.billing.alert_webhook_url =
            Some("https://hooks.slack.com/services/T0001/B0002/XXXXsecretXXXX".into());
        c.metrics.token = Some("metrics-token-0123456789abcdef0123456789".into());
        let s = format!("{c:?}");
        for secret in [
            "hunter2",
            "s3cret-redis",
            "XXXXsecretXXXX",
            "T0001",
            "metrics-token",
        ] {
            assert!(!s.contains(secret), "{secret} in {s}");
        }
        assert!(s.contains("sslmode=require&password=***"), "{s}");
        assert!(s.contains("redis://:***@cache:6379/0"), "{s}");
        assert!(s.contains("https://hooks.slack.com/***"), "{s}");
        assert_eq!(redact_url("redis://tok@h"), "redis://***@h");
        assert_eq!(redact_url("http://h:8123/?user=u"), "http://h:8123/?user=u");
        assert_eq!(
            redact_url("postgres://u:p@h/db?sslpassword=x"),
            "postgres://u:***@h/db?sslpassword=***"
        );
        assert_eq!(redact_webhook("https://u:p@h.io/x?y"), "https://h.io/***");
    }

    #[test]
    fn short_secrets_and_bad_zones_are_refused() {
        let mut c = Config::default();
        c.keys.pepper = Some("short".into());
        assert!(c.validate().is_err());
        let mut c = Config::default();
        c.platform.timezone = "Nowhere/City".into();
        assert!(c.validate().is_err());
        assert!(Config::default()
            .with_demo_secrets()
            .encryption_key()
            .is_ok());
    }

    #[test]
    fn enforcement_off_needs_the_explicit_bench_switch() {
        let mut c = Config::default();
        assert_eq!(c.gateway.admission, AdmissionSetting::Lease);
        c.gateway.admission = AdmissionSetting::Off;
        let err = c.validate().unwrap_err().to_string();
        assert!(err.contains("bench_unenforced_ok"), "{err}");
        c.gateway.bench_unenforced_ok = true;
        assert!(c.validate().is_ok());
        let fig = Figment::from(Serialized::defaults(Config::default()))
            .merge(Toml::string("[gateway]\nadmission = \"per_request\""));
        let c: Config = fig.extract().unwrap();
        assert_eq!(c.gateway.admission, AdmissionSetting::PerRequest);
    }

    #[test]
    fn unknown_keys_are_refused() {
        let fig = Figment::from(Serialized::defaults(Config::default()))
            .merge(Toml::string("[redis]\nurll = \"x\""));
        assert!(fig.extract::<Config>().is_err());
    }
}
