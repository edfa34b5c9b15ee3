//! Leases on this replica (docs/design.md §4, "Leases — the fast path"): the
//! two-level bucket. For each scope chain (tenant, app, key, month) the
//! replica holds at most one live lease, admits requests from it without a
//! Redis round trip, and settles them against it in batches (one Lua call
//! per batch, each request's usage event written in that same call).
//!
//! - **Sizing**: a top-up asks for `horizon` of the chain's recent demand
//!   (admission rate × mean request, peak concurrency); the script caps each
//!   dimension at a share of the scope's headroom.
//! - **Near the limit** the script grants nothing and the caller uses the
//!   per-request path; the chain stays on it for `near_limit_backoff` and its
//!   current lease is returned, so no tokens are stranded here.
//! - **Return**: a lease idle for `idle`, older than `max_age`, granted
//!   under limits that have since changed, or found dead in Redis, admits
//!   nothing more; once its last request settles, a final batch returns
//!   what it still holds. `shutdown` returns every lease.

mod flusher;

use crate::engine::{HoldRequest, LedgerSource, QuotaEngine, QuotaError, SettleOutcome};
use crate::lease_engine::{LeaseAcquire, LeaseGrant, LeaseItem};
use domain::lease::{Chunk, Demand, Need, Pools};
use domain::Limits;
use flusher::Flusher;
use rustc_hash::FxHashMap as HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, oneshot, Notify};

#[derive(Debug, Clone)]
pub struct LeaseTuning {
    /// A top-up asks for this much of the recent admission rate.
    pub horizon: Duration,
    /// ... but never more than this many requests' worth.
    pub max_requests: i64,
    /// A lease that admitted nothing for this long is returned.
    pub idle: Duration,
    /// A lease this old admits nothing more and is returned (a fresh one,
    /// sized to current demand, replaces it).
    pub max_age: Duration,
    /// Settles wait this long to travel in one batch.
    pub flush_linger: Duration,
    pub max_batch: usize,
    /// After the script said "near the limit", the chain uses the
    /// per-request path for this long before trying a lease again.
    pub near_limit_backoff: Duration,
}

impl Default for LeaseTuning {
    fn default() -> Self {
        Self {
            horizon: Duration::from_millis(250),
            max_requests: 5_000,
            idle: Duration::from_millis(1_000),
            max_age: Duration::from_secs(10),
            flush_linger: Duration::from_millis(1),
            max_batch: 256,
            near_limit_backoff: Duration::from_millis(250),
        }
    }
}

/// The answer of the lease path for one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LeaseAdmit {
    Admitted {
        remaining_requests: Option<i64>,
        remaining_tokens: Option<i64>,
    },
    /// Not from a lease (a scope is near its limit, or the request does not
    /// fit one): use the per-request path.
    PerRequest,
}

#[derive(Clone, PartialEq, Eq, Hash)]
struct ChainKey {
    tenant: String,
    app: String,
    key: String,
    month: String,
}

struct Chain {
    id: ChainKey,
    state: Mutex<ChainState>,
    /// One top-up at a time per chain; the others wait and retry locally.
    refill: tokio::sync::Mutex<()>,
}

struct ChainState {
    current: Option<Arc<Lease>>,
    demand: Demand,
    per_request_until: Option<Instant>,
    last_seen: Instant,
}

struct Lease {
    id: String,
    chain: ChainKey,
    /// The limits the lease was granted under: when the effective limits
    /// change (a grant, a lower budget), the lease admits nothing more.
    limits: [Limits; 3],
    created: Instant,
    state: Mutex<LeaseState>,
    tx: mpsc::UnboundedSender<Msg>,
}

struct LeaseState {
    pools: Pools,
    inflight: i64,
    /// Admits nothing more; returned once `inflight` is zero.
    retiring: bool,
    close_sent: bool,
    last_admit: Instant,
    /// Set while a batch of this lease cannot reach Redis: the lease then
    /// admits nothing (fail closed, as the per-request path does), since
    /// Redis may have lost it.
    unreachable: bool,
    /// Redis granted this lease something: a later acquire is a top-up,
    /// which Redis must know already (it never re-creates a lost lease).
    granted: bool,
    remaining_requests: Option<i64>,
    remaining_tokens: Option<i64>,
}

