use crate::conn::{Conn, Link, Timeouts};
use crate::keys::KeySpace;
use domain::limits::{LimitKind, ScopeKind};
use domain::{Limits, Refusal};
use redis::{Script, ScriptInvocation};
use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

/// Month counters expire this long after their last rebuild; a later request
/// simply rebuilds them from the ledger.
const MONTH_TTL_SECS: u64 = 62 * 24 * 3600;
const REBUILD_LOCK_MS: u64 = 5_000;
const DEFAULT_CALL_LIMIT: usize = 64;
const DEFAULT_TURN_WAIT: Duration = Duration::from_secs(2);

#[derive(Debug, thiserror::Error)]
pub enum QuotaError {
    /// Redis is down, refused, or slower than the timeout: fail closed.
    #[error("quota store unavailable: {0}")]
    Unavailable(String),
    #[error("ledger unavailable for rebuild: {0}")]
    Ledger(String),
    #[error("unexpected reply from the hold engine: {0}")]
    Protocol(String),
    /// An amount outside what the counters can hold exactly (see
    /// `domain::counter`): refused before any Lua runs, and by the scripts.
    #[error("amount out of range: {0}")]
    OutOfRange(String),
    /// Redis is set up so that the books cannot stay exact (an eviction
    /// policy other than `noeviction`).
    #[error("{0}")]
    Misconfigured(String),
}

impl From<redis::RedisError> for QuotaError {
    fn from(e: redis::RedisError) -> Self {
        // The prelude's `amount` refuses an argument with this code.
        if e.code() == Some("TGRANGE") {
            return QuotaError::OutOfRange(e.detail().unwrap_or_default().to_string());
        }
        QuotaError::Unavailable(e.to_string())
    }
}

impl From<domain::counter::OutOfRange> for QuotaError {
    fn from(e: domain::counter::OutOfRange) -> Self {
        QuotaError::OutOfRange(e.to_string())
    }
}

