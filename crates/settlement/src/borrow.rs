//! Borrowing from the platform pool and reclaiming (docs/design.md §7), off the
//! per-request path:
//!
//! - on demand: a hold refused for the tenant's monthly budget asks the
//!   borrower (one borrow at a time per tenant on this replica); the request
//!   waits up to `borrow_wait` for it and retries its hold once — the borrow
//!   itself runs on, so when it lands late it serves the next request;
//! - periodically (one replica at a time): tenants near their limit borrow
//!   ahead, and borrows left `pending` by a crash are driven to an end;
//! - `run_reclaim(now)`: gives unused borrowed quota back when the pool runs
//!   low.
//!
//! Every borrow is first recorded `pending` in Postgres, then the pool is
//! debited by one idempotent Lua call keyed by the borrow id, then the
//! borrow becomes `active` (with its audit row). Reclaims go the other way:
//! Postgres first (the limit drops at once), then the pool is given the
//! amount back, idempotently by reclaim id.

use crate::ledger_source::StoreLedger;
use crate::{Tenant, Tenants};
use chrono::{DateTime, Utc};
use domain::borrowing::{plan_reclaim, PoolPolicy, ReclaimCandidate};
use domain::period::PlatformClock;
use quota::{BorrowOutcome, QuotaEngine};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use store::{Store, TenantScope};
use uuid::Uuid;

#[derive(Debug, Clone)]
pub struct BorrowTuning {
    /// How long a refused request waits for an on-demand borrow.
    pub wait: Duration,
    /// The periodic check borrows for tenants whose used + held reached
    /// this share (ppm) of their effective token limit.
    pub near_limit_ppm: i64,
    /// The share (ppm) of each borrow's outstanding amount one reclaim run
    /// may take back.
    pub reclaim_fraction_ppm: i64,
    /// After a borrow that got nothing (pool dry or cap reached), the
    /// tenant's refused requests do not ask again for this long.
    pub empty_backoff: Duration,
}

impl Default for BorrowTuning {
    fn default() -> Self {
        Self {
            wait: Duration::from_secs(2),
            near_limit_ppm: 900_000,
            reclaim_fraction_ppm: 500_000,
            empty_backoff: Duration::from_secs(5),
        }
    }
}

pub struct Borrowing {
    pub store: Store,
    pub quota: Arc<QuotaEngine>,
    pub catalog: Arc<dyn Tenants>,
    pub clock: PlatformClock,
    pub replica: String,
    pub tuning: BorrowTuning,
    /// Per tenant: one borrow at a time, and when the last one came back
    /// empty.
    tenants: Mutex<HashMap<String, Arc<tokio::sync::Mutex<Option<Instant>>>>>,
}

#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ReclaimReport {
    pub period: String,
    pub lent_before: i64,
    pub need: i64,
    pub reclaimed_tokens: i64,
    pub reclaims: usize,
}

impl Borrowing {
    pub fn new(
        store: Store,
        quota: Arc<QuotaEngine>,
        catalog: Arc<dyn Tenants>,
        clock: PlatformClock,
        replica: String,
        tuning: BorrowTuning,
    ) -> Self {
        Self {
            store,
            quota,
            catalog,
            clock,
            replica,
            tuning,
            tenants: Default::default(),
        }
    }

    fn lock_of(&self, tenant: &str) -> Arc<tokio::sync::Mutex<Option<Instant>>> {
        let mut m = self.tenants.lock().expect("borrower lock");
        m.entry(tenant.to_string()).or_default().clone()
    }

    /// A hold of `tenant` was refused for its monthly budget. Borrows a
    /// chunk (unless one landed meanwhile) and waits up to `tuning.wait`:
    /// true when the tenant's effective limit grew, so the hold is worth
    /// one retry.
    pub async fn borrow_for(self: &Arc<Self>, tenant: Arc<dyn Tenant>, month: &str) -> bool {
        if !tenant.may_borrow() || tenant.borrowed_in(month).0 >= tenant.borrow_cap_tokens() {
            return false;
        }
        let before = tenant.borrowed_in(month).0;
        let me = self.clone();
        let month = month.to_string();
        let t = tenant.clone();
        let job = tokio::spawn(async move {
            let lock = me.lock_of(t.id());
            let mut last_empty = lock.lock().await;
            if t.borrowed_in(&month).0 > before {
                return true;
            }
            if last_empty.is_some_and(|at| at.elapsed() < me.tuning.empty_backoff) {
                return false;
            }
            match me.borrow(t.as_ref(), &month, "hold_refused").await {
                Ok(n) if n > 0 => true,
                Ok(_) if t.borrowed_in(&month).0 > before => true,
                Ok(_) => {
                    *last_empty = Some(Instant::now());
                    false
                }
                Err(e) => {
                    tracing::warn!(tenant = %t.id(), error = %e, "borrow failed");
                    false
                }
            }
        });
        matches!(
            tokio::time::timeout(self.tuning.wait, job).await,
            Ok(Ok(true))
        )
    }

