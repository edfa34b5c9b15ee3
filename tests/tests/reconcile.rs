//! Holds nobody will settle — a crashed replica's, or any held too long —
//! are closed at their estimate, exactly once, and reach the ledger.

use domain::Limits;
use e2e::*;
use quota::{HoldOutcome, HoldRequest, QuotaEngine, SettleOutcome, SettleRequest};
use std::time::Duration;

async fn hold_as(env: &TestEnv, replica: &str, rid: &str, key_id: &str) -> QuotaEngine {
    let q = QuotaEngine::new(&env.redis_url, &env.prefix, Duration::from_secs(1), replica).unwrap();
    let none = Limits::default();
    let month = this_month();
    let req = HoldRequest {
        budgets: &[],
        request_id: rid,
        tenant: "t",
        app: "a",
        key: key_id,
        month: &month,
        est_input: 40,
        est_output: 60,
        est_cost: 42,
        model: "gpt-4o-mini",
        limits: [&none, &none, &none],
    };
    assert!(matches!(
        q.hold(
            &req,
            &settlement::ledger_source::StoreLedger {
                store: &env.store,
                quota: &q,
                writer: None,
            }
        )
        .await
        .unwrap(),
        HoldOutcome::Admitted { .. }
    ));
    q
}

#[tokio::test]
async fn stale_and_orphaned_holds_are_closed_at_their_estimate_once() {
    let env = TestEnv::new().await;
    let (key_id, _) = env.simple_tenant(Limits::default()).await;
    let month = this_month();
    // A replica that crashed mid-request (no heartbeat), and a live one.
    let dead = hold_as(&env, "replica-dead", "req-orphan", &key_id).await;
    // The live one's request arrived 5 s before its hold (a slow body): a
    // gateway id carrying that time.
    let received_ms = chrono::Utc::now().timestamp_millis() - 5_000;
    let live_id = domain::request_id::at_millis(received_ms, 7);
    let live = hold_as(&env, "replica-live", &live_id, &key_id).await;
    live.heartbeat(Duration::from_secs(600)).await.unwrap();
    assert_eq!(env.counters("t", &month).await["t:ht"], 200);

    // Three minutes later: the orphan is closed, the live replica's hold is not.
    let now = chrono::Utc::now() + chrono::Duration::minutes(3);
    let r = server::commands::stale_holds(&env.config(), Some(&now.to_rfc3339()))
        .await
        .unwrap();
    assert_eq!((r.closed_orphaned, r.closed_stale), (1, 0));
    let c = env.counters("t", &month).await;
    assert_eq!((c["t:ht"], c["t:ut"]), (100, 100));
    let e = env.usage_event("req-orphan").await.expect("in the ledger");
    assert_eq!(
        (
            e.status.as_str(),
            e.usage_source.as_str(),
            e.input_tokens,
            e.output_tokens,
            e.cost_micro
        ),
        ("expired", "estimated", 40, 60, 42)
    );
    assert_eq!(e.replica, "replica-dead");

    // A day later even the live replica's hold is stale.
    let now = chrono::Utc::now() + chrono::Duration::hours(25);
    let r = server::commands::stale_holds(&env.config(), Some(&now.to_rfc3339()))
        .await
        .unwrap();
    assert_eq!((r.closed_orphaned, r.closed_stale), (0, 1));
    let c = env.counters("t", &month).await;
    assert_eq!((c["t:ht"], c["t:ut"]), (0, 200));
    assert_eq!(live.inflight("t", "t").await.unwrap(), 0);
    // Booked at the time its request was received, as the gateway books a
    // request; the orphan's id carries no time: booked at its hold's.
    let e = env.usage_event(&live_id).await.expect("in the ledger");
    assert_eq!(e.started_at_ms, received_ms);
    let orphan = env.usage_event("req-orphan").await.unwrap();
    assert!(orphan.started_at_ms > received_ms + 4_000);

    // The crashed request's own settle, arriving late, changes nothing.
    let none = Limits::default();
    let late = SettleRequest {
        request_id: "req-orphan",
        tenant: "t",
        app: "a",
        key: &key_id,
        month: &month,
        input_tokens: 40,
        output_tokens: 10,
        cost: 9,
        event_json: "{}",
        status: "ok",
        limits: [&none, &none, &none],
        bound: domain::usage::Bound::SAFE,
    };
    assert!(matches!(
        dead.settle(&late).await.unwrap(),
        SettleOutcome::AlreadyClosed { .. }
    ));
    assert_eq!(env.counters("t", &month).await["t:ut"], 200);
    // Nothing left to do: a second run closes nothing.
    let r = server::commands::stale_holds(&env.config(), Some(&now.to_rfc3339()))
        .await
        .unwrap();
    assert_eq!((r.closed_orphaned, r.closed_stale), (0, 0));
    assert_eq!(env.ledger_tokens("t", &month).await, (200, 2));
}

