//! The ledger writer: settled usage events, batched into Postgres. Each event
//! is already parked in its tenant's Redis outbox by the settle script, so the
//! in-memory queue is only the fast path: an event lost here (full queue,
//! crash, Postgres down) is found and stored by the outbox sweeper. Inserts
//! are idempotent by request_id, so storing an event twice counts it once.

use crate::metrics_names as m;
use crate::Tenants;
use domain::usage::UsageEvent;
use quota::QuotaEngine;
use std::sync::Arc;
use std::time::Duration;
use store::Store;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;

enum Msg {
    Event(Box<UsageEvent>),
    Flush(oneshot::Sender<()>),
}

#[derive(Clone)]
pub struct LedgerWriter {
    tx: mpsc::Sender<Msg>,
}

const QUEUE: usize = 100_000;

impl LedgerWriter {
    pub fn start(
        store: Store,
        quota: Arc<QuotaEngine>,
        batch: usize,
        linger: Duration,
    ) -> (Self, JoinHandle<()>) {
        let (tx, rx) = mpsc::channel(QUEUE);
        let task = tokio::spawn(run(rx, store, quota, batch.max(1), linger));
        (Self { tx }, task)
    }

    pub fn submit(&self, ev: UsageEvent) {
        if self.tx.try_send(Msg::Event(Box::new(ev))).is_err() {
            // The outbox still has it; the sweeper will store it.
            metrics::counter!(m::LEDGER_ERRORS, "kind" => "queue_full").increment(1);
        }
    }

    /// Waits until everything submitted before this call was written (or
    /// failed and was left to the sweeper).
    pub async fn flush(&self) {
        let (tx, rx) = oneshot::channel();
        if self.tx.send(Msg::Flush(tx)).await.is_ok() {
            let _ = rx.await;
        }
    }
}

async fn run(
    mut rx: mpsc::Receiver<Msg>,
    store: Store,
    quota: Arc<QuotaEngine>,
    batch: usize,
    linger: Duration,
) {
    let mut events: Vec<UsageEvent> = Vec::with_capacity(batch);
    let mut waiters: Vec<oneshot::Sender<()>> = Vec::new();
    loop {
        let Some(first) = rx.recv().await else { break };
        let mut closed = false;
        push(first, &mut events, &mut waiters);
        let deadline = tokio::time::Instant::now() + linger;
        while events.len() < batch && waiters.is_empty() {
            match tokio::time::timeout_at(deadline, rx.recv()).await {
                Ok(Some(msg)) => push(msg, &mut events, &mut waiters),
                Ok(None) => {
                    closed = true;
                    break;
                }
                Err(_) => break,
            }
        }
        store_batch(&store, &quota, &mut events).await;
        for w in waiters.drain(..) {
            let _ = w.send(());
        }
        if closed {
            break;
        }
    }
    store_batch(&store, &quota, &mut events).await;
}

fn push(msg: Msg, events: &mut Vec<UsageEvent>, waiters: &mut Vec<oneshot::Sender<()>>) {
    match msg {
        Msg::Event(e) => events.push(*e),
        Msg::Flush(w) => waiters.push(w),
    }
}

async fn store_batch(store: &Store, quota: &QuotaEngine, events: &mut Vec<UsageEvent>) {
    if events.is_empty() {
        return;
    }
    for attempt in 0..3u32 {
        match store.insert_usage_events(events).await {
            Ok(n) => {
                metrics::counter!(m::LEDGER_EVENTS).increment(n);
                let stored: Vec<(&str, &str)> = events
                    .iter()
                    .map(|e| (e.tenant_id.as_str(), e.request_id.as_str()))
                    .collect();
                if let Err(e) = quota.outbox_remove(&stored).await {
                    // Harmless: the sweeper re-inserts (a no-op) and removes them.
                    tracing::warn!(error = %e, "could not clear stored events from the outbox");
                }
                events.clear();
                return;
            }
            Err(e) => {
                metrics::counter!(m::LEDGER_ERRORS, "kind" => "insert").increment(1);
                tracing::warn!(error = %e, attempt, events = events.len(), "ledger insert failed");
                tokio::time::sleep(Duration::from_millis(50 << attempt)).await;
            }
        }
    }
    // Left in the Redis outbox for the sweeper.
    events.clear();
}

/// Outbox entries read per `HSCAN` step (a hint to Redis), and so about a
/// batch's size.
const SWEEP_PAGE: usize = 500;

/// How long the periodic sweeper leaves a settled event to the ledger
/// writer that queued it: a writer stores its batch within its linger and
/// one insert, so an event settled longer ago than this was lost (a crash,
/// a full queue, Postgres down) or is being retried. Storing the younger
/// ones as well stored them twice at once: the writer's `COPY` then failed
/// on the primary key (its rows left behind as dead tuples) and its batch
/// went again through the skipping insert (bench/results/
/// 2026-12-04-the-sweeper-leaves-young-events-to-the.md). The margin covers clock skew
/// between replicas, whose events any replica's sweeper stores, and an
/// event stamped before a slow settle or a backed-up writer queue; one a
/// writer still holds past the grace is only stored twice, counted once.
/// An event stamped ahead by a replica whose clock runs fast waits until
/// real time passes its stamp (or for the jobs' sweep, which stores all).
pub fn writer_grace(linger: Duration) -> Duration {
    Duration::from_secs(2).saturating_add(linger.saturating_mul(2))
}