/// Every amount of a call in the counters' range, or the first one not.
pub(crate) fn check_amounts(amounts: &[(&'static str, i64)]) -> Result<(), QuotaError> {
    for (name, v) in amounts {
        domain::counter::amount(name, *v)?;
    }
    Ok(())
}

/// The helpers every script shares (`lua/prelude.lua`), in front of each
/// script's own text: one EVALSHA per call still.
const PRELUDE: &str = include_str!("../lua/prelude.lua");

pub(crate) fn lua_script(body: &str) -> Script {
    Script::new(&format!("{PRELUDE}\n{body}"))
}

/// One request's reservation across its three scopes.
#[derive(Debug, Clone)]
pub struct HoldRequest<'a> {
    pub request_id: &'a str,
    pub tenant: &'a str,
    pub app: &'a str,
    pub key: &'a str,
    pub month: &'a str,
    pub est_input: i64,
    pub est_output: i64,
    pub est_cost: i64,
    pub model: &'a str,
    /// Limits of tenant, app and key, in that order.
    pub limits: [&'a Limits; 3],
}

/// The fourth scope of a hold: the request's end user, under its app, when
/// the app limits its end users (docs/billing.md).
#[derive(Debug, Clone, Copy)]
pub struct EndUserScope<'a> {
    /// As the client sent it (the ledger rebuild looks it up).
    pub id: &'a str,
    pub limits: &'a domain::attribution::EndUserLimits,
}

impl EndUserScope<'_> {
    pub fn digest(&self) -> String {
        domain::attribution::end_user_digest(self.id)
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HoldOutcome {
    Admitted {
        remaining_requests: Option<i64>,
        remaining_tokens: Option<i64>,
    },
    /// The same request_id was held before; the first answer stands.
    Duplicate {
        state: String,
    },
    Refused(Refusal),
}

#[derive(Debug, Clone)]
pub struct SettleRequest<'a> {
    pub request_id: &'a str,
    pub tenant: &'a str,
    pub app: &'a str,
    pub key: &'a str,
    /// The month the hold was taken in.
    pub month: &'a str,
    pub input_tokens: i64,
    pub output_tokens: i64,
    pub cost: i64,
    /// The usage event, stored verbatim in the outbox for the ledger writer.
    pub event_json: &'a str,
    pub status: &'a str,
    pub limits: [&'a Limits; 3],
    /// The most this settle may book (`domain::usage::Bound`): amounts are
    /// clamped to it before any script runs.
    pub bound: domain::usage::Bound,
}

/// More output for an open hold (a stream past its slice).
#[derive(Debug, Clone)]
pub struct ExtendRequest<'a> {
    pub request_id: &'a str,
    pub tenant: &'a str,
    pub app: &'a str,
    pub key: &'a str,
    /// The month the hold was taken in.
    pub month: &'a str,
    pub add_output: i64,
    pub add_cost: i64,
    pub limits: [&'a Limits; 3],
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExtendOutcome {
    Extended {
        remaining_tokens: Option<i64>,
    },
    Refused(Refusal),
    /// No open hold under this id (settled, released, or lost with Redis).
    NotHeld {
        state: String,
    },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SettleOutcome {
    Settled {
        overrun_tokens: i64,
        overrun_cost: i64,
    },
    /// Already settled or released: nothing changed.
    AlreadyClosed { state: String },
}

/// An open hold, as recorded by the hold script.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpenHold {
    pub request_id: String,
    pub app: String,
    pub key: String,
    pub month: String,
    pub est_input: i64,
    pub est_output: i64,
    pub est_cost: i64,
    pub model: String,
    pub replica: String,
    /// Redis time of the hold, ms since the epoch.
    pub at_ms: i64,
    /// The end user's digest when the hold took the end user's scope.
    pub end_user_digest: Option<String>,
}

/// Settled usage of one (app, key) pair in a month, as the ledger has it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScopeUsage {
    pub app: String,
    pub key: String,
    pub tokens: i64,
    pub cost: i64,
    pub overrun_tokens: i64,
    pub overrun_cost: i64,
}

/// Where a lost month is rebuilt from: the Postgres ledger, implemented by
/// the caller so this crate stays free of SQL.
pub trait LedgerSource: Send + Sync {
    fn month_usage(
        &self,
        tenant: &str,
        month: &str,
    ) -> impl Future<Output = Result<Vec<ScopeUsage>, String>> + Send;

    /// One end user's settled (tokens, cost) of an app in a month. Sources
    /// that never see end users (tools, most tests) keep this default.
    fn end_user_month_usage(
        &self,
        _tenant: &str,
        _app: &str,
        _end_user: &str,
        _month: &str,
    ) -> impl Future<Output = Result<(i64, i64), String>> + Send {
        async { Ok((0, 0)) }
    }
}

/// The ledger's answer to "is this request booked already?" — asked only
/// when a settle finds no hold record. Object-safe (a boxed future) so the
/// engine can carry one.
pub trait BookedCheck: Send + Sync {
    fn is_booked<'a>(
        &'a self,
        tenant: &'a str,
        request_id: &'a str,
    ) -> std::pin::Pin<Box<dyn Future<Output = Result<bool, String>> + Send + 'a>>;
}

/// Raw counters of a tenant's month, by field (`t:ut`, `a:<app>:ht`, …).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MonthCounters(pub HashMap<String, i64>);

impl MonthCounters {
    fn field(&self, scope: &str, f: &str) -> i64 {
        self.0.get(&format!("{scope}:{f}")).copied().unwrap_or(0)
    }
    pub fn used_tokens(&self, scope: &str) -> i64 {
        self.field(scope, "ut")
    }
    pub fn held_tokens(&self, scope: &str) -> i64 {
        self.field(scope, "ht")
    }
    pub fn used_cost(&self, scope: &str) -> i64 {
        self.field(scope, "uc")
    }
    pub fn held_cost(&self, scope: &str) -> i64 {
        self.field(scope, "hc")
    }
    pub fn overrun_tokens(&self, scope: &str) -> i64 {
        self.field(scope, "ot")
    }
    pub fn is_rebuilt(&self) -> bool {
        self.0.contains_key("_rb")
    }
}

pub(crate) struct Scripts {
    hold: Script,
    settle: Script,
    release: Script,
    rebuild: Script,
    extend: Script,
    pub(crate) lease_acquire: Script,
    pub(crate) lease_settle: Script,
    pub(crate) lease_expire: Script,
}

pub struct QuotaEngine {
    conn: Link,
    pub(crate) keys: KeySpace,
    timeout: Duration,
    /// Calls this replica has in flight to Redis at once (see `bounded`).
    calls: tokio::sync::Semaphore,
    call_limit: usize,
    /// How long a call may wait for its turn before failing closed.
    turn_wait: Duration,
    pub(crate) replica: String,
    pub(crate) scripts: Scripts,
    booked: Option<Arc<dyn BookedCheck>>,
}

pub(crate) fn limit_args(limits: [&Limits; 3]) -> impl Iterator<Item = i64> + '_ {
    limits
        .into_iter()
        .flat_map(|l| l.hold_args())
        .map(domain::counter::limit_arg)
}

impl QuotaEngine {
    /// One Redis. Connects lazily: the engine exists even while Redis is
    /// down, and every call fails closed until Redis answers again.
    pub fn new(
        url: &str,
        prefix: &str,
        timeout: Duration,
        replica: &str,
    ) -> Result<Self, QuotaError> {
        Self::new_with(url, prefix, Timeouts::both(timeout), replica)
    }

    /// One Redis, with separate bounds for dialling and for an answer.
    pub fn new_with(
        url: &str,
        prefix: &str,
        t: Timeouts,
        replica: &str,
    ) -> Result<Self, QuotaError> {
        Ok(Self::with_link(Link::single(url, t)?, prefix, t, replica))
    }

