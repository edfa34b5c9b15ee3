//! Closing against the provider's invoice (issue #46, docs/billing.md):
//! the mock provider serves OpenAI's and Anthropic's admin usage and cost
//! APIs from what it actually served (its own counters, per API key, model
//! and day); the `provider-reconcile` job compares them with the ledger.
//! What the provider "billed" is read from the mock's reports by the test
//! itself, never from tollgate's code.

mod browser_common;

use browser_common::{artifacts_dir, Driver, Ui};
use e2e::*;
use futures::StreamExt;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::time::Duration;
use store::NewModel;

const OPENAI_REF: &str = "key_tollgate_prod";
const ANTHROPIC_REF: &str = "wrkspc_tollgate";

/// (input, cached input, output) µUSD per million tokens, the same on
/// tollgate's sheet and the provider's.
fn prices(model: &str) -> (i64, i64, i64) {
    match model {
        "gpt-4o-mini" => (150_000, 75_000, 600_000),
        "gpt-4.1" => (2_000_000, 500_000, 8_000_000),
        _ => (3_000_000, 300_000, 15_000_000),
    }
}

async fn model_on(env: &TestEnv, id: &str, base: &str) {
    let (i, _, o) = prices(id);
    env.store
        .create_model(
            "test",
            &NewModel {
                id: id.into(),
                kind: "chat".into(),
                upstream_base_url: base.into(),
                upstream_model: id.into(),
                upstream_api_key_enc: Some(domain::secret::encrypt(
                    &hex::decode(ENC_KEY).unwrap().try_into().unwrap(),
                    PROVIDER_KEY,
                )),
                input_price_micro_per_mtok: i,
                output_price_micro_per_mtok: o,
                tokenizer: None,
                default_max_output_tokens: 256,
                profile: domain::provider::ProviderProfile::suggested_for(id),
            },
        )
        .await
        .unwrap();
}

/// The mock's admin side: our key's ids, the admin key, the same prices.
async fn provider_settings(mock_v1: &str, models: &[&str], extra: Value) {
    let mut p = serde_json::Map::new();
    for m in models {
        let (i, c, o) = prices(m);
        p.insert(
            m.to_string(),
            json!({"input": i, "cached_input": c, "output": o}),
        );
    }
    let mut body = json!({"admin_key": PROVIDER_ADMIN_KEY,
        "keys": {PROVIDER_KEY: {"id": OPENAI_REF, "workspace": ANTHROPIC_REF}},
        "prices": p});
    if let Value::Object(e) = extra {
        for (k, v) in e {
            body[k] = v;
        }
    }
    let r = reqwest::Client::new()
        .post(format!("{}/mock/admin", mock_v1.trim_end_matches("/v1")))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
}

