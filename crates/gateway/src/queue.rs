//! Fair queues (docs/design.md §5 "queue", §7): when a tenant's in-flight limit or a
//! model pool is full, the request waits in its tenant's queue on this
//! replica instead of failing. `domain::fairq` decides the order; this file
//! is the plumbing: a dispatcher task offers turns to waiting requests in
//! that order whenever a slot may have freed — at once when a request of
//! this replica settles or releases, and by polling with backoff for slots
//! freed by other replicas.

use crate::metrics_names as m;
use domain::fairq::{FairScheduler, Priority, QueueFull, QueuePolicy};
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, oneshot, Notify};

/// What held a waiting request back: its tenant's (app's, key's) in-flight
/// limit, or a model pool.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Blocked {
    Tenant(String),
    Model(String),
}

/// A turn offered to a waiting request: it tries admission again and
/// reports whether it got in (or what blocked it).
pub struct Turn {
    report: oneshot::Sender<Option<Blocked>>,
}

impl Turn {
    pub fn admitted(self) {
        let _ = self.report.send(None);
    }

    pub fn blocked(self, by: Blocked) {
        let _ = self.report.send(Some(by));
    }
}

struct Waiter {
    tx: mpsc::Sender<Turn>,
    tenant: String,
    model: String,
}

struct State {
    sched: FairScheduler,
    waiters: HashMap<u64, Waiter>,
}

pub struct AdmissionQueue {
    state: Mutex<State>,
    /// Requests waiting, all tenants (kept under the lock, read without it).
    waiting: AtomicUsize,
    wake: Notify,
    epoch: Instant,
    poll_min: Duration,
    poll_max: Duration,
}

/// A request's place in its tenant's queue; leaving (drop) gives it up.
pub struct Place {
    q: Arc<AdmissionQueue>,
    ticket: u64,
    rx: mpsc::Receiver<Turn>,
    pub deadline: Instant,
    pub joined: Instant,
    pub priority: Priority,
    tenant: String,
}

impl AdmissionQueue {
    pub fn new(policy: QueuePolicy, poll_min: Duration, poll_max: Duration) -> Arc<Self> {
        Arc::new(Self {
            state: Mutex::new(State {
                sched: FairScheduler::new(policy),
                waiters: HashMap::new(),
            }),
            waiting: AtomicUsize::new(0),
            wake: Notify::new(),
            epoch: Instant::now(),
            poll_min,
            poll_max,
        })
    }

    fn now_ms(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64
    }

    pub fn max_wait(&self, p: Priority) -> Duration {
        let st = self.state.lock().expect("queue lock");
        Duration::from_millis(st.sched.policy().max_wait_ms(p))
    }

    /// A slot may have freed on this replica: offer turns now.
    pub fn slot_freed(&self) {
        self.wake.notify_one();
    }

    /// Is `tenant`'s queue on this replica full? Then a new request of that
    /// tenant is refused before any work is spent on it: it could only wait
    /// behind the full queue, and refusing it costs little CPU that another
    /// tenant's requests need (docs/fair.md, "Isolation"). No lock when
    /// nothing waits.
    /// `cap` is the tenant's own cap (`tenants.max_queued_requests`), None
    /// for the platform's.
    pub fn full_for(&self, tenant: &str, cap: Option<usize>) -> Option<QueueFull> {
        if self.waiting.load(Ordering::Relaxed) == 0 {
            return None;
        }
        let st = self.state.lock().expect("queue lock");
        let depth = st.sched.depth(tenant);
        (depth >= st.sched.cap(cap)).then_some(QueueFull { depth })
    }

