//! A lease after Redis lost it (FLUSHALL, a failover to an empty replica):
//! the replica's next top-up is refused, never re-created, and the replica
//! drops its local grant, so the budget holds to within the one chunk it
//! had in hand. On a private redis-server: this test flushes it.

use domain::lease::{Need, BUDGET_SHARE_DIVISOR};
use domain::Limits;
use quota::{
    HoldOutcome, HoldRequest, LeaseAdmit, LeaseBook, LeaseTuning, LedgerSource, QuotaEngine,
    ScopeUsage, SettleOutcome, SettleRequest,
};
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

mod common;
use common::PrivateRedis;

/// The ledger as the ledger writer keeps it: every settled request's
/// tokens, stored the moment it settled (the best case for a rebuild, so
/// what the test measures is the lease path alone).
#[derive(Default)]
struct Ledger {
    tokens: AtomicI64,
}

impl LedgerSource for Ledger {
    async fn month_usage(&self, _t: &str, _m: &str) -> Result<Vec<ScopeUsage>, String> {
        Ok(vec![ScopeUsage {
            app: "web".into(),
            key: "k1".into(),
            tokens: self.tokens.load(Ordering::SeqCst),
            cost: 0,
            overrun_tokens: 0,
            overrun_cost: 0,
        }])
    }
}

const LIMIT: i64 = 20_000;
const EST: (i64, i64) = (10, 20);
const USED: i64 = 30;

struct World {
    q: Arc<QuotaEngine>,
    book: Arc<LeaseBook>,
    ledger: Ledger,
    limits: [Limits; 3],
    next: AtomicU64,
}

impl World {
    fn hold_request<'a>(&'a self, rid: &'a str) -> HoldRequest<'a> {
        HoldRequest {
            budgets: &[],
            request_id: rid,
            tenant: "acme",
            app: "web",
            key: "k1",
            month: "2026-11",
            est_input: EST.0,
            est_output: EST.1,
            est_cost: 0,
            model: "m",
            limits: [&self.limits[0], &self.limits[1], &self.limits[2]],
        }
    }

    /// Admits one request (lease first, the per-request path near the
    /// limit); its id and whether it came from the lease, or None.
    async fn admit(&self) -> Option<(String, bool)> {
        let rid = format!("r{}", self.next.fetch_add(1, Ordering::SeqCst));
        let req = self.hold_request(&rid);
        match self.book.admit(&req, &self.ledger).await.unwrap() {
            LeaseAdmit::Admitted { .. } => Some((rid, true)),
            LeaseAdmit::PerRequest => match self.q.hold(&req, &self.ledger).await.unwrap() {
                HoldOutcome::Admitted { .. } => Some((rid, false)),
                _ => None,
            },
        }
    }

    async fn settle(&self, (rid, leased): (String, bool)) {
        let outcome = if leased {
            let used = Need {
                input: EST.0,
                output: USED - EST.0,
                cost: 0,
            };
            self.book
                .settle(&rid, used, "{}".into())
                .unwrap()
                .await
                .unwrap()
        } else {
            let l = &self.limits;
            let req = SettleRequest {
                request_id: &rid,
                tenant: "acme",
                app: "web",
                key: "k1",
                month: "2026-11",
                input_tokens: EST.0,
                output_tokens: USED - EST.0,
                cost: 0,
                event_json: "{}",
                status: "ok",
                limits: [&l[0], &l[1], &l[2]],
                bound: domain::usage::Bound::SAFE,
            };
            self.q.settle(&req).await.unwrap()
        };
        assert!(
            matches!(outcome, SettleOutcome::Settled { .. }),
            "{outcome:?}"
        );
        self.ledger.tokens.fetch_add(USED, Ordering::SeqCst);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_flushall_a_top_up_never_resurrects_the_lease() {
    let redis = PrivateRedis::start();
    let q =
        Arc::new(QuotaEngine::new(&redis.url(), "tgloss", Duration::from_secs(1), "r1").unwrap());
    let tuning = LeaseTuning {
        max_age: Duration::from_secs(30),
        idle: Duration::from_secs(30),
        ..LeaseTuning::default()
    };
    let w = Arc::new(World {
        book: LeaseBook::start(q.clone(), tuning),
        q,
        ledger: Ledger::default(),
        limits: [
            Limits {
                monthly_tokens: Some(LIMIT),
                ..Default::default()
            },
            Limits::default(),
            Limits::default(),
        ],
        next: AtomicU64::new(0),
    });
    // A lease, used a little, every request settled and in the ledger.
    for _ in 0..40 {
        let r = w.admit().await.expect("admitted");
        assert!(r.1, "the first requests come from a lease");
        w.settle(r).await;
    }
    let mut c = redis::Client::open(redis.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let _: () = redis::cmd("FLUSHALL").query_async(&mut c).await.unwrap();
    // Force a top-up before any batch could tell the replica: admit, settle
    // nothing, until the local grant runs out.
    let mut open = vec![];
    for _ in 0..(LIMIT / USED) {
        match w.admit().await {
            Some(r) => open.push(r),
            None => break,
        }
    }
    for r in open {
        w.settle(r).await;
    }
    // Then 5 s of admit + settle from four clients.
    let until = Instant::now() + Duration::from_secs(5);
    let clients: Vec<_> = (0..4)
        .map(|_| {
            let w = w.clone();
            tokio::spawn(async move {
                while Instant::now() < until {
                    match w.admit().await {
                        Some(r) => w.settle(r).await,
                        None => tokio::time::sleep(Duration::from_millis(5)).await,
                    }
                }
            })
        })
        .collect();
    for c in clients {
        c.await.unwrap();
    }
    let used = w.ledger.tokens.load(Ordering::SeqCst);
    let chunk = LIMIT / BUDGET_SHARE_DIVISOR;
    assert!(
        used <= LIMIT + chunk,
        "used {used} tokens of a {LIMIT} budget (one chunk: {chunk})"
    );
    w.book.shutdown(Duration::from_secs(2)).await;
}