async fn mock_clock(mock_v1: &str, offset_secs: i64) {
    let r = reqwest::Client::new()
        .post(format!("{}/mock/clock", mock_v1.trim_end_matches("/v1")))
        .json(&json!({"offset_secs": offset_secs}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
}

struct Fixture {
    env: TestEnv,
    _srv: server::app::Running,
    base: String,
    admin: String,
    /// tenant → key
    keys: BTreeMap<&'static str, String>,
    anthropic_url: String,
}

async fn fixture(extra_openai: Value) -> Fixture {
    let env = TestEnv::new().await;
    let (anthropic_url, _) = mock_upstream::spawn(Default::default()).await;
    model_on(&env, "gpt-4o-mini", &env.mock_url).await;
    model_on(&env, "gpt-4.1", &env.mock_url).await;
    model_on(&env, "claude-sonnet", &anthropic_url).await;
    // A model no account reconciles.
    env.model("local-llm", "chat", 1, 1).await;
    provider_settings(&env.mock_url, &["gpt-4o-mini", "gpt-4.1"], extra_openai).await;
    provider_settings(&anthropic_url, &["claude-sonnet"], json!({})).await;
    let mut keys = BTreeMap::new();
    for t in ["research", "support"] {
        env.tenant(t, domain::Limits::default(), None).await;
        env.app(t, "a", domain::Limits::default()).await;
        keys.insert(t, env.key(t, "a", domain::Limits::default()).await.1);
    }
    user(&env, "root@x.io", "platform_admin", None).await;
    user(&env, "fin1@x.io", "finance", None).await;
    user(&env, "fin2@x.io", "finance", None).await;
    // Plain-HTTP cookies, for the browser test's sign-in.
    let mut cfg = env.config();
    cfg.auth.cookie_secure = false;
    let srv = env.server_with(cfg).await;
    let base = format!("http://{}", srv.addr);
    let admin = login(&base, "root@x.io").await;
    for (model, (i, c, o)) in [
        ("gpt-4o-mini", prices("gpt-4o-mini")),
        ("gpt-4.1", prices("gpt-4.1")),
        ("claude-sonnet", prices("claude-sonnet")),
    ] {
        let (s, b) = api(
            "POST",
            &format!("{base}/api/v1/models/{model}/prices"),
            Some(&admin),
            Some(json!({"sheet": {"input": i, "cached_input": c, "output": o}})),
        )
        .await;
        assert_eq!(s, 200, "{b}");
    }
    for (id, kind, url, links) in [
        (
            "openai-prod",
            "openai",
            env.mock_url.clone(),
            json!([{"model": "gpt-4o-mini", "deployment": "default", "provider_ref": OPENAI_REF},
                   {"model": "gpt-4.1", "deployment": "default", "provider_ref": OPENAI_REF}]),
        ),
        (
            "anthropic-prod",
            "anthropic",
            anthropic_url.clone(),
            json!([{"model": "claude-sonnet", "deployment": "default", "provider_ref": ANTHROPIC_REF}]),
        ),
    ] {
        let (s, b) = api(
            "PUT",
            &format!("{base}/api/v1/provider-accounts/{id}"),
            Some(&admin),
            Some(
                json!({"kind": kind, "api_base_url": url, "admin_key": PROVIDER_ADMIN_KEY,
                "drift_alert_pct": 1.0, "deployments": links}),
            ),
        )
        .await;
        assert_eq!(s, 200, "{b}");
        assert!(
            b.get("admin_key").is_none(),
            "the admin key is write-only: {b}"
        );
    }
    // The catalog takes the sheets on its change notice.
    tokio::time::sleep(Duration::from_millis(800)).await;
    Fixture {
        env,
        _srv: srv,
        base,
        admin,
        keys,
        anthropic_url,
    }
}

/// One request through tollgate; returns the usage the client was told.
async fn call(
    f: &Fixture,
    tenant: &str,
    model: &str,
    cached: u32,
    stream: bool,
    n: usize,
) -> Value {
    let words = "lorem ipsum dolor ".repeat(10 + n % 17);
    let content = if cached > 0 {
        format!(
            "[mock:cached={cached}] [mock:output_tokens={}] {words}",
            5 + n % 9
        )
    } else {
        format!("[mock:output_tokens={}] {words}", 5 + n % 9)
    };
    let mut body = json!({"model": model, "messages": [{"role": "user", "content": content}]});
    if stream {
        body["stream"] = json!(true);
        body["stream_options"] = json!({"include_usage": true});
    }
    let r = post(
        &format!("{}/v1/chat/completions", f.base),
        &f.keys[tenant],
        &body,
    )
    .await;
    assert_eq!(r.status(), 200, "{model}");
    if stream {
        let events = sse_events(r).await;
        events
            .iter()
            .rev()
            .filter_map(|e| e.strip_prefix("data: "))
            .filter_map(|e| serde_json::from_str::<Value>(e).ok())
            .find(|v| v["usage"].is_object())
            .map(|v| v["usage"].clone())
            .expect("a usage chunk")
    } else {
        r.json::<Value>().await.unwrap()["usage"].clone()
    }
}

/// `n` requests on a mix of models, tenants, cached and not, streams and
/// not, 8 at a time; the usages the clients were told, by model.
async fn traffic(
    f: &Fixture,
    plan: &[(&'static str, &'static str, usize)],
) -> Vec<(String, Value)> {
    let mut jobs = Vec::new();
    for (model, tenant, n) in plan {
        for i in 0..*n {
            jobs.push((*model, *tenant, i));
        }
    }
    futures::stream::iter(jobs)
        .map(|(model, tenant, i)| async move {
            let cached = if i % 3 == 0 { 8 + (i % 5) as u32 } else { 0 };
            (
                model.to_string(),
                call(f, tenant, model, cached, i % 4 == 1, i).await,
            )
        })
        .buffer_unordered(8)
        .collect()
        .await
}

async fn settled(f: &Fixture, n: i64) {
    assert!(
        ledger_reaches(&f.env, n, Duration::from_secs(30)).await,
        "ledger holds {n} events"
    );
}

/// Moves every event in the ledger by `days` (the gateway has no clock to
/// wind back: the first day's traffic is served now, dated on the mock's
/// wound-back clock, then moved to that day in the ledger too).
async fn shift_ledger(f: &Fixture, days: i32) {
    let pool = f.env.store.pool();
    sqlx::query(
        "UPDATE usage_events SET started_at = started_at + make_interval(days => $1),
            settled_at = settled_at + make_interval(days => $1), day = day + $1",
    )
    .bind(days)
    .execute(pool)
    .await
    .unwrap();
    for t in ["usage_rollups", "usage_day_rollups"] {
        sqlx::query(&format!("UPDATE {t} SET day = day + $1"))
            .bind(days)
            .execute(pool)
            .await
            .unwrap();
    }
}

async fn run_job(f: &Fixture, day: chrono::NaiveDate) -> jobs::JobReport {
    let settings = jobs::JobSettings {
        encryption_key: Some(hex::decode(ENC_KEY).unwrap().try_into().unwrap()),
        ..Default::default()
    };
    let mut ctx = f.env.job_context(None, settings);
    ctx.provider_day = Some(day);
    let runner = jobs::JobRunner::new(ctx, "replica-a");
    match runner
        .run(jobs::JobName::ProviderReconcile, chrono::Utc::now(), None)
        .await
        .unwrap()
    {
        jobs::RunResult::Ran { report, .. } => report,
        other => panic!("the job did not run: {other:?}"),
    }
}

async fn reconciliation(f: &Fixture, token: &str) -> Value {
    let period = this_month();
    let (s, b) = api(
        "GET",
        &format!("{}/api/v1/reconciliation?period={period}", f.base),
        Some(token),
        None,
    )
    .await;
    assert_eq!(s, 200, "{b}");
    b
}

fn day_of<'a>(rec: &'a Value, account: &str, day: chrono::NaiveDate) -> &'a Value {
    rec["days"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["account"] == account && d["day"] == day.to_string())
        .unwrap_or_else(|| panic!("{account} {day} reconciled: {rec}"))
}