    /// One borrow of up to one chunk for `tenant` in `month`; the tokens
    /// granted (0 when the pool or the tenant's cap had no room).
    pub async fn borrow(
        &self,
        tenant: &dyn Tenant,
        month: &str,
        trigger: &str,
    ) -> crate::Result<i64> {
        let pool = self.store.pool_policy().await?;
        let chunk = pool.chunk_tokens();
        if chunk == 0 || !tenant.may_borrow() {
            return Ok(0);
        }
        let id = Uuid::now_v7();
        self.store
            .begin_borrow(id, tenant.id(), month, chunk, trigger, &self.replica)
            .await?;
        self.drive(id, tenant, month, chunk, &pool).await
    }

    /// Debits the pool for a recorded borrow (again, after a crash: the
    /// script answers a known id with its first answer) and activates it.
    async fn drive(
        &self,
        id: Uuid,
        tenant: &dyn Tenant,
        month: &str,
        chunk: i64,
        pool: &PoolPolicy,
    ) -> crate::Result<i64> {
        let total = pool.monthly_tokens.unwrap_or(0);
        let mut granted = None;
        for _ in 0..3 {
            let out = self
                .quota
                .pool_borrow(
                    month,
                    &id.to_string(),
                    tenant.id(),
                    chunk,
                    total,
                    tenant.borrow_cap_tokens(),
                )
                .await?;
            match out {
                BorrowOutcome::Granted { tokens, .. } | BorrowOutcome::Seen { tokens } => {
                    granted = Some(tokens);
                    break;
                }
                BorrowOutcome::Unknown => self.rebuild_pool(month).await?,
            }
        }
        let tokens = granted.ok_or_else(|| crate::Error::PoolRebuildIncomplete {
            month: month.to_string(),
        })?;
        let cost = pool.cost_for(tokens);
        self.store.finish_borrow(id, tokens, cost).await?;
        if tokens > 0 {
            tracing::info!(tenant = %tenant.id(), month, tokens, cost, "borrowed from the pool");
        }
        // Always: an index reloaded while an earlier borrow was landing may
        // show this tenant without it (then the cap left nothing to grant).
        self.refresh_borrowed(tenant, month).await;
        Ok(tokens)
    }

    /// Sets the tenant's in-memory borrowed amount from Postgres, on the
    /// entry the caller holds and on the index's current one.
    async fn refresh_borrowed(&self, tenant: &dyn Tenant, month: &str) {
        let Ok(rows) = self.store.borrowed(&TenantScope::system()).await else {
            return;
        };
        let (t, c) = rows
            .iter()
            .find(|r| r.tenant_id == tenant.id() && r.period == month)
            .map_or((0, 0), |r| (r.tokens, r.cost_micro));
        tenant.set_borrowed(month, t, c);
        if let Some(cur) = self.catalog.tenant(tenant.id()) {
            cur.set_borrowed(month, t, c);
        }
    }

    /// Restores the pool's month in Redis from Postgres.
    pub async fn rebuild_pool(&self, month: &str) -> crate::Result<()> {
        let rows = self.store.borrowed(&TenantScope::system()).await?;
        let outstanding: Vec<(String, i64)> = rows
            .into_iter()
            .filter(|r| r.period == month)
            .map(|r| (r.tenant_id, r.tokens))
            .collect();
        let pending: Vec<String> = self
            .store
            .reclaims(&TenantScope::system(), month, true)
            .await?
            .into_iter()
            .map(|r| r.id.to_string())
            .collect();
        let rebuilt = self
            .quota
            .pool_rebuild(month, &outstanding, &pending)
            .await?;
        if rebuilt {
            tracing::info!(
                month,
                tenants = outstanding.len(),
                "rebuilt the pool from Postgres"
            );
        }
        Ok(())
    }

    /// The periodic check: drives borrows left pending, and borrows ahead
    /// for tenants whose used + held reached `near_limit_ppm` of their
    /// effective token limit. Returns the number of borrows granted.
    pub async fn run_borrow_check(&self, now: DateTime<Utc>) -> crate::Result<usize> {
        let month = self.clock.month(now);
        let pool = self.store.pool_policy().await?;
        let index = self.catalog.tenants();
        let mut granted = 0;
        let stuck = self
            .store
            .pending_borrows(&TenantScope::system(), now - chrono::Duration::seconds(30))
            .await?;
        for b in stuck {
            let Some(t) = index.get(&b.tenant_id) else {
                continue;
            };
            if self
                .drive(b.id, t.as_ref(), &b.period, b.asked_tokens, &pool)
                .await?
                > 0
            {
                granted += 1;
            }
        }
        if pool.chunk_tokens() == 0 {
            return Ok(granted);
        }
        for t in index.values() {
            if !t.may_borrow() || t.borrowed_in(&month).0 >= t.borrow_cap_tokens() {
                continue;
            }
            let Some(limit) = t.effective(now, &month).monthly_tokens else {
                continue;
            };
            let c = self.quota.month_counters(t.id(), &month).await?;
            let busy = c.used_tokens("t") + c.held_tokens("t");
            if (busy as i128) * 1_000_000 >= limit as i128 * self.tuning.near_limit_ppm as i128
                && self.borrow(t.as_ref(), &month, "near_limit").await? > 0
            {
                granted += 1;
            }
        }
        Ok(granted)
    }