/// The settle time before which the sweeper's pass at `now_ms` stores
/// events: `grace` earlier.
fn grace_cutoff(now_ms: i64, grace: Duration) -> i64 {
    let grace_ms = i64::try_from(grace.as_millis()).unwrap_or(i64::MAX);
    now_ms.saturating_sub(grace_ms)
}

/// Whether a sweep storing the events settled before `settled_before_ms`
/// (all of them: `None`) stores one settled at `settled_at_ms`.
fn swept(settled_at_ms: i64, settled_before_ms: Option<i64>) -> bool {
    settled_before_ms.is_none_or(|b| settled_at_ms < b)
}

/// Stores every event waiting in the outboxes of the given tenants (settled
/// by any replica, including ones that crashed). Returns how many were new.
/// For the jobs that need the ledger complete now (rollover, reconcile, a
/// month's rebuild).
pub async fn sweep_outboxes(
    store: &Store,
    quota: &QuotaEngine,
    tenants: &[String],
) -> crate::Result<u64> {
    sweep(store, quota, tenants, None).await
}

/// Stores the events of the given tenants' outboxes settled more than
/// `grace` (`writer_grace`) before `now_ms`, leaving younger ones to the
/// writers that queued them. Returns how many were new.
pub async fn sweep_outside_grace(
    store: &Store,
    quota: &QuotaEngine,
    tenants: &[String],
    now_ms: i64,
    grace: Duration,
) -> crate::Result<u64> {
    sweep(store, quota, tenants, Some(grace_cutoff(now_ms, grace))).await
}

/// Stores events taken from their tenants' outboxes, then removes them
/// there. Returns how many were new.
pub(crate) async fn store_from_outbox(
    store: &Store,
    quota: &QuotaEngine,
    events: &[UsageEvent],
) -> crate::Result<u64> {
    let new = store.insert_usage_events(events).await?;
    let stored: Vec<(&str, &str)> = events
        .iter()
        .map(|e| (e.tenant_id.as_str(), e.request_id.as_str()))
        .collect();
    quota.outbox_remove(&stored).await?;
    Ok(new)
}

async fn sweep(
    store: &Store,
    quota: &QuotaEngine,
    tenants: &[String],
    settled_before_ms: Option<i64>,
) -> crate::Result<u64> {
    let mut new = 0;
    for t in tenants {
        let mut cursor = 0;
        loop {
            let (next, raw) = quota.outbox_scan(t, cursor, SWEEP_PAGE).await?;
            let mut events = Vec::with_capacity(raw.len());
            for (rid, json) in &raw {
                match serde_json::from_str::<UsageEvent>(json) {
                    Ok(e) if swept(e.settled_at_ms, settled_before_ms) => events.push(e),
                    Ok(_) => {}
                    Err(e) => {
                        tracing::error!(tenant = %t, request_id = %rid, error = %e, "unreadable outbox event left in place")
                    }
                }
            }
            if !events.is_empty() {
                new += store_from_outbox(store, quota, &events).await?;
            }
            if next == 0 {
                break;
            }
            cursor = next;
        }
    }
    Ok(new)
}

pub fn spawn_sweeper(
    store: Store,
    quota: Arc<QuotaEngine>,
    catalog: Arc<dyn Tenants>,
    every: Duration,
    grace: Duration,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let tenants = catalog.tenant_ids();
            let now_ms = chrono::Utc::now().timestamp_millis();
            match sweep_outside_grace(&store, &quota, &tenants, now_ms, grace).await {
                Ok(0) => {}
                Ok(n) => tracing::info!(events = n, "outbox sweeper stored events"),
                Err(e) => tracing::warn!(error = %e, "outbox sweep failed; will retry"),
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sweeper_leaves_events_younger_than_the_grace() {
        let grace = writer_grace(Duration::from_millis(50));
        assert_eq!(grace, Duration::from_millis(2_100));
        let now = 1_764_770_000_000;
        let before = grace_cutoff(now, grace);
        assert_eq!(before, now - 2_100);
        // Settled more than 2.1 s ago: lost or stuck, the sweeper's.
        assert!(swept(now - 2_101, Some(before)));
        assert!(!swept(now - 2_100, Some(before)));
        // Younger, or stamped ahead by a replica's fast clock: the writer's.
        assert!(!swept(now - 50, Some(before)));
        assert!(!swept(now + 500, Some(before)));
        // The jobs' sweep stores everything.
        assert!(swept(now + 500, None));
        assert!(swept(i64::MIN, None));
    }

    #[test]
    fn absurd_graces_saturate() {
        assert_eq!(grace_cutoff(10, Duration::MAX), 10 - i64::MAX);
        assert_eq!(grace_cutoff(i64::MIN, Duration::from_secs(1)), i64::MIN);
        assert_eq!(writer_grace(Duration::MAX), Duration::MAX);
    }
}