/// A reconciled day's line of `model` and `class`.
fn line_of<'a>(day: &'a Value, model: &str, class: &str) -> &'a Value {
    day["lines"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["model"] == model && l["class"] == class)
        .unwrap_or_else(|| panic!("{model} {class}: {day}"))
}

/// Today, and the other day of the two-day test: yesterday, or tomorrow on
/// the 1st (both days in one month).
fn two_days() -> (chrono::NaiveDate, chrono::NaiveDate, i32) {
    use chrono::Datelike;
    let today = chrono::Utc::now().date_naive();
    if today.day() == 1 {
        (today, today + chrono::Duration::days(1), 1)
    } else {
        (today, today - chrono::Duration::days(1), -1)
    }
}

/// ≥ 1,000 requests over two days, two accounts, three models, cached and
/// uncached input, streams and not: every account × day × model × class
/// matches, the stored result is the same when the day is run again, and
/// the job is on the jobs list.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_days_of_traffic_reconcile_without_a_difference() {
    let f = fixture(json!({})).await;
    let (today, other, shift) = two_days();
    if two_days_skips_midnight() {
        return;
    }
    let plan = [
        ("gpt-4o-mini", "research", 180),
        ("gpt-4o-mini", "support", 100),
        ("gpt-4.1", "research", 70),
        ("claude-sonnet", "support", 160),
    ];
    // The other day first, on both mocks' clocks, then moved in the ledger.
    mock_clock(&f.env.mock_url, i64::from(shift) * 86_400).await;
    mock_clock(&f.anthropic_url, i64::from(shift) * 86_400).await;
    let first = traffic(&f, &plan).await;
    settled(&f, first.len() as i64).await;
    shift_ledger(&f, shift).await;
    mock_clock(&f.env.mock_url, 0).await;
    mock_clock(&f.anthropic_url, 0).await;
    let second = traffic(&f, &plan).await;
    let total = (first.len() + second.len()) as i64;
    assert!(total >= 1_000);
    settled(&f, total).await;

    for day in [other, today] {
        let r = run_job(&f, day).await;
        assert!(r.clean, "no difference on {day}: {}", r.detail);
    }
    let fin = login(&f.base, "fin1@x.io").await;
    let rec = reconciliation(&f, &fin).await;
    for day in [other, today] {
        for account in ["openai-prod", "anthropic-prod"] {
            let d = day_of(&rec, account, day);
            assert_eq!(d["differences"], 0, "{d}");
            assert_eq!(d["difference_usd"], "0.00", "{d}");
            for l in d["lines"].as_array().unwrap() {
                assert_eq!(l["finding"], "match", "{l}");
                assert_eq!(l["tollgate_quantity"], l["provider_quantity"], "{l}");
            }
        }
        // What the clients were told, summed here: the classes compared
        // hold exactly that (requests and output of gpt-4o-mini that day).
        let usages = if day == other { &first } else { &second };
        let told: i64 = usages
            .iter()
            .filter(|(m, _)| m == "gpt-4o-mini")
            .map(|(_, u)| u["completion_tokens"].as_i64().unwrap())
            .sum();
        let d = day_of(&rec, "openai-prod", day);
        let line = |model: &str, class: &str| line_of(d, model, class);
        assert_eq!(line("gpt-4o-mini", "output")["tollgate_quantity"], told);
        assert_eq!(line("gpt-4o-mini", "requests")["tollgate_quantity"], 280);
        let cached: i64 = usages
            .iter()
            .filter(|(m, _)| m == "gpt-4o-mini")
            .map(|(_, u)| {
                u["prompt_tokens_details"]["cached_tokens"]
                    .as_i64()
                    .unwrap_or(0)
            })
            .sum();
        assert!(cached > 0);
        assert_eq!(
            line("gpt-4o-mini", "cached_input")["provider_quantity"],
            cached
        );
        let a = day_of(&rec, "anthropic-prod", day);
        assert!(
            a["lines"]
                .as_array()
                .unwrap()
                .iter()
                .any(|l| l["class"] == "cached_input"),
            "{a}"
        );
    }
    // Running a day again stores the same result.
    let before = reconciliation(&f, &fin).await;
    run_job(&f, today).await;
    let after = reconciliation(&f, &fin).await;
    let strip = |v: &Value| {
        let mut v = v.clone();
        for d in v["days"].as_array_mut().unwrap() {
            d.as_object_mut().unwrap().remove("fetched_at");
        }
        v
    };
    assert_eq!(strip(&before), strip(&after));
    assert_eq!(day_of(&after, "openai-prod", today)["revisions"], 0);
    // The deployment no account reconciles is named.
    assert!(
        after["not_reconciled"]
            .as_array()
            .unwrap()
            .iter()
            .any(|x| x["model"] == "local-llm"),
        "{after}"
    );
    // The job is on the jobs list like the others.
    let (s, runs) = api(
        "GET",
        &format!("{}/api/v1/job-runs", f.base),
        Some(&f.admin),
        None,
    )
    .await;
    assert_eq!(s, 200);
    assert!(runs.to_string().contains("provider-reconcile"), "{runs}");
}