/// A usage event of tenant `t` as the settle script parks it in the outbox:
/// `tokens` input tokens, settled at `settled_at_ms`.
fn outbox_event(rid: &str, tokens: i64, settled_at_ms: i64) -> domain::usage::UsageEvent {
    let month = this_month();
    domain::usage::UsageEvent {
        input_tokens: tokens,
        started_at_ms: settled_at_ms - 100,
        settled_at_ms,
        ..ledger_event(rid, "t", &month, &format!("{month}-01"))
    }
}

/// Tenant `t`'s outbox (the hold engine's key, spelled out here).
fn outbox_key(env: &TestEnv) -> String {
    format!("{}:{{t:t}}:ob", env.prefix)
}

/// The outbox sweeper leaves an event settled moments ago to the ledger
/// writer that queued it (storing it at the same time made the writer's
/// `COPY` fail on the primary key), and stores one settled longer ago than
/// the writers' grace (2 s plus twice the writer's linger; the linger is
/// 2 s here, so the grace is 6 s and the test's timing has room) — also
/// one it first left alone, once it is that old: an event no writer holds
/// is never lost. Both are put straight into the tenant's outbox; the real
/// server's sweeper runs every second in tests.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sweeper_leaves_young_events_to_the_writer_and_stores_old_ones() {
    let env = TestEnv::new().await;
    env.simple_tenant(Limits::default()).await;
    let mut cfg = env.config();
    cfg.gateway.ledger_linger_ms = 2_000;
    let srv = env.server_with(cfg).await;
    let month = this_month();
    let now = chrono::Utc::now().timestamp_millis();
    // Settled a minute ago (a crashed replica's), and just now.
    let old = outbox_event("req_sweep_old", 5, now - 60_000);
    let young = outbox_event("req_sweep_young", 5, now);
    let outbox = outbox_key(&env);
    let mut r = env.redis().await;
    for e in [&old, &young] {
        let _: () = redis::cmd("HSET")
            .arg(&outbox)
            .arg(&e.request_id)
            .arg(e.to_json())
            .query_async(&mut r)
            .await
            .unwrap();
    }

    assert!(
        eventually(Duration::from_secs(10), || async {
            env.usage_event("req_sweep_old").await.is_some()
        })
        .await,
        "the sweeper never stored an event settled a minute ago"
    );
    assert!(
        env.usage_event("req_sweep_young").await.is_none(),
        "the sweeper stored an event settled within the writers' grace"
    );
    let waiting: bool = redis::cmd("HEXISTS")
        .arg(&outbox)
        .arg("req_sweep_young")
        .query_async(&mut r)
        .await
        .unwrap();
    assert!(
        waiting,
        "the young event left the outbox without being stored"
    );

    assert!(
        eventually(Duration::from_secs(20), || async {
            env.usage_event("req_sweep_young").await.is_some()
        })
        .await,
        "an event no writer holds was never stored once older than the grace"
    );
    // The sweeper removes what it stored right after the insert commits.
    assert!(
        eventually(Duration::from_secs(5), || async {
            let left: i64 = redis::cmd("HLEN")
                .arg(&outbox)
                .query_async(&mut env.redis().await)
                .await
                .unwrap();
            left == 0
        })
        .await,
        "stored events are cleared from the outbox"
    );
    let (tokens, n) = env.ledger_tokens("t", &month).await;
    assert_eq!((tokens, n), (10, 2), "each event once");
    srv.shutdown().await;
}

/// The sweeper walks a whole outbox (a cursor over the hash, not its first
/// page again and again): a few old events behind thousands of young ones
/// it leaves in place are all stored in one pass, and the young ones all
/// stay. Called directly, with the grace's cutoff, so nothing is timed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_sweep_reaches_old_events_behind_thousands_of_young_ones() {
    let env = TestEnv::new().await;
    env.simple_tenant(Limits::default()).await;
    let q = QuotaEngine::new(&env.redis_url, &env.prefix, Duration::from_secs(1), "check").unwrap();
    let month = this_month();
    let now = chrono::Utc::now().timestamp_millis();
    let outbox = outbox_key(&env);
    let mut pipe = redis::pipe();
    for i in 0..3_000 {
        let e = outbox_event(&format!("req_young_{i:04}"), 3, now - 100);
        pipe.hset(&outbox, &e.request_id, e.to_json()).ignore();
    }
    for i in 0..20 {
        let e = outbox_event(&format!("req_old_{i:02}"), 3, now - 60_000);
        pipe.hset(&outbox, &e.request_id, e.to_json()).ignore();
    }
    let mut r = env.redis().await;
    let _: () = pipe.query_async(&mut r).await.unwrap();

    let grace = settlement::ledger::writer_grace(Duration::from_millis(50));
    let stored =
        settlement::ledger::sweep_outside_grace(&env.store, &q, &["t".to_string()], now, grace)
            .await
            .unwrap();
    assert_eq!(stored, 20, "every old event, in one pass");
    assert_eq!(env.ledger_tokens("t", &month).await, (60, 20));
    let left: i64 = redis::cmd("HLEN")
        .arg(&outbox)
        .query_async(&mut r)
        .await
        .unwrap();
    assert_eq!(left, 3_000, "the young events stay for their writers");
}
