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

mod liveness;
mod month;
mod outbox;
mod types;

pub use types::*;

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

/// `script`'s call as one `EVALSHA` command, its `keys` keys and then its
/// arguments to be added once, straight into the command's buffer. For a
/// call with many arguments (a lease's batch: four a request) this is
/// cheaper than a `ScriptInvocation`, which keeps each argument as a
/// vector of its own and copies them all into a new command for every
/// call. Run it with [`run_script`].
pub(crate) fn script_call(script: &Script, keys: usize) -> redis::Cmd {
    let mut cmd = redis::cmd("EVALSHA");
    cmd.arg(script.get_hash()).arg(keys);
    cmd
}

/// Runs a [`script_call`]. A Redis that does not know the script (it
/// restarted, or its scripts were flushed) is given it, and asked again.
pub(crate) async fn run_script<T: redis::FromRedisValue>(
    conn: &mut Conn,
    script: &Script,
    cmd: &redis::Cmd,
) -> redis::RedisResult<T> {
    match cmd.query_async(conn).await {
        Err(e) if e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript) => {
            script.load_async(conn).await?;
            cmd.query_async(conn).await
        }
        r => r,
    }
}

pub(crate) struct Scripts {
    hold: Script,
    settle: Script,
    release: Script,
    rebuild: Script,
    budget_rebuild: Script,
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
    /// Redis time less this replica's clock, in ms (0 while within the
    /// measurement's error): periods are Redis time's (`sync_clock`).
    clock_skew_ms: std::sync::atomic::AtomicI64,
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
            clock_skew_ms: Default::default(),
            scripts: Scripts {
                hold: lua_script(include_str!("../lua/hold.lua")),
                settle: lua_script(include_str!("../lua/settle.lua")),
                release: lua_script(include_str!("../lua/release.lua")),
                rebuild: lua_script(include_str!("../lua/rebuild.lua")),
                budget_rebuild: lua_script(include_str!("../lua/budget_rebuild.lua")),
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
                0 => return Ok(HoldOutcome::Refused(refusal_from(&reply, req.budgets)?)),
                -1 => self.rebuild_month(req.tenant, req.month, ledger).await?,
                -3 => {
                    let j = int_at(&reply, 1)? as usize;
                    let Some(b) = j.checked_sub(1).and_then(|j| req.budgets.get(j)) else {
                        return Err(QuotaError::Protocol(format!("{reply:?}")));
                    };
                    self.rebuild_budget(req.tenant, req.app, req.key, b, ledger)
                        .await?
                }
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
        // The budgets that count the request: last, and their number last
        // of all (`read_budgets` in lua/prelude.lua).
        for b in req.budgets {
            inv.key(self.keys.budget_period(req.tenant, &b.period_id))
                .arg(&b.field)
                .arg(budget_level(b.level))
                .arg(domain::counter::limit_arg(b.limits[0]))
                .arg(domain::counter::limit_arg(b.limits[1]))
                .arg(domain::counter::limit_arg(b.limits[2]))
                .arg(b.ttl_secs());
        }
        inv.arg(req.budgets.len());
        let mut conn = self.link().await?;
        self.timed(inv.invoke_async(&mut conn)).await
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
            0 => Ok(ExtendOutcome::Refused(refusal_from(&reply, req.budgets)?)),
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

/// A budget's level as the scripts number scopes (1 tenant, 2 app, 3 key).
fn budget_level(level: ScopeKind) -> i64 {
    match level {
        ScopeKind::Tenant => 1,
        ScopeKind::App => 2,
        _ => 3,
    }
}

/// `{0, scope_index, limit_index, retry_ms[, headroom_tokens, headroom_cost[,
/// budget j, kind]]}`; `budgets`: the request's, in the order it passed them.
fn refusal_from(
    reply: &[redis::Value],
    budgets: &[domain::chain_budgets::Applied],
) -> Result<Refusal, QuotaError> {
    let scope = ScopeKind::from_index(int_at(reply, 1)? as usize - 1);
    let limit = LimitKind::from_index(int_at(reply, 2)? as usize - 1);
    let (Some(scope), Some(limit)) = (scope, limit) else {
        return Err(QuotaError::Protocol(format!("{reply:?}")));
    };
    let retry = int_at(reply, 3)?;
    let opt = |i: usize| int_at(reply, i).ok().filter(|v| *v >= 0);
    let budget = if limit == LimitKind::Budget {
        let j = int_at(reply, 6)?;
        let kind = domain::budgets::BudgetKind::from_index((int_at(reply, 7)? - 1).max(0) as usize);
        let index = usize::try_from(j - 1).unwrap_or(0);
        let Some(kind) = kind else {
            return Err(QuotaError::Protocol(format!("{reply:?}")));
        };
        // The caller's list names the budget; an extension whose caller's
        // list no longer matches the hold's (its limits changed since)
        // still refuses, as the hold's budget: a monthly one by default.
        let (period, model_scoped) = budgets
            .get(index)
            .map_or((domain::budgets::BudgetPeriod::Month, false), |b| {
                (b.period, b.model_scoped)
            });
        Some(domain::reason::BudgetRefusal {
            index,
            period,
            kind,
            model_scoped,
        })
    } else {
        None
    };
    Ok(Refusal {
        scope,
        limit,
        retry_after_ms: (retry >= 0).then_some(retry as u64),
        headroom_tokens: opt(4),
        headroom_cost: opt(5),
        budget,
    })
}