/// Traffic that crosses midnight would be dated on two days by both sides;
/// the test would then be testing the edge, not the books. Skip a run
/// started in the last two minutes of a UTC day.
fn two_days_skips_midnight() -> bool {
    use chrono::Timelike;
    let now = chrono::Utc::now();
    let late = now.hour() == 23 && now.minute() >= 55;
    if late {
        eprintln!("skipped: too close to midnight UTC for a one-day comparison");
    }
    late
}

/// The provider bills 2 % more input on one model: the job names that
/// model, day and class with the difference in tokens and dollars and
/// nothing else; finance proposes, a second finance user approves, and the
/// departments' bills (JSON, CSV, FOCUS) add up to the provider's cost for
/// the day to the cent, each share pro rata to the department's cost.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_provider_that_bills_more_input_is_found_and_adjusted_to_the_invoice() {
    if two_days_skips_midnight() {
        return;
    }
    let f = fixture(json!({"extra_input_pct": {"gpt-4.1": 2}})).await;
    let today = chrono::Utc::now().date_naive();
    let served = traffic(
        &f,
        &[
            ("gpt-4.1", "research", 45),
            ("gpt-4.1", "support", 15),
            ("gpt-4o-mini", "support", 30),
        ],
    )
    .await;
    settled(&f, served.len() as i64).await;
    let r = run_job(&f, today).await;
    assert!(!r.clean, "a difference: {}", r.detail);

    // The extra input, from what each client was told.
    let extra: i64 = served
        .iter()
        .filter(|(m, _)| m == "gpt-4.1")
        .map(|(_, u)| {
            let uncached = u["prompt_tokens"].as_i64().unwrap()
                - u["prompt_tokens_details"]["cached_tokens"]
                    .as_i64()
                    .unwrap_or(0);
            (uncached * 102).div_euclid(100) + i64::from((uncached * 102) % 100 != 0) - uncached
        })
        .sum();
    assert!(extra > 0);
    let fin1 = login(&f.base, "fin1@x.io").await;
    let rec = reconciliation(&f, &fin1).await;
    let d = day_of(&rec, "openai-prod", today);
    let diffs: Vec<&Value> = d["lines"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|l| l["finding"] != "match")
        .collect();
    assert_eq!(diffs.len(), 1, "one difference only: {d}");
    let l = diffs[0];
    assert_eq!(
        (&l["model"], &l["class"]),
        (&json!("gpt-4.1"), &json!("input"))
    );
    assert_eq!(l["finding"], "provider_more");
    assert_eq!(l["difference_quantity"], extra);
    let extra_pico = i128::from(extra) * i128::from(prices("gpt-4.1").0);
    assert_eq!(
        l["difference_usd"],
        domain::money::pico_shown(extra_pico).trim_start_matches('$'),
        "{l}"
    );
    assert!(day_of(&rec, "anthropic-prod", today)["lines"]
        .as_array()
        .unwrap()
        .is_empty());
    // A drift over 1 % of the day's dollars raises a notice (small days drift).
    let (_, notices) = api(
        "GET",
        &format!("{}/api/v1/notices", f.base),
        Some(&f.admin),
        None,
    )
    .await;
    let drifted = d["drift_pct"].as_f64().unwrap() > 1.0;
    assert_eq!(
        notices.to_string().contains("provider_drift"),
        drifted,
        "{notices}"
    );

    // Finance proposes; the proposer cannot approve; a second one does.
    let (s, adj) = api(
        "POST",
        &format!("{}/api/v1/adjustments", f.base),
        Some(&fin1),
        Some(
            json!({"account": "openai-prod", "day": today, "model": "gpt-4.1",
            "reason": "OpenAI invoiced 2 % more input on gpt-4.1 than it reported"}),
        ),
    )
    .await;
    assert_eq!(s, 201, "{adj}");
    assert_eq!(adj["state"], "proposed");
    assert_eq!(adj["amount_pico"].as_i64().unwrap() as i128, extra_pico);
    let id = adj["id"].as_str().unwrap().to_string();
    let (s, b) = api(
        "POST",
        &format!("{}/api/v1/adjustments/{id}/approve", f.base),
        Some(&fin1),
        None,
    )
    .await;
    assert_eq!(
        (s, &b["error"]["code"]),
        (403, &json!("four_eyes_violation")),
        "{b}"
    );
    let (s, b) = api(
        "POST",
        &format!("{}/api/v1/adjustments/{id}/approve", f.base),
        Some(&f.admin),
        None,
    )
    .await;
    assert_eq!(s, 403, "a platform admin does not approve adjustments: {b}");
    let fin2 = login(&f.base, "fin2@x.io").await;
    let (s, adj) = api(
        "POST",
        &format!("{}/api/v1/adjustments/{id}/approve", f.base),
        Some(&fin2),
        None,
    )
    .await;
    assert_eq!(s, 200, "{adj}");
    assert_eq!(adj["state"], "approved");

    // A credit: the amount is signed; rejected, it changes no bill.
    let (s, credit) = api(
        "POST",
        &format!("{}/api/v1/adjustments", f.base),
        Some(&fin1),
        Some(
            json!({"account": "openai-prod", "day": today, "model": "gpt-4.1",
            "amount_usd": "-0.05", "allocation": "unallocated", "reason": "a credit note"}),
        ),
    )
    .await;
    assert_eq!(s, 201, "{credit}");
    assert_eq!(credit["amount_usd"], "-0.05");
    let (s, _) = api(
        "POST",
        &format!(
            "{}/api/v1/adjustments/{}/reject",
            f.base,
            credit["id"].as_str().unwrap()
        ),
        Some(&fin2),
        Some(json!({"note": "no credit note came"})),
    )
    .await;
    assert_eq!(s, 200);

    // Pro rata to each department's exact cost on gpt-4.1 that day, read
    // from the ledger here.
    let costs: BTreeMap<String, i64> = sqlx::query_as::<_, (String, i64)>(
        "SELECT tenant_id, sum(cost_pico)::int8 FROM usage_events WHERE model = 'gpt-4.1' GROUP BY 1",
    )
    .fetch_all(f.env.store.pool())
    .await
    .unwrap()
    .into_iter()
    .collect();
    let total_cost: i128 = costs.values().map(|c| i128::from(*c)).sum();
    let shares = adj["shares"].as_array().unwrap();
    assert_eq!(shares.len(), 2, "{adj}");
    let mut share_sum = 0i128;
    for s in shares {
        let t = s["tenant_id"].as_str().unwrap();
        let share = i128::from(s["amount_pico"].as_i64().unwrap());
        share_sum += share;
        // |share − amount × cost / total| < 1 pico
        let exact_num = extra_pico * i128::from(costs[t]);
        assert!(
            (share * total_cost - exact_num).abs() < total_cost,
            "{t}: {share} of {extra_pico}"
        );
    }
    assert_eq!(share_sum, extra_pico);

    // The provider's cost for the day, read from its own cost report.
    let provider_pico = provider_day_cost(&f.env.mock_url, today).await;
    let period = this_month();
    let (s, bill) = api(
        "GET",
        &format!("{}/api/v1/bills?period={period}", f.base),
        Some(&fin1),
        None,
    )
    .await;
    assert_eq!(s, 200);
    let micro = |v: &Value| {
        domain::MicroUsd::from_usd_str(v.as_str().unwrap())
            .unwrap()
            .0
    };
    let billed: i64 = bill["tenants"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| micro(&t["billed_usd"]))
        .sum();
    let provider_micro = domain::money::micro_rounded(provider_pico);
    // Each department's line is rounded once to the µUSD: two departments
    // and their adjustment lines are within 4 µUSD, far inside a cent.
    assert!(
        (billed - provider_micro).abs() <= 4,
        "bills {billed} µUSD, provider {provider_micro} µUSD: {bill}"
    );
    assert_eq!(micro(&bill["total"]["billed_usd"]), billed);
    for t in bill["tenants"].as_array().unwrap() {
        assert!(!t["adjustments"].as_array().unwrap().is_empty(), "{t}");
    }
    // CSV and FOCUS: the cost columns (usage and adjustment rows) add up to the same.
    for (path, col) in [("bills.csv", "cost_usd"), ("bills.focus.csv", "BilledCost")] {
        let r = reqwest::Client::new()
            .get(format!("{}/api/v1/{path}?period={period}", f.base))
            .bearer_auth(&fin1)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        let text = r.text().await.unwrap();
        let mut lines = text.lines();
        let header: Vec<&str> = lines.next().unwrap().split(',').collect();
        let at = header.iter().position(|h| *h == col).unwrap();
        let mut sum = 0i64;
        let mut adjustments = 0;
        for line in lines {
            let fields = csv_fields(line);
            sum += domain::MicroUsd::from_usd_str(&fields[at]).unwrap().0;
            if line.contains("djustment") {
                adjustments += 1;
            }
        }
        assert_eq!(sum, billed, "{path}");
        assert_eq!(adjustments, 2, "{path}: {text}");
    }
}

