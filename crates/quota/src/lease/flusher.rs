//! A lease's flusher: its settles go to Redis in batches (one Lua call per
//! batch, the batch's usage events written in that same call), in order,
//! each retried under the same sequence number until Redis answers.

use super::{close_if_drained, drop_grant, Lease, Msg};
use crate::engine::{QuotaEngine, SettleOutcome};
use crate::lease_engine::{LeaseBatch, LeaseBatchOutcome};
use domain::lease::{Chunk, Pools};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;

/// Sends a lease's settles to Redis in batches, in order, each retried
/// under the same sequence number until Redis answers (a batch is applied
/// at most once), then answers each request.
pub(super) struct Flusher {
    pub(super) engine: Arc<QuotaEngine>,
    pub(super) lease: Arc<Lease>,
    pub(super) linger: Duration,
    pub(super) max_batch: usize,
}

impl Flusher {
    pub(super) async fn run(self, mut rx: mpsc::UnboundedReceiver<Msg>) {
        let mut seq = 0u64;
        let l = &self.lease;
        loop {
            let Some(first) = rx.recv().await else { return };
            let mut items = Vec::new();
            let mut waiters = Vec::new();
            let mut given = Vec::new();
            let mut give = Chunk::default();
            let mut close = false;
            let lingers = matches!(first, Msg::Item(..)) && !self.linger.is_zero();
            let mut take = |m: Msg, close: &mut bool| match m {
                Msg::Item(it, w) => {
                    items.push(it);
                    waiters.push(w);
                }
                Msg::Give(c, w) => {
                    give = Chunk::from_array(std::array::from_fn(|i| {
                        give.as_array()[i] + c.as_array()[i]
                    }));
                    given.push(w);
                }
                Msg::Close => *close = true,
            };
            take(first, &mut close);
            if lingers {
                tokio::time::sleep(self.linger).await;
            }
            let mut n = 1;
            while n < self.max_batch && !close {
                match rx.try_recv() {
                    Ok(m) => take(m, &mut close),
                    Err(_) => break,
                }
                n += 1;
            }
            seq += 1;
            if close {
                let (r, i, o) = l.state.lock().expect("lease lock").pools.unused_rates();
                give.requests += r;
                give.input += i;
                give.output += o;
            }
            let c = &l.chain;
            let batch = LeaseBatch {
                lease_id: &l.id,
                tenant: &c.tenant,
                app: &c.app,
                key: &c.key,
                month: &c.month,
                seq,
                items: &items,
                close,
                give,
                limits: [&l.limits[0], &l.limits[1], &l.limits[2]],
            };
            let mut attempt = 0u32;
            let outcome = loop {
                match self.engine.lease_settle(&batch).await {
                    Ok(LeaseBatchOutcome::Duplicate { state }) if attempt == 0 => {
                        // Only a retry can find its batch applied already.
                        tracing::error!(lease = %l.id, seq, state, "a new lease batch was seen before; its settles are not booked");
                        break LeaseBatchOutcome::Duplicate { state };
                    }
                    Ok(LeaseBatchOutcome::Duplicate { state }) if state != "L" && !close => {
                        // A retry whose first try was applied: the lease's
                        // liveness still counts (it may have been expired
                        // or lost since).
                        tracing::warn!(lease = %l.id, seq, state, "lease no longer live in Redis; retiring it");
                        drop_grant(l);
                        break LeaseBatchOutcome::Duplicate { state };
                    }
                    Ok(o) => break o,
                    Err(e) => {
                        l.state.lock().expect("lease lock").unreachable = true;
                        tracing::warn!(lease = %l.id, attempt, error = %e, "lease settle failed; retrying the same batch");
                        tokio::time::sleep(Duration::from_millis(
                            (25u64 << attempt.min(8)).min(5_000),
                        ))
                        .await;
                        attempt += 1;
                    }
                }
            };
            l.state.lock().expect("lease lock").unreachable = false;
            let mut per: HashMap<usize, (i64, i64)> = HashMap::new();
            if let LeaseBatchOutcome::Applied {
                live,
                overrun,
                per_item_overrun,
                ..
            } = &outcome
            {
                let mut ls = l.state.lock().expect("lease lock");
                ls.pools.overrun_booked(overrun.0, overrun.1);
                if !live && !close {
                    // Expired by the reconciler or lost with Redis: what it
                    // held is gone; admit nothing more from it.
                    tracing::warn!(lease = %l.id, "lease no longer live in Redis; retiring it");
                    ls.retiring = true;
                    ls.pools = Pools::default();
                    close_if_drained(l, &mut ls);
                }
                per = per_item_overrun
                    .iter()
                    .map(|(i, t, c)| (*i, (*t, *c)))
                    .collect();
            }
            for w in given {
                let _ = w.send(());
            }
            for (i, done) in waiters.into_iter().enumerate() {
                let (t, c) = per.get(&i).copied().unwrap_or((0, 0));
                done(SettleOutcome::Settled {
                    overrun_tokens: t,
                    overrun_cost: c,
                });
            }
            if close {
                return;
            }
        }
    }
}
