//! Monthly rollover against real Postgres, Redis and ClickHouse: a simulated
//! month moves to the archive exactly, the bill reads the same before and
//! after, a re-run changes nothing, a crash between the ClickHouse insert
//! and the close loses and doubles nothing, and a ClickHouse outage leaves
//! the month open until a later run succeeds.

use chrono::{DateTime, TimeZone, Utc};
use domain::bill::Totals;
use domain::Limits;
use e2e::books::*;
use e2e::*;
use futures::StreamExt;
use jobs::{JobName, JobSettings, RunResult};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::time::Duration;

/// 00:05 on the 1st of the month after `period` (the tests' zone is UTC).
fn first_of_next_month(period: &str) -> DateTime<Utc> {
    let (y, m) = domain::period::parse_month(period).unwrap();
    let (y, m) = if m == 12 { (y + 1, 1) } else { (y, m + 1) };
    Utc.with_ymd_and_hms(y, m, 1, 0, 5, 0).unwrap()
}

const TENANTS: [&str; 3] = ["research", "sales", "support"];
const MODELS: [&str; 2] = ["gpt-4o-mini", "deepseek-chat"];

/// Three tenants × two apps × one key each, two chat models; returns keys.
async fn platform(env: &TestEnv) -> Vec<String> {
    env.model("gpt-4o-mini", "chat", 150_000, 600_000).await;
    env.model("deepseek-chat", "chat", 270_000, 1_100_000).await;
    let mut keys = vec![];
    for t in TENANTS {
        env.tenant(t, Limits::default(), None).await;
        for a in ["chat", "batch"] {
            env.app(t, a, Limits::default()).await;
            keys.push(env.key(t, a, Limits::default()).await.1);
        }
    }
    keys
}

/// `n` requests through the real gateway (mock upstream), spread over keys
/// and models with varying prompts; waits until the ledger has them all.
async fn simulate_month(env: &TestEnv, base: &str, keys: &[String], n: usize) {
    let client = reqwest::Client::new();
    let url = format!("{base}/v1/chat/completions");
    let statuses: Vec<u16> = futures::stream::iter(0..n)
        .map(|i| {
            let (client, url) = (client.clone(), url.clone());
            let key = keys[i % keys.len()].clone();
            let model = MODELS[(i / keys.len()) % MODELS.len()];
            async move {
                let body = json!({"model": model, "max_tokens": 32,
                    "messages": [{"role": "user", "content": format!("question {i}: {}", "why ".repeat(i % 17))}]});
                client
                    .post(&url)
                    .bearer_auth(key)
                    .json(&body)
                    .send()
                    .await
                    .map(|r| r.status().as_u16())
                    .unwrap_or(0)
            }
        })
        .buffer_unordered(16)
        .collect()
        .await;
    assert!(statuses.iter().all(|s| *s == 200), "every request admitted");
    let stored = eventually(Duration::from_secs(60), || async {
        sqlx::query_scalar::<_, i64>("SELECT count(*) FROM usage_events")
            .fetch_one(env.store.pool())
            .await
            .unwrap()
            == n as i64
    })
    .await;
    assert!(stored, "all {n} requests reached the ledger");
}

/// Refused requests, as the gateway records them (request_decisions).
async fn refusals(env: &TestEnv, period: &str, tenant: &str, n: usize) {
    for i in 0..n {
        sqlx::query(
            "INSERT INTO request_decisions (request_id, period, day, tenant_id, app_id, key_id, model, decision, reason, status)
             VALUES ($1, $2, $3::date, $4, 'chat', 'k', 'gpt-4o-mini', 'refused', $5, 429)",
        )
        .bind(format!("req_refused_{tenant}_{i}"))
        .bind(period)
        .bind(format!("{period}-01"))
        .bind(tenant)
        .bind(if i % 2 == 0 { "tenant_rpm_exceeded" } else { "tenant_monthly_budget_exhausted" })
        .execute(env.store.pool())
        .await
        .unwrap();
    }
}

async fn get_text(url: &str, token: &str) -> (u16, String) {
    let r = reqwest::Client::new()
        .get(url)
        .bearer_auth(token)
        .send()
        .await
        .unwrap();
    (r.status().as_u16(), r.text().await.unwrap())
}

