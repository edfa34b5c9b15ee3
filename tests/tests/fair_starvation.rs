//! No starvation (docs/design.md §7): under sustained interactive load on a model
//! pool, batch requests still get their turn within their maximum wait.

mod fair_common;

use domain::Limits;
use e2e::*;
use fair_common::*;
use serde_json::json;
use std::time::{Duration, Instant};

#[tokio::test]
async fn batch_requests_are_served_within_their_max_wait_under_interactive_load() {
    let env = TestEnv::new().await;
    env.model("gpt-4o-mini", "chat", 150_000, 600_000).await;
    let i1 = tenant(&env, "i1", "core", Limits::default(), None).await;
    let i2 = tenant(&env, "i2", "core", Limits::default(), None).await;
    let batch = tenant(&env, "b", "batch", Limits::default(), None).await;
    let mut cfg = config(&env);
    cfg.fair.max_wait_ms_core = 1_000;
    cfg.fair.max_wait_ms_batch = 4_000;
    cfg.fair.queue_max_per_tenant = 16;
    let srv = env.server_with(cfg).await;
    let base = format!("http://{}", srv.addr);
    let token = admin(&env, &base).await;
    let (s, _) = api(
        "PUT",
        &format!("{base}/api/v1/models/gpt-4o-mini/fairness"),
        Some(&token),
        Some(json!({"pool_capacity": 2})),
    )
    .await;
    assert_eq!(s, 200);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let url = format!("{base}/v1/chat/completions");

    // Two core tenants keep 16 requests outstanding against 2 slots for 5 s.
    let stop = Instant::now() + Duration::from_secs(5);
    let mut load = Vec::new();
    for key in [&i1, &i2] {
        for _ in 0..8 {
            let (url, key) = (url.clone(), key.clone());
            load.push(tokio::spawn(async move {
                let (mut queued, mut n) = (0, 0);
                while Instant::now() < stop {
                    let r = post(&url, &key, &body("[mock:latency_ms=50]", 10)).await;
                    n += 1;
                    queued += usize::from(decision(&r) == "queue");
                    if r.status() != 200 {
                        assert_eq!(reason(&r), "queue_timeout");
                    }
                }
                (queued, n)
            }));
        }
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    // Meanwhile a batch tenant sends work: it waits, but not forever.
    let mut jobs = Vec::new();
    for _ in 0..4 {
        let (url, key) = (url.clone(), batch.clone());
        jobs.push(tokio::spawn(async move {
            let r = post(&url, &key, &body("[mock:latency_ms=50]", 10)).await;
            let waited: u64 = r
                .headers()
                .get("x-tollgate-queue-wait-ms")
                .map_or(0, |v| v.to_str().unwrap().parse().unwrap());
            (r.status().as_u16(), reason(&r), waited)
        }));
    }
    for j in jobs {
        let (status, reason, waited) = j.await.unwrap();
        assert_eq!(status, 200, "batch request refused: {reason}");
        assert!(waited < 4_000, "waited {waited} ms");
    }
    let mut queued = 0;
    for h in load {
        queued += h.await.unwrap().0;
    }
    assert!(queued > 0, "the interactive load did saturate the pool");
    srv.shutdown().await;
}
