//! No counter wraps: amounts past 2^53 are refused before any Lua runs (and
//! by the scripts themselves), sums saturate at 2^53 − 1, a rebuild from a
//! ledger with absurd rows saturates too. Against the real Redis, each test
//! under its own key prefix.

use domain::counter::MAX_COUNTER;
use domain::Limits;
use quota::{
    HoldOutcome, HoldRequest, LeaseBook, LeaseTuning, LedgerSource, QuotaEngine, QuotaError,
    ScopeUsage, SettleOutcome, SettleRequest,
};
use std::sync::Arc;
use std::time::Duration;

const PRELUDE: &str = include_str!("../lua/prelude.lua");

fn redis_url() -> String {
    std::env::var("TOLLGATE_TEST_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into())
}

fn engine() -> QuotaEngine {
    let prefix = format!("tgovf{}", uuid::Uuid::new_v4().simple());
    QuotaEngine::new(&redis_url(), &prefix, Duration::from_secs(1), "ovf").unwrap()
}

struct Ledger(Vec<ScopeUsage>);
impl LedgerSource for Ledger {
    async fn month_usage(&self, _t: &str, _m: &str) -> Result<Vec<ScopeUsage>, String> {
        Ok(self.0.clone())
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

fn hold<'a>(l: &'a [Limits; 3], rid: &'a str, est_in: i64, est_out: i64) -> HoldRequest<'a> {
    HoldRequest {
        budgets: &[],
        request_id: rid,
        tenant: "acme",
        app: "web",
        key: "k1",
        month: "2026-11",
        est_input: est_in,
        est_output: est_out,
        est_cost: 0,
        model: "m",
        limits: [&l[0], &l[1], &l[2]],
    }
}

fn settle<'a>(l: &'a [Limits; 3], rid: &'a str, inp: i64, out: i64) -> SettleRequest<'a> {
    SettleRequest {
        request_id: rid,
        tenant: "acme",
        app: "web",
        key: "k1",
        month: "2026-11",
        input_tokens: inp,
        output_tokens: out,
        cost: 0,
        event_json: "{}",
        status: "ok",
        limits: [&l[0], &l[1], &l[2]],
        bound: domain::usage::Bound::SAFE,
    }
}

async fn eval(script: &str, args: &[&str]) -> redis::RedisResult<redis::Value> {
    let client = redis::Client::open(redis_url()).unwrap();
    let mut c = client.get_multiplexed_async_connection().await.unwrap();
    redis::cmd("EVAL")
        .arg(format!("{PRELUDE}\n{script}"))
        .arg(0)
        .arg(args)
        .query_async(&mut c)
        .await
}

#[test]
fn the_prelude_and_the_rust_checks_share_one_bound() {
    let literal = format!("local MAX = {MAX_COUNTER}");
    assert!(PRELUDE.contains(&literal), "prelude.lua must say {literal}");
}

#[tokio::test]
async fn the_prelude_saturates_counters_and_refuses_amounts_past_2_pow_53() {
    // '%d' of a double past 2^63 wraps (the −1,616 of a report near 2^63);
    // through `int` it saturates.
    let v = eval(
        "return int(tonumber(ARGV[1]) * 4)",
        &["9223372036854775807"],
    )
    .await
    .unwrap();
    assert_eq!(v, redis::Value::BulkString(MAX_COUNTER.to_string().into()));
    let v = eval("return clamp(tonumber(ARGV[1]))", &["-9223372036854775807"])
        .await
        .unwrap();
    assert_eq!(v, redis::Value::Int(-MAX_COUNTER));
    for bad in ["9007199254740992", "-2", "1.5", "nan", "abc"] {
        let e = eval("return amount(1)", &[bad]).await.unwrap_err();
        assert_eq!(e.code(), Some("TGRANGE"), "{bad}: {e}");
    }
    let ok = eval("return amount(1, -1)", &["-1"]).await.unwrap();
    assert_eq!(ok, redis::Value::Int(-1));
}

#[tokio::test]
async fn an_absurd_report_is_billed_at_its_bound_and_never_wraps() {
    let q = engine();
    let l = budget(10_000);
    let out = q
        .hold(&hold(&l, "r1", 10, 40), &Ledger(vec![]))
        .await
        .unwrap();
    assert!(matches!(out, HoldOutcome::Admitted { .. }), "{out:?}");
    // The provider reports 2^63-ish: the settle books the request's bound
    // (its input estimate plus the documented error, and the cap it was
    // sent), computed here from the documented rule, not read back.
    let mut req = settle(&l, "r1", i64::MAX, (1 << 62) + 7);
    req.bound = domain::usage::Bound::for_request(10, 40, |_, _| 0);
    let r = q.settle(&req).await.unwrap();
    assert!(matches!(r, SettleOutcome::Settled { .. }), "{r:?}");
    let c = q.month_counters("acme", "2026-11").await.unwrap();
    let most =
        10 + 10 * domain::usage::INPUT_ERROR_PCT / 100 + domain::usage::INPUT_ERROR_TOKENS + 40;
    assert!(
        (0..=most).contains(&c.used_tokens("t")) && c.held_tokens("t") == 0,
        "used {} held {}",
        c.used_tokens("t"),
        c.held_tokens("t")
    );
    // Another request, held normally.
    let out = q
        .hold(&hold(&l, "r3", 10, 40), &Ledger(vec![]))
        .await
        .unwrap();
    assert!(matches!(out, HoldOutcome::Admitted { .. }), "{out:?}");
    // A hold of 10^15 + 10^15 tokens, or of 2^63, never reaches a script.
    for (i, o) in [(i64::MAX, 1), (MAX_COUNTER, MAX_COUNTER)] {
        let e = q
            .hold(&hold(&l, "r2", i, o), &Ledger(vec![]))
            .await
            .unwrap_err();
        assert!(matches!(e, QuotaError::OutOfRange(_)), "{e:?}");
    }
    // The other request still settles at what it really used.
    let before = q
        .month_counters("acme", "2026-11")
        .await
        .unwrap()
        .used_tokens("t");
    let r = q.settle(&settle(&l, "r3", 10, 30)).await.unwrap();
    assert!(matches!(r, SettleOutcome::Settled { .. }), "{r:?}");
    let c = q.month_counters("acme", "2026-11").await.unwrap();
    assert_eq!((c.used_tokens("t") - before, c.held_tokens("t")), (40, 0));
}

#[tokio::test]
async fn sums_of_in_range_amounts_saturate_and_a_saturated_scope_admits_nothing() {
    let q = engine();
    let l = budget(1_000);
    q.hold(&hold(&l, "r1", 1, 1), &Ledger(vec![]))
        .await
        .unwrap();
    // Each amount is in range; their sum (2^54) is not.
    let r = q
        .settle(&settle(&l, "r1", MAX_COUNTER, MAX_COUNTER))
        .await
        .unwrap();
    assert!(
        matches!(r, SettleOutcome::Settled { overrun_tokens, .. } if overrun_tokens == MAX_COUNTER),
        "{r:?}"
    );
    let out = q
        .hold(&hold(&l, "r2", 1, 1), &Ledger(vec![]))
        .await
        .unwrap();
    assert!(
        matches!(out, HoldOutcome::Refused(_)),
        "a saturated scope admitted: {out:?}"
    );
    let c = q.month_counters("acme", "2026-11").await.unwrap();
    for scope in ["t", "a:web", "k:k1"] {
        assert_eq!(c.used_tokens(scope), MAX_COUNTER, "{scope}: {c:?}");
        assert_eq!(c.overrun_tokens(scope), MAX_COUNTER, "{scope}: {c:?}");
    }
    // A limit past the range is the largest limit, not a wrapped one.
    let huge = budget(i64::MAX);
    let out = q
        .hold(&hold(&huge, "r3", 5, 5), &Ledger(vec![]))
        .await
        .unwrap();
    assert!(matches!(out, HoldOutcome::Refused(_)), "{out:?}");
}

#[tokio::test]
async fn a_rebuild_from_absurd_ledger_rows_saturates_instead_of_wrapping() {
    let q = engine();
    let l = budget(1_000);
    let row = ScopeUsage {
        app: "web".into(),
        key: "k1".into(),
        tokens: i64::MAX,
        cost: 0,
        overrun_tokens: i64::MAX,
        overrun_cost: 0,
    };
    let ledger = Ledger(vec![row.clone(), row]);
    // Two rows of i64::MAX wrap to −2 in an unchecked sum: the scope would
    // then look unspent and admit.
    let out = q.hold(&hold(&l, "r1", 5, 5), &ledger).await.unwrap();
    assert!(matches!(out, HoldOutcome::Refused(_)), "{out:?}");
    let c = q.month_counters("acme", "2026-11").await.unwrap();
    assert_eq!(c.used_tokens("t"), MAX_COUNTER, "{c:?}");
}

#[tokio::test]
async fn a_lease_batch_saturates_an_absurd_item_and_the_books_stay_in_range() {
    let q = Arc::new(engine());
    let l = budget(10_000);
    let book = LeaseBook::start(q.clone(), LeaseTuning::default());
    let a = book
        .admit(&hold(&l, "r1", 10, 10), &Ledger(vec![]))
        .await
        .unwrap();
    assert!(matches!(a, quota::LeaseAdmit::Admitted { .. }), "{a:?}");
    let actual = domain::lease::Need {
        input: i64::MAX,
        output: i64::MAX,
        cost: i64::MAX,
    };
    let r = book
        .settle("r1", actual, "{}".into())
        .unwrap()
        .await
        .unwrap();
    assert!(matches!(r, SettleOutcome::Settled { .. }), "{r:?}");
    let c = q.month_counters("acme", "2026-11").await.unwrap();
    assert_eq!(c.used_tokens("t"), MAX_COUNTER, "{c:?}");
    assert!(c.held_tokens("t") >= 0, "{c:?}");
    book.shutdown(Duration::from_secs(2)).await;
}
