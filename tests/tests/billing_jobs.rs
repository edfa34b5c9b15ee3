//! The calendar's jobs against real Postgres, Redis and ClickHouse: budget
//! alerts once per threshold and month (webhook retried), the forecast,
//! grant expiry audited once, stale holds through the job runner,
//! `reconcile --check`, and one run across replicas.

use chrono::{TimeZone, Utc};
use domain::{Limits, MicroUsd};
use e2e::books::*;
use e2e::*;
use jobs::{JobName, JobSettings, RunResult};
use quota::{HoldOutcome, HoldRequest, QuotaEngine};
use std::time::Duration;

fn with_webhook(url: &str) -> JobSettings {
    JobSettings {
        webhook_url: Some(url.to_string()),
        ..Default::default()
    }
}

/// `n` chat requests through the gateway; waits for the ledger.
async fn spend(env: &TestEnv, base: &str, key: &str, n: usize) {
    for i in 0..n {
        let r = post(
            &format!("{base}/v1/chat/completions"),
            key,
            &chat_body(&format!("hello {i}"), Some(16)),
        )
        .await;
        assert_eq!(r.status(), 200);
    }
    let ok = eventually(Duration::from_secs(10), || async {
        env.ledger_tokens("t", &this_month()).await.1 == n as i64
    })
    .await;
    assert!(ok, "ledger has the {n} requests");
}

fn ran(r: &RunResult) -> &jobs::JobReport {
    match r {
        RunResult::Ran { report, .. } => report,
        other => panic!("job did not run: {other:?}"),
    }
}

#[tokio::test]
async fn budget_alerts_reach_the_webhook_once_per_threshold_and_month() {
    let env = TestEnv::new().await;
    let (_, key) = env.simple_tenant(Limits::default()).await;
    let srv = env.server().await;
    let base = format!("http://{}", srv.addr);
    spend(&env, &base, &key, 6).await;
    let used = env.counters("t", &this_month()).await["t:ut"];
    assert!(used > 0);

    // A receiver that fails its first 4 calls.
    let hook = WebhookReceiver::start(4, Duration::ZERO).await;
    let runner = env
        .job_runner(None, with_webhook(&hook.url), "replica-a")
        .await;
    let now = Utc::now();

    // 75% of the token budget used: the 70% alert, not yet the 90% one.
    let limits = Limits {
        monthly_tokens: Some(used * 100 / 75),
        ..Default::default()
    };
    env.store
        .set_tenant_limits("test", "t", &limits)
        .await
        .unwrap();
    let r = ran(&runner.run(JobName::Alerts, now, None).await.unwrap()).clone();
    assert_eq!(
        (
            r.counts["alerts_recorded"].as_i64(),
            r.counts["delivered"].as_i64()
        ),
        (Some(1), Some(0))
    );
    // Three quick attempts in the run, all refused; the alert waits.
    assert_eq!(hook.calls().len(), 3);
    let a = &env
        .store
        .alerts(&TenantScope::system().narrow_to("t").unwrap(), None)
        .await
        .unwrap()[0];
    assert_eq!(
        (a.threshold.as_str(), a.delivery.as_str(), a.attempts),
        ("used_70", "pending", 3)
    );
    // Running again before the backoff has passed changes nothing.
    ran(&runner.run(JobName::Alerts, now, None).await.unwrap());
    assert_eq!(hook.calls().len(), 3);
    // After the backoff the retry goes through (the 4th call fails, the 5th lands).
    let later = now + chrono::Duration::minutes(10);
    let r = ran(&runner.run(JobName::Alerts, later, None).await.unwrap()).clone();
    assert_eq!(
        (
            r.counts["alerts_recorded"].as_i64(),
            r.counts["delivered"].as_i64()
        ),
        (Some(0), Some(1))
    );
    let calls = hook.calls();
    assert_eq!(calls.len(), 5);
    assert_eq!(calls.iter().filter(|c| c.answered == 200).count(), 1);
    assert!(
        calls
            .iter()
            .all(|c| c.alert_id == a.id.to_string() && c.body == calls[0].body),
        "the same alert each time"
    );
    let body = &calls[4].body;
    assert_eq!(
        (body["tenant_id"].as_str(), body["scope"].as_str()),
        (Some("t"), Some("tenant:t"))
    );
    assert_eq!(
        (body["threshold_percent"].as_i64(), body["measure"].as_str()),
        (Some(70), Some("tokens"))
    );
    assert_eq!(body["used"].as_i64(), Some(used));

    // Repeated runs: no second call for the same threshold.
    for _ in 0..3 {
        ran(&runner.run(JobName::Alerts, later, None).await.unwrap());
    }
    assert_eq!(hook.calls().len(), 5);

    // 95% used (and a cost budget 90% used too): one call each, once.
    let cost = env.counters("t", &this_month()).await["t:uc"];
    let limits = Limits {
        monthly_tokens: Some(used * 100 / 95),
        monthly_cost_usd: Some(MicroUsd(cost * 100 / 91)),
        ..Default::default()
    };
    env.store
        .set_tenant_limits("test", "t", &limits)
        .await
        .unwrap();
    for _ in 0..3 {
        ran(&runner.run(JobName::Alerts, later, None).await.unwrap());
    }
    let ok: Vec<_> = hook
        .calls()
        .into_iter()
        .filter(|c| c.answered == 200)
        .collect();
    let mut got: Vec<(String, i64)> = ok
        .iter()
        .map(|c| {
            (
                c.body["measure"].as_str().unwrap().to_string(),
                c.body["threshold_percent"].as_i64().unwrap(),
            )
        })
        .collect();
    got.sort();
    assert_eq!(
        got,
        [
            ("cost".into(), 70),
            ("cost".into(), 90),
            ("tokens".into(), 70),
            ("tokens".into(), 90)
        ]
    );
    assert_eq!(
        ok.iter()
            .find(|c| c.body["measure"] == "cost")
            .unwrap()
            .body["limit"],
        MicroUsd(cost * 100 / 91).to_string()
    );
    // The console notices say the same, for the tenant's admin too.
    let notices = env
        .store
        .notices(&TenantScope::system().narrow_to("t").unwrap(), 50)
        .await
        .unwrap();
    assert_eq!(
        notices
            .iter()
            .filter(|n| n.kind.starts_with("budget_used_"))
            .count(),
        4
    );
    user(&env, "ta@t.io", "tenant_admin", Some("t")).await;
    let ta = login(&base, "ta@t.io").await;
    let (s, v) = api("GET", &format!("{base}/api/v1/notices"), Some(&ta), None).await;
    assert_eq!(s, 200);
    assert_eq!(v["notices"].as_array().unwrap().len(), 4);
    srv.shutdown().await;
}