/// Everything a reader sees of a month: the bill, its drill-downs, CSV and
/// FOCUS exports (`state` and `source` left out: they say which book).
async fn month_as_seen(base: &str, token: &str, period: &str) -> Value {
    let mut out = json!({});
    for by in ["", "&by=app", "&by=model", "&by=day"] {
        let (s, mut v) = api(
            "GET",
            &format!("{base}/api/v1/bills?period={period}{by}"),
            Some(token),
            None,
        )
        .await;
        assert_eq!(s, 200, "{v}");
        let o = v.as_object_mut().unwrap();
        o.remove("state");
        o.remove("source");
        out[format!("bill{by}")] = v;
    }
    out["csv"] = json!(
        get_text(&format!("{base}/api/v1/bills.csv?period={period}"), token)
            .await
            .1
    );
    out["focus"] = json!(
        get_text(
            &format!("{base}/api/v1/bills.focus.csv?period={period}"),
            token
        )
        .await
        .1
    );
    out
}

/// Signs in to the HTML console (the login form first, as a browser does);
/// returns the session cookie.
async fn console_cookie(base: &str, email: &str) -> String {
    e2e::console_web::Web::login(base, email).await.cookie
}

async fn console_get(url: &str, cookie: &str) -> (u16, String) {
    let r = reqwest::Client::new()
        .get(url)
        .header("cookie", cookie)
        .send()
        .await
        .unwrap();
    (r.status().as_u16(), r.text().await.unwrap())
}

fn micro(usd: &str) -> i64 {
    domain::MicroUsd::from_usd_str(usd).unwrap().0
}

/// Sum of a CSV column (money columns as micro-USD).
fn csv_sum(csv: &str, column: &str) -> i64 {
    // CSV lines end in CRLF.
    let mut lines = csv.lines().map(|l| l.trim_end_matches('\r'));
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    let i = header
        .iter()
        .position(|h| *h == column)
        .unwrap_or_else(|| panic!("column {column} in {header:?}"));
    lines
        .map(|l| {
            let v = l.split(',').nth(i).unwrap();
            if v.contains('.') {
                micro(v)
            } else {
                v.parse::<i64>().unwrap()
            }
        })
        .sum()
}

fn total(m: &BTreeMap<String, Totals>) -> Totals {
    let mut t = Totals::default();
    m.values().for_each(|v| t.add(v));
    t
}

