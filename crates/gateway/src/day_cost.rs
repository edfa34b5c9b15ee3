//! Each tenant's settled cost of the day as this replica sees it, for the
//! daily soft limit (docs/fair.md, "The daily soft limit"): one
//! `domain::day_cost::DayView` per tenant-day, synced with the Redis
//! counter by one call that adds this replica's unsent costs and answers the
//! total.
//!
//! - A request reads the view (no Redis call) while it synced within
//!   [`FRESH`]; the first request that finds it older syncs it (the others
//!   read the view as it was meanwhile; a request that finds a view never
//!   synced waits for that sync).
//! - A settle adds its cost to the view at once and wakes the flusher, which
//!   sends every view's unsent costs after [`LINGER`]: one call per
//!   tenant-day and batch, and each call's answer syncs the view — so with
//!   traffic, other replicas' spend is seen within a few milliseconds.
//!
//! Before, each request of a tenant with a soft limit made two Redis calls
//! of its own (a read before admission, an add after the settle).

use crate::errors::Internal;
use domain::day_cost::DayView;
use quota::QuotaEngine;
use rustc_hash::FxHashMap as HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use store::{Store, TenantScope};
use tokio::sync::Notify;

/// A view synced this recently is read without Redis.
pub const FRESH: Duration = Duration::from_millis(250);
/// Settled costs wait this long for others to go in the same call.
pub const LINGER: Duration = Duration::from_millis(5);

struct Entry {
    view: Mutex<DayView>,
    /// Held while this view syncs: syncs of one view never overlap.
    turn: tokio::sync::Mutex<()>,
}

/// A tenant's days (one, two around midnight), oldest first.
type Days = Vec<(String, Arc<Entry>)>;

pub struct DayCosts {
    quota: Arc<QuotaEngine>,
    store: Store,
    /// tenant → its days and their views.
    views: Mutex<HashMap<String, Days>>,
    wake: Arc<Notify>,
    origin: Instant,
}

impl DayCosts {
    /// The views and their flusher (ends when the last handle is dropped).
    pub fn start(quota: Arc<QuotaEngine>, store: Store) -> Arc<Self> {
        let me = Arc::new(Self {
            quota,
            store,
            views: Mutex::new(HashMap::default()),
            wake: Arc::new(Notify::new()),
            origin: Instant::now(),
        });
        tokio::spawn(flusher(Arc::downgrade(&me), me.wake.clone()));
        me
    }

    fn now_ms(&self) -> u64 {
        self.origin.elapsed().as_millis() as u64
    }

    fn entry(&self, tenant: &str, day: &str) -> Arc<Entry> {
        let mut views = self.views.lock().expect("day cost lock");
        let days = match views.get_mut(tenant) {
            Some(d) => d,
            None => views.entry(tenant.to_string()).or_default(),
        };
        if let Some((_, e)) = days.iter().find(|(d, _)| d == day) {
            return e.clone();
        }
        let e = Arc::new(Entry {
            view: Mutex::new(DayView::default()),
            turn: tokio::sync::Mutex::new(()),
        });
        days.push((day.to_string(), e.clone()));
        e
    }

    /// A cost settled on this replica: counted at once, sent soon.
    pub fn add(&self, tenant: &str, day: &str, cost: i64) {
        if cost <= 0 {
            return;
        }
        let e = self.entry(tenant, day);
        e.view.lock().expect("day view lock").add(cost);
        self.wake.notify_one();
    }

    /// The tenant's settled cost of `day` as this replica knows it.
    pub async fn current(&self, tenant: &str, day: &str) -> Result<i64, Internal> {
        let e = self.entry(tenant, day);
        let last_known = {
            let v = e.view.lock().expect("day view lock");
            if let Some(c) = v.current(self.now_ms(), FRESH.as_millis() as u64) {
                return Ok(c);
            }
            v.last_known()
        };
        let turn = match (e.turn.try_lock(), last_known) {
            (Ok(turn), _) => turn,
            // Another request is syncing it: the view as it was will do.
            (Err(_), Some(c)) => return Ok(c),
            (Err(_), None) => {
                let turn = e.turn.lock().await;
                let v = e.view.lock().expect("day view lock");
                if let Some(c) = v.current(self.now_ms(), FRESH.as_millis() as u64) {
                    return Ok(c);
                }
                drop(v);
                turn
            }
        };
        let total = self.sync(tenant, day, &e).await;
        drop(turn);
        total
    }

