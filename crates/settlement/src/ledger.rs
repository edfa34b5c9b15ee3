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

/// Stores every event waiting in the outboxes of the given tenants (settled
/// by any replica, including ones that crashed). Returns how many were new.
pub async fn sweep_outboxes(
    store: &Store,
    quota: &QuotaEngine,
    tenants: &[String],
) -> crate::Result<u64> {
    let mut new = 0;
    for t in tenants {
        loop {
            let raw = quota.outbox_peek(t, 500).await?;
            if raw.is_empty() {
                break;
            }
            let mut events = Vec::with_capacity(raw.len());
            for (rid, json) in &raw {
                match serde_json::from_str::<UsageEvent>(json) {
                    Ok(e) => events.push(e),
                    Err(e) => {
                        tracing::error!(tenant = %t, request_id = %rid, error = %e, "unreadable outbox event left in place")
                    }
                }
            }
            if events.is_empty() {
                break;
            }
            new += store.insert_usage_events(&events).await?;
            let stored: Vec<(&str, &str)> = events
                .iter()
                .map(|e| (e.tenant_id.as_str(), e.request_id.as_str()))
                .collect();
            quota.outbox_remove(&stored).await?;
            if raw.len() < 500 {
                break;
            }
        }
    }
    Ok(new)
}

pub fn spawn_sweeper(
    store: Store,
    quota: Arc<QuotaEngine>,
    catalog: Arc<dyn Tenants>,
    every: Duration,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let tenants = catalog.tenant_ids();
            match sweep_outboxes(&store, &quota, &tenants).await {
                Ok(0) => {}
                Ok(n) => tracing::info!(events = n, "outbox sweeper stored events"),
                Err(e) => tracing::warn!(error = %e, "outbox sweep failed; will retry"),
            }
        }
    })
}