/// What finishes a lease settle once its batch is in Redis; it runs in the
/// lease's flusher, so it must be short (the gateway books the event and
/// counts it; no task of its own per request). Dropped unrun only when the
/// flusher stops (runtime shutting down): the event is then in the outbox
/// if the batch landed, and the sweeper stores it.
pub type SettleDone = Box<dyn FnOnce(SettleOutcome) + Send>;

enum Msg {
    Item(LeaseItem, SettleDone),
    /// Give this back now (the lease shrinks); answered once Redis has it.
    Give(Chunk, oneshot::Sender<()>),
    Close,
}

struct Ticket {
    lease: Arc<Lease>,
    need: Need,
}

pub struct LeaseBook {
    engine: Arc<QuotaEngine>,
    tuning: LeaseTuning,
    chains: Mutex<HashMap<ChainKey, Arc<Chain>>>,
    tickets: Mutex<HashMap<String, Ticket>>,
    next_id: AtomicU64,
    /// Leases whose final batch has not been applied yet.
    open: Arc<OpenLeases>,
}

#[derive(Default)]
struct OpenLeases {
    count: AtomicUsize,
    closed: Notify,
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

impl LeaseBook {
    /// A book and its janitor (returns idle, old and dead leases).
    pub fn start(engine: Arc<QuotaEngine>, tuning: LeaseTuning) -> Arc<Self> {
        let book = Arc::new(Self {
            engine,
            tuning,
            chains: Mutex::new(HashMap::default()),
            tickets: Mutex::new(HashMap::default()),
            next_id: AtomicU64::new(1),
            open: Arc::default(),
        });
        let weak = Arc::downgrade(&book);
        let every = (book.tuning.idle.min(book.tuning.max_age) / 4).max(Duration::from_millis(20));
        tokio::spawn(janitor(weak, every));
        book
    }

    pub fn tuning(&self) -> &LeaseTuning {
        &self.tuning
    }

    fn chain(&self, req: &HoldRequest<'_>) -> Arc<Chain> {
        let id = ChainKey {
            tenant: req.tenant.to_string(),
            app: req.app.to_string(),
            key: req.key.to_string(),
            month: req.month.to_string(),
        };
        let mut chains = self.chains.lock().expect("lease book lock");
        chains
            .entry(id.clone())
            .or_insert_with(|| {
                Arc::new(Chain {
                    id,
                    state: Mutex::new(ChainState {
                        current: None,
                        demand: Demand::default(),
                        per_request_until: None,
                        last_seen: Instant::now(),
                    }),
                    refill: tokio::sync::Mutex::new(()),
                })
            })
            .clone()
    }

    /// Admits a request from its chain's lease, topping the lease up (one
    /// Redis call) when it runs short. `PerRequest` when the chain is near
    /// a limit or the lease cannot take the request.
    pub async fn admit(
        &self,
        req: &HoldRequest<'_>,
        ledger: &impl LedgerSource,
    ) -> Result<LeaseAdmit, QuotaError> {
        let need = Need {
            input: req.est_input,
            output: req.est_output,
            cost: req.est_cost,
        };
        let chain = self.chain(req);
        {
            let mut st = chain.state.lock().expect("chain lock");
            let inflight = st
                .current
                .as_ref()
                .map_or(0, |l| l.state.lock().expect("lease lock").inflight);
            st.demand.record(&need, inflight + 1, now_ms());
            st.last_seen = Instant::now();
        }
        if let Some(a) = self.try_local(&chain, req, &need) {
            return Ok(a);
        }
        // Boxed: the refill's future (a Redis round trip) is large and
        // rare; the request's own future stays small (bench/results/
        // 2026-12-03-the-gateway-s-own-work.md).
        Box::pin(self.refill_and_admit(&chain, req, &need, ledger)).await
    }