/// Borrowed quota raises the limit the gateway enforces; the budget alert
/// must measure against that same limit, not the lower base.
#[tokio::test]
async fn budget_alerts_measure_against_the_limit_raised_by_borrowed_quota() {
    let env = TestEnv::new().await;
    let (_, key) = env.simple_tenant(Limits::default()).await;
    let srv = env.server().await;
    let base = format!("http://{}", srv.addr);
    spend(&env, &base, &key, 4).await;
    let month = this_month();
    let used = env.counters("t", &month).await["t:ut"];
    assert!(used > 0);

    // 95% of the base budget used, but borrowed quota raises the limit so
    // that only 70-89% of the effective limit is used.
    let base_limit = used * 100 / 95;
    let borrowed = used * 100 / 80 - base_limit;
    assert!(borrowed > 0);
    env.store
        .set_tenant_limits(
            "test",
            "t",
            &Limits {
                monthly_tokens: Some(base_limit),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let id = uuid::Uuid::now_v7();
    env.store
        .begin_borrow(id, "t", &month, borrowed, "near_limit", "replica-a")
        .await
        .unwrap();
    env.store.finish_borrow(id, borrowed, 0).await.unwrap();

    let runner = env
        .job_runner(None, JobSettings::default(), "replica-a")
        .await;
    let r = ran(&runner.run(JobName::Alerts, Utc::now(), None).await.unwrap()).clone();
    assert_eq!(r.counts["alerts_recorded"].as_i64(), Some(1));
    let alerts = env
        .store
        .alerts(&TenantScope::system().narrow_to("t").unwrap(), None)
        .await
        .unwrap();
    assert_eq!(alerts.len(), 1);
    assert_eq!(alerts[0].threshold, "used_70");
    assert_eq!(
        alerts[0].payload["limit"].as_i64(),
        Some(base_limit + borrowed),
        "the limit the gateway enforces"
    );
}

#[tokio::test]
async fn the_month_end_forecast_alerts_when_it_exceeds_the_budget() {
    let env = TestEnv::new().await;
    // A budget of $1; $0.10 a day for the first three days of a 31-day month.
    env.tenant(
        "t",
        Limits {
            monthly_cost_usd: Some(MicroUsd(1_000_000)),
            ..Default::default()
        },
        None,
    )
    .await;
    env.tenant(
        "frugal",
        Limits {
            monthly_cost_usd: Some(MicroUsd(100_000_000)),
            ..Default::default()
        },
        None,
    )
    .await;
    let period = "2026-03";
    let events: Vec<_> = (0..6)
        .map(|i| domain::usage::UsageEvent {
            request_id: format!("req_fc_{i}"),
            tenant_id: if i < 3 { "t" } else { "frugal" }.into(),
            app_id: "a".into(),
            key_id: "k".into(),
            model: "m".into(),
            period: period.into(),
            day: format!("2026-03-0{}", 1 + i % 3),
            input_tokens: 10,
            output_tokens: 10,
            cost_micro: 100_000,
            cost_pico: 0,
            est_tokens: 20,
            est_cost_micro: 100_000,
            overrun_tokens: 0,
            overrun_cost_micro: 0,
            status: "ok".into(),
            stream: false,
            usage_source: "provider".into(),
            replica: "r".into(),
            started_at_ms: 0,
            settled_at_ms: 0,
            deployment: None,
            breakdown: None,
            charges: None,
            raw_usage: None,
            attribution: Default::default(),
            anomaly: None,
        })
        .collect();
    env.store.insert_usage_events(&events).await.unwrap();
    let hook = WebhookReceiver::start(0, Duration::ZERO).await;
    let runner = env
        .job_runner(None, with_webhook(&hook.url), "replica-a")
        .await;
    let now = Utc.with_ymd_and_hms(2026, 3, 4, 12, 0, 0).unwrap();
    let r = ran(&runner.run(JobName::Forecast, now, None).await.unwrap()).clone();
    assert_eq!(r.counts["over_budget"], 1);
    ran(&runner.run(JobName::Forecast, now, None).await.unwrap());
    let calls = hook.calls();
    assert_eq!(calls.len(), 1, "once per tenant and month");
    let b = &calls[0].body;
    assert_eq!(
        (b["type"].as_str(), b["tenant_id"].as_str()),
        (Some("forecast_over_budget"), Some("t"))
    );
    // $0.30 spent + $0.10 today + $0.10 × 27 days left = $3.10.
    assert_eq!(b["forecast"], "3.100000");
    assert_eq!(b["limit"], "1.000000");
}

#[tokio::test]
async fn expired_grants_are_audited_once() {
    let env = TestEnv::new().await;
    env.tenant(
        "t",
        Limits {
            monthly_tokens: Some(1000),
            ..Default::default()
        },
        None,
    )
    .await;
    let requester = user(&env, "ta@t.io", "tenant_admin", Some("t")).await;
    let approver = user(&env, "pa@x.io", "platform_admin", None).await;
    let expires = Utc::now() + chrono::Duration::hours(1);
    let q = env
        .store
        .create_quota_request(
            "test",
            &store::NewQuotaRequest {
                tenant_id: "t".into(),
                app_id: None,
                tokens: 500,
                cost_micro: 0,
                expires_at: expires,
                reason: "demo".into(),
                requested_by: requester.parse().unwrap(),
            },
        )
        .await
        .unwrap();
    env.store
        .decide_quota_request("test", q.id, approver.parse().unwrap(), true, "ok")
        .await
        .unwrap();
    let runner = env
        .job_runner(None, JobSettings::default(), "replica-a")
        .await;
    let r = ran(&runner
        .run(JobName::GrantExpiry, Utc::now(), None)
        .await
        .unwrap())
    .clone();
    assert_eq!(r.counts["expired_grants_recorded"], 0, "not expired yet");
    let later = expires + chrono::Duration::minutes(1);
    for expect in [1, 0, 0] {
        let r = ran(&runner.run(JobName::GrantExpiry, later, None).await.unwrap()).clone();
        assert_eq!(r.counts["expired_grants_recorded"], expect);
    }
    let rows: Vec<_> = env
        .store
        .audit_chain(&TenantScope::system())
        .await
        .unwrap()
        .into_iter()
        .filter(|a| a.entry.action == "grant.expire")
        .collect();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].entry.target, format!("quota_request:{}", q.id));
    assert_eq!(rows[0].entry.after["tokens"], 500);
    assert_eq!(
        env.store
            .job_runs(&TenantScope::system(), Some("grant-expiry"), 10)
            .await
            .unwrap()
            .len(),
        4
    );
}

