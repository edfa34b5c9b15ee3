//! The shared pool (docs/design.md §7) through the gateway's borrower
//! (`settlement::borrow::Borrowing`): borrows as the on-demand and near-limit
//! paths take them, borrows a dead replica left between the pool's debit
//! and their activation, replays of borrow ids, the periodic check that
//! drives stuck borrows again, the reclaim job, and the pool's rebuild from
//! Postgres after a FLUSHALL.

use super::budget::Budget;
use super::{fail, Setup};
use domain::borrowing::PoolPolicy;
use proptest::prelude::*;
use quota::{BorrowOutcome, QuotaEngine};
use settlement::borrow::{BorrowTuning, Borrowing};
use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;
use store::{BorrowRow, Store, TenantScope};
use uuid::Uuid;

pub struct Pool {
    pub borrowing: Arc<Borrowing>,
    policy: PoolPolicy,
    /// Borrows a dead replica left `pending` after debiting the pool, with
    /// what the pool lent them (None: no debit survives — the pool was
    /// unknown then, or a FLUSHALL lost it since).
    stuck: Vec<(Uuid, Option<i64>)>,
    /// Borrow ids whose record in the pool a FLUSHALL destroyed.
    forgotten: HashSet<Uuid>,
}

impl Pool {
    /// Sets the platform's pool for this case (there is one pool row; each
    /// case borrows in a month of its own).
    pub async fn start(store: &Store, quota: Arc<QuotaEngine>, b: &Budget, s: &Setup) -> Self {
        let policy = PoolPolicy {
            monthly_tokens: Some(s.pool_tokens),
            monthly_cost_micro: None,
            max_borrow_share_ppm: 50_000,
            reclaim_below_share_ppm: s.reclaim_below_ppm,
        };
        store.set_pool_policy("test", &policy).await.unwrap();
        // A request waits for its borrow far longer than in production: a
        // borrow still running after the wait would race the next step.
        let tuning = BorrowTuning {
            wait: Duration::from_secs(30),
            ..Default::default()
        };
        let borrowing = Arc::new(Borrowing::new(
            store.clone(),
            quota,
            b.catalog.clone(),
            b.clock,
            "prop-borrower".into(),
            tuning,
        ));
        Self {
            borrowing,
            policy,
            stuck: Vec::new(),
            forgotten: HashSet::new(),
        }
    }

    fn size(&self) -> i64 {
        self.policy.monthly_tokens.unwrap_or(0)
    }

    fn within_a_chunk(&self, lent: i64) -> Result<(), TestCaseError> {
        let chunk = self.policy.chunk_tokens();
        prop_assert!(
            lent <= chunk,
            "one borrow lent {} > a chunk of {}",
            lent,
            chunk
        );
        Ok(())
    }

    /// One borrow of up to a chunk: what both the on-demand and the
    /// near-limit path run.
    pub async fn borrow(&self, b: &Budget) -> Result<(), TestCaseError> {
        let tenant = b.entry();
        let got = self
            .borrowing
            .borrow(tenant.as_ref(), &b.month, "near_limit")
            .await;
        self.within_a_chunk(got.map_err(fail)?)
    }

    /// A request refused for the tenant's budget asks the borrower: true
    /// when the limit grew (by at most a chunk).
    pub async fn borrow_on_demand(&self, b: &Budget) -> Result<bool, TestCaseError> {
        let before = self.outstanding(b).await;
        let grew = self.borrowing.borrow_for(b.entry(), &b.month).await;
        self.within_a_chunk(self.outstanding(b).await - before)?;
        Ok(grew)
    }

    /// A borrow whose replica died after the pool's debit, before the
    /// borrow became active: the first half of `Borrowing::borrow`.
    pub async fn borrow_and_die(&mut self, b: &Budget) -> Result<(), TestCaseError> {
        let id = Uuid::now_v7();
        let chunk = self.policy.chunk_tokens();
        let store = &self.borrowing.store;
        store
            .begin_borrow(id, &b.tenant.id, &b.month, chunk, "hold_refused", "dead")
            .await
            .map_err(fail)?;
        let debit = match self.debit(b, id).await? {
            BorrowOutcome::Granted { tokens, .. } => Some(tokens),
            BorrowOutcome::Unknown => None,
            seen => return Err(fail(format!("a new borrow id was {seen:?}"))),
        };
        self.stuck.push((id, debit));
        Ok(())
    }

    async fn debit(&self, b: &Budget, id: Uuid) -> Result<BorrowOutcome, TestCaseError> {
        self.borrowing
            .quota
            .pool_borrow(
                &b.month,
                &id.to_string(),
                &b.tenant.id,
                self.policy.chunk_tokens(),
                self.size(),
                b.tenant.borrow_cap_tokens,
            )
            .await
            .map_err(fail)
    }

    /// The periodic check: it drives the stuck borrows again (each replays
    /// its id against the pool, which answers with the first debit) and
    /// borrows for tenants near their limit.
    pub async fn borrow_check(&mut self, b: &Budget) -> Result<(), TestCaseError> {
        self.borrowing.run_borrow_check(b.now).await.map_err(fail)?;
        let system = TenantScope::system();
        for (id, debit) in std::mem::take(&mut self.stuck) {
            let store = &self.borrowing.store;
            let all = store.borrows(&system, &b.month).await.map_err(fail)?;
            let row = all
                .into_iter()
                .find(|r| r.id == id)
                .expect("a recorded borrow");
            prop_assert_ne!(&row.state, "pending", "a stuck borrow was not driven");
            self.within_a_chunk(row.tokens)?;
            if let Some(d) = debit {
                prop_assert_eq!(row.tokens, d, "a replayed borrow id lent anew");
            }
        }
        Ok(())
    }