    /// The lease ran dry: tops it up from Redis (one refiller per chain)
    /// and admits from it, or sends the request the per-request way.
    async fn refill_and_admit(
        &self,
        chain: &Arc<Chain>,
        req: &HoldRequest<'_>,
        need: &Need,
        ledger: &impl LedgerSource,
    ) -> Result<LeaseAdmit, QuotaError> {
        let _refill = chain.refill.lock().await;
        for _ in 0..2 {
            if let Some(a) = self.try_local(chain, req, need) {
                return Ok(a);
            }
            if self.near_limit(chain) {
                return Ok(LeaseAdmit::PerRequest);
            }
            let (lease, want, min) = self.prepare_top_up(chain, req, need);
            let fresh = !lease.state.lock().expect("lease lock").granted;
            let acq = LeaseAcquire {
                fresh,
                lease_id: &lease.id,
                tenant: req.tenant,
                app: req.app,
                key: req.key,
                month: req.month,
                want,
                min,
                limits: req.limits,
            };
            match self.engine.lease_acquire(&acq, ledger).await? {
                LeaseGrant::Granted {
                    chunk,
                    remaining_requests,
                    remaining_tokens,
                } => {
                    let mut ls = lease.state.lock().expect("lease lock");
                    ls.granted = true;
                    ls.pools.grant(&chunk);
                    ls.remaining_requests = remaining_requests;
                    ls.remaining_tokens = remaining_tokens;
                }
                LeaseGrant::Closed { state } => {
                    // Expired under us (the reconciler thought this replica
                    // dead), or lost with Redis: what it held there is gone,
                    // so what this replica holds of it goes too (admitting
                    // from it would spend budget Redis no longer reserves);
                    // the next round makes a new one.
                    tracing::warn!(lease = %lease.id, state, "lease closed or unknown in Redis; dropping its local grant");
                    self.retire_current(chain, &lease);
                    drop_grant(&lease);
                }
                LeaseGrant::NearLimit { .. } => {
                    let shrunk = {
                        let mut st = chain.state.lock().expect("chain lock");
                        st.per_request_until =
                            Some(Instant::now() + self.tuning.near_limit_backoff);
                        st.current.take().map(|cur| shrink_and_retire(&cur))
                    };
                    // Whatever this replica's lease does not need goes back
                    // before the request takes the per-request path, so
                    // the last tokens are usable here or on any replica.
                    if let Some(given) = shrunk {
                        let _ = given.await;
                    }
                    return Ok(LeaseAdmit::PerRequest);
                }
            }
        }
        Ok(self
            .try_local(chain, req, need)
            .unwrap_or(LeaseAdmit::PerRequest))
    }

    fn near_limit(&self, chain: &Chain) -> bool {
        let st = chain.state.lock().expect("chain lock");
        st.per_request_until.is_some_and(|t| Instant::now() < t)
    }

    /// Admits from the current lease if it is usable and covers the need.
    fn try_local(&self, chain: &Chain, req: &HoldRequest<'_>, need: &Need) -> Option<LeaseAdmit> {
        let mut st = chain.state.lock().expect("chain lock");
        let lease = st.current.clone()?;
        let same_limits = lease.limits.iter().zip(req.limits).all(|(a, b)| a == b);
        if !same_limits {
            // Granted under other limits (a lowered budget, an expired
            // grant): it admits nothing more, and what it holds unpromised
            // goes back now.
            st.current = None;
            drop(shrink_and_retire(&lease));
            return None;
        }
        if lease.created.elapsed() > self.tuning.max_age {
            st.current = None;
            retire(&lease);
            return None;
        }
        let admitted = {
            let mut ls = lease.state.lock().expect("lease lock");
            if ls.retiring || ls.unreachable || !ls.pools.admit(need) {
                None
            } else {
                ls.inflight += 1;
                ls.last_admit = Instant::now();
                let p = ls.pools.0;
                Some(LeaseAdmit::Admitted {
                    remaining_requests: ls.remaining_requests.map(|r| r + p.requests.max(0)),
                    remaining_tokens: ls.remaining_tokens.map(|r| r + p.tokens.max(0)),
                })
            }
        };
        if is_retiring(&lease) {
            st.current = None;
        }
        drop(st);
        if admitted.is_some() {
            self.tickets.lock().expect("tickets lock").insert(
                req.request_id.to_string(),
                Ticket {
                    lease: lease.clone(),
                    need: *need,
                },
            );
        }
        admitted
    }