    /// A Redis Cluster, from its seed nodes (`redis://host:port` each).
    pub fn new_cluster(
        nodes: &[String],
        prefix: &str,
        t: Timeouts,
        replica: &str,
    ) -> Result<Self, QuotaError> {
        Ok(Self::with_link(
            Link::cluster(nodes, t)?,
            prefix,
            t,
            replica,
        ))
    }

    fn with_link(conn: Link, prefix: &str, t: Timeouts, replica: &str) -> Self {
        Self {
            conn,
            keys: KeySpace::new(prefix),
            timeout: t.answer,
            calls: tokio::sync::Semaphore::new(DEFAULT_CALL_LIMIT),
            call_limit: DEFAULT_CALL_LIMIT,
            turn_wait: DEFAULT_TURN_WAIT,
            replica: replica.to_string(),
            booked: None,
            scripts: Scripts {
                hold: lua_script(include_str!("../lua/hold.lua")),
                settle: lua_script(include_str!("../lua/settle.lua")),
                release: lua_script(include_str!("../lua/release.lua")),
                rebuild: lua_script(include_str!("../lua/rebuild.lua")),
                extend: lua_script(include_str!("../lua/extend.lua")),
                lease_acquire: lua_script(include_str!("../lua/lease_acquire.lua")),
                lease_settle: lua_script(include_str!("../lua/lease_settle.lua")),
                lease_expire: lua_script(include_str!("../lua/lease_expire.lua")),
            },
        }
    }

