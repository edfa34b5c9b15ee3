//! Leases through the real server (docs/design.md §4, "Leases — the fast path"):
//! the last tokens of a budget stay usable from any replica, a lowered limit
//! takes effect on a replica that holds a lease, and the books agree with
//! what the clients were told.

use domain::Limits;
use e2e::*;
use server::config::AdmissionSetting;
use std::time::Duration;

/// Sends `body` until the gateway refuses; returns (tokens the clients were
/// told they used, requests served, the refusal's code).
async fn spend_until_refused(url: &str, key: &str, max: usize) -> (i64, usize, String) {
    let (mut told, mut served) = (0, 0);
    for _ in 0..max {
        let r = post(url, key, &chat_body("hello", Some(16))).await;
        let status = r.status().as_u16();
        let json: serde_json::Value = r.json().await.unwrap();
        if status != 200 {
            return (told, served, json["error"]["code"].as_str().unwrap().into());
        }
        told += json["usage"]["total_tokens"].as_i64().unwrap();
        served += 1;
    }
    (told, served, "never refused".into())
}

fn lease_config(env: &TestEnv) -> server::config::Config {
    let mut cfg = env.config();
    cfg.gateway.admission = AdmissionSetting::Lease;
    cfg.gateway.lease_idle_ms = 300;
    cfg
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_last_tokens_of_a_budget_are_usable_from_any_replica() {
    let env = TestEnv::new().await;
    // Estimate 27 (11 in + 16 out), actual 24, as in the concurrency test.
    let budget = 3_000;
    let (_, key) = env
        .simple_tenant(Limits {
            monthly_tokens: Some(budget),
            ..Default::default()
        })
        .await;
    let (a, b) = (
        env.server_with(lease_config(&env)).await,
        env.server_with(lease_config(&env)).await,
    );
    let url = |s: &server::app::Running| format!("http://{}/v1/chat/completions", s.addr);
    let month = this_month();

    // A serves a burst and holds a lease.
    let mut told = 0;
    for _ in 0..40 {
        let r = post(&url(&a), &key, &chat_body("hello", Some(16))).await;
        assert_eq!(r.status(), 200);
        told += r.json::<serde_json::Value>().await.unwrap()["usage"]["total_tokens"]
            .as_i64()
            .unwrap();
    }
    // B spends the rest while A may still hold part of the budget.
    let (t, _, code) = spend_until_refused(&url(&b), &key, 200).await;
    told += t;
    assert_eq!(code, "tenant_monthly_budget_exhausted");
    // A goes idle and returns its lease; B gets what it held.
    let returned = eventually(Duration::from_secs(5), || async {
        env.counters("t", &month)
            .await
            .get("t:ht")
            .copied()
            .unwrap_or(0)
            == 0
    })
    .await;
    assert!(returned, "A never returned its lease");
    let (t, _, code) = spend_until_refused(&url(&b), &key, 200).await;
    told += t;
    assert_eq!(code, "tenant_monthly_budget_exhausted");

    let c = env.counters("t", &month).await;
    let used = c["t:ut"];
    assert!(used <= budget, "used {used} > {budget}");
    assert!(
        budget - used < 27,
        "{} tokens stranded: less than one request's estimate may be left",
        budget - used
    );
    let booked = eventually(Duration::from_secs(5), || async {
        env.ledger_tokens("t", &month).await.0 == used
    })
    .await;
    assert!(
        booked,
        "ledger {:?} vs redis {used}",
        env.ledger_tokens("t", &month).await
    );
    assert_eq!(told, used, "what the clients were told is what was booked");
    a.shutdown().await;
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lowered_limit_takes_effect_on_a_replica_holding_a_lease() {
    let env = TestEnv::new().await;
    let (_, key) = env
        .simple_tenant(Limits {
            monthly_tokens: Some(1_000_000),
            ..Default::default()
        })
        .await;
    let srv = env.server_with(lease_config(&env)).await;
    let url = format!("http://{}/v1/chat/completions", srv.addr);
    let month = this_month();
    for _ in 0..30 {
        assert_eq!(
            post(&url, &key, &chat_body("hello", Some(16)))
                .await
                .status(),
            200
        );
    }
    // Settles travel in batches: wait until all 30 have reached Redis and
    // the ledger, so "used" below is final before the limit is lowered.
    let landed = eventually(Duration::from_secs(5), || async {
        let (tokens, events) = env.ledger_tokens("t", &month).await;
        let c = env.counters("t", &month).await;
        events == 30 && c.get("t:ut") == Some(&tokens)
    })
    .await;
    assert!(landed, "the 30 settles never all landed");
    let c = env.counters("t", &month).await;
    assert!(c["t:ht"] > 0, "the replica holds a lease: {c:?}");
    // The admin lowers the budget to a little above what is used.
    let new_limit = c["t:ut"] + 100;
    env.store
        .set_tenant_limits(
            "test",
            "t",
            &Limits {
                monthly_tokens: Some(new_limit),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    // Requests admitted before the replica hears of the change count
    // against the old limit, on either path; wait for the catalog reload.
    let reloaded = eventually(Duration::from_secs(5), || async {
        srv.gateway
            .catalog()
            .get()
            .tenants
            .get("t")
            .is_some_and(|t| t.limits.monthly_tokens == Some(new_limit))
    })
    .await;
    assert!(reloaded, "the catalog never saw the new limit");
    // From now on the lease granted under the old limit admits nothing:
    // requests fit the new limit, then are refused.
    let mut codes = vec![];
    for _ in 0..10 {
        codes.push(
            post(&url, &key, &chat_body("hello", Some(16)))
                .await
                .status()
                .as_u16(),
        );
    }
    assert!(codes.contains(&402), "{codes:?}");
    assert!(codes.iter().all(|c| *c == 200 || *c == 402), "{codes:?}");
    let settled = eventually(Duration::from_secs(5), || async {
        let c = env.counters("t", &month).await;
        c.get("t:ht") == Some(&0)
    })
    .await;
    assert!(settled);
    let c = env.counters("t", &month).await;
    assert!(
        c["t:ut"] <= new_limit,
        "used {} > new limit {new_limit}",
        c["t:ut"]
    );
    srv.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leasing_replica_returns_its_leases_on_shutdown() {
    let env = TestEnv::new().await;
    let (_, key) = env
        .simple_tenant(Limits {
            monthly_tokens: Some(1_000_000),
            max_inflight: Some(1000),
            ..Default::default()
        })
        .await;
    let mut cfg = lease_config(&env);
    cfg.gateway.lease_idle_ms = 60_000; // only shutdown returns it
    let srv = env.server_with(cfg).await;
    let url = format!("http://{}/v1/chat/completions", srv.addr);
    for _ in 0..10 {
        assert_eq!(
            post(&url, &key, &chat_body("hello", Some(16)))
                .await
                .status(),
            200
        );
    }
    let month = this_month();
    let q = quota::QuotaEngine::new(&env.redis_url, &env.prefix, Duration::from_secs(1), "check")
        .unwrap();
    assert!(env.counters("t", &month).await["t:ht"] > 0);
    assert!(q.inflight("t", "t").await.unwrap() > 0, "lease slots held");
    srv.shutdown().await;
    let c = env.counters("t", &month).await;
    assert_eq!(c["t:ht"], 0, "{c:?}");
    assert_eq!(q.inflight("t", "t").await.unwrap(), 0);
    assert_eq!(env.ledger_tokens("t", &month).await, (c["t:ut"], 10));
}
