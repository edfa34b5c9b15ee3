//! Degrade before reject (docs/design.md §3, §5): past its daily cost soft limit a
//! tenant's request goes to the model's cheaper model, says so in headers,
//! and is billed as the cheaper model; past the hard (monthly cost) limit it
//! is refused.

mod fair_common;

use domain::{Limits, MicroUsd};
use e2e::*;
use fair_common::*;
use serde_json::json;
use std::time::Duration;

#[tokio::test]
async fn past_the_soft_limit_the_cheaper_model_answers_and_is_billed() {
    let env = TestEnv::new().await;
    // 5 and 30 micro-USD per token against 0.15 and 0.6.
    env.model("gpt-4o", "chat", 5_000_000, 30_000_000).await;
    env.model("gpt-4o-mini", "chat", 150_000, 600_000).await;
    let limits = Limits {
        daily_cost_soft_usd: Some(MicroUsd(100)),
        monthly_cost_usd: Some(MicroUsd(1_500)),
        ..Default::default()
    };
    let key = tenant(&env, "t", "standard", limits, None).await;
    let srv = env.server_with(config(&env)).await;
    let base = format!("http://{}", srv.addr);
    let token = admin(&env, &base).await;
    let (s, b) = api(
        "PUT",
        &format!("{base}/api/v1/models/gpt-4o/fairness"),
        Some(&token),
        Some(json!({"degrade_to": "gpt-4o-mini"})),
    )
    .await;
    assert_eq!(s, 200, "{b}");
    let url = format!("{base}/v1/chat/completions");
    let mut req = body("", 10);
    req["model"] = json!("gpt-4o");

    // Under the soft limit: the model asked for.
    let r = post(&url, &key, &req).await;
    assert_eq!(r.status(), 200);
    assert_eq!(decision(&r), "allow");
    let first: serde_json::Value = r.json().await.unwrap();
    assert_eq!(first["model"], "gpt-4o");
    tokio::time::sleep(Duration::from_millis(200)).await; // its settle lands

    // That request cost ~340 micro-USD, past the 100 soft limit: once it is
    // settled, the next request goes to gpt-4o-mini and says so.
    let t0 = std::time::Instant::now();
    let degraded = loop {
        let r = post(&url, &key, &req).await;
        assert_eq!(r.status(), 200);
        if decision(&r) == "degrade" {
            break Some(r);
        }
        if t0.elapsed() > Duration::from_secs(5) {
            break None;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let r = degraded.expect("never degraded past the soft limit");
    assert_eq!(reason(&r), "daily_cost_soft_limit");
    let rid = r.headers()["x-request-id"].to_str().unwrap().to_string();
    let b: serde_json::Value = r.json().await.unwrap();
    assert_eq!(b["model"], "gpt-4o-mini", "the cheaper model answered");

    // The ledger (what the bill is made of) shows the model actually used.
    let stored = eventually(Duration::from_secs(5), || async {
        env.usage_event(&rid).await.is_some()
    })
    .await;
    assert!(stored);
    let e = env.usage_event(&rid).await.unwrap();
    assert_eq!(e.model, "gpt-4o-mini");

    // Degraded requests go on until the hard monthly cost limit: then 402.
    let mut n = 0;
    let last = loop {
        let r = post(&url, &key, &req).await;
        if r.status() != 200 {
            break r;
        }
        assert_eq!(decision(&r), "degrade");
        n += 1;
        assert!(n < 500, "never reached the hard limit");
    };
    assert_eq!(last.status(), 402);
    assert_eq!(reason(&last), "tenant_monthly_cost_exhausted");
    let by_model: Vec<(String, i64)> =
        sqlx::query_as("SELECT model, count(*) FROM usage_events GROUP BY model ORDER BY model")
            .fetch_all(env.store.pool())
            .await
            .unwrap();
    assert_eq!(by_model[0].0, "gpt-4o");
    assert_eq!(by_model[1].0, "gpt-4o-mini");
    srv.shutdown().await;
}

/// The day counter the soft limit reads is fed by each replica in batches
/// (docs/fair.md, "Day counter"): after a burst spread over two replicas it
/// holds exactly the day's cost in the ledger — no settle lost, none counted
/// twice — computed here by SQL over the stored events.
#[tokio::test]
async fn the_day_counter_adds_up_to_the_ledger_across_replicas() {
    use futures::StreamExt;
    let env = TestEnv::new().await;
    let limits = Limits {
        // Far out of reach: nothing is degraded, every request settles.
        daily_cost_soft_usd: Some(MicroUsd(1_000_000_000)),
        ..Default::default()
    };
    env.model("gpt-4o-mini", "chat", 150_000, 600_000).await;
    let key = tenant(&env, "t", "standard", limits, None).await;
    let a = env.server_with(config(&env)).await;
    let b = env.server_with(config(&env)).await;
    let urls = [
        format!("http://{}/v1/chat/completions", a.addr),
        format!("http://{}/v1/chat/completions", b.addr),
    ];
    const N: usize = 240;
    let statuses: Vec<u16> = futures::stream::iter(0..N)
        .map(|i| {
            let (url, key) = (urls[i % 2].clone(), key.clone());
            // Output lengths vary, so costs differ from request to request.
            let req = body("", 5 + (i % 17) as i64);
            async move { post(&url, &key, &req).await.status().as_u16() }
        })
        .buffer_unordered(12)
        .collect()
        .await;
    assert!(statuses.iter().all(|s| *s == 200), "{statuses:?}");

    let day = chrono::Utc::now().format("%Y-%m-%d").to_string();
    let ledger = || async {
        sqlx::query_as::<_, (i64, i64)>(
            "SELECT count(*), COALESCE(SUM(cost_micro), 0)::bigint FROM usage_events \
             WHERE tenant_id = 't' AND day::text = $1",
        )
        .bind(&day)
        .fetch_one(env.store.pool())
        .await
        .unwrap()
    };
    let counter = || async {
        let mut c = env.redis().await;
        let v: Option<i64> = redis::cmd("HGET")
            .arg(format!("{}:{{t:t}}:d:{day}", env.prefix))
            .arg("uc")
            .query_async(&mut c)
            .await
            .unwrap();
        v
    };
    let settled = eventually(Duration::from_secs(10), || async {
        let (n, cost) = ledger().await;
        n == N as i64 && counter().await == Some(cost)
    })
    .await;
    let (n, cost) = ledger().await;
    assert!(
        settled,
        "ledger: {n} events costing {cost}; day counter: {:?}",
        counter().await
    );
    assert!(cost > 0);
    a.shutdown().await;
    b.shutdown().await;
}
