//! Borrowing from the shared pool (docs/design.md §7): a tenant past its own budget
//! keeps working on borrowed quota up to its cap, then gets 402; the pool's
//! lent total equals the sum of outstanding borrows; every borrow is in
//! Postgres and the audit log.

mod fair_common;

use domain::Limits;
use e2e::*;
use fair_common::*;

#[tokio::test]
async fn a_tenant_past_its_budget_borrows_up_to_its_cap_then_gets_402() {
    let env = TestEnv::new().await;
    env.model("gpt-4o-mini", "chat", 150_000, 600_000).await;
    let budget = Limits {
        monthly_tokens: Some(200),
        ..Default::default()
    };
    let camp = tenant(&env, "camp", "standard", budget.clone(), Some(1_000)).await;
    let plain = tenant(&env, "plain", "standard", budget, None).await;
    let srv = env.server_with(config(&env)).await;
    let base = format!("http://{}", srv.addr);
    let token = admin(&env, &base).await;
    // 10 000 tokens; one borrow takes at most 5 % = 500.
    set_pool(&base, &token, 10_000, 0.05, 0.0).await;
    let url = format!("{base}/v1/chat/completions");

    let mut served = 0;
    let last = loop {
        let r = post(&url, &camp, &body("", 10)).await;
        if r.status() != 200 {
            break r;
        }
        served += 1;
        assert!(served < 200, "the budget never ran out");
    };
    assert_eq!(last.status(), 402);
    assert_eq!(reason(&last), "tenant_monthly_budget_exhausted");

    let month = this_month();
    let used = eventually(std::time::Duration::from_secs(5), || async {
        env.counters("camp", &month)
            .await
            .get("t:ht")
            .copied()
            .unwrap_or(0)
            == 0
    })
    .await;
    assert!(used);
    let c = env.counters("camp", &month).await;
    let used = c["t:ut"];
    assert!(
        used > 200 + 500,
        "kept working on two borrows past its own 200 tokens: used {used} in {served} requests"
    );
    assert!(used <= 1_200, "never past base + cap: used {used}");

    // Two borrows of 500 (the cap is 1000), both outstanding.
    let b = get(&base, &token, &format!("/api/v1/borrows?period={month}")).await;
    let rows = b["data"].as_array().unwrap();
    let active: Vec<_> = rows.iter().filter(|r| r["state"] == "active").collect();
    assert_eq!(active.len(), 2, "{b}");
    for r in &active {
        assert_eq!(r["tenant_id"], "camp");
        assert_eq!(r["tokens"], 500);
        assert_eq!(r["trigger"], "hold_refused");
    }
    let outstanding: i64 = active
        .iter()
        .map(|r| r["outstanding_tokens"].as_i64().unwrap())
        .sum();
    assert_eq!(outstanding, 1_000);

    // The pool's lent total (Redis) equals the sum of outstanding borrows.
    let p = get(&base, &token, &format!("/api/v1/pool?period={month}")).await;
    assert_eq!(p["lent_tokens"], 1_000, "{p}");
    assert_eq!(p["outstanding_tokens"], 1_000, "{p}");
    assert_eq!(p["free_tokens"], 9_000, "{p}");

    // Effective limit = base + grants + borrowed.
    let u = get(
        &base,
        &token,
        &format!("/api/v1/tenants/camp/usage?period={month}"),
    )
    .await;
    assert_eq!(u["base_limit_tokens"], 200, "{u}");
    assert_eq!(u["borrowed_tokens"], 1_000, "{u}");
    assert_eq!(u["limit_tokens"], 1_200, "{u}");

    let grants: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM audit_log WHERE action = 'borrow.grant' AND target = 'tenant:camp'",
    )
    .fetch_one(env.store.pool())
    .await
    .unwrap();
    assert_eq!(grants, 2);

    // A tenant whose policy does not allow borrowing just gets its 402.
    let last = loop {
        let r = post(&url, &plain, &body("", 10)).await;
        if r.status() != 200 {
            break r;
        }
    };
    assert_eq!(last.status(), 402);
    let b = get(&base, &token, &format!("/api/v1/borrows?period={month}")).await;
    assert!(b["data"]
        .as_array()
        .unwrap()
        .iter()
        .all(|r| r["tenant_id"] == "camp"));
    srv.shutdown().await;
}

#[tokio::test]
async fn the_pool_api_is_for_platform_admins_finance_and_auditors() {
    let env = TestEnv::new().await;
    env.tenant("t", Limits::default(), None).await;
    let srv = env.server_with(config(&env)).await;
    let base = format!("http://{}", srv.addr);
    let token = admin(&env, &base).await;
    user(&env, "fin@example.com", "finance", None).await;
    user(&env, "ta@example.com", "tenant_admin", Some("t")).await;
    let fin = login(&base, "fin@example.com").await;
    let ta = login(&base, "ta@example.com").await;
    let url = format!("{base}/api/v1/pool");
    let put = serde_json::json!({"monthly_tokens": 1000, "max_borrow_share": 0.1, "reclaim_below_share": 0.2});
    assert_eq!(api("PUT", &url, Some(&fin), Some(put.clone())).await.0, 403);
    assert_eq!(api("PUT", &url, Some(&ta), Some(put.clone())).await.0, 403);
    let bad = serde_json::json!({"monthly_tokens": 1000, "max_borrow_share": 1.5});
    assert_eq!(api("PUT", &url, Some(&token), Some(bad)).await.0, 400);
    assert_eq!(api("PUT", &url, Some(&token), Some(put)).await.0, 200);
    let (s, p) = api("GET", &url, Some(&fin), None).await;
    assert_eq!(s, 200);
    assert_eq!(p["monthly_tokens"], 1000);
    assert_eq!(p["max_borrow_share"], 0.1);
    assert_eq!(api("GET", &url, Some(&ta), None).await.0, 403);
    let audited: i64 =
        sqlx::query_scalar("SELECT count(*) FROM audit_log WHERE action = 'pool.update'")
            .fetch_one(env.store.pool())
            .await
            .unwrap();
    assert_eq!(audited, 1);
    srv.shutdown().await;
}
