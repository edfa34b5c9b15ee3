//! Leases against the real Redis, each test under its own key prefix: one
//! atomic hold per chunk, local admission, batched settles with their usage
//! events, return, expiry, and the per-request path near the limit.

use domain::lease::Chunk;
use domain::Limits;
use quota::{
    HoldRequest, LeaseAcquire, LeaseAdmit, LeaseBatch, LeaseBatchOutcome, LeaseBook, LeaseGrant,
    LeaseItem, LeaseTuning, LedgerSource, QuotaEngine, ScopeUsage, SettleOutcome,
};
use std::sync::Arc;
use std::time::Duration;

mod common;
use common::PrivateRedis;

fn redis_url() -> String {
    std::env::var("TOLLGATE_TEST_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into())
}

fn engine(prefix: &str, replica: &str) -> Arc<QuotaEngine> {
    Arc::new(QuotaEngine::new(&redis_url(), prefix, Duration::from_secs(1), replica).unwrap())
}

fn prefix() -> String {
    format!("tglease{}", uuid::Uuid::new_v4().simple())
}

struct EmptyLedger;
impl LedgerSource for EmptyLedger {
    async fn month_usage(&self, _t: &str, _m: &str) -> Result<Vec<ScopeUsage>, String> {
        Ok(vec![])
    }
}

fn tuning() -> LeaseTuning {
    LeaseTuning {
        idle: Duration::from_millis(200),
        flush_linger: Duration::from_millis(1),
        ..LeaseTuning::default()
    }
}

fn hold<'a>(l: &'a [Limits; 3], rid: &'a str, input: i64, output: i64) -> HoldRequest<'a> {
    HoldRequest {
        budgets: &[],
        request_id: rid,
        tenant: "acme",
        app: "web",
        key: "k1",
        month: "2026-11",
        est_input: input,
        est_output: output,
        est_cost: input + output,
        model: "m",
        limits: [&l[0], &l[1], &l[2]],
    }
}

fn budget(tokens: i64) -> [Limits; 3] {
    [
        Limits {
            monthly_tokens: Some(tokens),
            ..Default::default()
        },
        Limits::default(),
        Limits::default(),
    ]
}

async fn settle(book: &LeaseBook, rid: &str, input: i64, output: i64) -> SettleOutcome {
    let actual = domain::lease::Need {
        input,
        output,
        cost: input + output,
    };
    book.settle(rid, actual, format!("{{\"rid\":\"{rid}\"}}"))
        .expect("admitted from a lease")
        .await
        .unwrap()
}

#[tokio::test]
async fn a_lease_is_one_hold_and_its_batch_books_every_request_once() {
    let p = prefix();
    let q = engine(&p, "r1");
    let book = LeaseBook::start(q.clone(), tuning());
    let l = budget(1_000_000);
    let mut admitted = vec![];
    for i in 0..20 {
        let rid = format!("r{i}");
        let a = book
            .admit(&hold(&l, &rid, 10, 20), &EmptyLedger)
            .await
            .unwrap();
        assert!(matches!(a, LeaseAdmit::Admitted { .. }), "{a:?}");
        admitted.push(rid);
    }
    let c = q.month_counters("acme", "2026-11").await.unwrap();
    // The lease holds at least the 20 requests' estimates, in every scope.
    assert!(c.held_tokens("t") >= 600, "{c:?}");
    assert_eq!(c.held_tokens("t"), c.held_tokens("k:k1"));
    assert_eq!(c.used_tokens("t"), 0);
    for rid in &admitted {
        let r = settle(&book, rid, 10, 5).await;
        assert!(matches!(r, SettleOutcome::Settled { .. }), "{r:?}");
    }
    let c = q.month_counters("acme", "2026-11").await.unwrap();
    assert_eq!(c.used_tokens("t"), 20 * 15);
    assert_eq!(c.used_tokens("a:web"), 20 * 15);
    assert_eq!(c.used_cost("k:k1"), 20 * 15);
    let outbox = q.outbox_peek("acme", 100).await.unwrap();
    assert_eq!(outbox.len(), 20, "one event per request");
    // Idle: the lease goes back, nothing stays held or in flight.
    book.shutdown(Duration::from_secs(5)).await;
    let c = q.month_counters("acme", "2026-11").await.unwrap();
    assert_eq!((c.held_tokens("t"), c.held_cost("t")), (0, 0), "{c:?}");
    assert_eq!(q.inflight("acme", "t").await.unwrap(), 0);
    assert_eq!(q.inflight("acme", "k:k1").await.unwrap(), 0);
}

/// Lease L1 of acme/web/k1 in 2026-11, as a new lease: 100 tokens and
/// cost, 2 slots.
fn lease_l1<'a>(limits: [&'a Limits; 3]) -> LeaseAcquire<'a> {
    LeaseAcquire {
        lease_id: "L1",
        tenant: "acme",
        app: "web",
        key: "k1",
        month: "2026-11",
        want: Chunk {
            tokens: 100,
            cost: 100,
            slots: 2,
            requests: 2,
            input: 50,
            output: 50,
        },
        min: Chunk::default(),
        limits,
        fresh: true,
    }
}

