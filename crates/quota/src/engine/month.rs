//! A tenant's month in Redis: rebuilt from the ledger when lost (once,
//! under a lock), and read back as counters.

use super::*;
use domain::limits::ScopeKind;
use domain::standing::ScopeCounters;

impl QuotaEngine {
    /// Restores one end user's month from the ledger (a new end user, or
    /// Redis lost it), once, under a lock, like [`Self::rebuild_month`].
    pub(super) async fn rebuild_end_user(
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

    /// Restores one budget's used counters in its period from the ledger
    /// (lost with Redis, or the budget is new), once, under a lock.
    pub(super) async fn rebuild_budget(
        &self,
        tenant: &str,
        app: &str,
        key: &str,
        b: &domain::chain_budgets::Applied,
        ledger: &impl LedgerSource,
    ) -> Result<(), QuotaError> {
        let lock = self
            .keys
            .rebuild_lock(tenant, &format!("b:{}:{}", b.period_id, b.field));
        self.once_under_lock(&lock, async {
            let (app, key) = match b.level {
                ScopeKind::Tenant => (None, None),
                ScopeKind::App => (Some(app), None),
                _ => (Some(app), Some(key)),
            };
            let (tokens, cost, requests) = ledger
                .window_usage(tenant, app, key, b.models.as_deref(), b.days)
                .await
                .map_err(QuotaError::Ledger)?;
            let cap = |v: i64| v.clamp(0, domain::usage::MAX_SETTLE_AMOUNT);
            let mut inv = self.scripts.budget_rebuild.prepare_invoke();
            inv.key(self.keys.budget_period(tenant, &b.period_id))
                .arg(&b.field)
                .arg(b.ttl_secs())
                .arg(cap(tokens))
                .arg(cap(cost))
                .arg(cap(requests));
            let mut conn = self.link().await?;
            let _: i64 = self.bounded(inv.invoke_async(&mut conn)).await?;
            Ok(())
        })
        .await
    }

    /// Runs `work` on this replica only if it takes `lock` (held at most
    /// `REBUILD_LOCK_MS`, deleted after); a caller that finds it taken
    /// waits a moment and returns, to find the work done when it retries.
    pub(super) async fn once_under_lock(
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
}

/// The scopes of a chain as the scripts name them (`scopes_of` in
/// `lua/prelude.lua`).
fn chain_scopes(app: &str, key: &str) -> [String; 3] {
    ["t".to_string(), format!("a:{app}"), format!("k:{key}")]
}

impl QuotaEngine {
    /// One chain's counters (tenant, app, key) in a month, read from the
    /// hashes the hold scripts keep — month (used, held) and rates
    /// (in-flight, buckets) — in one atomic read, no write; None when Redis
    /// has lost the month. For `GET /v1/usage`, never the request path.
    pub async fn chain_counters(
        &self,
        tenant: &str,
        app: &str,
        key: &str,
        month: &str,
    ) -> Result<Option<[ScopeCounters; 3]>, QuotaError> {
        const MONTH: [&str; 4] = ["ut", "ht", "uc", "hc"];
        const RATES: [&str; 7] = ["if", "rpm", "rpm:ts", "itpm", "itpm:ts", "otpm", "otpm:ts"];
        let scopes = chain_scopes(app, key);
        let mut m = redis::cmd("HMGET");
        m.arg(self.keys.month(tenant, month)).arg("_rb");
        let mut r = redis::cmd("HMGET");
        r.arg(self.keys.rates(tenant));
        for s in &scopes {
            for f in MONTH {
                m.arg(format!("{s}:{f}"));
            }
            for f in RATES {
                r.arg(format!("{s}:{f}"));
            }
        }
        // One MULTI/EXEC (both keys carry the tenant's hash tag): a hold
        // between two separate reads would show its in-flight slot
        // without its held tokens.
        let mut conn = self.link().await?;
        let (mv, rv): (Vec<Option<String>>, Vec<Option<String>>) = self
            .bounded(
                redis::pipe()
                    .atomic()
                    .add_command(m)
                    .add_command(r)
                    .query_async(&mut conn),
            )
            .await?;
        if mv.first().is_none_or(Option::is_none) {
            return Ok(None);
        }
        let int = |v: Option<&Option<String>>| -> i64 {
            v.and_then(|v| v.as_deref())
                .and_then(|v| v.parse::<f64>().ok())
                .map_or(0, |v| v as i64)
        };
        let bucket = |level: Option<&Option<String>>, at: Option<&Option<String>>| {
            let level = level?.as_deref()?.parse::<f64>().ok()?;
            let at_ms = at
                .and_then(|v| v.as_deref())
                .and_then(|v| v.parse::<i64>().ok())?;
            Some(domain::standing::Bucket { level, at_ms })
        };
        Ok(Some(std::array::from_fn(|s| {
            let mb = 1 + s * MONTH.len();
            let rb = s * RATES.len();
            ScopeCounters {
                used_tokens: int(mv.get(mb)),
                held_tokens: int(mv.get(mb + 1)),
                used_cost: int(mv.get(mb + 2)),
                held_cost: int(mv.get(mb + 3)),
                inflight: int(rv.get(rb)),
                rpm: bucket(rv.get(rb + 1), rv.get(rb + 2)),
                input_tpm: bucket(rv.get(rb + 3), rv.get(rb + 4)),
                output_tpm: bucket(rv.get(rb + 5), rv.get(rb + 6)),
            }
        })))
    }

    /// [`Self::chain_counters`], the month rebuilt from the ledger first
    /// when Redis has lost it (a lost month reads as zeros, not as what
    /// was used), as a hold would.
    pub async fn chain_counters_rebuilt(
        &self,
        tenant: &str,
        app: &str,
        key: &str,
        month: &str,
        ledger: &impl LedgerSource,
    ) -> Result<[ScopeCounters; 3], QuotaError> {
        for _ in 0..50 {
            if let Some(c) = self.chain_counters(tenant, app, key, month).await? {
                return Ok(c);
            }
            self.rebuild_month(tenant, month, ledger).await?;
        }
        Err(QuotaError::Unavailable(
            "month rebuild did not complete".into(),
        ))
    }
}

impl QuotaEngine {
    /// The counters of `budgets` (a chain's, `domain::chain_budgets::of_chain`):
    /// tokens, µUSD and requests, used and held — each rebuilt from the
    /// ledger first when Redis does not know it. For `GET /v1/usage`.
    pub async fn budget_counters_rebuilt(
        &self,
        tenant: &str,
        app: &str,
        key: &str,
        budgets: &[domain::chain_budgets::Applied],
        ledger: &impl LedgerSource,
    ) -> Result<Vec<[i64; 6]>, QuotaError> {
        const FIELDS: [&str; 7] = ["rb", "ut", "ht", "uc", "hc", "uq", "hq"];
        let mut out = Vec::with_capacity(budgets.len());
        for b in budgets {
            let mut done = None;
            for _ in 0..50 {
                let mut cmd = redis::cmd("HMGET");
                cmd.arg(self.keys.budget_period(tenant, &b.period_id));
                for f in FIELDS {
                    cmd.arg(format!("{}:{f}", b.field));
                }
                let mut conn = self.link().await?;
                let v: Vec<Option<String>> = self.bounded(cmd.query_async(&mut conn)).await?;
                if v.first().is_some_and(Option::is_some) {
                    let int = |i: usize| {
                        v.get(i)
                            .and_then(|x| x.as_deref())
                            .and_then(|x| x.parse::<f64>().ok())
                            .map_or(0, |x| x as i64)
                    };
                    done = Some(std::array::from_fn(|i| int(i + 1)));
                    break;
                }
                self.rebuild_budget(tenant, app, key, b, ledger).await?;
            }
            out.push(done.ok_or_else(|| {
                QuotaError::Unavailable("budget rebuild did not complete".into())
            })?);
        }
        Ok(out)
    }
}