#[tokio::test]
async fn a_hold_left_by_a_killed_gateway_is_expired_by_the_job() {
    let env = TestEnv::new().await;
    let (key_id, _) = env
        .simple_tenant(Limits {
            monthly_tokens: Some(150),
            ..Default::default()
        })
        .await;
    let month = this_month();
    // A replica takes a hold and dies (it never heartbeats again).
    let dead = QuotaEngine::new(
        &env.redis_url,
        &env.prefix,
        Duration::from_secs(1),
        "replica-killed",
    )
    .unwrap();
    let none = Limits::default();
    let tenant_limits = Limits {
        monthly_tokens: Some(150),
        ..Default::default()
    };
    let req = HoldRequest {
        budgets: &[],
        request_id: "req-abandoned",
        tenant: "t",
        app: "a",
        key: &key_id,
        month: &month,
        est_input: 40,
        est_output: 60,
        est_cost: 42,
        model: "gpt-4o-mini",
        limits: [&tenant_limits, &none, &none],
    };
    let ledger = settlement::ledger_source::StoreLedger {
        store: &env.store,
        quota: &dead,
        writer: None,
    };
    assert!(matches!(
        dead.hold(&req, &ledger).await.unwrap(),
        HoldOutcome::Admitted { .. }
    ));
    // Its quota is locked: another 100 tokens do not fit the budget of 150.
    let other = HoldRequest {
        budgets: &[],
        request_id: "req-other",
        ..req
    };
    assert!(!matches!(
        dead.hold(&other, &ledger).await.unwrap(),
        HoldOutcome::Admitted { .. }
    ));
    drop(dead);

    let runner = env
        .job_runner(None, JobSettings::default(), "replica-a")
        .await;
    let r = ran(&runner
        .run(
            JobName::StaleHolds,
            Utc::now() + chrono::Duration::minutes(3),
            None,
        )
        .await
        .unwrap())
    .clone();
    assert_eq!(r.counts["closed_orphaned"], 1);
    let e = env
        .usage_event("req-abandoned")
        .await
        .expect("in the ledger");
    assert_eq!(
        (
            e.status.as_str(),
            e.input_tokens + e.output_tokens,
            e.cost_micro
        ),
        ("expired", 100, 42)
    );
    let c = env.counters("t", &month).await;
    assert_eq!(
        (c["t:ht"], c["t:ut"]),
        (0, 100),
        "the hold's quota is freed (settled at its estimate)"
    );
    let runs = env
        .store
        .job_runs(&TenantScope::system(), Some("stale-holds"), 5)
        .await
        .unwrap();
    assert_eq!((runs.len(), runs[0].outcome.as_str()), (1, "ok"));
    assert_eq!(runs[0].counts["closed_orphaned"], 1);
}