#[tokio::test]
async fn a_simulated_month_rolls_over_exactly_and_reads_the_same() {
    let env = TestEnv::new().await;
    let archive = test_archive().await;
    let keys = platform(&env).await;
    let srv = env.server_with(env.billing_config(&archive)).await;
    let base = format!("http://{}", srv.addr);
    let period = this_month();
    const N: usize = 2400;
    simulate_month(&env, &base, &keys, N).await;
    refusals(&env, &period, "sales", 7).await;

    // A grant approved this month shows on the department's line.
    let requester = user(&env, "ta@research.io", "tenant_admin", Some("research")).await;
    let approver = user(&env, "pa@x.io", "platform_admin", None).await;
    let q = env
        .store
        .create_quota_request(
            "test",
            &store::NewQuotaRequest {
                tenant_id: "research".into(),
                app_id: None,
                tokens: 5000,
                cost_micro: 0,
                expires_at: Utc::now() + chrono::Duration::days(3),
                reason: "launch".into(),
                requested_by: requester.parse().unwrap(),
            },
        )
        .await
        .unwrap();
    env.store
        .decide_quota_request("test", q.id, approver.parse().unwrap(), true, "ok")
        .await
        .unwrap();

    user(&env, "fin@x.io", "finance", None).await;
    let fin = login(&base, "fin@x.io").await;
    let before = month_as_seen(&base, &fin, &period).await;
    let bill = &before["bill"];
    let pg = env
        .store
        .period_totals(&TenantScope::system(), &period)
        .await
        .unwrap();
    let pg_total = total(&pg);
    // The bill's total: each department's exact cost rounded once, half up
    // (docs/billing.md, "Exact cost, and the rounding rule"), summed.
    let billed: i64 = pg
        .values()
        .map(|t| (t.cost_pico + 500_000) / 1_000_000)
        .sum();
    assert_eq!(pg_total.requests, N as i64);
    assert_eq!(bill["total"]["requests"], N as i64);
    assert_eq!(micro(bill["total"]["cost_usd"].as_str().unwrap()), billed);
    assert_eq!(bill["tenants"].as_array().unwrap().len(), 3);
    let research = &bill["tenants"][0];
    assert_eq!(
        (
            research["tenant_id"].as_str(),
            research["granted_tokens"].as_i64()
        ),
        (Some("research"), Some(5000))
    );
    assert_eq!(research["borrowed_tokens"], 0);
    let sales = &bill["tenants"][1];
    assert_eq!(sales["refused_requests"], 7);
    assert_eq!(sales["refused"]["tenant_rpm_exceeded"], 4);
    // The CSV and the FOCUS export sum to the bill's total.
    let csv = before["csv"].as_str().unwrap();
    assert_eq!(csv_sum(csv, "cost_usd"), billed);
    assert_eq!(csv_sum(csv, "requests"), N as i64);
    assert_eq!(
        csv.lines().count(),
        1 + 3 * 2 * 2,
        "tenant × app × model lines"
    );
    let focus = before["focus"].as_str().unwrap();
    for col in domain::bill::FOCUS_COLUMNS {
        assert!(
            focus.lines().next().unwrap().split(',').any(|h| h == col),
            "FOCUS column {col}"
        );
    }
    assert_eq!(csv_sum(focus, "BilledCost"), billed);
    assert_eq!(csv_sum(focus, "EffectiveCost"), billed);
    assert_eq!(csv_sum(focus, "ConsumedQuantity"), pg_total.tokens());

    // Tenant admins see their own tenant only; others are not found.
    let ta = login(&base, "ta@research.io").await;
    let (s, own) = api(
        "GET",
        &format!("{base}/api/v1/bills?period={period}"),
        Some(&ta),
        None,
    )
    .await;
    assert_eq!(s, 200);
    assert_eq!(own["tenants"].as_array().unwrap().len(), 1);
    assert_eq!(own["tenants"][0], bill["tenants"][0]);
    let (s, _) = api(
        "GET",
        &format!("{base}/api/v1/bills?period={period}&tenant=sales"),
        Some(&ta),
        None,
    )
    .await;
    assert_eq!(s, 404);
    assert_eq!(
        get_text(
            &format!("{base}/api/v1/bills.csv?period={period}&tenant=sales"),
            &ta
        )
        .await
        .0,
        404
    );

    // The 1st of next month, 00:05: the rollover closes the month.
    let now = first_of_next_month(&period);
    let runner = env
        .job_runner(Some(archive.clone()), JobSettings::default(), "replica-a")
        .await;
    // The month's last leases go back once idle (a second here): until
    // then the rollover defers the month, then it closes it.
    let mut r = None;
    for _ in 0..30 {
        let run = runner.run(JobName::Rollover, now, None).await.unwrap();
        let RunResult::Ran { report, .. } = &run else {
            panic!("rollover ran: {run:?}")
        };
        let deferred = report.counts["deferred"] == 1;
        r = Some(run);
        if !deferred {
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let r = r.unwrap();
    let RunResult::Ran { report, .. } = &r else {
        panic!("rollover ran: {r:?}")
    };
    assert_eq!(report.counts["closed"], 1, "{report:?}");
    let m = env.store.closed_month(&period).await.unwrap().unwrap();
    assert_eq!(m.state, "closed");
    // The closing record keeps the totals and the exact cost, not the
    // components (the archive below has those).
    assert_eq!(
        m.totals,
        Totals {
            charges: Default::default(),
            ..pg_total
        }
    );

    // Every event moved; ClickHouse equals Postgres to the micro-dollar.
    assert_eq!(archive.events_in_period(&period).await.unwrap(), N as i64);
    assert_eq!(archive.event_totals(&period, m.batch_id).await.unwrap(), pg);
    let (rows, bills) = archive.bill_row_totals(&period, m.batch_id).await.unwrap();
    assert_eq!((rows, bills), (12, pg.clone()));

    // The closed month's bill, now read from ClickHouse, reads the same.
    let (_, after_bill) = api(
        "GET",
        &format!("{base}/api/v1/bills?period={period}"),
        Some(&fin),
        None,
    )
    .await;
    assert_eq!(
        (after_bill["state"].as_str(), after_bill["source"].as_str()),
        (Some("closed"), Some("clickhouse"))
    );
    assert_eq!(month_as_seen(&base, &fin, &period).await, before);

    // The console's bill page: the same total, the charts, the exports.
    let cookie = console_cookie(&base, "fin@x.io").await;
    let (s, page) = console_get(
        &format!("{base}/console/bills?period={period}&by=model"),
        &cookie,
    )
    .await;
    assert_eq!(s, 200);
    let total_usd = after_bill["total"]["cost_usd"].as_str().unwrap();
    // The page shows money as people read it ($1,234.56): compare amounts.
    let shown = page
        .split("id=\"bill-total\">")
        .nth(1)
        .and_then(|r| r.split('<').next())
        .expect("total on the page")
        .replace(['$', ','], "");
    assert_eq!(
        domain::MicroUsd::from_usd_str(&shown).ok(),
        domain::MicroUsd::from_usd_str(total_usd).ok(),
        "total on the page: {shown} vs {total_usd}"
    );
    assert!(
        page.contains("<svg") && page.contains("deepseek-chat"),
        "charts and the model drill-down"
    );
    let (s, csv_page) = console_get(
        &format!("{base}/console/bills.csv?period={period}"),
        &cookie,
    )
    .await;
    // The console's download is the API's CSV after a byte-order mark
    // (for spreadsheets; console_cosmetic reads its bytes).
    assert_eq!(
        (s, csv_page.trim_start_matches('\u{feff}')),
        (200, before["csv"].as_str().unwrap())
    );
    let (s, jobs_page) = console_get(&format!("{base}/console/jobs"), &cookie).await;
    assert_eq!(s, 200);
    assert!(jobs_page.contains("rollover") && jobs_page.contains(&period));
    let ta_cookie = console_cookie(&base, "ta@research.io").await;
    let (s, _) = console_get(
        &format!("{base}/console/bills?period={period}&tenant=sales"),
        &ta_cookie,
    )
    .await;
    assert_eq!(s, 404, "another tenant's bill is not found");
    let (s, _) = console_get(&format!("{base}/console/jobs"), &ta_cookie).await;
    assert_eq!(s, 403);

    // A second run changes nothing.
    let r = runner
        .run(JobName::Rollover, now + chrono::Duration::hours(1), None)
        .await
        .unwrap();
    let RunResult::Ran { report, .. } = &r else {
        panic!("{r:?}")
    };
    assert_eq!(report.counts["closed"], 0);
    assert_eq!(env.store.closed_month(&period).await.unwrap().unwrap(), m);
    assert_eq!(archive.events_in_period(&period).await.unwrap(), N as i64);

    // The three books agree; the rollover is in the audit log.
    let ctx = env.job_context(Some(archive.clone()), JobSettings::default());
    let rc = jobs::reconcile::check(&ctx, now, Some(&period))
        .await
        .unwrap();
    assert!(rc.differences.is_empty(), "{:?}", rc.differences);
    assert_eq!(rc.tenants_checked, 3);
    let closes: Vec<_> = env
        .store
        .audit_chain(&TenantScope::system())
        .await
        .unwrap()
        .into_iter()
        .filter(|a| a.entry.action == "month.close")
        .collect();
    assert_eq!(closes.len(), 1);
    assert_eq!(closes[0].entry.target, format!("period:{period}"));

    // After the retention period the Postgres rows go; the bill stays.
    let later = now + chrono::Duration::days(91);
    let r = runner.run(JobName::Rollover, later, None).await.unwrap();
    let RunResult::Ran { report, .. } = &r else {
        panic!("{r:?}")
    };
    assert_eq!(report.counts["purged"], 1);
    assert!(env
        .store
        .period_totals(&TenantScope::system(), &period)
        .await
        .unwrap()
        .is_empty());
    assert_eq!(month_as_seen(&base, &fin, &period).await, before);
    let rc = jobs::reconcile::check(&ctx, later, Some(&period))
        .await
        .unwrap();
    assert!(rc.differences.is_empty(), "{:?}", rc.differences);

    srv.shutdown().await;
}

/// Events stored through the production ledger path (the ledger writer's
/// batched insert), for tests that need a month but not the gateway.
async fn ledger_month(env: &TestEnv, period: &str, n: usize) {
    let (y, m) = domain::period::parse_month(period).unwrap();
    let events: Vec<_> = (0..n)
        .map(|i| domain::usage::UsageEvent {
            request_id: format!("req_{period}_{i:05}"),
            tenant_id: TENANTS[i % 3].into(),
            app_id: "chat".into(),
            key_id: "k1".into(),
            model: MODELS[i % 2].into(),
            period: period.into(),
            day: format!("{period}-{:02}", 1 + i % 28),
            input_tokens: 10 + (i % 7) as i64,
            output_tokens: 20 + (i % 5) as i64,
            cost_micro: 13 + (i % 11) as i64,
            cost_pico: 0,
            est_tokens: 60,
            est_cost_micro: 30,
            overrun_tokens: 0,
            overrun_cost_micro: 0,
            status: "ok".into(),
            stream: i % 2 == 0,
            usage_source: "provider".into(),
            replica: "r1".into(),
            started_at_ms: Utc
                .with_ymd_and_hms(y, m, 1, 12, 0, 0)
                .unwrap()
                .timestamp_millis(),
            settled_at_ms: Utc
                .with_ymd_and_hms(y, m, 1, 12, 0, 1)
                .unwrap()
                .timestamp_millis(),
            deployment: None,
            breakdown: None,
            charges: None,
            // Half the rows with the provider's usage object, as sent.
            raw_usage: (i % 2 == 0).then(|| raw_usage_of(i)),
            attribution: Default::default(),
            anomaly: None,
        })
        .collect();
    for chunk in events.chunks(500) {
        env.store.insert_usage_events(chunk).await.unwrap();
    }
}

/// The usage object `ledger_month` gives its `i`th event.
fn raw_usage_of(i: usize) -> domain::usage::RawUsage {
    domain::usage::RawUsage::of(&serde_json::json!({
        "prompt_tokens": 10 + i % 7, "completion_tokens": 20 + i % 5,
        "prompt_tokens_details": {"cached_tokens": i % 3}}))
}

/// An answer of ClickHouse's HTTP interface to `sql`, trimmed.
async fn clickhouse(sql: &str) -> String {
    let r = reqwest::Client::new()
        .post(clickhouse_url())
        .body(sql.to_string())
        .send()
        .await
        .unwrap();
    let status = r.status();
    let text = r.text().await.unwrap();
    assert!(status.is_success(), "{sql}: {text}");
    text.trim().to_string()
}

async fn tenants_only(env: &TestEnv) {
    for t in TENANTS {
        env.tenant(t, Limits::default(), None).await;
    }
}

#[tokio::test]
async fn a_crash_between_the_clickhouse_insert_and_the_close_loses_and_doubles_nothing() {
    let env = TestEnv::new().await;
    let archive = test_archive().await;
    tenants_only(&env).await;
    let period = "2026-03";
    ledger_month(&env, period, 1500).await;
    let pg = env
        .store
        .period_totals(&TenantScope::system(), period)
        .await
        .unwrap();
    let books = billing::Books::new(
        env.store.clone(),
        Some(archive.clone()),
        domain::period::PlatformClock::parse("UTC").unwrap(),
    );
    let bill_before = books.bill(period, &TenantScope::system()).await.unwrap();

    // Crash right after the copy reached ClickHouse.
    let now = first_of_next_month(period);
    let ctx = env.job_context(Some(archive.clone()), JobSettings::default());
    let crash = jobs::RolloverOptions {
        crash_after_archive: true,
    };
    let e = jobs::rollover::run(&ctx, now, &crash).await.unwrap_err();
    assert!(matches!(e, jobs::JobError::Failpoint), "{e}");
    let m = env.store.closed_month(period).await.unwrap().unwrap();
    assert_eq!(m.state, "archiving", "the month stays open");
    assert_eq!(
        archive.events_in_period(period).await.unwrap(),
        1500,
        "the copy did land"
    );
    assert_eq!(
        books.bill(period, &TenantScope::system()).await.unwrap(),
        bill_before,
        "bills still from Postgres"
    );

    // The re-run copies again: no duplicates, nothing missing.
    let runner = env
        .job_runner(Some(archive.clone()), JobSettings::default(), "replica-a")
        .await;
    let r = runner.run(JobName::Rollover, now, None).await.unwrap();
    assert!(
        matches!(&r, RunResult::Ran { report, .. } if report.counts["closed"] == 1),
        "{r:?}"
    );
    let m2 = env.store.closed_month(period).await.unwrap().unwrap();
    assert_eq!((m2.state.as_str(), m2.attempts), ("closed", 2));
    assert_ne!(m2.batch_id, m.batch_id);
    assert_eq!(archive.events_in_period(period).await.unwrap(), 1500);
    assert_eq!(archive.event_totals(period, m2.batch_id).await.unwrap(), pg);
    let mut after = books.bill(period, &TenantScope::system()).await.unwrap();
    assert_eq!(
        (after.state.as_str(), after.source),
        ("closed", domain::bill::BillSource::Clickhouse)
    );
    after.state = bill_before.state.clone();
    after.source = bill_before.source;
    assert_eq!(after, bill_before);

    // The archived month keeps each row's usage object (sql/0001_archive.sql).
    let db = archive.database();
    let kept = clickhouse(&format!(
        "SELECT count() FROM {db}.usage_events WHERE period = '{period}' \
         AND batch_id = '{}' AND raw_usage != ''",
        m2.batch_id
    ))
    .await;
    assert_eq!(kept, "750");
    let one = clickhouse(&format!(
        "SELECT raw_usage FROM {db}.usage_events WHERE request_id = 'req_{period}_00004' \
         AND batch_id = '{}' FORMAT JSONEachRow",
        m2.batch_id
    ))
    .await;
    let row: serde_json::Value = serde_json::from_str(&one).unwrap();
    // The text as Postgres' jsonb gives it back (its key order and
    // spacing): the same JSON.
    let archived: Value = serde_json::from_str(row["raw_usage"].as_str().unwrap()).unwrap();
    let sent: Value = serde_json::from_str(raw_usage_of(4).as_str()).unwrap();
    assert_eq!(archived, sent);
}

/// An archive created before `raw_usage` gets the column from
/// `apply_schema` (ClickHouse 18.16 has no ADD COLUMN IF NOT EXISTS), its
/// old rows read as '' and new ones keep it.
#[tokio::test]
async fn an_archive_from_before_the_raw_usage_column_gets_it() {
    let archive = test_archive().await;
    let db = archive.database();
    clickhouse(&format!(
        "ALTER TABLE {db}.usage_events DROP COLUMN raw_usage"
    ))
    .await;
    let has = |db: String| async move {
        clickhouse(&format!(
            "SELECT count() FROM system.columns WHERE database = '{db}' \
             AND table = 'usage_events' AND name = 'raw_usage'"
        ))
        .await
    };
    assert_eq!(has(db.to_string()).await, "0");
    archive.apply_schema().await.unwrap();
    assert_eq!(has(db.to_string()).await, "1");
    archive.apply_schema().await.unwrap();
    assert_eq!(has(db.to_string()).await, "1", "applied twice, added once");
    archive.drop_database().await.unwrap();
}

#[tokio::test]
async fn clickhouse_down_keeps_the_month_open_and_a_later_run_closes_it() {
    let env = TestEnv::new().await;
    let archive = test_archive().await;
    tenants_only(&env).await;
    let period = "2026-02";
    ledger_month(&env, period, 600).await;
    let pg = env
        .store
        .period_totals(&TenantScope::system(), period)
        .await
        .unwrap();
    let now = first_of_next_month(period);

    let down = env
        .job_runner(
            Some(unreachable_archive(archive.database())),
            JobSettings::default(),
            "replica-a",
        )
        .await;
    let r = down.run(JobName::Rollover, now, None).await.unwrap();
    let RunResult::Failed { run_id, error } = &r else {
        panic!("failed run expected: {r:?}")
    };
    assert!(error.contains("ClickHouse"), "{error}");
    let runs = env
        .store
        .job_runs(&TenantScope::system(), Some("rollover"), 10)
        .await
        .unwrap();
    assert_eq!((runs[0].id, runs[0].outcome.as_str()), (*run_id, "failed"));
    assert!(runs[0].finished_at.is_some() && runs[0].error.is_some());
    assert!(
        env.store
            .closed_month(period)
            .await
            .unwrap()
            .is_none_or(|m| !m.is_closed()),
        "still open"
    );
    assert_eq!(
        env.store
            .period_totals(&TenantScope::system(), period)
            .await
            .unwrap(),
        pg,
        "nothing lost"
    );
    assert!(env
        .store
        .notices(&TenantScope::system(), 10)
        .await
        .unwrap()
        .iter()
        .any(|n| n.kind == "job_failed"));

    // ClickHouse back: the retry closes the month, once.
    let up = env
        .job_runner(Some(archive.clone()), JobSettings::default(), "replica-a")
        .await;
    let r = up
        .run(JobName::Rollover, now + chrono::Duration::hours(1), None)
        .await
        .unwrap();
    assert!(
        matches!(&r, RunResult::Ran { report, .. } if report.counts["closed"] == 1),
        "{r:?}"
    );
    let m = env.store.closed_month(period).await.unwrap().unwrap();
    assert_eq!(m.state, "closed");
    assert_eq!(archive.events_in_period(period).await.unwrap(), 600);
    assert_eq!(archive.event_totals(period, m.batch_id).await.unwrap(), pg);
    assert_eq!(
        env.store
            .period_totals(&TenantScope::system(), period)
            .await
            .unwrap(),
        pg
    );
}

/// Month end on the lease path: a request admitted from a lease has no hold
/// record of its own, so rollover also waits for the month's live leases (a
/// lease stays live until its last request settled, and that settle parks
/// the event in the outbox in the same Redis call). Admitted before the
/// month ends, still running at the rollover: the month stays open; once it
/// settled and its lease went back, the month closes and the bill has it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_admitted_request_in_flight_keeps_its_month_open_until_it_settles() {
    let env = TestEnv::new().await;
    let archive = test_archive().await;
    let (_, key) = env
        .simple_tenant(Limits {
            monthly_tokens: Some(1_000_000),
            ..Default::default()
        })
        .await;
    let mut cfg = env.config();
    cfg.gateway.admission = server::config::AdmissionSetting::Lease;
    let srv = env.server_with(cfg).await;
    let url = format!("http://{}/v1/chat/completions", srv.addr);
    let period = this_month();
    // One request settled and stored: the month has something to close.
    assert_eq!(
        post(&url, &key, &chat_body("hi", Some(8))).await.status(),
        200
    );
    let stored = || async {
        env.store
            .period_totals(&TenantScope::system(), &period)
            .await
            .unwrap()
            .values()
            .map(|t| t.requests)
            .sum::<i64>()
    };
    assert!(eventually(Duration::from_secs(5), || async { stored().await == 1 }).await);

    // The slow one: admitted from the lease, answering in 4 s.
    let slow = {
        let (url, key) = (url.clone(), key.clone());
        tokio::spawn(async move {
            post(
                &url,
                &key,
                &chat_body("[mock:latency_ms=4000] slow", Some(8)),
            )
            .await
        })
    };
    assert!(
        eventually(Duration::from_secs(3), || async {
            env.mock.snapshot().requests == 2
        })
        .await,
        "the slow request reached the upstream"
    );
    let holds = env.counters("t", &period).await;
    let ctx = env.job_context(Some(archive.clone()), JobSettings::default());
    let now = first_of_next_month(&period);
    let r = jobs::rollover::run(&ctx, now, &Default::default())
        .await
        .unwrap();
    assert_eq!(
        r.counts["closed"], 0,
        "closed under a running request: {r:?} {holds:?}"
    );
    assert_eq!(r.counts["deferred"], 1, "{r:?}");
    assert!(
        env.store
            .closed_month(&period)
            .await
            .unwrap()
            .is_none_or(|m| !m.is_closed()),
        "the month stays open"
    );

    let answer = slow.await.unwrap();
    assert_eq!(answer.status(), 200);
    // Settled, its lease idle and returned: the next run closes the month.
    let closed = eventually(Duration::from_secs(15), || async {
        let r = jobs::rollover::run(&ctx, now, &Default::default())
            .await
            .unwrap();
        r.counts["closed"] == 1
    })
    .await;
    assert!(closed, "the month never closed");
    let books = billing::Books::new(
        env.store.clone(),
        Some(archive.clone()),
        domain::period::PlatformClock::parse("UTC").unwrap(),
    );
    let bill = books.bill(&period, &TenantScope::system()).await.unwrap();
    assert_eq!(bill.state, "closed");
    assert_eq!(
        bill.total.requests, 2,
        "the bill has the slow request: {bill:?}"
    );
    assert_eq!(archive.events_in_period(&period).await.unwrap(), 2);
    srv.shutdown().await;
}
