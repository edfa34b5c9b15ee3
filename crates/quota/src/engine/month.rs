//! A tenant's month in Redis: rebuilt from the ledger when lost (once,
//! under a lock), and read back as counters.

use super::*;

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