#[tokio::test]
async fn reconcile_check_passes_clean_and_names_a_tampered_counter() {
    let env = TestEnv::new().await;
    let (_, key) = env.simple_tenant(Limits::default()).await;
    env.tenant("u", Limits::default(), None).await;
    env.app("u", "a", Limits::default()).await;
    let (_, key_u) = env.key("u", "a", Limits::default()).await;
    let archive = test_archive().await;
    let cfg = env.billing_config(&archive);
    let srv = env.server_with(cfg.clone()).await;
    let base = format!("http://{}", srv.addr);
    spend(&env, &base, &key, 5).await;
    for i in 0..3 {
        let r = post(
            &format!("{base}/v1/chat/completions"),
            &key_u,
            &chat_body(&format!("u {i}"), Some(16)),
        )
        .await;
        assert_eq!(r.status(), 200);
    }
    assert!(
        eventually(Duration::from_secs(10), || async {
            env.ledger_tokens("u", &this_month()).await.1 == 3
        })
        .await
    );
    let period = this_month();
    assert!(
        server::commands::reconcile_check(&cfg, Some(&period))
            .await
            .unwrap(),
        "clean books"
    );

    // Someone adds $0.001234 to tenant u's month hash in Redis.
    let mut r = env.redis().await;
    let () = redis::cmd("HINCRBY")
        .arg(format!("{}:{{t:u}}:m:{period}", env.prefix))
        .arg("t:uc")
        .arg(1234)
        .query_async(&mut r)
        .await
        .unwrap();
    assert!(!server::commands::reconcile_check(&cfg, Some(&period))
        .await
        .unwrap());
    let ctx = env.job_context(Some(archive.clone()), JobSettings::default());
    let rc = jobs::reconcile::check(&ctx, Utc::now(), Some(&period))
        .await
        .unwrap();
    assert_eq!(rc.differences.len(), 1, "{:?}", rc.differences);
    let d = &rc.differences[0];
    let pg_cost = env
        .store
        .period_totals(&TenantScope::system(), &period)
        .await
        .unwrap()["u"]
        .cost_micro;
    assert_eq!(
        (d.tenant_id.as_str(), d.scope.as_str(), d.field.as_str()),
        ("u", "tenant:u", "cost_micro")
    );
    assert_eq!((d.redis, d.postgres), (Some(pg_cost + 1234), Some(pg_cost)));

    // As a job, the finding is recorded with the run.
    let runner = jobs::JobRunner::new(ctx, "replica-a");
    let r = runner
        .run(JobName::Reconcile, Utc::now(), None)
        .await
        .unwrap();
    assert!(
        matches!(&r, RunResult::Ran { report, .. } if !report.clean),
        "{r:?}"
    );
    let run = &env
        .store
        .job_runs(&TenantScope::system(), Some("reconcile"), 1)
        .await
        .unwrap()[0];
    assert_eq!(run.outcome, "differences");
    assert_eq!(run.detail["differences"][0]["tenant_id"], "u");

    // The command line says the same, exit status 1.
    let bin = std::env::current_exe()
        .unwrap()
        .parent()
        .unwrap()
        .parent()
        .unwrap()
        .join("tollgate");
    assert!(
        bin.exists(),
        "build the binary first: cargo build -p tollgate-server --bin tollgate"
    );
    {
        let out = std::process::Command::new(&bin)
            .args(["reconcile", "--check", "--period", &period])
            .env("TOLLGATE__DATABASE__URL", &cfg.database.url)
            .env("TOLLGATE__REDIS__URL", &cfg.redis.url)
            .env("TOLLGATE__REDIS__KEY_PREFIX", &cfg.redis.key_prefix)
            .env("TOLLGATE__CLICKHOUSE__URL", &cfg.clickhouse.url)
            .env("TOLLGATE__CLICKHOUSE__DATABASE", &cfg.clickhouse.database)
            .env("TOLLGATE__PLATFORM__TIMEZONE", "UTC")
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert_eq!(out.status.code(), Some(1), "{stdout}");
        assert!(
            stdout.contains("tenant=u scope=tenant:u field=cost_micro"),
            "{stdout}"
        );
        assert!(
            stdout.contains(&format!("redis={}", pg_cost + 1234)),
            "{stdout}"
        );
    }
    srv.shutdown().await;
}

