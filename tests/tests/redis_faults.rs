//! Redis lost or down: the budget survives a FLUSHALL (rebuilt from the
//! ledger), and a dead Redis fails closed fast without reaching the upstream.

use domain::Limits;
use e2e::*;
use std::time::{Duration, Instant};

#[tokio::test]
async fn after_flushall_the_month_is_rebuilt_from_postgres_and_the_budget_holds() {
    let redis = RedisProc::start();
    let env = TestEnv::with_redis(redis.url(), Default::default()).await;
    // Each request settles at 24 tokens (8 in, 16 out) with an estimate of 27.
    let (_, key) = env
        .simple_tenant(Limits {
            monthly_tokens: Some(98),
            ..Default::default()
        })
        .await;
    let srv = env.server().await;
    let url = format!("http://{}/v1/chat/completions", srv.addr);
    for _ in 0..3 {
        assert_eq!(
            post(&url, &key, &chat_body("hello", Some(16)))
                .await
                .status(),
            200
        );
    }
    let month = this_month();
    assert!(
        eventually(Duration::from_secs(5), || async {
            env.ledger_tokens("t", &month).await.0 == 72
        })
        .await
    );

    let mut c = env.redis().await;
    let _: () = redis::cmd("FLUSHALL").query_async(&mut c).await.unwrap();
    assert!(env.counters("t", &month).await.is_empty());

    // 72 used: one more request (27 held) would pass 98 → refused, from the
    // rebuilt counters, not from an empty Redis.
    let r = post(&url, &key, &chat_body("hello", Some(16))).await;
    assert_eq!(r.status(), 402);
    assert_eq!(
        r.headers()["x-tollgate-reason"],
        "tenant_monthly_budget_exhausted"
    );
    let counters = env.counters("t", &month).await;
    assert_eq!(counters.get("t:ut"), Some(&72), "{counters:?}");
    assert_eq!(counters.get("_rb"), Some(&1));
    // A request that fits still passes.
    assert_eq!(
        post(&url, &key, &chat_body("hello", Some(4)))
            .await
            .status(),
        200
    );
    srv.shutdown().await;
}

#[tokio::test]
async fn redis_stopped_means_503_within_100ms_and_nothing_forwarded() {
    let mut redis = RedisProc::start();
    let env = TestEnv::with_redis(redis.url(), Default::default()).await;
    let (_, key) = env
        .simple_tenant(Limits {
            monthly_tokens: Some(1_000_000),
            ..Default::default()
        })
        .await;
    let srv = env.server().await;
    let url = format!("http://{}/v1/chat/completions", srv.addr);
    let client = reqwest::Client::new();
    let send = || {
        client
            .post(&url)
            .bearer_auth(&key)
            .json(&chat_body("hi", None))
            .send()
    };
    assert_eq!(send().await.unwrap().status(), 200);
    let before = env.mock.snapshot().requests;

    redis.stop();
    for _ in 0..5 {
        let t0 = Instant::now();
        let r = send().await.unwrap();
        let took = t0.elapsed();
        assert_eq!(r.status(), 503);
        assert_eq!(r.headers()["retry-after"], "1");
        let b: serde_json::Value = r.json().await.unwrap();
        assert_eq!(b["error"]["code"], "quota_store_unavailable");
        assert!(took < Duration::from_millis(100), "answered after {took:?}");
    }
    assert_eq!(
        env.mock.snapshot().requests,
        before,
        "a request reached the upstream without a hold"
    );

    // Redis comes back empty: service resumes, counters rebuilt from the ledger.
    redis.restart();
    let back = eventually(Duration::from_secs(5), || async {
        send().await.unwrap().status() == 200
    })
    .await;
    assert!(back, "gateway did not recover after Redis came back");
    srv.shutdown().await;
}