    /// The lease to top up (a new one, registered before Redis is asked, so
    /// a grant whose reply is lost is still returned later) and what to ask.
    fn prepare_top_up(
        &self,
        chain: &Arc<Chain>,
        req: &HoldRequest<'_>,
        need: &Need,
    ) -> (Arc<Lease>, Chunk, Chunk) {
        let mut st = chain.state.lock().expect("chain lock");
        let lease = match st.current.clone() {
            Some(l) => l,
            None => {
                let l = self.new_lease(chain, req);
                st.current = Some(l.clone());
                l
            }
        };
        let floor = Chunk::of(need);
        let chunk = st
            .demand
            .chunk(
                self.tuning.horizon.as_millis() as i64,
                self.tuning.max_requests,
                need,
            )
            .max(&floor);
        let pools = lease.state.lock().expect("lease lock").pools.0;
        let min = pools.shortfall(&floor);
        let want = pools.shortfall(&chunk).max(&min);
        (lease, want, min)
    }

    fn new_lease(&self, chain: &Arc<Chain>, req: &HoldRequest<'_>) -> Arc<Lease> {
        let n = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = mpsc::unbounded_channel();
        let lease = Arc::new(Lease {
            // Unique across books and boots: a batch is idempotent by
            // (lease id, seq), so two leases must never share an id.
            id: format!(
                "{}.{n}.{}",
                self.engine.replica,
                &uuid::Uuid::new_v4().simple().to_string()[..12]
            ),
            chain: chain.id.clone(),
            limits: [
                req.limits[0].clone(),
                req.limits[1].clone(),
                req.limits[2].clone(),
            ],
            created: Instant::now(),
            state: Mutex::new(LeaseState {
                pools: Pools::default(),
                inflight: 0,
                retiring: false,
                close_sent: false,
                last_admit: Instant::now(),
                unreachable: false,
                granted: false,
                remaining_requests: None,
                remaining_tokens: None,
            }),
            tx,
        });
        self.open.count.fetch_add(1, Ordering::SeqCst);
        let flusher = Flusher {
            engine: self.engine.clone(),
            lease: lease.clone(),
            linger: self.tuning.flush_linger,
            max_batch: self.tuning.max_batch.max(1),
        };
        let open = self.open.clone();
        tokio::spawn(async move {
            flusher.run(rx).await;
            open.count.fetch_sub(1, Ordering::SeqCst);
            open.closed.notify_waiters();
        });
        lease
    }

    fn retire_current(&self, chain: &Chain, lease: &Arc<Lease>) {
        let mut st = chain.state.lock().expect("chain lock");
        if st.current.as_ref().is_some_and(|c| Arc::ptr_eq(c, lease)) {
            st.current = None;
        }
        retire(lease);
    }

    /// Settles a request admitted from a lease: queued for its lease's next
    /// batch, answered once that batch is in Redis. None when the request
    /// was not admitted from a lease.
    pub fn settle(
        &self,
        request_id: &str,
        actual: Need,
        event_json: String,
    ) -> Option<oneshot::Receiver<SettleOutcome>> {
        let (tx, rx) = oneshot::channel();
        let done: SettleDone = Box::new(move |o| {
            let _ = tx.send(o);
        });
        self.settle_with(request_id, actual, event_json, done)
            .then_some(rx)
    }

    /// Was this request admitted from a lease (and not settled yet)?
    pub fn admitted(&self, request_id: &str) -> bool {
        self.tickets
            .lock()
            .expect("tickets lock")
            .contains_key(request_id)
    }

    /// [`LeaseBook::settle`], finished by `done` in the flusher instead of
    /// a channel. False (and `done` dropped unrun) when the request was not
    /// admitted from a lease: ask [`LeaseBook::admitted`] first.
    pub fn settle_with(
        &self,
        request_id: &str,
        actual: Need,
        event_json: String,
        done: SettleDone,
    ) -> bool {
        let Some(t) = self
            .tickets
            .lock()
            .expect("tickets lock")
            .remove(request_id)
        else {
            return false;
        };
        // A batch cannot refuse one item without the others, so amounts
        // outside the counters' range are saturated here (the gateway bounds
        // what a provider reports before it gets this far).
        let sat = |v: i64| domain::counter::saturating_sum([v]);
        let actual = Need {
            input: sat(actual.input),
            output: sat(actual.output),
            cost: sat(actual.cost),
        };
        let mut ls = t.lease.state.lock().expect("lease lock");
        ls.pools.settle(&t.need, &actual);
        ls.inflight -= 1;
        let item = LeaseItem {
            request_id: request_id.to_string(),
            tokens: domain::counter::saturating_sum([actual.input, actual.output]),
            cost: actual.cost,
            event_json,
        };
        let _ = t.lease.tx.send(Msg::Item(item, done));
        close_if_drained(&t.lease, &mut ls);
        true
    }