    /// A per-request script with the keys every one of them starts with:
    /// the tenant's month, its rates and the request's hold record.
    fn hold_script<'s>(
        &self,
        script: &'s Script,
        tenant: &str,
        month: &str,
        request_id: &str,
    ) -> ScriptInvocation<'s> {
        let k = &self.keys;
        let mut inv = script.prepare_invoke();
        inv.key(k.month(tenant, month))
            .key(k.rates(tenant))
            .key(k.hold(tenant, request_id));
        inv
    }

    /// Appends the limits of tenant, app and key and runs the script.
    pub(crate) async fn run(
        &self,
        mut inv: ScriptInvocation<'_>,
        limits: [&Limits; 3],
    ) -> Result<Vec<redis::Value>, QuotaError> {
        for l in limit_args(limits) {
            inv.arg(l);
        }
        let mut conn = self.link().await?;
        self.bounded(inv.invoke_async(&mut conn)).await
    }

    /// The connection; no turn needed: it sends Redis nothing per call
    /// (a cluster connects once, under the timeout).
    pub(crate) async fn link(&self) -> Result<Conn, QuotaError> {
        self.timed(self.conn.get()).await
    }

    pub fn keys(&self) -> &KeySpace {
        &self.keys
    }

    /// At most `max_calls` calls in flight, each waiting at most `turn_wait`
    /// for its turn (defaults: 64 and 2 s).
    pub fn with_call_limit(mut self, max_calls: usize, turn_wait: Duration) -> Self {
        let max_calls = max_calls.max(1);
        self.calls = tokio::sync::Semaphore::new(max_calls);
        self.call_limit = max_calls;
        self.turn_wait = turn_wait;
        self
    }

    /// Every Redis call goes through here. Its answer must come within
    /// `timeout`, or it fails closed. The timeout measures Redis, not this
    /// replica's own queue: a burst (1,000 streams opening at once) would
    /// otherwise put a thousand scripts on the one connection, the last
    /// ones waiting behind all the others and timing out while Redis is
    /// healthy. So calls take turns — at most `call_limit` in flight, which
    /// keeps Redis busy (it runs one script at a time anyway) — and a call
    /// that finds no turn within `turn_wait` fails closed too.
    pub(crate) async fn bounded<T>(
        &self,
        f: impl Future<Output = redis::RedisResult<T>>,
    ) -> Result<T, QuotaError> {
        let _turn = self.turn().await?;
        self.timed(f).await
    }

    /// A turn to call Redis, held until dropped. A hot-path call takes it
    /// before it builds its arguments: the calls in flight are answered
    /// while the waiting ones only wait, instead of the runtime building
    /// thousands of invocations first while the answers of the calls in
    /// flight sit unread past their timeout.
    pub(crate) async fn turn(&self) -> Result<tokio::sync::SemaphorePermit<'_>, QuotaError> {
        match self.calls.try_acquire() {
            Ok(p) => Ok(p),
            Err(_) => match tokio::time::timeout(self.turn_wait, self.calls.acquire()).await {
                Ok(Ok(p)) => Ok(p),
                _ => Err(QuotaError::Unavailable(format!(
                    "quota store busy: {} calls in flight, no turn within {} ms",
                    self.call_limit,
                    self.turn_wait.as_millis()
                ))),
            },
        }
    }

    /// The answer within `timeout`, or fail closed.
    async fn timed<T>(
        &self,
        f: impl Future<Output = redis::RedisResult<T>>,
    ) -> Result<T, QuotaError> {
        match tokio::time::timeout(self.timeout, f).await {
            Ok(r) => Ok(r?),
            Err(_) => Err(QuotaError::Unavailable(format!(
                "no answer within {} ms",
                self.timeout.as_millis()
            ))),
        }
    }

    /// Holds the estimate against every scope, rebuilding the tenant's month
    /// from the ledger first when Redis has lost it.
    pub async fn hold(
        &self,
        req: &HoldRequest<'_>,
        ledger: &impl LedgerSource,
    ) -> Result<HoldOutcome, QuotaError> {
        self.hold_with(req, None, ledger).await
    }

    /// A hold that also takes the end user's scope, when given.
    pub async fn hold_with(
        &self,
        req: &HoldRequest<'_>,
        end_user: Option<EndUserScope<'_>>,
        ledger: &impl LedgerSource,
    ) -> Result<HoldOutcome, QuotaError> {
        let digest = end_user.map(|e| e.digest());
        let eu = end_user.zip(digest.as_deref());
        check_amounts(&[
            ("est_input", req.est_input),
            ("est_output", req.est_output),
            ("est_cost", req.est_cost),
            ("est_tokens", req.est_input.saturating_add(req.est_output)),
        ])?;
        for _ in 0..50 {
            let reply: Vec<redis::Value> = self.hold_once(req, eu).await?;
            match int_at(&reply, 0)? {
                1 => {
                    let opt = |v: i64| (v >= 0).then_some(v);
                    return Ok(HoldOutcome::Admitted {
                        remaining_requests: opt(int_at(&reply, 1)?),
                        remaining_tokens: opt(int_at(&reply, 2)?),
                    });
                }
                2 => {
                    return Ok(HoldOutcome::Duplicate {
                        state: str_at(&reply, 1),
                    })
                }
                0 => return Ok(HoldOutcome::Refused(refusal_from(&reply)?)),
                -1 => self.rebuild_month(req.tenant, req.month, ledger).await?,
                -2 => match eu {
                    Some((e, d)) => {
                        self.rebuild_end_user(req.tenant, req.app, e.id, d, req.month, ledger)
                            .await?
                    }
                    None => return Err(QuotaError::Protocol(format!("{reply:?}"))),
                },
                _ => return Err(QuotaError::Protocol(format!("{reply:?}"))),
            }
        }
        Err(QuotaError::Unavailable(
            "month rebuild did not complete".into(),
        ))
    }

    async fn hold_once(
        &self,
        req: &HoldRequest<'_>,
        eu: Option<(EndUserScope<'_>, &str)>,
    ) -> Result<Vec<redis::Value>, QuotaError> {
        let _turn = self.turn().await?;
        let mut inv = self.hold_script(&self.scripts.hold, req.tenant, req.month, req.request_id);
        inv.key(self.keys.open_holds(req.tenant))
            .arg(req.request_id)
            .arg(req.app)
            .arg(req.key)
            .arg(req.est_input)
            .arg(req.est_output)
            .arg(req.est_cost)
            .arg(req.model)
            .arg(&self.replica)
            .arg(req.month);
        for l in limit_args(req.limits) {
            inv.arg(l);
        }
        if let Some((e, digest)) = eu {
            let k = &self.keys;
            inv.key(k.end_user_month(req.tenant, req.app, digest, req.month))
                .key(k.end_user_rates(req.tenant, req.app, digest))
                .key(k.end_users_seen(req.tenant, req.app))
                .arg(digest);
            for l in e.limits.hold_args() {
                inv.arg(domain::counter::limit_arg(l));
            }
            inv.arg(MONTH_TTL_SECS);
        }
        let mut conn = self.link().await?;
        self.timed(inv.invoke_async(&mut conn)).await
    }

    /// Restores one end user's month from the ledger (a new end user, or
    /// Redis lost it), once, under a lock, like [`Self::rebuild_month`].
    async fn rebuild_end_user(
        &self,
        tenant: &str,
        app: &str,
        end_user: &str,
        digest: &str,
        month: &str,
        ledger: &impl LedgerSource,
    ) -> Result<(), QuotaError> {
        let lock = self
            .keys
            .rebuild_lock(tenant, &format!("{month}:eu:{app}:{digest}"));
        self.once_under_lock(&lock, async {
            let (tokens, cost) = ledger
                .end_user_month_usage(tenant, app, end_user, month)
                .await
                .map_err(QuotaError::Ledger)?;
            let mut inv = self.scripts.rebuild.prepare_invoke();
            inv.key(self.keys.end_user_month(tenant, app, digest, month))
                .arg(MONTH_TTL_SECS)
                .arg("ut")
                .arg(tokens.clamp(0, domain::usage::MAX_SETTLE_AMOUNT))
                .arg("uc")
                .arg(cost.clamp(0, domain::usage::MAX_SETTLE_AMOUNT));
            let mut conn = self.link().await?;
            let _: i64 = self.bounded(inv.invoke_async(&mut conn)).await?;
            Ok(())
        })
        .await
    }

    /// Restores a tenant's month from the ledger, once, under a lock; other
    /// callers wait for the marker instead of querying the ledger too.
    pub(crate) async fn rebuild_month(
        &self,
        tenant: &str,
        month: &str,
        ledger: &impl LedgerSource,
    ) -> Result<(), QuotaError> {
        let lock = self.keys.rebuild_lock(tenant, month);
        self.once_under_lock(&lock, async {
            let rows = ledger
                .month_usage(tenant, month)
                .await
                .map_err(QuotaError::Ledger)?;
            let mut sums: HashMap<String, i64> = HashMap::new();
            for r in &rows {
                for scope in [
                    "t".to_string(),
                    format!("a:{}", r.app),
                    format!("k:{}", r.key),
                ] {
                    for (f, v) in [
                        ("ut", r.tokens),
                        ("uc", r.cost),
                        ("ot", r.overrun_tokens),
                        ("oc", r.overrun_cost),
                    ] {
                        // Saturating, as the scripts count: a ledger with
                        // absurd rows must not wrap the rebuilt month.
                        let e = sums.entry(format!("{scope}:{f}")).or_default();
                        *e = domain::counter::saturating_sum([*e, v]);
                    }
                }
            }
            let mut inv = self.scripts.rebuild.prepare_invoke();
            inv.key(self.keys.month(tenant, month)).arg(MONTH_TTL_SECS);
            for (f, v) in &sums {
                inv.arg(f).arg(*v);
            }
            let mut conn = self.link().await?;
            let rebuilt: i64 = self.bounded(inv.invoke_async(&mut conn)).await?;
            if rebuilt == 1 {
                tracing::info!(
                    tenant,
                    month,
                    scopes = sums.len(),
                    "rebuilt month counters from the ledger"
                );
            }
            Ok(())
        })
        .await
    }

    /// Runs `work` on this replica only if it takes `lock` (held at most
    /// `REBUILD_LOCK_MS`, deleted after); a caller that finds it taken
    /// waits a moment and returns, to find the work done when it retries.
    async fn once_under_lock(
        &self,
        lock: &str,
        work: impl Future<Output = Result<(), QuotaError>>,
    ) -> Result<(), QuotaError> {
        let mut conn = self.link().await?;
        let got: Option<String> = self
            .bounded(
                redis::cmd("SET")
                    .arg(lock)
                    .arg(&self.replica)
                    .arg("NX")
                    .arg("PX")
                    .arg(REBUILD_LOCK_MS)
                    .query_async(&mut conn),
            )
            .await?;
        if got.is_none() {
            tokio::time::sleep(Duration::from_millis(5)).await;
            return Ok(());
        }
        let result = work.await;
        let mut conn = self.link().await?;
        let _: Result<i64, _> = self
            .bounded(redis::cmd("DEL").arg(lock).query_async(&mut conn))
            .await;
        result
    }

    /// Adds output to an open hold, with the same all-or-nothing checks as
    /// a hold for what the extension consumes.
    pub async fn extend(&self, req: &ExtendRequest<'_>) -> Result<ExtendOutcome, QuotaError> {
        self.extend_with(req, None).await
    }

    /// An extension that also checks and takes the end user's scope (when
    /// the hold took it).
    pub async fn extend_with(
        &self,
        req: &ExtendRequest<'_>,
        end_user: Option<EndUserScope<'_>>,
    ) -> Result<ExtendOutcome, QuotaError> {
        check_amounts(&[("add_output", req.add_output), ("add_cost", req.add_cost)])?;
        let mut inv = self.hold_script(&self.scripts.extend, req.tenant, req.month, req.request_id);
        inv.arg(req.request_id)
            .arg(req.app)
            .arg(req.key)
            .arg(req.add_output)
            .arg(req.add_cost);
        for l in limit_args(req.limits) {
            inv.arg(l);
        }
        if let Some(e) = end_user {
            let [tokens, cost, _, _] = e.limits.hold_args();
            inv.key(
                self.keys
                    .end_user_month(req.tenant, req.app, &e.digest(), req.month),
            )
            .arg(domain::counter::limit_arg(tokens))
            .arg(domain::counter::limit_arg(cost));
        }
        let mut conn = self.link().await?;
        let reply: Vec<redis::Value> = self.bounded(inv.invoke_async(&mut conn)).await?;
        match int_at(&reply, 0)? {
            1 => Ok(ExtendOutcome::Extended {
                remaining_tokens: Some(int_at(&reply, 1)?).filter(|v| *v >= 0),
            }),
            0 => Ok(ExtendOutcome::Refused(refusal_from(&reply)?)),
            2 => Ok(ExtendOutcome::NotHeld {
                state: str_at(&reply, 1),
            }),
            _ => Err(QuotaError::Protocol(format!("{reply:?}"))),
        }
    }

    pub async fn settle(&self, req: &SettleRequest<'_>) -> Result<SettleOutcome, QuotaError> {
        self.settle_with(req, None).await
    }

    /// A settle that also books the end user's scope (`end_user`: the id as
    /// sent), when the hold took it.
    pub async fn settle_with(
        &self,
        req: &SettleRequest<'_>,
        end_user: Option<&str>,
    ) -> Result<SettleOutcome, QuotaError> {
        let digest = end_user.map(domain::attribution::end_user_digest);
        self.settle_digest(req, digest.as_deref()).await
    }

    /// [`Self::settle_with`] for a caller that has the end user's digest
    /// only (the hold record's `u`: the stale-hold reconciler).
    pub async fn settle_digest(
        &self,
        req: &SettleRequest<'_>,
        end_user_digest: Option<&str>,
    ) -> Result<SettleOutcome, QuotaError> {
        let eu_month =
            end_user_digest.map(|d| self.keys.end_user_month(req.tenant, req.app, d, req.month));
        // The provider's report is bounded first (an absurd report is billed
        // at the bound), then checked against the Lua-safe range.
        let billable = req.billable();
        let (input_tokens, output_tokens, cost) = billable;
        check_amounts(&[
            ("input_tokens", input_tokens),
            ("output_tokens", output_tokens),
            ("cost", cost),
        ])?;
        let eu = eu_month.as_deref();
        let mut reply = self.settle_once(req, billable, false, eu).await?;
        if int_at(&reply, 0)? == 3 {
            // No hold record: lost with Redis, or a replay after the settled
            // record expired. The ledger (unique by request id) tells which.
            if self.booked(req.tenant, req.request_id).await? {
                return Ok(SettleOutcome::AlreadyClosed {
                    state: "ledger".into(),
                });
            }
            reply = self.settle_once(req, billable, true, eu).await?;
        }
        match int_at(&reply, 0)? {
            1 => Ok(SettleOutcome::Settled {
                overrun_tokens: int_at(&reply, 1)?,
                overrun_cost: int_at(&reply, 2)?,
            }),
            2 => Ok(SettleOutcome::AlreadyClosed {
                state: str_at(&reply, 1),
            }),
            _ => Err(QuotaError::Protocol(format!("{reply:?}"))),
        }
    }

    async fn settle_once(
        &self,
        req: &SettleRequest<'_>,
        (input_tokens, output_tokens, cost): (i64, i64, i64),
        lost_ok: bool,
        end_user_month: Option<&str>,
    ) -> Result<Vec<redis::Value>, QuotaError> {
        let mut inv = self.hold_script(&self.scripts.settle, req.tenant, req.month, req.request_id);
        inv.key(self.keys.open_holds(req.tenant))
            .key(self.keys.outbox(req.tenant));
        if let Some(k) = end_user_month {
            inv.key(k);
        }
        inv.arg(req.request_id)
            .arg(req.app)
            .arg(req.key)
            .arg(input_tokens)
            .arg(output_tokens)
            .arg(cost)
            .arg(req.event_json)
            .arg(req.status);
        for l in limit_args(req.limits) {
            inv.arg(l);
        }
        inv.arg(if lost_ok { 1 } else { 0 });
        let mut conn = self.link().await?;
        self.bounded(inv.invoke_async(&mut conn)).await
    }

    /// Whether the ledger already has this request (false without a check:
    /// tools and tests that have no ledger).
    async fn booked(&self, tenant: &str, request_id: &str) -> Result<bool, QuotaError> {
        match &self.booked {
            Some(check) => check
                .is_booked(tenant, request_id)
                .await
                .map_err(QuotaError::Ledger),
            None => Ok(false),
        }
    }

    /// Where a settle without a hold record checks that its request is not
    /// in the ledger already (the server passes the Postgres ledger).
    pub fn with_booked_check(mut self, check: Arc<dyn BookedCheck>) -> Self {
        self.booked = Some(check);
        self
    }

    /// Gives back a hold that consumed nothing. Returns false when there was
    /// no open hold (already settled or released).
    pub async fn release(
        &self,
        tenant: &str,
        app: &str,
        key: &str,
        month: &str,
        request_id: &str,
        limits: [&Limits; 3],
    ) -> Result<bool, QuotaError> {
        self.release_with(tenant, app, key, month, request_id, limits, None)
            .await
    }

    /// A release that also gives back the end user's scope (`end_user`: the
    /// id as sent), when the hold took it.
    #[allow(clippy::too_many_arguments)]
    pub async fn release_with(
        &self,
        tenant: &str,
        app: &str,
        key: &str,
        month: &str,
        request_id: &str,
        limits: [&Limits; 3],
        end_user: Option<&str>,
    ) -> Result<bool, QuotaError> {
        let mut inv = self.hold_script(&self.scripts.release, tenant, month, request_id);
        inv.key(self.keys.open_holds(tenant));
        if let Some(u) = end_user {
            let d = domain::attribution::end_user_digest(u);
            inv.key(self.keys.end_user_month(tenant, app, &d, month));
        }
        inv.arg(request_id).arg(app).arg(key);
        let reply = self.run(inv, limits).await?;
        Ok(int_at(&reply, 0)? == 1)
    }

    pub async fn month_counters(
        &self,
        tenant: &str,
        month: &str,
    ) -> Result<MonthCounters, QuotaError> {
        let mut conn = self.link().await?;
        let raw: HashMap<String, String> = self
            .bounded(
                redis::cmd("HGETALL")
                    .arg(self.keys.month(tenant, month))
                    .query_async(&mut conn),
            )
            .await?;
        Ok(MonthCounters(
            raw.into_iter()
                .filter_map(|(k, v)| v.parse().ok().map(|v| (k, v)))
                .collect(),
        ))
    }

    /// A tenant's month counters, rebuilt from the ledger first when Redis
    /// has lost the month — for callers that weigh `used` against a limit
    /// outside a hold (the reclaim job): a lost month reads as zeros, or as
    /// the partial sums of settles since the loss, not as what was used.
    pub async fn month_counters_rebuilt(
        &self,
        tenant: &str,
        month: &str,
        ledger: &impl LedgerSource,
    ) -> Result<MonthCounters, QuotaError> {
        for _ in 0..50 {
            let c = self.month_counters(tenant, month).await?;
            if c.is_rebuilt() {
                return Ok(c);
            }
            self.rebuild_month(tenant, month, ledger).await?;
        }
        Err(QuotaError::Unavailable(
            "month rebuild did not complete".into(),
        ))
    }

    /// In-flight count of a scope (`t`, `a:<app>`, `k:<key>`).
    pub async fn inflight(&self, tenant: &str, scope: &str) -> Result<i64, QuotaError> {
        let mut conn = self.link().await?;
        let v: Option<i64> = self
            .bounded(
                redis::cmd("HGET")
                    .arg(self.keys.rates(tenant))
                    .arg(format!("{scope}:if"))
                    .query_async(&mut conn),
            )
            .await?;
        Ok(v.unwrap_or(0))
    }

    /// Up to `max` settled events waiting in a tenant's outbox.
    pub async fn outbox_peek(
        &self,
        tenant: &str,
        max: usize,
    ) -> Result<Vec<(String, String)>, QuotaError> {
        let mut conn = self.link().await?;
        let (_cursor, flat): (u64, Vec<String>) = self
            .bounded(
                redis::cmd("HSCAN")
                    .arg(self.keys.outbox(tenant))
                    .arg(0)
                    .arg("COUNT")
                    .arg(max)
                    .query_async(&mut conn),
            )
            .await?;
        Ok(flat
            .chunks_exact(2)
            .map(|c| (c[0].clone(), c[1].clone()))
            .collect())
    }

    /// Drops events the ledger has stored, one command per tenant.
    pub async fn outbox_remove(&self, stored: &[(&str, &str)]) -> Result<(), QuotaError> {
        if stored.is_empty() {
            return Ok(());
        }
        let mut by_tenant: HashMap<&str, Vec<&str>> = HashMap::new();
        for (t, r) in stored {
            by_tenant.entry(t).or_default().push(r);
        }
        // One command per tenant: on a cluster each goes to its tenant's node.
        let mut conn = self.link().await?;
        for (t, rids) in by_tenant {
            self.bounded(
                redis::cmd("HDEL")
                    .arg(self.keys.outbox(t))
                    .arg(rids)
                    .query_async::<()>(&mut conn),
            )
            .await?;
        }
        Ok(())
    }

    /// A page of a tenant's holds taken before `before_ms` (Redis time), the
    /// oldest first: those still open, and the ids in the index whose hold
    /// is gone or closed.
    pub async fn open_holds(
        &self,
        tenant: &str,
        before_ms: i64,
        offset: usize,
        page: usize,
    ) -> Result<(Vec<OpenHold>, Vec<String>), QuotaError> {
        let mut conn = self.link().await?;
        let ids: Vec<String> = self
            .bounded(
                redis::cmd("ZRANGEBYSCORE")
                    .arg(self.keys.open_holds(tenant))
                    .arg("-inf")
                    .arg(format!("({before_ms}"))
                    .arg("LIMIT")
                    .arg(offset)
                    .arg(page)
                    .query_async(&mut conn),
            )
            .await?;
        if ids.is_empty() {
            return Ok((vec![], vec![]));
        }
        let mut pipe = redis::pipe();
        for id in &ids {
            pipe.cmd("HMGET")
                .arg(self.keys.hold(tenant, id))
                .arg(&["st", "a", "k", "p", "ei", "eo", "ec", "m", "r", "at", "u"]);
        }
        let rows: Vec<Vec<Option<String>>> = self.bounded(pipe.query_async(&mut conn)).await?;
        let num = |v: &Option<String>| v.as_deref().and_then(|s| s.parse().ok()).unwrap_or(0);
        let txt = |v: &Option<String>| v.clone().unwrap_or_default();
        let (open, gone): (Vec<_>, Vec<_>) = ids
            .into_iter()
            .zip(rows)
            .partition(|(_, f)| f.first().and_then(|s| s.as_deref()) == Some("H"));
        let gone = gone.into_iter().map(|(id, _)| id).collect();
        let open = open
            .into_iter()
            .map(|(request_id, f)| OpenHold {
                request_id,
                app: txt(&f[1]),
                key: txt(&f[2]),
                month: txt(&f[3]),
                est_input: num(&f[4]),
                est_output: num(&f[5]),
                est_cost: num(&f[6]),
                model: txt(&f[7]),
                replica: txt(&f[8]),
                at_ms: num(&f[9]),
                end_user_digest: f[10].clone(),
            })
            .collect();
        Ok((open, gone))
    }

    /// Drops ids from the open-holds index whose hold is no longer open
    /// (the index and the records can disagree after Redis lost data).
    pub async fn forget_open(
        &self,
        tenant: &str,
        request_ids: &[String],
    ) -> Result<(), QuotaError> {
        if request_ids.is_empty() {
            return Ok(());
        }
        let mut conn = self.link().await?;
        self.bounded(
            redis::cmd("ZREM")
                .arg(self.keys.open_holds(tenant))
                .arg(request_ids)
                .query_async::<()>(&mut conn),
        )
        .await
    }

    /// Redis time, ms since the epoch (the clock holds are stamped with).
    pub async fn now_ms(&self) -> Result<i64, QuotaError> {
        let mut conn = self.link().await?;
        let (s, us): (i64, i64) = self
            .bounded(redis::cmd("TIME").query_async(&mut conn))
            .await?;
        Ok(s * 1000 + us / 1000)
    }

    /// Marks this replica alive for `ttl`; holds of a replica without a
    /// heartbeat are orphans.
    pub async fn heartbeat(&self, ttl: Duration) -> Result<(), QuotaError> {
        let mut conn = self.link().await?;
        self.bounded(
            redis::cmd("SET")
                .arg(self.keys.replica(&self.replica))
                .arg(1)
                .arg("PX")
                .arg(ttl.as_millis() as u64)
                .query_async::<()>(&mut conn),
        )
        .await
    }

    pub async fn replica_alive(&self, replica: &str) -> Result<bool, QuotaError> {
        let mut conn = self.link().await?;
        let n: i64 = self
            .bounded(
                redis::cmd("EXISTS")
                    .arg(self.keys.replica(replica))
                    .query_async(&mut conn),
            )
            .await?;
        Ok(n == 1)
    }

    /// Connects now, allowing `patience` rather than the per-call timeout
    /// (a cluster connection first maps the slots). Startup calls this so
    /// the first requests do not pay for it; failure is not fatal.
    pub async fn warm_up(&self, patience: Duration) -> bool {
        let conn = tokio::time::timeout(patience, self.conn.get()).await;
        let Ok(Ok(mut conn)) = conn else { return false };
        let ping = redis::cmd("PING");
        matches!(
            tokio::time::timeout(patience, ping.query_async::<String>(&mut conn)).await,
            Ok(Ok(_))
        )
    }

    pub async fn ping(&self) -> Result<(), QuotaError> {
        let mut conn = self.link().await?;
        self.bounded(redis::cmd("PING").query_async::<String>(&mut conn))
            .await
            .map(|_| ())
    }
}

