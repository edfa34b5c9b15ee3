//! Hold-engine tests against the real Redis (TOLLGATE_TEST_REDIS_URL, default
//! local), each under a random key prefix so tests never see each other.

use domain::limits::{LimitKind, ScopeKind};
use domain::Limits;
use quota::{
    ExtendOutcome, ExtendRequest, HoldOutcome, HoldRequest, LedgerSource, QuotaEngine, QuotaError,
    ScopeUsage, SettleOutcome, SettleRequest,
};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn redis_url() -> String {
    std::env::var("TOLLGATE_TEST_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into())
}

fn engine() -> QuotaEngine {
    engine_with_timeout(Duration::from_millis(500))
}

fn engine_with_timeout(timeout: Duration) -> QuotaEngine {
    let prefix = format!("tgtest{}", uuid::Uuid::new_v4().simple());
    QuotaEngine::new(&redis_url(), &prefix, timeout, "test-replica").unwrap()
}

/// An empty ledger: a month nobody has spent in yet.
struct EmptyLedger;
impl LedgerSource for EmptyLedger {
    async fn month_usage(&self, _t: &str, _m: &str) -> Result<Vec<ScopeUsage>, String> {
        Ok(vec![])
    }
}

struct Scopes {
    tenant: Limits,
    app: Limits,
    key: Limits,
}

fn hold<'a>(s: &'a Scopes, rid: &'a str, est_in: i64, est_out: i64) -> HoldRequest<'a> {
    HoldRequest {
        budgets: &[],
        request_id: rid,
        tenant: "acme",
        app: "web",
        key: "k1",
        month: "2026-11",
        est_input: est_in,
        est_output: est_out,
        est_cost: est_in + est_out,
        model: "gpt-4o-mini",
        limits: [&s.tenant, &s.app, &s.key],
    }
}

fn settle<'a>(s: &'a Scopes, rid: &'a str, inp: i64, out: i64) -> SettleRequest<'a> {
    SettleRequest {
        request_id: rid,
        tenant: "acme",
        app: "web",
        key: "k1",
        month: "2026-11",
        input_tokens: inp,
        output_tokens: out,
        cost: inp + out,
        event_json: "{}",
        status: "ok",
        limits: [&s.tenant, &s.app, &s.key],
        bound: domain::usage::Bound::SAFE,
    }
}

fn no_limits() -> Scopes {
    Scopes {
        tenant: Limits::default(),
        app: Limits::default(),
        key: Limits::default(),
    }
}

#[tokio::test]
async fn hold_then_settle_moves_the_estimate_to_used() {
    let q = engine();
    let s = no_limits();
    let out = q
        .hold(&hold(&s, "r1", 10, 100), &EmptyLedger)
        .await
        .unwrap();
    assert!(matches!(out, HoldOutcome::Admitted { .. }), "{out:?}");
    let c = q.month_counters("acme", "2026-11").await.unwrap();
    for scope in ["t", "a:web", "k:k1"] {
        assert_eq!(
            (c.used_tokens(scope), c.held_tokens(scope)),
            (0, 110),
            "{scope}"
        );
    }
    assert_eq!(q.inflight("acme", "t").await.unwrap(), 1);
    let r = q.settle(&settle(&s, "r1", 10, 40)).await.unwrap();
    assert_eq!(
        r,
        SettleOutcome::Settled {
            overrun_tokens: 0,
            overrun_cost: 0
        }
    );
    let c = q.month_counters("acme", "2026-11").await.unwrap();
    for scope in ["t", "a:web", "k:k1"] {
        assert_eq!(
            (c.used_tokens(scope), c.held_tokens(scope)),
            (50, 0),
            "{scope}"
        );
        assert_eq!(c.used_cost(scope), 50);
    }
    assert_eq!(q.inflight("acme", "t").await.unwrap(), 0);
    let outbox = q.outbox_peek("acme", 10).await.unwrap();
    assert_eq!(outbox, vec![("r1".to_string(), "{}".to_string())]);
}

#[tokio::test]
async fn a_refusal_by_the_key_rpm_changes_nothing_anywhere() {
    let q = engine();
    let s = Scopes {
        tenant: Limits {
            monthly_tokens: Some(1_000_000),
            rpm: Some(1000),
            ..Default::default()
        },
        app: Limits {
            monthly_tokens: Some(100_000),
            input_tpm: Some(100_000),
            ..Default::default()
        },
        key: Limits {
            rpm: Some(2),
            ..Default::default()
        },
    };
    for rid in ["a", "b"] {
        let out = q.hold(&hold(&s, rid, 10, 10), &EmptyLedger).await.unwrap();
        assert!(matches!(out, HoldOutcome::Admitted { .. }), "{out:?}");
    }
    let before_m = q.month_counters("acme", "2026-11").await.unwrap();
    let before_if = q.inflight("acme", "a:web").await.unwrap();
    let out = q.hold(&hold(&s, "c", 10, 10), &EmptyLedger).await.unwrap();
    let HoldOutcome::Refused(r) = out else {
        panic!("expected refusal, got {out:?}")
    };
    assert_eq!((r.scope, r.limit), (ScopeKind::Key, LimitKind::Rpm));
    assert_eq!(r.reason().as_str(), "key_rpm_exceeded");
    assert!(r.retry_after_ms.unwrap() > 0);
    assert_eq!(q.month_counters("acme", "2026-11").await.unwrap(), before_m);
    assert_eq!(q.inflight("acme", "a:web").await.unwrap(), before_if);
    assert_eq!(q.inflight("acme", "t").await.unwrap(), 2);
}

#[tokio::test]
async fn replayed_hold_and_settle_charge_once() {
    let q = engine();
    let s = no_limits();
    q.hold(&hold(&s, "r", 5, 5), &EmptyLedger).await.unwrap();
    let again = q.hold(&hold(&s, "r", 5, 5), &EmptyLedger).await.unwrap();
    assert_eq!(again, HoldOutcome::Duplicate { state: "H".into() });
    assert_eq!(
        q.month_counters("acme", "2026-11")
            .await
            .unwrap()
            .held_tokens("t"),
        10
    );
    q.settle(&settle(&s, "r", 5, 3)).await.unwrap();
    let again = q.settle(&settle(&s, "r", 5, 3)).await.unwrap();
    assert_eq!(again, SettleOutcome::AlreadyClosed { state: "S".into() });
    let again = q.hold(&hold(&s, "r", 5, 5), &EmptyLedger).await.unwrap();
    assert_eq!(again, HoldOutcome::Duplicate { state: "S".into() });
    let c = q.month_counters("acme", "2026-11").await.unwrap();
    assert_eq!((c.used_tokens("t"), c.held_tokens("t")), (8, 0));
    assert_eq!(q.inflight("acme", "t").await.unwrap(), 0);
}

#[tokio::test]
async fn release_gives_everything_back_once() {
    let q = engine();
    let s = Scopes {
        tenant: Limits {
            output_tpm: Some(1000),
            ..Default::default()
        },
        ..no_limits()
    };
    q.hold(&hold(&s, "r", 5, 600), &EmptyLedger).await.unwrap();
    // The bucket has 400 left: a second 600-token hold must wait.
    let out = q.hold(&hold(&s, "r2", 5, 600), &EmptyLedger).await.unwrap();
    assert!(
        matches!(out, HoldOutcome::Refused(r) if r.limit == LimitKind::OutputTpm),
        "{out:?}"
    );
    assert!(q
        .release(
            "acme",
            "web",
            "k1",
            "2026-11",
            "r",
            [&s.tenant, &s.app, &s.key]
        )
        .await
        .unwrap());
    assert!(!q
        .release(
            "acme",
            "web",
            "k1",
            "2026-11",
            "r",
            [&s.tenant, &s.app, &s.key]
        )
        .await
        .unwrap());
    let c = q.month_counters("acme", "2026-11").await.unwrap();
    assert_eq!((c.used_tokens("t"), c.held_tokens("t")), (0, 0));
    let out = q.hold(&hold(&s, "r2", 5, 600), &EmptyLedger).await.unwrap();
    assert!(matches!(out, HoldOutcome::Admitted { .. }), "{out:?}");
}

#[tokio::test]
async fn a_settle_above_its_hold_is_billed_in_full_and_flagged() {
    let q = engine();
    let s = Scopes {
        tenant: Limits {
            monthly_tokens: Some(100),
            ..Default::default()
        },
        ..no_limits()
    };
    q.hold(&hold(&s, "r", 10, 50), &EmptyLedger).await.unwrap();
    let r = q.settle(&settle(&s, "r", 20, 60)).await.unwrap();
    assert_eq!(
        r,
        SettleOutcome::Settled {
            overrun_tokens: 20,
            overrun_cost: 20
        }
    );
    let c = q.month_counters("acme", "2026-11").await.unwrap();
    assert_eq!((c.used_tokens("t"), c.overrun_tokens("t")), (80, 20));
    // used + held <= limit + overruns holds; the next hold must fit what's left.
    let out = q.hold(&hold(&s, "r2", 10, 20), &EmptyLedger).await.unwrap();
    assert!(matches!(out, HoldOutcome::Refused(_)), "{out:?}");
    let out = q.hold(&hold(&s, "r3", 10, 10), &EmptyLedger).await.unwrap();
    assert!(
        matches!(
            out,
            HoldOutcome::Admitted {
                remaining_tokens: Some(0),
                ..
            }
        ),
        "{out:?}"
    );
}

#[tokio::test]
async fn concurrent_holds_never_pass_the_budget() {
    let q = Arc::new(engine());
    // Room for exactly 40 holds of 25 tokens.
    let s = Arc::new(Scopes {
        tenant: Limits {
            monthly_tokens: Some(1000),
            ..Default::default()
        },
        ..no_limits()
    });
    let mut tasks = Vec::new();
    for i in 0..200 {
        let (q, s) = (q.clone(), s.clone());
        tasks.push(tokio::spawn(async move {
            let rid = format!("r{i}");
            q.hold(&hold(&s, &rid, 5, 20), &EmptyLedger).await.unwrap()
        }));
    }
    let mut admitted = 0;
    for t in tasks {
        match t.await.unwrap() {
            HoldOutcome::Admitted { .. } => admitted += 1,
            HoldOutcome::Refused(r) => {
                assert_eq!(r.reason().as_str(), "tenant_monthly_budget_exhausted")
            }
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(admitted, 40);
    let c = q.month_counters("acme", "2026-11").await.unwrap();
    assert_eq!(c.held_tokens("t"), 1000);
}

#[tokio::test]
async fn a_lost_month_is_rebuilt_from_the_ledger_before_admitting() {
    struct Spent;
    impl LedgerSource for Spent {
        async fn month_usage(&self, _t: &str, _m: &str) -> Result<Vec<ScopeUsage>, String> {
            Ok(vec![ScopeUsage {
                app: "web".into(),
                key: "k1".into(),
                tokens: 950,
                cost: 950,
                overrun_tokens: 0,
                overrun_cost: 0,
            }])
        }
    }
    let q = engine();
    let s = Scopes {
        tenant: Limits {
            monthly_tokens: Some(1000),
            ..Default::default()
        },
        ..no_limits()
    };
    let out = q.hold(&hold(&s, "r", 10, 50), &Spent).await.unwrap();
    assert!(matches!(out, HoldOutcome::Refused(_)), "{out:?}");
    let c = q.month_counters("acme", "2026-11").await.unwrap();
    assert!(c.is_rebuilt());
    assert_eq!(
        (
            c.used_tokens("t"),
            c.used_tokens("a:web"),
            c.used_tokens("k:k1")
        ),
        (950, 950, 950)
    );
}

#[tokio::test]
async fn redis_down_fails_closed_fast() {
    // Nothing listens on port 1.
    let q = QuotaEngine::new("redis://127.0.0.1:1", "x", Duration::from_millis(50), "r").unwrap();
    let s = no_limits();
    let t0 = Instant::now();
    let err = q
        .hold(&hold(&s, "r", 1, 1), &EmptyLedger)
        .await
        .unwrap_err();
    assert!(matches!(err, quota::QuotaError::Unavailable(_)), "{err:?}");
    assert!(
        t0.elapsed() < Duration::from_millis(100),
        "{:?}",
        t0.elapsed()
    );
}

fn extend<'a>(s: &'a Scopes, rid: &'a str, add: i64) -> ExtendRequest<'a> {
    ExtendRequest {
        budgets: &[],
        request_id: rid,
        tenant: "acme",
        app: "web",
        key: "k1",
        month: "2026-11",
        add_output: add,
        add_cost: add,
        limits: [&s.tenant, &s.app, &s.key],
    }
}

#[tokio::test]
async fn extend_is_all_or_nothing_and_only_for_open_holds() {
    let q = engine();
    let s = Scopes {
        tenant: Limits {
            monthly_tokens: Some(1000),
            ..Default::default()
        },
        app: Limits {
            output_tpm: Some(100_000),
            ..Default::default()
        },
        key: Limits::default(),
    };
    q.hold(&hold(&s, "r", 100, 256), &EmptyLedger)
        .await
        .unwrap();
    let out = q.extend(&extend(&s, "r", 256)).await.unwrap();
    assert_eq!(
        out,
        ExtendOutcome::Extended {
            remaining_tokens: Some(1000 - 612)
        }
    );
    let before = q.month_counters("acme", "2026-11").await.unwrap();
    let out = q.extend(&extend(&s, "r", 500)).await.unwrap();
    let ExtendOutcome::Refused(r) = out else {
        panic!("{out:?}")
    };
    assert_eq!(r.reason().as_str(), "tenant_monthly_budget_exhausted");
    assert_eq!(q.month_counters("acme", "2026-11").await.unwrap(), before);
    // Settling releases the whole extended hold: 612 held become 150 used.
    q.settle(&settle(&s, "r", 100, 50)).await.unwrap();
    let c = q.month_counters("acme", "2026-11").await.unwrap();
    assert_eq!((c.used_tokens("t"), c.held_tokens("t")), (150, 0));
    let out = q.extend(&extend(&s, "r", 1)).await.unwrap();
    assert_eq!(out, ExtendOutcome::NotHeld { state: "S".into() });
}

#[tokio::test]
async fn a_budget_refusal_tells_the_headroom_left() {
    let q = engine();
    let s = Scopes {
        tenant: Limits {
            monthly_tokens: Some(1000),
            ..Default::default()
        },
        app: Limits {
            monthly_tokens: Some(700),
            ..Default::default()
        },
        key: Limits::default(),
    };
    q.hold(&hold(&s, "a", 100, 100), &EmptyLedger)
        .await
        .unwrap();
    let out = q
        .hold(&hold(&s, "b", 100, 900), &EmptyLedger)
        .await
        .unwrap();
    let HoldOutcome::Refused(r) = out else {
        panic!("{out:?}")
    };
    assert_eq!(r.reason().as_str(), "tenant_monthly_budget_exhausted");
    assert_eq!(r.headroom_tokens, Some(500)); // the app's 700 - 200 is the tightest
    assert_eq!(r.headroom_cost, None);
}

#[tokio::test]
async fn a_free_model_hold_can_be_released() {
    // Found by the property test: `-0` (a zero cost negated in Lua) is not
    // an integer to Redis, so releasing a hold of a free model failed.
    let q = engine();
    let s = no_limits();
    let mut h = hold(&s, "free", 5, 5);
    h.est_cost = 0;
    q.hold(&h, &EmptyLedger).await.unwrap();
    assert!(q
        .release(
            "acme",
            "web",
            "k1",
            "2026-11",
            "free",
            [&s.tenant, &s.app, &s.key]
        )
        .await
        .unwrap());
    let c = q.month_counters("acme", "2026-11").await.unwrap();
    assert_eq!((c.held_tokens("t"), c.held_cost("t")), (0, 0));
}

/// `n` holds of 10 + 10 tokens fired at once, each in its own task.
fn fire_holds(
    q: &Arc<QuotaEngine>,
    s: &Arc<Scopes>,
    prefix: &str,
    n: usize,
) -> Vec<tokio::task::JoinHandle<Result<HoldOutcome, QuotaError>>> {
    (0..n)
        .map(|i| {
            let (q, s, rid) = (q.clone(), s.clone(), format!("{prefix}-{i}"));
            tokio::spawn(async move { q.hold(&hold(&s, &rid, 10, 10), &EmptyLedger).await })
        })
        .collect()
}

/// 8,000 holds fired at once, as when thousands of streams open together:
/// Redis runs them one after another, so without turns the later ones sat
/// on the connection past the timeout (100 ms here, above scheduler noise)
/// and failed closed while Redis was healthy. With turns every one is answered.
#[tokio::test]
async fn a_burst_of_holds_waits_its_turn_instead_of_timing_out() {
    let q = Arc::new(
        engine_with_timeout(Duration::from_millis(100))
            .with_call_limit(64, Duration::from_secs(30)),
    );
    let s = Arc::new(no_limits());
    // The month exists before the burst (one rebuild, not 8,000).
    q.hold(&hold(&s, "warm", 1, 1), &EmptyLedger).await.unwrap();
    let tasks = fire_holds(&q, &s, "burst", 8000);
    let mut failed = Vec::new();
    for t in tasks {
        match t.await.unwrap() {
            Ok(HoldOutcome::Admitted { .. }) => {}
            other => failed.push(format!("{other:?}")),
        }
    }
    assert!(
        failed.is_empty(),
        "{} of 8000 failed, e.g. {:?}",
        failed.len(),
        failed.first()
    );
    assert_eq!(q.inflight("acme", "t").await.unwrap(), 8001);
}

/// A call that gets no turn in time fails closed like a Redis timeout, and
/// holds nothing.
#[tokio::test]
async fn a_call_without_a_turn_fails_closed() {
    let q = Arc::new(engine().with_call_limit(1, Duration::ZERO));
    let s = Arc::new(no_limits());
    q.hold(&hold(&s, "warm", 1, 1), &EmptyLedger).await.unwrap();
    let tasks = fire_holds(&q, &s, "busy", 50);
    let (mut ok, mut busy) = (0, 0);
    for t in tasks {
        match t.await.unwrap() {
            Ok(HoldOutcome::Admitted { .. }) => ok += 1,
            Err(quota::QuotaError::Unavailable(m)) if m.contains("quota store busy") => busy += 1,
            other => panic!("unexpected {other:?}"),
        }
    }
    assert!(busy > 0, "no call was turned away ({ok} admitted)");
    assert_eq!(ok + busy, 50);
    // Only the admitted holds count.
    assert_eq!(q.inflight("acme", "t").await.unwrap(), 1 + ok);
}
