//! The reclaim job (docs/design.md §7): when the pool's free share falls below its
//! threshold, unused borrowed quota is taken back — lowest priority and
//! longest-held first, a part per run, never below what a tenant used —
//! and each reclaim is recorded in Postgres and the audit log.

mod fair_common;

use domain::Limits;
use e2e::*;
use fair_common::*;
use std::time::Duration;

#[tokio::test]
async fn reclaim_takes_from_the_longest_held_lowest_priority_first_never_below_used() {
    let env = TestEnv::new().await;
    env.model("gpt-4o-mini", "chat", 150_000, 600_000).await;
    let small = Limits {
        monthly_tokens: Some(50),
        ..Default::default()
    };
    let b_old = tenant(&env, "batch-old", "batch", small.clone(), Some(500)).await;
    let std = tenant(&env, "std", "standard", small.clone(), Some(500)).await;
    let b_new = tenant(&env, "batch-new", "batch", small, Some(500)).await;
    let mut cfg = config(&env);
    cfg.fair.reclaim_secs = 0; // this test runs the job itself
    cfg.fair.borrow_check_secs = 3600;
    let srv = env.server_with(cfg).await;
    let base = format!("http://{}", srv.addr);
    let token = admin(&env, &base).await;
    set_pool(&base, &token, 10_000, 0.05, 0.0).await;
    let url = format!("{base}/v1/chat/completions");
    let month = this_month();

    // Borrow in this order (so batch-old holds the longest); batch-old uses
    // most of its borrowed quota, the other two little of theirs.
    for (key, n) in [(&b_old, 20), (&std, 5), (&b_new, 5)] {
        for _ in 0..n {
            let r = post(&url, key, &body("", 10)).await;
            assert_eq!(r.status(), 200, "{}", reason(&r));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let b = get(&base, &token, &format!("/api/v1/borrows?period={month}")).await;
    let order: Vec<&str> = b["data"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["state"] == "active")
        .map(|r| r["tenant_id"].as_str().unwrap())
        .collect();
    assert_eq!(order, vec!["batch-old", "std", "batch-new"], "{b}");
    let settled = eventually(Duration::from_secs(5), || async {
        let mut idle = true;
        for t in ["batch-old", "std", "batch-new"] {
            idle &= env
                .counters(t, &month)
                .await
                .get("t:ht")
                .copied()
                .unwrap_or(0)
                == 0;
        }
        idle
    })
    .await;
    assert!(settled);
    let used_old = env.counters("batch-old", &month).await["t:ut"];
    // batch-old's unused part: its effective limit (50 + 500) minus used.
    let unused_old = 550 - used_old;
    assert!(
        (1..250).contains(&unused_old),
        "setup: batch-old should have less unused than half its borrow, has {unused_old}"
    );

    // 1500 lent of 10 000: free 85 %. Reclaim below 88 % free: 300 to take back.
    set_pool(&base, &token, 10_000, 0.05, 0.88).await;
    let r = srv
        .gateway
        .borrower()
        .run_reclaim(chrono::Utc::now())
        .await
        .unwrap();
    assert_eq!(
        (r.lent_before, r.need, r.reclaimed_tokens),
        (1_500, 300, 300)
    );

    let b = get(&base, &token, &format!("/api/v1/borrows?period={month}")).await;
    let reclaims = b["reclaims"].as_array().unwrap();
    let taken = |t: &str| -> i64 {
        reclaims
            .iter()
            .filter(|r| r["tenant_id"] == t && r["state"] == "done")
            .map(|r| r["tokens"].as_i64().unwrap())
            .sum()
    };
    // Lowest priority first, longest-held first among equals; batch-old only
    // down to what it used.
    assert_eq!(taken("batch-old"), unused_old, "{b}");
    assert_eq!(taken("batch-new"), 300 - unused_old, "{b}");
    assert_eq!(taken("std"), 0, "{b}");

    // batch-old's effective limit is now exactly what it used.
    let u = get(
        &base,
        &token,
        &format!("/api/v1/tenants/batch-old/usage?period={month}"),
    )
    .await;
    assert_eq!(u["limit_tokens"], used_old, "{u}");
    assert_eq!(u["borrowed_tokens"], 500 - unused_old, "{u}");

    // The pool got it back: lent = sum of outstanding borrows.
    let p = get(&base, &token, &format!("/api/v1/pool?period={month}")).await;
    assert_eq!(p["lent_tokens"], 1_200, "{p}");
    assert_eq!(p["outstanding_tokens"], 1_200, "{p}");
    let audited: i64 =
        sqlx::query_scalar("SELECT count(*) FROM audit_log WHERE action = 'borrow.reclaim'")
            .fetch_one(env.store.pool())
            .await
            .unwrap();
    assert_eq!(audited, 2);

    // The pool is healthy again: the next run takes nothing.
    let r = srv
        .gateway
        .borrower()
        .run_reclaim(chrono::Utc::now())
        .await
        .unwrap();
    assert_eq!((r.need, r.reclaims), (0, 0));
    srv.shutdown().await;
}

/// Borrowing and reclaim are scheduled jobs (crates/jobs/src/schedule.rs):
/// every run that changed something is in `job_runs`; runs with nothing to
/// do are counted in `/metrics`, not kept.
#[tokio::test]
async fn the_schedule_borrows_and_reclaims_and_records_both_in_job_runs() {
    let env = TestEnv::new().await;
    env.model("gpt-4o-mini", "chat", 150_000, 600_000).await;
    let limits = Limits {
        monthly_tokens: Some(1_000),
        ..Default::default()
    };
    let key = tenant(&env, "t", "standard", limits, Some(500)).await;
    let mut cfg = config(&env);
    cfg.fair.borrow_check_secs = 1;
    cfg.fair.reclaim_secs = 1;
    cfg.fair.near_limit_share = 0.01;
    let srv = env.server_with(cfg).await;
    let base = format!("http://{}", srv.addr);
    let token = admin(&env, &base).await;
    set_pool(&base, &token, 10_000, 0.05, 0.0).await;
    let runs = |job: &'static str| {
        let store = env.store.clone();
        async move {
            store
                .job_runs(&store::TenantScope::system(), Some(job), 100)
                .await
                .unwrap()
        }
    };
    let idle = |job: &'static str| {
        let addr = srv.addr;
        async move {
            let text = metrics(addr).await;
            let series = format!("tollgate_job_runs_total{{job=\"{job}\",outcome=\"idle\"}} ");
            text.lines()
                .find_map(|l| l.strip_prefix(&series))
                .and_then(|v| v.trim().parse::<f64>().ok())
                .unwrap_or(0.0)
        }
    };

    // Nothing used, nothing lent: both jobs run and find nothing to do.
    assert!(
        eventually(Duration::from_secs(10), || async {
            idle("borrow-check").await >= 2.0 && idle("reclaim").await >= 2.0
        })
        .await,
        "both jobs run every second"
    );
    assert!(runs("borrow-check").await.is_empty());
    assert!(runs("reclaim").await.is_empty());

    // Used past 1 % of the limit: the next borrow-check lends, and says so.
    let r = post(&format!("{base}/v1/chat/completions"), &key, &body("", 10)).await;
    assert_eq!(r.status(), 200, "{}", reason(&r));
    assert!(
        eventually(Duration::from_secs(10), || async {
            runs("borrow-check").await.iter().any(|r| r.outcome == "ok")
        })
        .await,
        "a borrow-check that lent is recorded"
    );
    let recorded = runs("borrow-check").await;
    assert!(
        recorded
            .iter()
            .all(|r| r.outcome == "ok" && r.counts["borrows_granted"].as_i64() >= Some(1)),
        "only runs that lent are kept: {:?}",
        recorded.iter().map(|r| &r.counts).collect::<Vec<_>>()
    );
    let month = this_month();
    let b = get(&base, &token, &format!("/api/v1/borrows?period={month}")).await;
    assert!(
        b["data"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["tenant_id"] == "t"),
        "{b}"
    );

    // The pool wants almost everything back: the scheduled reclaim takes it.
    set_pool(&base, &token, 10_000, 0.05, 0.9999).await;
    assert!(
        eventually(Duration::from_secs(10), || async {
            runs("reclaim")
                .await
                .iter()
                .any(|r| r.outcome == "ok" && r.counts["reclaimed_tokens"].as_i64() > Some(0))
        })
        .await,
        "a reclaim that took quota back is recorded"
    );
    let b = get(&base, &token, &format!("/api/v1/borrows?period={month}")).await;
    assert!(
        b["reclaims"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["tenant_id"] == "t"),
        "{b}"
    );
    srv.shutdown().await;
}