#[tokio::test]
async fn a_job_runs_once_across_two_replicas() {
    let env = TestEnv::new().await;
    let (_, key) = env.simple_tenant(Limits::default()).await;
    let srv = env.server().await;
    spend(&env, &format!("http://{}", srv.addr), &key, 3).await;
    let used = env.counters("t", &this_month()).await["t:ut"];
    env.store
        .set_tenant_limits(
            "test",
            "t",
            &Limits {
                monthly_tokens: Some(used),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    // A slow receiver keeps the first run busy while the second arrives.
    let hook = WebhookReceiver::start(0, Duration::from_millis(700)).await;
    let a = env
        .job_runner(None, with_webhook(&hook.url), "replica-a")
        .await;
    let b = env
        .job_runner(None, with_webhook(&hook.url), "replica-b")
        .await;
    let now = Utc::now();
    let slot = Some(Utc.with_ymd_and_hms(2026, 1, 1, 0, 5, 0).unwrap());
    let (ra, rb) = tokio::join!(a.run(JobName::Alerts, now, slot), async {
        tokio::time::sleep(Duration::from_millis(100)).await;
        b.run(JobName::Alerts, now, slot).await
    });
    let results = [ra.unwrap(), rb.unwrap()];
    assert_eq!(
        results
            .iter()
            .filter(|r| matches!(r, RunResult::Ran { .. }))
            .count(),
        1,
        "{results:?}"
    );
    assert_eq!(
        results.iter().filter(|r| **r == RunResult::Skipped).count(),
        1
    );
    // The same slot later, on either replica: already run.
    assert_eq!(
        b.run(JobName::Alerts, now, slot).await.unwrap(),
        RunResult::Skipped
    );
    assert_eq!(
        a.run(JobName::Alerts, now, slot).await.unwrap(),
        RunResult::Skipped
    );
    let runs = env
        .store
        .job_runs(&TenantScope::system(), Some("alerts"), 10)
        .await
        .unwrap();
    assert_eq!(runs.len(), 1);
    // Two alerts (70% and 90%), each delivered once.
    assert_eq!(hook.calls().len(), 2);
    srv.shutdown().await;
}