/// A CSV line's fields (quoted fields may hold commas).
fn csv_fields(line: &str) -> Vec<String> {
    let mut out = vec![String::new()];
    let mut quoted = false;
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '"' if quoted && chars.peek() == Some(&'"') => {
                chars.next();
                out.last_mut().unwrap().push('"');
            }
            '"' => quoted = !quoted,
            ',' if !quoted => out.push(String::new()),
            c => out.last_mut().unwrap().push(c),
        }
    }
    out
}

/// The day's cost on the OpenAI mock's own cost report, in pico-USD.
async fn provider_day_cost(mock_v1: &str, day: chrono::NaiveDate) -> i128 {
    let start = day.and_hms_opt(0, 0, 0).unwrap().and_utc().timestamp();
    let r = reqwest::Client::new()
        .get(format!("{mock_v1}/organization/costs"))
        .query(&[
            ("start_time", start.to_string()),
            ("end_time", (start + 86_400).to_string()),
            ("bucket_width", "1d".into()),
        ])
        .bearer_auth(PROVIDER_ADMIN_KEY)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let b: Value = r.json().await.unwrap();
    b["data"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|bucket| bucket["results"].as_array().unwrap().clone())
        .map(|r| (r["amount"]["value"].as_f64().unwrap() * 1e12).round() as i128)
        .sum()
}

