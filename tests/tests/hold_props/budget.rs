//! The tenant's effective monthly token limit as the gateway's hot path
//! computes it — `TenantEntry::effective(now, month)` of the catalog index:
//! base (the tenants row) + approved grants unexpired at `now` + outstanding
//! borrowed. The clock is simulated so that grants expire mid-case. The
//! index is reloaded where the gateway reloads it on NOTIFY (a base change,
//! an approved grant) and deliberately not when a grant expires: that must
//! take effect by time alone (docs/design.md §3).

use super::Setup;
use chrono::{DateTime, Duration, TimeZone, Utc};
use domain::period::PlatformClock;
use domain::Limits;
use gateway::catalog::TenantEntry;
use gateway::state::CatalogCache;
use proptest::prelude::*;
use std::sync::Arc;
use store::{NewQuotaRequest, Store, TenantRow};
use uuid::Uuid;

/// The two console users a grant needs: one asks, another approves.
#[derive(Debug, Clone, Copy)]
pub struct Approvers {
    pub requester: Uuid,
    pub approver: Uuid,
}

pub struct Budget {
    pub tenant: TenantRow,
    pub catalog: Arc<CatalogCache>,
    pub clock: PlatformClock,
    /// The simulated clock: what the limit check and the jobs take as now.
    pub now: DateTime<Utc>,
    pub month: String,
    /// Approved grants: (tokens, expires_at).
    grants: Vec<(i64, DateTime<Utc>)>,
}

impl Budget {
    /// Creates the tenant and loads the index. Case `n` runs in a month of
    /// its own, from 2030 on: the pool is per month, so no case borrows
    /// from another's, and every grant lies after the real clock, so
    /// Postgres loads it as unexpired and the simulated clock alone decides.
    pub async fn start(store: &Store, tenant: &str, setup: &Setup, case: u32) -> Self {
        let tenant = TenantRow {
            id: tenant.into(),
            name: tenant.into(),
            cost_center: "CC-1".into(),
            priority: "standard".into(),
            limits: monthly(setup.base),
            may_borrow: true,
            borrow_cap_tokens: setup.borrow_cap,
            allowed_models: None,
            clamp_max_tokens: false,
            max_queued_requests: None,
            max_open_streams: None,
        };
        store.create_tenant("test", &tenant).await.unwrap();
        let key = hex::decode(e2e::ENC_KEY).unwrap().try_into().unwrap();
        let catalog = Arc::new(CatalogCache::new(key));
        catalog.reload(store).await.unwrap();
        let clock = PlatformClock::parse("UTC").unwrap();
        let year = 2030 + (case / 12) as i32;
        let now = Utc
            .with_ymd_and_hms(year, case % 12 + 1, 2, 0, 0, 0)
            .unwrap();
        Self {
            month: clock.month(now),
            tenant,
            catalog,
            clock,
            now,
            grants: Vec::new(),
        }
    }

    /// The tenant as the hot path sees it now.
    pub fn entry(&self) -> Arc<TenantEntry> {
        let index = self.catalog.get();
        index.tenants[&self.tenant.id].clone()
    }

    /// The tenant's limits the gateway passes to the hold engine now.
    pub fn limits(&self) -> Limits {
        self.entry().effective(self.now, &self.month)
    }

    pub fn limit(&self) -> i64 {
        self.limits().monthly_tokens.expect("a token budget")
    }

    /// A platform admin changes the base limit.
    pub async fn set_base(&mut self, store: &Store, tokens: i64) {
        self.tenant.limits = monthly(tokens);
        store
            .update_tenant("test", &self.tenant, serde_json::Value::Null, None)
            .await
            .unwrap();
        self.catalog.reload(store).await.unwrap();
    }

    /// A temporary grant is requested and approved.
    pub async fn grant(&mut self, store: &Store, who: Approvers, tokens: i64, minutes: i64) {
        let expires_at = self.now + Duration::minutes(minutes);
        let asked = NewQuotaRequest {
            tenant_id: self.tenant.id.clone(),
            app_id: None,
            tokens,
            cost_micro: 0,
            expires_at,
            reason: "campaign".into(),
            requested_by: who.requester,
        };
        let q = store.create_quota_request("test", &asked).await.unwrap();
        store
            .decide_quota_request("test", q.id, who.approver, true, "ok")
            .await
            .unwrap();
        self.grants.push((tokens, expires_at));
        self.catalog.reload(store).await.unwrap();
    }

    /// The clock reaches the very instant one live grant expires (a minute
    /// passes when none is live), and the grant-expiry job runs — it only
    /// records the expiry.
    pub async fn expire_grant(&mut self, store: &Store, pick: usize) {
        let live: Vec<DateTime<Utc>> = self
            .grants
            .iter()
            .map(|g| g.1)
            .filter(|at| *at > self.now)
            .collect();
        self.now = match live.len() {
            0 => self.now + Duration::minutes(1),
            n => live[pick % n],
        };
        store
            .record_grant_expiries("job:grant-expiry", self.now)
            .await
            .unwrap();
    }

    /// The effective limit is base + unexpired grants + `borrowed`.
    pub fn check(&self, borrowed: i64) -> Result<(), TestCaseError> {
        let granted: i64 = self
            .grants
            .iter()
            .filter(|g| g.1 > self.now)
            .map(|g| g.0)
            .sum();
        let base = self.tenant.limits.monthly_tokens.expect("a base budget");
        prop_assert_eq!(
            self.limit(),
            base + granted + borrowed,
            "effective limit at {}: base {}, granted {}, borrowed {}",
            self.now,
            base,
            granted,
            borrowed
        );
        Ok(())
    }
}

fn monthly(tokens: i64) -> Limits {
    Limits {
        monthly_tokens: Some(tokens),
        ..Default::default()
    }
}