    /// The reclaim job (docs/design.md §7): when the pool's free share is below its
    /// threshold, takes unused borrowed quota back — lowest priority and
    /// longest-held first, at most `reclaim_fraction_ppm` of each borrow per
    /// run, never below what a tenant has used or holds — and records each
    /// reclaim in Postgres and the audit log.
    pub async fn run_reclaim(&self, now: DateTime<Utc>) -> crate::Result<ReclaimReport> {
        let month = self.clock.month(now);
        // Reclaims a crash left half-done give the pool its amount first.
        for r in self
            .store
            .reclaims(&TenantScope::system(), &month, true)
            .await?
        {
            self.quota
                .pool_return(&month, &r.id.to_string(), &r.tenant_id, r.tokens)
                .await?;
            self.store.finish_reclaim(r.id).await?;
        }
        let pool = self.store.pool_policy().await?;
        let lent = match self.quota.pool_state(&month).await? {
            Some((lent, _)) => lent,
            None => {
                self.rebuild_pool(&month).await?;
                self.quota.pool_state(&month).await?.map_or(0, |s| s.0)
            }
        };
        let need = pool.reclaim_need(lent);
        let mut report = ReclaimReport {
            period: month.clone(),
            lent_before: lent,
            need,
            ..Default::default()
        };
        if need == 0 {
            return Ok(report);
        }
        let index = self.catalog.tenants();
        let borrows: Vec<_> = self
            .store
            .borrows(&TenantScope::system(), &month)
            .await?
            .into_iter()
            .filter(|b| b.state == "active" && b.outstanding_tokens > 0)
            .collect();
        let ledger = StoreLedger {
            store: &self.store,
            quota: &self.quota,
            writer: None,
        };
        let mut headroom: HashMap<String, i64> = HashMap::new();
        let mut candidates = Vec::new();
        for b in &borrows {
            let t = index.get(&b.tenant_id);
            if !headroom.contains_key(&b.tenant_id) {
                let room = match t.and_then(|t| t.effective(now, &month).monthly_tokens) {
                    Some(limit) => {
                        // After a Redis loss the month must come back from
                        // the ledger first, or all of it would look unused.
                        let c = self
                            .quota
                            .month_counters_rebuilt(&b.tenant_id, &month, &ledger)
                            .await?;
                        limit - c.used_tokens("t") - c.held_tokens("t")
                    }
                    // No token budget: borrowed tokens raise nothing; all of it is unused.
                    None => i64::MAX,
                };
                headroom.insert(b.tenant_id.clone(), room);
            }
            candidates.push(ReclaimCandidate {
                borrow: b.id.to_string(),
                tenant: b.tenant_id.clone(),
                priority: t.map_or(domain::fairq::Priority::Standard, |t| t.priority()),
                borrowed_at_ms: b.created_at.timestamp_millis(),
                outstanding_tokens: b.outstanding_tokens,
            });
        }
        let steps = plan_reclaim(need, &candidates, self.tuning.reclaim_fraction_ppm, |t| {
            headroom.get(t).copied().unwrap_or(0)
        });
        for s in steps {
            let b = borrows
                .iter()
                .find(|b| b.id.to_string() == s.borrow)
                .expect("planned from these borrows");
            // Cost goes back in proportion to the tokens.
            let cost = ((b.outstanding_cost_micro as i128 * s.tokens as i128)
                / b.outstanding_tokens as i128) as i64;
            let reason = format!(
                "pool free share below threshold: {} of {} tokens lent",
                lent,
                pool.monthly_tokens.unwrap_or(0)
            );
            let r = self
                .store
                .reclaim("job:reclaim", b.id, s.tokens, cost, &reason)
                .await?;
            self.quota
                .pool_return(&month, &r.id.to_string(), &r.tenant_id, r.tokens)
                .await?;
            self.store.finish_reclaim(r.id).await?;
            if let Some(t) = index.get(&b.tenant_id) {
                self.refresh_borrowed(t.as_ref(), &month).await;
            }
            report.reclaimed_tokens += s.tokens;
            report.reclaims += 1;
        }
        tracing::info!(?report, "reclaim run");
        Ok(report)
    }
}