pub(crate) fn int_at(v: &[redis::Value], i: usize) -> Result<i64, QuotaError> {
    match v.get(i) {
        Some(redis::Value::Int(n)) => Ok(*n),
        other => Err(QuotaError::Protocol(format!(
            "expected an integer at {i}, got {other:?}"
        ))),
    }
}

pub(crate) fn str_at(v: &[redis::Value], i: usize) -> String {
    match v.get(i) {
        Some(redis::Value::BulkString(b)) => String::from_utf8_lossy(b).into_owned(),
        Some(redis::Value::SimpleString(s)) => s.clone(),
        other => format!("{other:?}"),
    }
}

/// `{0, scope_index, limit_index, retry_ms[, headroom_tokens, headroom_cost]}`
fn refusal_from(reply: &[redis::Value]) -> Result<Refusal, QuotaError> {
    let scope = ScopeKind::from_index(int_at(reply, 1)? as usize - 1);
    let limit = LimitKind::from_index(int_at(reply, 2)? as usize - 1);
    let (Some(scope), Some(limit)) = (scope, limit) else {
        return Err(QuotaError::Protocol(format!("{reply:?}")));
    };
    let retry = int_at(reply, 3)?;
    let opt = |i: usize| int_at(reply, i).ok().filter(|v| *v >= 0);
    Ok(Refusal {
        scope,
        limit,
        retry_after_ms: (retry >= 0).then_some(retry as u64),
        headroom_tokens: opt(4),
        headroom_cost: opt(5),
    })
}