    /// Gives back a lease-admitted request that consumed nothing. False
    /// when the request was not admitted from a lease.
    pub fn release(&self, request_id: &str) -> bool {
        let Some(t) = self
            .tickets
            .lock()
            .expect("tickets lock")
            .remove(request_id)
        else {
            return false;
        };
        let mut ls = t.lease.state.lock().expect("lease lock");
        ls.pools.release(&t.need);
        ls.inflight -= 1;
        close_if_drained(&t.lease, &mut ls);
        true
    }

    /// Whether a request holds a slot of a lease (not settled yet).
    pub fn holds(&self, request_id: &str) -> bool {
        self.tickets
            .lock()
            .expect("tickets lock")
            .contains_key(request_id)
    }

    /// Leases that idled, aged, or must go back.
    fn sweep(&self) {
        let mut chains = self.chains.lock().expect("lease book lock");
        chains.retain(|_, chain| {
            let mut st = chain.state.lock().expect("chain lock");
            if let Some(l) = st.current.clone() {
                let idle = l.state.lock().expect("lease lock").last_admit.elapsed();
                if idle > self.tuning.idle || l.created.elapsed() > self.tuning.max_age {
                    st.current = None;
                    retire(&l);
                }
            }
            st.current.is_some() || st.last_seen.elapsed() < self.tuning.idle * 10
        });
    }

    /// Returns every lease (shutdown): nothing more is admitted from them,
    /// and each goes back once its last request settles. Waits up to
    /// `patience` for the final batches.
    pub async fn shutdown(&self, patience: Duration) {
        {
            let chains = self.chains.lock().expect("lease book lock");
            for chain in chains.values() {
                let mut st = chain.state.lock().expect("chain lock");
                st.per_request_until = Some(Instant::now() + Duration::from_secs(3600));
                if let Some(l) = st.current.take() {
                    retire(&l);
                }
            }
        }
        let deadline = tokio::time::Instant::now() + patience;
        let open = &self.open;
        while open.count.load(Ordering::SeqCst) > 0 {
            let wait = open.closed.notified();
            tokio::pin!(wait);
            wait.as_mut().enable();
            if open.count.load(Ordering::SeqCst) == 0 {
                break;
            }
            if tokio::time::timeout_at(deadline, wait).await.is_err() {
                tracing::warn!(
                    open = open.count.load(Ordering::SeqCst),
                    "leases not all returned at shutdown; the reconciler frees them"
                );
                break;
            }
        }
    }

    /// Leases this replica holds live (for tests and metrics).
    pub fn live_leases(&self) -> usize {
        self.open.count.load(Ordering::SeqCst)
    }
}

fn is_retiring(lease: &Lease) -> bool {
    lease.state.lock().expect("lease lock").retiring
}

/// No more admissions; the final batch goes once the last request settled.
fn retire(lease: &Arc<Lease>) {
    let mut ls = lease.state.lock().expect("lease lock");
    ls.retiring = true;
    close_if_drained(lease, &mut ls);
}

/// Gives back now everything no request holds, and retires the lease.
fn shrink_and_retire(lease: &Arc<Lease>) -> oneshot::Receiver<()> {
    let mut ls = lease.state.lock().expect("lease lock");
    let free = ls.pools.take_free();
    let (tx, rx) = oneshot::channel();
    let _ = lease.tx.send(Msg::Give(free, tx));
    ls.retiring = true;
    close_if_drained(lease, &mut ls);
    rx
}

/// Redis no longer holds this lease: nothing more is admitted from it and
/// its pools are emptied (its open requests still settle, booked as
/// overrun by the script).
fn drop_grant(lease: &Lease) {
    let mut ls = lease.state.lock().expect("lease lock");
    ls.retiring = true;
    ls.pools = Pools::default();
    close_if_drained(lease, &mut ls);
}

fn close_if_drained(lease: &Lease, ls: &mut LeaseState) {
    if ls.retiring && ls.inflight == 0 && !ls.close_sent {
        ls.close_sent = true;
        let _ = lease.tx.send(Msg::Close);
    }
}

async fn janitor(book: Weak<LeaseBook>, every: Duration) {
    loop {
        tokio::time::sleep(every).await;
        let Some(b) = book.upgrade() else { return };
        b.sweep();
    }
}