/// L1's batch `seq`: `items` settled, nothing given back.
fn batch_l1<'a>(seq: u64, items: &'a [LeaseItem], limits: [&'a Limits; 3]) -> LeaseBatch<'a> {
    LeaseBatch {
        lease_id: "L1",
        tenant: "acme",
        app: "web",
        key: "k1",
        month: "2026-11",
        seq,
        items,
        close: false,
        give: Chunk::default(),
        limits,
    }
}

/// A request of 40 tokens and 40 micro-USD, its event naming it.
fn item(rid: &str) -> LeaseItem {
    LeaseItem {
        request_id: rid.into(),
        tokens: 40,
        cost: 40,
        event_json: format!("{{\"request_id\":\"{rid}\"}}"),
    }
}

#[tokio::test]
async fn a_replayed_batch_changes_nothing_and_an_expired_lease_books_as_overrun() {
    let p = prefix();
    let q = engine(&p, "r1");
    let l = budget(10_000);
    let lim = [&l[0], &l[1], &l[2]];
    let acq = lease_l1(lim);
    let g = q.lease_acquire(&acq, &EmptyLedger).await.unwrap();
    assert!(matches!(g, LeaseGrant::Granted { .. }), "{g:?}");
    let items = [item("a")];
    let batch = batch_l1(1, &items, lim);
    let first = q.lease_settle(&batch).await.unwrap();
    assert!(
        matches!(
            first,
            LeaseBatchOutcome::Applied {
                live: true,
                held: (60, 60, 2),
                overrun: (0, 0),
                ..
            }
        ),
        "{first:?}"
    );
    let before = q.month_counters("acme", "2026-11").await.unwrap();
    let again = q.lease_settle(&batch).await.unwrap();
    assert!(
        matches!(again, LeaseBatchOutcome::Duplicate { .. }),
        "{again:?}"
    );
    assert_eq!(q.month_counters("acme", "2026-11").await.unwrap(), before);

    // The reconciler frees the lease (its replica died)...
    let open = q.open_leases("acme", i64::MAX).await.unwrap();
    assert_eq!(open.len(), 1);
    assert!(q.lease_expire("acme", &open[0]).await.unwrap());
    let c = q.month_counters("acme", "2026-11").await.unwrap();
    assert_eq!((c.used_tokens("t"), c.held_tokens("t")), (40, 0));
    assert_eq!(q.inflight("acme", "t").await.unwrap(), 0);
    // ...and a late batch is booked in full, as overrun, never double-freed.
    let late = LeaseBatch {
        seq: 2,
        ..batch.clone()
    };
    let r = q.lease_settle(&late).await.unwrap();
    assert!(
        matches!(
            r,
            LeaseBatchOutcome::Applied {
                live: false,
                overrun: (40, 40),
                ..
            }
        ),
        "{r:?}"
    );
    let c = q.month_counters("acme", "2026-11").await.unwrap();
    assert_eq!((c.used_tokens("t"), c.held_tokens("t")), (80, 0));
    assert_eq!(c.overrun_tokens("t"), 40);
    assert!(c.used_tokens("t") + c.held_tokens("t") <= 10_000 + c.overrun_tokens("t"));
    // A closed lease cannot be topped up: the replica makes a new one.
    let g = q.lease_acquire(&acq, &EmptyLedger).await.unwrap();
    assert!(matches!(g, LeaseGrant::Closed { .. }), "{g:?}");
}

#[tokio::test]
async fn near_the_limit_the_last_tokens_go_per_request_from_any_replica() {
    let p = prefix();
    let (qa, qb) = (engine(&p, "ra"), engine(&p, "rb"));
    let (a, b) = (
        LeaseBook::start(qa.clone(), tuning()),
        LeaseBook::start(qb.clone(), tuning()),
    );
    // 400 tokens; each request is estimated at 30.
    let l = budget(400);
    // A admits three requests at once (three top-ups of one request each),
    // and they use a third of their estimates: A's lease keeps 60 unused.
    for rid in ["a1", "a2", "a3"] {
        let r = a.admit(&hold(&l, rid, 10, 20), &EmptyLedger).await.unwrap();
        assert!(matches!(r, LeaseAdmit::Admitted { .. }), "{r:?}");
    }
    let c = qa.month_counters("acme", "2026-11").await.unwrap();
    assert!(c.held_tokens("t") <= 100, "{c:?}");
    for rid in ["a1", "a2", "a3"] {
        settle(&a, rid, 5, 5).await;
    }

    // B spends what is left through its own leases, then per request.
    let mut spent_b = 0;
    let mut per_request = 0;
    for i in 0..40 {
        let rid = format!("b{i}");
        match b
            .admit(&hold(&l, &rid, 10, 20), &EmptyLedger)
            .await
            .unwrap()
        {
            LeaseAdmit::Admitted { .. } => {
                settle(&b, &rid, 10, 20).await;
                spent_b += 30;
            }
            LeaseAdmit::PerRequest => {
                per_request += 1;
                let h = qb
                    .hold(&hold(&l, &rid, 10, 20), &EmptyLedger)
                    .await
                    .unwrap();
                if let quota::HoldOutcome::Admitted { .. } = h {
                    let s = quota::SettleRequest {
                        request_id: &rid,
                        tenant: "acme",
                        app: "web",
                        key: "k1",
                        month: "2026-11",
                        input_tokens: 10,
                        output_tokens: 20,
                        cost: 30,
                        event_json: "{}",
                        status: "ok",
                        limits: [&l[0], &l[1], &l[2]],
                        bound: domain::usage::Bound::SAFE,
                    };
                    qb.settle(&s).await.unwrap();
                    spent_b += 30;
                }
            }
        }
        let c = qb.month_counters("acme", "2026-11").await.unwrap();
        assert!(c.used_tokens("t") + c.held_tokens("t") <= 400, "{c:?}");
    }
    assert!(per_request > 0, "the scope never went per-request");
    // A went idle and returned its lease: B got every last usable token.
    tokio::time::sleep(Duration::from_millis(600)).await;
    for i in 40..60 {
        let rid = format!("b{i}");
        if let quota::HoldOutcome::Admitted { .. } = qb
            .hold(&hold(&l, &rid, 10, 20), &EmptyLedger)
            .await
            .unwrap()
        {
            spent_b += 30;
        }
    }
    let c = qb.month_counters("acme", "2026-11").await.unwrap();
    assert!(c.used_tokens("t") + c.held_tokens("t") <= 400, "{c:?}");
    // 30 used by A, then B: 12 requests of 30 fit in the 370 left, which
    // needs the 60 A's idle lease gave back.
    assert_eq!(spent_b, 360, "{c:?}");
    assert!(a.live_leases() == 0, "A still holds a lease");
}

#[tokio::test]
async fn a_changed_limit_retires_the_lease_granted_under_the_old_one() {
    let p = prefix();
    let q = engine(&p, "r1");
    let book = LeaseBook::start(q.clone(), tuning());
    let high = budget(100_000);
    assert!(matches!(
        book.admit(&hold(&high, "x1", 10, 20), &EmptyLedger)
            .await
            .unwrap(),
        LeaseAdmit::Admitted { .. }
    ));
    settle(&book, "x1", 10, 20).await;
    // The budget is lowered below what is already used + held.
    let c = q.month_counters("acme", "2026-11").await.unwrap();
    let low = budget(c.used_tokens("t") + 10);
    let r = book
        .admit(&hold(&low, "x2", 10, 20), &EmptyLedger)
        .await
        .unwrap();
    assert_eq!(
        r,
        LeaseAdmit::PerRequest,
        "the old lease must not admit under the new limit"
    );
    let r = q
        .hold(&hold(&low, "x2", 10, 20), &EmptyLedger)
        .await
        .unwrap();
    assert!(matches!(r, quota::HoldOutcome::Refused(_)), "{r:?}");
    book.shutdown(Duration::from_secs(5)).await;
    let c = q.month_counters("acme", "2026-11").await.unwrap();
    assert_eq!(c.held_tokens("t"), 0, "{c:?}");
}

#[tokio::test]
async fn in_flight_slots_are_leased_and_never_exceed_the_limit() {
    let p = prefix();
    let q = engine(&p, "r1");
    let book = LeaseBook::start(q.clone(), tuning());
    let l = [
        Limits {
            max_inflight: Some(8),
            ..Default::default()
        },
        Limits::default(),
        Limits::default(),
    ];
    let mut admitted = 0;
    let mut per_request = 0;
    for i in 0..12 {
        let rid = format!("s{i}");
        match book
            .admit(&hold(&l, &rid, 1, 1), &EmptyLedger)
            .await
            .unwrap()
        {
            LeaseAdmit::Admitted { .. } => admitted += 1,
            LeaseAdmit::PerRequest => {
                per_request += 1;
                if let quota::HoldOutcome::Admitted { .. } =
                    q.hold(&hold(&l, &rid, 1, 1), &EmptyLedger).await.unwrap()
                {
                    admitted += 1;
                }
            }
        }
        assert!(q.inflight("acme", "t").await.unwrap() <= 8);
    }
    assert!(per_request >= 1, "the last slots go per request");
    assert_eq!(admitted, 8, "every slot used, none more");
    assert_eq!(q.inflight("acme", "t").await.unwrap(), 8);
}

/// A Redis that lost its scripts (a restart, `SCRIPT FLUSH`) is given the
/// lease's settle script again by the call that found it missing: the
/// batch is applied, once. On a private redis-server: this test flushes
/// its scripts.
#[tokio::test]
async fn a_batch_settles_after_redis_lost_its_scripts() {
    let redis = PrivateRedis::start();
    let q = QuotaEngine::new(&redis.url(), &prefix(), Duration::from_secs(1), "r1").unwrap();
    let l = budget(10_000);
    let lim = [&l[0], &l[1], &l[2]];
    let g = q.lease_acquire(&lease_l1(lim), &EmptyLedger).await.unwrap();
    assert!(matches!(g, LeaseGrant::Granted { .. }), "{g:?}");
    // The first batch loads the script; then Redis forgets it.
    let first = [item("a")];
    let r = q.lease_settle(&batch_l1(1, &first, lim)).await.unwrap();
    assert!(matches!(r, LeaseBatchOutcome::Applied { .. }), "{r:?}");
    let mut c = redis::Client::open(redis.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let _: () = redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query_async(&mut c)
        .await
        .unwrap();
    let info: String = redis::cmd("INFO")
        .arg("memory")
        .query_async(&mut c)
        .await
        .unwrap();
    assert!(
        info.contains("number_of_cached_scripts:0\r\n"),
        "the scripts are gone: {info}"
    );
    let second = [item("b")];
    let r = q.lease_settle(&batch_l1(2, &second, lim)).await.unwrap();
    assert!(
        matches!(
            r,
            LeaseBatchOutcome::Applied {
                held: (20, 20, 2),
                overrun: (0, 0),
                ..
            }
        ),
        "{r:?}"
    );
    let mut outbox: Vec<String> = redis::cmd("HKEYS")
        .arg(q.keys().outbox("acme"))
        .query_async(&mut c)
        .await
        .unwrap();
    outbox.sort();
    assert_eq!(outbox, ["a", "b"]);
    let again = q.lease_settle(&batch_l1(2, &second, lim)).await.unwrap();
    assert!(
        matches!(again, LeaseBatchOutcome::Duplicate { .. }),
        "{again:?}"
    );
}