    /// Joins `tenant`'s queue; refused when that queue is full (at `cap`,
    /// the tenant's own, or the platform's when None).
    pub fn join(
        self: &Arc<Self>,
        tenant: &str,
        priority: Priority,
        model: &str,
        cap: Option<usize>,
    ) -> Result<Place, QueueFull> {
        let (tx, rx) = mpsc::channel(1);
        let now = self.now_ms();
        let (ticket, wait, depth) = {
            let mut st = self.state.lock().expect("queue lock");
            let ticket = st.sched.enqueue_capped(tenant, priority, now, cap)?;
            st.waiters.insert(
                ticket,
                Waiter {
                    tx,
                    tenant: tenant.to_string(),
                    model: model.to_string(),
                },
            );
            self.waiting.store(st.sched.len(), Ordering::Relaxed);
            let wait = st.sched.deadline_ms(ticket).unwrap_or(now) - now;
            (ticket, wait, st.sched.depth(tenant))
        };
        metrics::gauge!(m::QUEUE_DEPTH, "tenant" => tenant.to_string()).set(depth as f64);
        let joined = Instant::now();
        Ok(Place {
            q: self.clone(),
            ticket,
            rx,
            deadline: joined + Duration::from_millis(wait),
            joined,
            priority,
            tenant: tenant.to_string(),
        })
    }

    fn leave(&self, ticket: u64, tenant: &str, served: bool) {
        let depth = {
            let mut st = self.state.lock().expect("queue lock");
            st.waiters.remove(&ticket);
            if served {
                st.sched.served(ticket);
            } else {
                st.sched.cancel(ticket);
            }
            self.waiting.store(st.sched.len(), Ordering::Relaxed);
            st.sched.depth(tenant)
        };
        metrics::gauge!(m::QUEUE_DEPTH, "tenant" => tenant.to_string()).set(depth as f64);
    }

    /// The dispatcher: on every wake-up (a local slot freed) or poll tick,
    /// offers turns in fair order. A request blocked by its tenant or model
    /// means the others waiting on the same thing are skipped this round.
    pub fn spawn_dispatcher(self: &Arc<Self>) -> tokio::task::JoinHandle<()> {
        let q = self.clone();
        tokio::spawn(async move {
            let mut pause = q.poll_min;
            loop {
                tokio::select! {
                    _ = q.wake.notified() => {}
                    _ = tokio::time::sleep(pause) => {}
                }
                let admitted = q.round().await;
                pause = if admitted {
                    q.poll_min
                } else {
                    (pause * 2).min(q.poll_max)
                };
            }
        })
    }

    /// One round of turns; true when someone got in.
    async fn round(&self) -> bool {
        let order: Vec<(u64, mpsc::Sender<Turn>, String, String)> = {
            let st = self.state.lock().expect("queue lock");
            st.sched
                .order(self.now_ms())
                .into_iter()
                .filter_map(|t| {
                    let w = st.waiters.get(&t)?;
                    Some((t, w.tx.clone(), w.tenant.clone(), w.model.clone()))
                })
                .collect()
        };
        let mut blocked: HashSet<Blocked> = HashSet::new();
        let mut admitted = false;
        for (ticket, tx, tenant, model) in order {
            if blocked.contains(&Blocked::Tenant(tenant.clone()))
                || blocked.contains(&Blocked::Model(model.clone()))
            {
                continue;
            }
            let (report, answer) = oneshot::channel();
            if tx.try_send(Turn { report }).is_err() {
                continue; // gone, or still busy with its last turn
            }
            match answer.await {
                Ok(None) => {
                    self.leave(ticket, &tenant, true);
                    admitted = true;
                }
                Ok(Some(b)) => {
                    blocked.insert(b);
                }
                Err(_) => {}
            }
        }
        admitted
    }
}

impl Place {
    /// Waits for the next turn; None once the maximum wait has passed.
    pub async fn next_turn(&mut self) -> Option<Turn> {
        let left = self.deadline.saturating_duration_since(Instant::now());
        tokio::time::timeout(left, self.rx.recv())
            .await
            .ok()
            .flatten()
    }

    pub fn waited(&self) -> Duration {
        self.joined.elapsed()
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        // Served places were removed by the dispatcher; this is a no-op then.
        self.q.leave(self.ticket, &self.tenant, false);
    }
}
