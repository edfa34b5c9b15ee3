//! Guarantees (docs/design.md §7): with a model pool saturated by standard tenants,
//! a core tenant still gets its guaranteed concurrency at once; the others
//! wait in their queues and are served as slots free.

mod fair_common;

use domain::Limits;
use e2e::*;
use fair_common::*;
use serde_json::json;
use std::time::{Duration, Instant};

#[tokio::test]
async fn a_core_tenant_keeps_its_guaranteed_slots_of_a_saturated_model_pool() {
    let env = TestEnv::new().await;
    env.model("gpt-4o-mini", "chat", 150_000, 600_000).await;
    let core = tenant(&env, "core", "core", Limits::default(), None).await;
    let s1 = tenant(&env, "s1", "standard", Limits::default(), None).await;
    let s2 = tenant(&env, "s2", "standard", Limits::default(), None).await;
    let mut cfg = config(&env);
    cfg.fair.max_wait_ms_standard = 15_000;
    let srv = env.server_with(cfg).await;
    let base = format!("http://{}", srv.addr);
    let token = admin(&env, &base).await;
    // 4 concurrent upstream requests; 2 of them guaranteed to core.
    let (s, b) = api(
        "PUT",
        &format!("{base}/api/v1/models/gpt-4o-mini/fairness"),
        Some(&token),
        Some(json!({"pool_capacity": 4, "guarantees": [{"tenant_id": "core", "slots": 2}]})),
    )
    .await;
    assert_eq!(s, 200, "{b}");
    tokio::time::sleep(Duration::from_millis(300)).await; // the index reloads on NOTIFY
    let url = format!("{base}/v1/chat/completions");

    // Six slow requests of standard tenants saturate what they may use.
    let mut flood = Vec::new();
    for key in [&s1, &s2, &s1, &s2, &s1, &s2] {
        let (url, key) = (url.clone(), key.clone());
        flood.push(tokio::spawn(async move {
            let r = post(&url, &key, &body("[mock:latency_ms=1000]", 10)).await;
            (r.status().as_u16(), decision(&r), reason(&r))
        }));
    }
    // Standard tenants never hold more than capacity - guarantee = 2 slots.
    let mut conn = env.redis().await;
    let by = format!("{}:{{m:gpt-4o-mini}}:by", env.prefix);
    let mut peak = 0;
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_millis(400) {
        let v: Vec<Option<i64>> = redis::cmd("HMGET")
            .arg(&by)
            .arg("s1")
            .arg("s2")
            .query_async(&mut conn)
            .await
            .unwrap();
        peak = peak.max(v.iter().map(|x| x.unwrap_or(0)).sum::<i64>());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        peak, 2,
        "standard tenants fill exactly the unguaranteed slots"
    );

    // The core tenant gets its two slots at once, without queueing.
    let mut mine = Vec::new();
    for _ in 0..2 {
        let (url, key) = (url.clone(), core.clone());
        mine.push(tokio::spawn(async move {
            let t = Instant::now();
            let r = post(&url, &key, &body("[mock:latency_ms=200]", 10)).await;
            (r.status().as_u16(), decision(&r), t.elapsed(), reason(&r))
        }));
    }
    for h in mine {
        let (status, decision, took, reason) = h.await.unwrap();
        assert_eq!(status, 200, "{reason}");
        assert_eq!(decision, "allow", "core was not queued (took {took:?})");
    }
    let mut queued = 0;
    for h in flood {
        let (status, decision, reason) = h.await.unwrap();
        assert_eq!(
            status, 200,
            "standard requests wait their turn and are served: {reason}"
        );
        queued += usize::from(decision == "queue");
    }
    assert!(
        queued >= 4,
        "four of six standard requests had to wait: {queued}"
    );
    srv.shutdown().await;
}
