//! A settle replayed after its settled-hold record expired (24 h) finds no
//! record in Redis: the ledger (unique request id) decides, so the replay
//! books nothing; a hold that Redis lost, and that the ledger does not
//! have, is still booked (in full, as overrun). Against the real Redis.

use domain::Limits;
use quota::{
    BookedCheck, HoldOutcome, HoldRequest, LedgerSource, QuotaEngine, QuotaError, ScopeUsage,
    SettleOutcome, SettleRequest,
};
use std::collections::HashSet;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

fn redis_url() -> String {
    std::env::var("TOLLGATE_TEST_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into())
}

struct EmptyLedger;
impl LedgerSource for EmptyLedger {
    async fn month_usage(&self, _t: &str, _m: &str) -> Result<Vec<ScopeUsage>, String> {
        Ok(vec![])
    }
}

/// The ledger's request ids (what the ledger writer stored).
#[derive(Default)]
struct Booked(Mutex<HashSet<String>>);
impl BookedCheck for Booked {
    fn is_booked<'a>(
        &'a self,
        _tenant: &'a str,
        request_id: &'a str,
    ) -> Pin<Box<dyn Future<Output = Result<bool, String>> + Send + 'a>> {
        let found = self.0.lock().unwrap().contains(request_id);
        Box::pin(async move { Ok(found) })
    }
}

/// A ledger that cannot be reached.
struct Down;
impl BookedCheck for Down {
    fn is_booked<'a>(
        &'a self,
        _t: &'a str,
        _r: &'a str,
    ) -> Pin<Box<dyn Future<Output = Result<bool, String>> + Send + 'a>> {
        Box::pin(async { Err("postgres down".to_string()) })
    }
}

fn engine(check: Arc<dyn BookedCheck>) -> QuotaEngine {
    let prefix = format!("tgreplay{}", uuid::Uuid::new_v4().simple());
    QuotaEngine::new(&redis_url(), &prefix, Duration::from_secs(1), "replay")
        .unwrap()
        .with_booked_check(check)
}

fn limits() -> [Limits; 3] {
    [
        Limits {
            monthly_tokens: Some(10_000),
            ..Default::default()
        },
        Limits::default(),
        Limits::default(),
    ]
}

fn hold<'a>(l: &'a [Limits; 3], rid: &'a str) -> HoldRequest<'a> {
    HoldRequest {
        budgets: &[],
        request_id: rid,
        tenant: "acme",
        app: "web",
        key: "k1",
        month: "2026-11",
        est_input: 10,
        est_output: 40,
        est_cost: 0,
        model: "m",
        limits: [&l[0], &l[1], &l[2]],
    }
}

fn settle<'a>(l: &'a [Limits; 3], rid: &'a str) -> SettleRequest<'a> {
    SettleRequest {
        request_id: rid,
        tenant: "acme",
        app: "web",
        key: "k1",
        month: "2026-11",
        input_tokens: 10,
        output_tokens: 30,
        cost: 0,
        event_json: "{}",
        status: "ok",
        limits: [&l[0], &l[1], &l[2]],
        bound: domain::usage::Bound::SAFE,
    }
}

/// The settled-hold record's 24 h are up.
async fn expire_record(q: &QuotaEngine, rid: &str) {
    let client = redis::Client::open(redis_url()).unwrap();
    let mut c = client.get_multiplexed_async_connection().await.unwrap();
    let n: i64 = redis::cmd("DEL")
        .arg(q.keys().hold("acme", rid))
        .query_async(&mut c)
        .await
        .unwrap();
    assert_eq!(n, 1, "the record existed");
}

#[tokio::test]
async fn a_replay_after_the_record_expired_is_checked_against_the_ledger() {
    let ledger = Arc::new(Booked::default());
    let q = engine(ledger.clone());
    let l = limits();
    let out = q.hold(&hold(&l, "r1"), &EmptyLedger).await.unwrap();
    assert!(matches!(out, HoldOutcome::Admitted { .. }), "{out:?}");
    let first = q.settle(&settle(&l, "r1")).await.unwrap();
    assert!(matches!(first, SettleOutcome::Settled { .. }), "{first:?}");
    ledger.0.lock().unwrap().insert("r1".into()); // the ledger writer stored it
    expire_record(&q, "r1").await;
    let before = q.month_counters("acme", "2026-11").await.unwrap();
    assert_eq!(before.used_tokens("t"), 40);

    let again = q.settle(&settle(&l, "r1")).await.unwrap();
    assert_eq!(
        again,
        SettleOutcome::AlreadyClosed {
            state: "ledger".into()
        }
    );
    assert_eq!(q.month_counters("acme", "2026-11").await.unwrap(), before);
}

#[tokio::test]
async fn a_hold_lost_with_redis_and_not_in_the_ledger_is_still_booked() {
    let q = engine(Arc::new(Booked::default()));
    let l = limits();
    q.hold(&hold(&l, "r2"), &EmptyLedger).await.unwrap();
    expire_record(&q, "r2").await; // lost, never settled
    let r = q.settle(&settle(&l, "r2")).await.unwrap();
    assert_eq!(
        r,
        SettleOutcome::Settled {
            overrun_tokens: 40,
            overrun_cost: 0
        }
    );
    let c = q.month_counters("acme", "2026-11").await.unwrap();
    assert_eq!(c.used_tokens("t"), 40);
    // Booked once: the record it leaves answers the next replay.
    let again = q.settle(&settle(&l, "r2")).await.unwrap();
    assert!(
        matches!(again, SettleOutcome::AlreadyClosed { .. }),
        "{again:?}"
    );
    assert_eq!(q.month_counters("acme", "2026-11").await.unwrap(), c);
}

#[tokio::test]
async fn without_the_ledger_a_recordless_settle_books_nothing_and_fails() {
    let q = engine(Arc::new(Down));
    let l = limits();
    q.hold(&hold(&l, "r3"), &EmptyLedger).await.unwrap();
    expire_record(&q, "r3").await;
    let before = q.month_counters("acme", "2026-11").await.unwrap();
    let e = q.settle(&settle(&l, "r3")).await.unwrap_err();
    assert!(matches!(e, QuotaError::Ledger(_)), "{e:?}");
    assert_eq!(q.month_counters("acme", "2026-11").await.unwrap(), before);
}