/// Traffic on the provider key that never went through tollgate is named
/// as such; a day published late and revised replaces its figures; pages
/// and a 429 are handled; a wrong admin key gives a notice naming the
/// account and changes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn outside_traffic_late_days_pages_429_and_a_wrong_key() {
    if two_days_skips_midnight() {
        return;
    }
    // Small pages (one-hour buckets, six a page: four pages a day) and a
    // 429 on the first admin request.
    let f = fixture(json!({"page_size": 6, "fail_next": 1})).await;
    let today = chrono::Utc::now().date_naive();
    let a = traffic(&f, &[("gpt-4o-mini", "research", 12)]).await;
    settled(&f, a.len() as i64).await;
    // The provider publishes only what it served until now.
    tokio::time::sleep(Duration::from_millis(50)).await;
    let cut = chrono::Utc::now();
    tokio::time::sleep(Duration::from_millis(50)).await;
    provider_settings(
        &f.env.mock_url,
        &["gpt-4o-mini", "gpt-4.1"],
        json!({"published_until": cut.to_rfc3339()}),
    )
    .await;
    let b = traffic(&f, &[("gpt-4o-mini", "support", 8)]).await;
    settled(&f, (a.len() + b.len()) as i64).await;
    // Three requests straight to the provider with the same key.
    for _ in 0..3 {
        let r = post(
            &format!("{}/chat/completions", f.env.mock_url),
            PROVIDER_KEY,
            &json!({"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "[mock:output_tokens=7] hi from a script"}]}),
        )
        .await;
        assert_eq!(r.status(), 200);
    }
    let fin = login(&f.base, "fin1@x.io").await;

    // Late: the provider has not published the last requests yet.
    let r = run_job(&f, today).await;
    assert!(!r.clean);
    let rec = reconciliation(&f, &fin).await;
    let d = day_of(&rec, "openai-prod", today);
    let req = line_of(d, "gpt-4o-mini", "requests");
    assert_eq!(
        (
            req["tollgate_quantity"].as_i64(),
            req["provider_quantity"].as_i64()
        ),
        (Some(20), Some(12)),
        "{d}"
    );
    assert_eq!(req["finding"], "not_billed");
    assert_eq!(d["final"], false);

    // Revised: everything published; the outside requests are named.
    provider_settings(
        &f.env.mock_url,
        &["gpt-4o-mini", "gpt-4.1"],
        json!({"published_until": null}),
    )
    .await;
    run_job(&f, today).await;
    let rec = reconciliation(&f, &fin).await;
    let d = day_of(&rec, "openai-prod", today).clone();
    assert_eq!(d["revisions"], 1, "{d}");
    for l in d["lines"].as_array().unwrap() {
        if l["finding"] == "match" {
            continue;
        }
        assert_eq!(l["finding"], "outside_traffic", "{l}");
    }
    let line = |class: &str| line_of(&d, "gpt-4o-mini", class);
    assert_eq!(line("requests")["difference_quantity"], 3);
    assert_eq!(line("output")["difference_quantity"], 21);
    assert_eq!(line("input")["finding"], "outside_traffic");
    let (_, notices) = api(
        "GET",
        &format!("{}/api/v1/notices", f.base),
        Some(&f.admin),
        None,
    )
    .await;
    assert!(
        notices.to_string().contains("provider_day_revised"),
        "{notices}"
    );

    // The stored admin key goes only to the address it was given for.
    let (s, b) = api(
        "PUT",
        &format!("{}/api/v1/provider-accounts/openai-prod", f.base),
        Some(&f.admin),
        Some(
            json!({"kind": "openai", "api_base_url": "https://collector.example/v1",
            "deployments": []}),
        ),
    )
    .await;
    assert_eq!((s, &b["error"]["param"]), (400, &json!("admin_key")), "{b}");
    // A wrong admin key: a notice naming the account; nothing changes.
    let (s, _) = api(
        "PUT",
        &format!("{}/api/v1/provider-accounts/openai-prod", f.base),
        Some(&f.admin),
        Some(json!({"kind": "openai", "api_base_url": f.env.mock_url, "admin_key": "sk-admin-wrong",
            "deployments": [{"model": "gpt-4o-mini", "deployment": "default", "provider_ref": OPENAI_REF},
                            {"model": "gpt-4.1", "deployment": "default", "provider_ref": OPENAI_REF}]})),
    )
    .await;
    assert_eq!(s, 200);
    let r = run_job(&f, today).await;
    assert!(!r.clean);
    assert!(
        r.detail.to_string().contains("refused the admin key"),
        "{}",
        r.detail
    );
    let again = reconciliation(&f, &fin).await;
    let mut d2 = day_of(&again, "openai-prod", today).clone();
    let mut d1 = d.clone();
    d1.as_object_mut().unwrap().remove("fetched_at");
    d2.as_object_mut().unwrap().remove("fetched_at");
    assert_eq!(d1, d2, "a refused key changes nothing");
    let (_, notices) = api(
        "GET",
        &format!("{}/api/v1/notices", f.base),
        Some(&f.admin),
        None,
    )
    .await;
    let n = notices.to_string();
    assert!(
        n.contains("provider_reconcile_failed") && n.contains("openai-prod"),
        "{n}"
    );
    assert!(!n.contains("sk-admin-wrong"), "no key in a notice");
}

/// Finance works the month in the console: the reconciliation page shows
/// the day's difference, one finance user proposes an adjustment from it,
/// the proposer is told why they cannot approve it, a second one approves
/// it, and the shares show; tenant admins do not see the page.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn finance_proposes_and_approves_an_adjustment_in_the_console() {
    if two_days_skips_midnight() {
        return;
    }
    let f = fixture(json!({"extra_input_pct": {"gpt-4.1": 2}})).await;
    user(&f.env, "ta@x.io", "tenant_admin", Some("research")).await;
    let today = chrono::Utc::now().date_naive();
    let served = traffic(&f, &[("gpt-4.1", "research", 9), ("gpt-4.1", "support", 3)]).await;
    settled(&f, served.len() as i64).await;
    run_job(&f, today).await;
    let period = this_month();
    let page = format!("/console/reconciliation?period={period}");

    let fin1 = console_web::Web::login(&f.base, "fin1@x.io").await;
    let p = fin1.get(&page).await;
    assert_eq!(p.status, 200);
    assert!(p.body.contains("provider counted more"), "{}", p.body);
    assert!(p.body.contains(r#"data-finding="provider_more""#));
    assert!(p.body.contains("/console/reconciliation/adjustments"));
    let day = today.to_string();
    let r = fin1
        .post(
            "/console/reconciliation/adjustments",
            &[
                ("period", period.as_str()),
                ("account", "openai-prod"),
                ("day", day.as_str()),
                ("model", "gpt-4.1"),
                ("allocation", "pro_rata"),
                ("reason", "invoice shows <b>2 %</b> more input"),
            ],
        )
        .await;
    assert_eq!(r.status, 303, "{}", r.body);
    let p = fin1.get(&page).await;
    assert!(
        p.body
            .contains("invoice shows &#60;b&#62;2 %&#60;/b&#62; more input"),
        "escaped: {}",
        p.body
    );
    assert!(
        !p.body.contains("/approve\""),
        "the proposer has no approve button"
    );
    assert!(p.body.contains("class=\"muted refusal\""));

    let fin2 = console_web::Web::login(&f.base, "fin2@x.io").await;
    let p = fin2.get(&page).await;
    let at = p
        .body
        .find("/console/adjustments/")
        .expect("an approve form");
    let id: String = p.body[at + "/console/adjustments/".len()..]
        .chars()
        .take_while(|c| *c != '/')
        .collect();
    let r = fin2
        .post(
            &format!("/console/adjustments/{id}/approve"),
            &[
                ("period", period.as_str()),
                ("note", "checked against the invoice"),
            ],
        )
        .await;
    assert_eq!(r.status, 303, "{}", r.body);
    let p = fin2.get(&page).await;
    assert!(p.body.contains("approved"), "{}", p.body);
    assert!(
        p.body.contains("research: $") && p.body.contains("support: $"),
        "{}",
        p.body
    );
    // On the bills page's data too.
    let (_, bill) = api(
        "GET",
        &format!("{}/api/v1/bills?period={period}", f.base),
        Some(&login(&f.base, "fin1@x.io").await),
        None,
    )
    .await;
    assert!(bill["tenants"][0]["adjustment_usd"] != "0.000000", "{bill}");

    // A platform admin adds an account from the page's form.
    let root = console_web::Web::login(&f.base, "root@x.io").await;
    assert!(
        root.get(&page).await.body.contains("local-llm/default"),
        "not reconciled yet"
    );
    let bad = root
        .post(
            "/console/reconciliation/accounts",
            &[
                ("id", "batch"),
                ("kind", "openai"),
                ("api_base_url", "http://127.0.0.1:9/v1"),
                ("admin_key", "sk-admin-batch"),
                ("deployments", "local-llm/default"),
            ],
        )
        .await;
    assert_eq!(bad.status, 400, "a line without its provider id");
    assert!(
        bad.body.contains("model/deployment provider-id"),
        "{}",
        bad.body
    );
    let r = root
        .post(
            "/console/reconciliation/accounts",
            &[
                ("id", "batch"),
                ("kind", "openai"),
                ("api_base_url", "http://127.0.0.1:9/v1"),
                ("admin_key", "sk-admin-batch"),
                ("drift_alert_pct", "2.5"),
                ("deployments", "local-llm/default key_batch"),
            ],
        )
        .await;
    assert_eq!(r.status, 303, "{}", r.body);
    let p = root.get(&page).await;
    assert!(
        p.body.contains("local-llm/default key_batch") && p.body.contains("2.5 %"),
        "{}",
        p.body
    );
    assert!(!p.body.contains("sk-admin-batch"), "the key is write-only");
    let (_, accounts) = api(
        "GET",
        &format!("{}/api/v1/provider-accounts", f.base),
        Some(&f.admin),
        None,
    )
    .await;
    assert!(
        accounts["not_reconciled"].as_array().unwrap().is_empty(),
        "{accounts}"
    );
    // Finance reads accounts but has no form for them.
    assert!(!fin1
        .get(&page)
        .await
        .body
        .contains("/console/reconciliation/accounts"));

    let ta = console_web::Web::login(&f.base, "ta@x.io").await;
    assert_eq!(ta.get(&page).await.status, 403);
    let (s, _) = api(
        "GET",
        &format!("{}/api/v1/reconciliation", f.base),
        Some(&login(&f.base, "ta@x.io").await),
        None,
    )
    .await;
    assert_eq!(s, 403);
}

/// The same in headless Chromium: finance sees the day's difference on the
/// page, proposes from its form, the second finance user approves from the
/// adjustments table, and the shares show (screenshots in the artifacts).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_reconciliation_page_works_in_a_browser() {
    if two_days_skips_midnight() {
        return;
    }
    let f = fixture(json!({"extra_input_pct": {"gpt-4.1": 2}})).await;
    let today = chrono::Utc::now().date_naive();
    let served = traffic(&f, &[("gpt-4.1", "research", 6), ("gpt-4.1", "support", 2)]).await;
    settled(&f, served.len() as i64).await;
    run_job(&f, today).await;
    let page = format!("/console/reconciliation?period={}", this_month());
    let driver = Driver::start();
    let ui = Ui {
        c: driver.browser().await,
        base: f.base.clone(),
        shots: artifacts_dir(),
    };
    ui.login("fin1@x.io", None).await;
    ui.go(&page).await;
    ui.wait("tr.recon-line[data-finding=provider_more]").await;
    assert!(ui
        .text("#days-table")
        .await
        .contains("provider counted more"));
    ui.fill(
        "form.propose input[name=reason]",
        "OpenAI invoiced 2 % more input",
    )
    .await;
    ui.shot("reconciliation-01-difference").await;
    ui.click("form.propose button").await;
    ui.wait("#adjustments-table .pill.proposed").await;
    assert_eq!(
        ui.count("#adjustments-table button.approve").await,
        0,
        "not the proposer's"
    );
    ui.logout().await;

    ui.login("fin2@x.io", None).await;
    ui.go(&page).await;
    ui.fill("#adjustments-table input[name=note]", "matches the invoice")
        .await;
    ui.click("#adjustments-table button.approve").await;
    ui.wait("#adjustments-table .pill.approved").await;
    let table = ui.text("#adjustments-table").await;
    assert!(
        table.contains("research: $") && table.contains("support: $"),
        "{table}"
    );
    ui.shot("reconciliation-02-approved").await;
    ui.logout().await;
}
