//! Postgres down: the data plane keeps serving the keys it knows, settled
//! usage waits in the Redis outbox, and reaches the ledger exactly once
//! when Postgres comes back.

use domain::Limits;
use e2e::*;
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn usage_settled_while_postgres_is_down_reaches_the_ledger_once_it_returns() {
    let pg = PgProc::start();
    let env = TestEnv::with_services(&pg.admin_url(), shared_redis_url(), Default::default()).await;
    let (_, key) = env
        .simple_tenant(Limits {
            monthly_tokens: Some(1_000_000),
            ..Default::default()
        })
        .await;
    let srv = env.server().await;
    let url = format!("http://{}/v1/chat/completions", srv.addr);
    assert_eq!(
        post(&url, &key, &chat_body("hello", Some(16)))
            .await
            .status(),
        200
    );

    pg.down();
    let health = reqwest::get(format!("http://{}/healthz", srv.addr))
        .await
        .unwrap();
    assert_eq!(health.status(), 503);
    assert_eq!(
        health.json::<serde_json::Value>().await.unwrap()["postgres"],
        false
    );
    for _ in 0..20 {
        let r = post(&url, &key, &chat_body("hello", Some(16))).await;
        assert_eq!(
            r.status(),
            200,
            "a known key must keep working while Postgres is down"
        );
    }

    pg.up();
    let month = this_month();
    // The outbox sweeper stores what the writer could not (1 s in tests).
    let stored = eventually(Duration::from_secs(20), || async {
        env.store
            .month_usage(&TenantScope::system(), "t", &month)
            .await
            .map(|r| r.iter().map(|r| r.requests).sum::<i64>() == 21)
            .unwrap_or(false)
    })
    .await;
    assert!(
        stored,
        "the 20 requests served without Postgres never reached the ledger"
    );
    let (tokens, n) = env.ledger_tokens("t", &month).await;
    assert_eq!(n, 21, "each request exactly once");
    assert_eq!(env.counters("t", &month).await["t:ut"], tokens);
    srv.shutdown().await;
}