    /// Every borrow of the month in Postgres.
    async fn month_borrows(&self, b: &Budget) -> Vec<BorrowRow> {
        self.borrowing
            .store
            .borrows(&TenantScope::system(), &b.month)
            .await
            .unwrap()
    }

    /// Borrows of this tenant the pool has a record of.
    async fn known(&self, b: &Budget) -> Vec<BorrowRow> {
        self.month_borrows(b)
            .await
            .into_iter()
            .filter(|r| r.tenant_id == b.tenant.id && r.state != "pending")
            .filter(|r| !self.forgotten.contains(&r.id))
            .collect()
    }

    /// A finished borrow is driven again (debit and activation): the pool
    /// answers with its first grant and nothing changes anywhere.
    pub async fn replay(&self, b: &Budget, pick: usize) -> Result<(), TestCaseError> {
        let known = self.known(b).await;
        if known.is_empty() {
            return Ok(());
        }
        let r = &known[pick % known.len()];
        let quota = &self.borrowing.quota;
        let before = quota.pool_state(&b.month).await.map_err(fail)?;
        let answer = self.debit(b, r.id).await?;
        prop_assert_eq!(answer, BorrowOutcome::Seen { tokens: r.tokens });
        prop_assert_eq!(quota.pool_state(&b.month).await.map_err(fail)?, before);
        let again = self
            .borrowing
            .store
            .finish_borrow(r.id, r.tokens, r.cost_micro)
            .await
            .map_err(fail)?;
        prop_assert_eq!(again.outstanding_tokens, r.outstanding_tokens);
        Ok(())
    }

    /// The reclaim job: the tokens it took back from the tenant.
    pub async fn reclaim(&self, b: &Budget) -> Result<i64, TestCaseError> {
        let before = self.outstanding(b).await;
        self.borrowing.run_reclaim(b.now).await.map_err(fail)?;
        Ok(before - self.outstanding(b).await)
    }

    /// A reclaim from a tenant whose limit was `limit` when the job ran,
    /// and which used and held `busy`: it may take only the headroom.
    pub fn check_reclaim(taken: i64, limit: i64, busy: i64) -> Result<(), TestCaseError> {
        prop_assert!(
            taken <= (limit - busy).max(0),
            "reclaimed {} of a tenant with limit {} that uses and holds {}",
            taken,
            limit,
            busy
        );
        Ok(())
    }

    /// FLUSHALL took the pool's month with every debit it recorded.
    pub async fn flushed(&mut self, b: &Budget) {
        for (_, debit) in &mut self.stuck {
            *debit = None;
        }
        let all = self.month_borrows(b).await;
        self.forgotten.extend(all.iter().map(|r| r.id));
    }

    /// The tenant's outstanding borrowed tokens of the month (Postgres).
    async fn outstanding(&self, b: &Budget) -> i64 {
        share(&self.outstanding_by_tenant(b).await, &b.tenant.id)
    }

    async fn outstanding_by_tenant(&self, b: &Budget) -> Vec<(String, i64)> {
        let rows = self
            .borrowing
            .store
            .borrowed(&TenantScope::system())
            .await
            .unwrap();
        rows.into_iter()
            .filter(|r| r.period == b.month)
            .map(|r| (r.tenant_id, r.tokens))
            .collect()
    }

    /// Lent == Σ outstanding borrows + stuck debits, lent <= the pool, the
    /// tenant within its cap. Returns the tenant's outstanding borrowed.
    pub async fn check(&self, b: &Budget) -> Result<i64, TestCaseError> {
        let per = self.outstanding_by_tenant(b).await;
        let mine = share(&per, &b.tenant.id);
        let stuck: i64 = self.stuck.iter().filter_map(|s| s.1).sum();
        prop_assert!(
            mine + stuck <= b.tenant.borrow_cap_tokens,
            "borrowed {} + {} stuck past the cap {}",
            mine,
            stuck,
            b.tenant.borrow_cap_tokens
        );
        let state = self.borrowing.quota.pool_state(&b.month).await;
        // None: lost with Redis, until the next borrow or reclaim rebuilds it.
        if let Some((lent, owed)) = state.map_err(fail)? {
            let outstanding: i64 = per.iter().map(|(_, tokens)| tokens).sum();
            prop_assert_eq!(lent, outstanding + stuck, "lent vs Σ outstanding");
            prop_assert!(
                lent <= self.size(),
                "lent {} of a pool of {}",
                lent,
                self.size()
            );
            prop_assert_eq!(share(&owed, &b.tenant.id), mine + stuck);
        }
        Ok(mine)
    }
}

/// A tenant's part of a per-tenant list of tokens.
fn share(per: &[(String, i64)], tenant: &str) -> i64 {
    per.iter()
        .find(|(t, _)| t == tenant)
        .map_or(0, |(_, tokens)| *tokens)
}