    /// Sends the view's unsent costs (maybe none) and syncs it with the
    /// answer. The caller holds the entry's turn.
    async fn sync(&self, tenant: &str, day: &str, e: &Entry) -> Result<i64, Internal> {
        let amount = e
            .view
            .lock()
            .expect("day view lock")
            .begin_sync()
            .expect("one sync at a time: the caller holds the turn");
        match self.add_in_redis(tenant, day, amount).await {
            Ok(total) => {
                let mut v = e.view.lock().expect("day view lock");
                v.synced(total, self.now_ms());
                Ok(v.last_known().unwrap_or(total))
            }
            Err(err) => {
                e.view.lock().expect("day view lock").sync_failed();
                Err(err)
            }
        }
    }

    /// Adds `amount` to the Redis counter and answers the day's total; a
    /// day without a counter starts from the ledger first.
    async fn add_in_redis(&self, tenant: &str, day: &str, amount: i64) -> Result<i64, Internal> {
        if let Some(total) = self.quota.day_cost_add(tenant, day, amount).await? {
            return Ok(total);
        }
        let ledger = self
            .store
            .tenant_day_cost(&TenantScope::system(), tenant, day)
            .await?;
        let start = ledger.saturating_add(amount);
        let (started, total) = self.quota.day_cost_rebuild(tenant, day, start).await?;
        if started {
            return Ok(total);
        }
        // Another replica started it meanwhile: add to its count.
        match self.quota.day_cost_add(tenant, day, amount).await? {
            Some(total) => Ok(total),
            None => {
                Err(quota::QuotaError::Protocol("the day's cost counter vanished".into()).into())
            }
        }
    }

    /// Sends every view's unsent costs now; false when some could not be
    /// sent (Redis failed, or a view was syncing).
    pub async fn flush(&self) -> bool {
        let pending: Vec<(String, String, Arc<Entry>)> = {
            let mut views = self.views.lock().expect("day cost lock");
            let mut out = Vec::new();
            views.retain(|tenant, days| {
                // Days are added in order: the last is the newest.
                let newest = days.len().saturating_sub(1);
                let mut i = 0;
                days.retain(|(day, e)| {
                    let unsent = e.view.lock().expect("day view lock").has_unsent();
                    if unsent {
                        out.push((tenant.clone(), day.clone(), e.clone()));
                    }
                    // An older day's view goes once sent and unused.
                    let keep = i == newest || unsent || Arc::strong_count(e) > 1;
                    i += 1;
                    keep
                });
                !days.is_empty()
            });
            out
        };
        let mut all = true;
        for (tenant, day, e) in pending {
            let Ok(turn) = e.turn.try_lock() else {
                all = false;
                continue;
            };
            if let Err(err) = self.sync(&tenant, &day, &e).await {
                tracing::warn!(tenant = %tenant, error = %err, "day cost not sent; retrying");
                all = false;
            }
            drop(turn);
        }
        all
    }
}

impl Drop for DayCosts {
    fn drop(&mut self) {
        // The flusher wakes, finds no views, and ends.
        self.wake.notify_one();
    }
}

async fn flusher(me: std::sync::Weak<DayCosts>, wake: Arc<Notify>) {
    let mut backoff = LINGER;
    loop {
        wake.notified().await;
        tokio::time::sleep(LINGER).await;
        loop {
            let Some(d) = me.upgrade() else { return };
            if d.flush().await {
                backoff = LINGER;
                break;
            }
            drop(d);
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(Duration::from_secs(2));
        }
    }
}
