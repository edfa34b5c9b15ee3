//! Rollups: a month loaded through the ledger path bills exactly what its
//! events sum to, and `reconcile --check` names a tampered rollup row.

use devtools::load_ledger::{load, LoadPlan};
use e2e::*;
use jobs::JobSettings;
use sqlx::Row;
use std::collections::BTreeMap;

const PERIOD: &str = "2026-03";

async fn loaded() -> TestEnv {
    let env = TestEnv::new().await;
    let plan = LoadPlan {
        events: 5_000,
        tenants: 4,
        apps: 3,
        end_users: 50,
        period: PERIOD.into(),
        batch: 500,
        parallel: 3,
        progress: false,
    };
    let r = load(&env.store, &plan).await.unwrap();
    assert_eq!(r.events_written, 5_000);
    // The same plan again (one writer this time) writes nothing new: request
    // ids are the plan's, not the writers'.
    let serial = LoadPlan {
        parallel: 1,
        ..plan.clone()
    };
    let again = load(&env.store, &serial).await.unwrap();
    assert_eq!(again.events_written, 0);
    env
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_bill_of_a_loaded_month_equals_the_sum_of_its_events() {
    let env = loaded().await;
    user(&env, "finance@x.io", "finance", None).await;
    let srv = env.server().await;
    let base = format!("http://{}", srv.addr);
    let token = login(&base, "finance@x.io").await;
    let (status, bill) = api(
        "GET",
        &format!("{base}/api/v1/bills?period={PERIOD}"),
        Some(&token),
        None,
    )
    .await;
    assert_eq!(status, 200, "{bill}");
    let direct = sqlx::query(
        "SELECT tenant_id, count(*)::int8 AS n, sum(input_tokens)::int8 AS i,
                sum(output_tokens)::int8 AS o, sum(cost_pico)::int8 AS p,
                count(*) FILTER (WHERE charges IS NULL OR cost_pico <= 0)::int8 AS unpriced
         FROM usage_events WHERE period = $1 GROUP BY tenant_id ORDER BY tenant_id",
    )
    .bind(PERIOD)
    .fetch_all(env.store.pool())
    .await
    .unwrap();
    assert_eq!(direct.len(), 4);
    let billed: BTreeMap<String, &serde_json::Value> = bill["tenants"]
        .as_array()
        .unwrap_or_else(|| panic!("no tenants in {bill}"))
        .iter()
        .map(|t| (t["tenant_id"].as_str().unwrap().to_string(), t))
        .collect();
    for r in &direct {
        let t: String = r.get("tenant_id");
        let b = billed[&t];
        assert_eq!(
            b["requests"].as_i64(),
            Some(r.get::<i64, _>("n")),
            "{t}: {b}"
        );
        assert_eq!(
            b["input_tokens"].as_i64(),
            Some(r.get::<i64, _>("i")),
            "{t}"
        );
        assert_eq!(
            b["output_tokens"].as_i64(),
            Some(r.get::<i64, _>("o")),
            "{t}"
        );
        // Every loaded row is priced by component, exactly; the line is
        // their exact sum rounded once, half up.
        assert_eq!(r.get::<i64, _>("unpriced"), 0, "{t}");
        let pico: i64 = r.get("p");
        assert_eq!(
            b["cost_usd"],
            serde_json::to_value(domain::MicroUsd((pico + 500_000) / 1_000_000)).unwrap(),
            "{t}: {b}"
        );
    }
    srv.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reconcile_passes_then_names_a_tampered_rollup() {
    let env = loaded().await;
    let ctx = env.job_context(None, JobSettings::default());
    let now = chrono::Utc::now();
    let clean = jobs::reconcile::check(&ctx, now, Some(PERIOD))
        .await
        .unwrap();
    assert!(
        clean.is_clean(),
        "{:?} {:?}",
        clean.differences,
        clean.rollups
    );

    // Someone adds a micro-dollar to one rollup row.
    let (tenant, app, key, model, day): (String, String, String, String, String) = {
        let r = sqlx::query(
            "UPDATE usage_rollups SET cost_micro = cost_micro + 1
             WHERE ctid = (
                SELECT ctid FROM usage_rollups
                WHERE period = $1 ORDER BY tenant_id, app_id, key_id, model, day, end_user LIMIT 1)
             RETURNING tenant_id, app_id, key_id, model, day::text AS day",
        )
        .bind(PERIOD)
        .fetch_one(env.store.pool())
        .await
        .unwrap();
        (
            r.get("tenant_id"),
            r.get("app_id"),
            r.get("key_id"),
            r.get("model"),
            r.get("day"),
        )
    };
    let dirty = jobs::reconcile::check(&ctx, now, Some(PERIOD))
        .await
        .unwrap();
    assert!(!dirty.is_clean());
    assert_eq!(dirty.rollups.len(), 1, "{:?}", dirty.rollups);
    let d = &dirty.rollups[0];
    assert_eq!(
        (&d.tenant_id, &d.app_id, &d.key_id, &d.model, &d.day),
        (&tenant, &app, &key, &model, &day)
    );
    let (r, e) = (d.rollup.unwrap(), d.events.unwrap());
    assert_eq!(r[3], e[3] + 1, "the rollup's cost is the tampered one");
    assert_eq!(r[..3], e[..3]);
    // The command line says so too, and exits unclean.
    assert!(
        !server::commands::reconcile_check(&env.config(), Some(PERIOD))
            .await
            .unwrap()
    );

    // A month row (what bills read) tampered with is named too, its key and
    // day shown as `*`.
    let (tenant, app, model): (String, String, String) = {
        let r = sqlx::query(
            "UPDATE usage_month_rollups SET requests = requests + 1
             WHERE (period, tenant_id, app_id, model) = (
                SELECT period, tenant_id, app_id, model FROM usage_month_rollups
                WHERE period = $1 ORDER BY tenant_id DESC, app_id, model LIMIT 1)
             RETURNING tenant_id, app_id, model",
        )
        .bind(PERIOD)
        .fetch_one(env.store.pool())
        .await
        .unwrap();
        (r.get("tenant_id"), r.get("app_id"), r.get("model"))
    };
    let dirty = jobs::reconcile::check(&ctx, now, Some(PERIOD))
        .await
        .unwrap();
    assert_eq!(dirty.rollups.len(), 2, "{:?}", dirty.rollups);
    let d = &dirty.rollups[1];
    assert_eq!(
        (
            &d.tenant_id,
            &d.app_id,
            d.key_id.as_str(),
            &d.model,
            d.day.as_str()
        ),
        (&tenant, &app, "*", &model, "*")
    );
    let (r, e) = (d.rollup.unwrap(), d.events.unwrap());
    assert_eq!(
        r[0],
        e[0] + 1,
        "the month row's requests are the tampered ones"
    );

    // A day row (what the FOCUS export and the dashboards read) likewise,
    // its key shown as `*` and its day named.
    let (tenant, app, model, day): (String, String, String, String) = {
        let r = sqlx::query(
            "UPDATE usage_day_rollups SET cost_pico = cost_pico + 1
             WHERE (period, tenant_id, day, app_id, model, tags) = (
                SELECT period, tenant_id, day, app_id, model, tags FROM usage_day_rollups
                WHERE period = $1 ORDER BY tenant_id, day DESC, app_id, model LIMIT 1)
             RETURNING tenant_id, app_id, model, day::text AS day",
        )
        .bind(PERIOD)
        .fetch_one(env.store.pool())
        .await
        .unwrap();
        (
            r.get("tenant_id"),
            r.get("app_id"),
            r.get("model"),
            r.get("day"),
        )
    };
    let dirty = jobs::reconcile::check(&ctx, now, Some(PERIOD))
        .await
        .unwrap();
    assert_eq!(dirty.rollups.len(), 3, "{:?}", dirty.rollups);
    let d = &dirty.rollups[2];
    assert_eq!(
        (&d.tenant_id, &d.app_id, d.key_id.as_str(), &d.model, &d.day),
        (&tenant, &app, "*", &model, &day)
    );
    let (r, e) = (d.rollup.unwrap(), d.events.unwrap());
    assert_eq!(
        r[4],
        e[4] + 1,
        "the day row's exact cost is the tampered one"
    );
}

fn event(n: u64) -> domain::usage::UsageEvent {
    let at = 1_772_323_200_000 + n as i64;
    domain::usage::UsageEvent {
        app_id: format!("app-{}", n % 2),
        input_tokens: 100 + n as i64,
        output_tokens: 7 * n as i64,
        cost_micro: 1_000 + 3 * n as i64,
        cost_pico: 0,
        est_tokens: 1,
        est_cost_micro: 1,
        started_at_ms: at,
        settled_at_ms: at,
        ..ledger_event(
            &format!("req_batch_{n:04}"),
            "batch",
            PERIOD,
            &format!("{PERIOD}-{:02}", 1 + n % 3),
        )
    }
}

/// A batch holding request ids already stored (a retried batch, the outbox
/// sweeper racing the ledger writer) stores and rolls up only its new
/// events, also when two such batches run at once: the rollups equal sums
/// computed here from the distinct events, not read back from the ledger.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batches_holding_stored_events_add_only_their_new_ones() {
    let env = TestEnv::new().await;
    let batch = |r: std::ops::Range<u64>| r.map(event).collect::<Vec<_>>();
    assert_eq!(
        env.store.insert_usage_events(&batch(0..10)).await.unwrap(),
        10
    );
    assert_eq!(
        env.store.insert_usage_events(&batch(0..10)).await.unwrap(),
        0
    );
    let (a, b) = (env.store.clone(), env.store.clone());
    let (x, y) = tokio::join!(
        async move { a.insert_usage_events(&batch(5..25)).await.unwrap() },
        async move { b.insert_usage_events(&batch(15..40)).await.unwrap() },
    );
    assert_eq!(
        x + y,
        30,
        "new events stored by the two overlapping batches"
    );

    let mut expected: BTreeMap<(String, String), [i64; 4]> = BTreeMap::new();
    for e in batch(0..40) {
        let t = expected.entry((e.app_id, e.day)).or_default();
        t[0] += 1;
        t[1] += e.input_tokens;
        t[2] += e.output_tokens;
        t[3] += e.cost_micro;
    }
    let rows = sqlx::query(
        "SELECT app_id, day::text AS day, requests, input_tokens, output_tokens, cost_micro
         FROM usage_rollups WHERE tenant_id = 'batch' ORDER BY app_id, day",
    )
    .fetch_all(env.store.pool())
    .await
    .unwrap();
    let rolled: BTreeMap<(String, String), [i64; 4]> = rows
        .iter()
        .map(|r| {
            (
                (r.get("app_id"), r.get("day")),
                [
                    r.get("requests"),
                    r.get("input_tokens"),
                    r.get("output_tokens"),
                    r.get("cost_micro"),
                ],
            )
        })
        .collect();
    assert_eq!(rolled, expected);
    let stored: i64 =
        sqlx::query_scalar("SELECT count(*) FROM usage_events WHERE tenant_id = 'batch'")
            .fetch_one(env.store.pool())
            .await
            .unwrap();
    assert_eq!(stored, 40);
}

/// An event whose period is not `YYYY-MM` fails its whole batch, on both
/// ledger writes (the copy, and the skipping insert of a batch holding a
/// stored id): usage_events no longer checks the period itself, the rollup
/// row every event is summed into in the same transaction does
/// (migration 0017).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_with_a_malformed_period_fails_its_whole_batch() {
    let env = TestEnv::new().await;
    let count = || async {
        let n: i64 =
            sqlx::query_scalar("SELECT count(*) FROM usage_events WHERE tenant_id = 'batch'")
                .fetch_one(env.store.pool())
                .await
                .unwrap();
        n
    };
    let mut bad = event(3);
    bad.period = "2026-3x".into();
    let copy = vec![event(1), event(2), bad.clone()];
    assert!(env.store.insert_usage_events(&copy).await.is_err());
    assert_eq!(count().await, 0, "nothing of the copied batch stored");
    // A stored id sends the batch down the skipping insert.
    assert_eq!(env.store.insert_usage_events(&[event(1)]).await.unwrap(), 1);
    let skipping = vec![event(1), event(2), bad];
    assert!(env.store.insert_usage_events(&skipping).await.is_err());
    assert_eq!(count().await, 1, "nothing of the skipping batch stored");
}

/// The copy path (a batch of new events) and the skipping path (a batch
/// holding a stored request id) add to the same rollup and month rows at
/// the same moment, round after round: both take rollup rows before month
/// rows, so one waits for the other and neither is chosen as a deadlock
/// victim; the rollups and month rollups still equal the events.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_two_ledger_paths_write_the_same_rows_at_once_without_deadlock() {
    let env = TestEnv::new().await;
    let batch = |r: std::ops::Range<u64>| r.map(event).collect::<Vec<_>>();
    env.store.insert_usage_events(&batch(0..1)).await.unwrap();
    for round in 0..40u64 {
        let base = 100 + round * 100;
        let fresh = batch(base..base + 30);
        let mut skipping = batch(0..1);
        skipping.extend(batch(base + 30..base + 60));
        let tasks: Vec<_> = [fresh, skipping]
            .into_iter()
            .map(|b| {
                let s = env.store.clone();
                tokio::spawn(async move { s.insert_usage_events(&b).await })
            })
            .collect();
        for t in tasks {
            let stored = t.await.unwrap();
            assert!(matches!(stored, Ok(30)), "round {round}: {stored:?}");
        }
    }
    let differences = env.store.rollup_differences(PERIOD, 10).await.unwrap();
    assert!(differences.is_empty(), "{differences:?}");
}

/// Both ledger writes (the copy, and the skipping insert of a batch holding
/// a stored id) keep each row's usage object as sent (migration 0029), and
/// an anomaly's reported object beside it; a row without one stays NULL.
#[tokio::test]
async fn both_ledger_writes_keep_the_usage_object() {
    use domain::usage::{RawUsage, UsageAnomaly};
    let env = TestEnv::new().await;
    let with = |id: &str, text: &str| {
        let mut e = ledger_event(id, "t", "2026-03", "2026-03-02");
        e.raw_usage = Some(RawUsage::parse(text).unwrap());
        e
    };
    let spaced = r#"{ "prompt_tokens": 5, "completion_tokens": 2 }"#;
    let mut anomalous = with("req_2", r#"{"prompt_tokens": -1, "completion_tokens": 2}"#);
    anomalous.anomaly = Some(UsageAnomaly {
        kind: "negative".into(),
        reported: serde_json::json!({"prompt_tokens": -1, "completion_tokens": 2}),
    });
    let copy = vec![with("req_1", spaced), anomalous.clone()];
    assert_eq!(env.store.insert_usage_events(&copy).await.unwrap(), 2);
    // req_1 again: the batch goes down the skipping insert.
    let skipping = vec![
        with("req_1", spaced),
        with("req_3", r#"{"input_tokens":7,"note":"a\"b"}"#),
        ledger_event("req_4", "t", "2026-03", "2026-03-02"),
    ];
    assert_eq!(env.store.insert_usage_events(&skipping).await.unwrap(), 2);
    let json = |s: &str| serde_json::from_str::<serde_json::Value>(s).unwrap();
    for (id, want) in [
        ("req_1", Some(json(spaced))),
        (
            "req_2",
            Some(json(r#"{"prompt_tokens": -1, "completion_tokens": 2}"#)),
        ),
        ("req_3", Some(json(r#"{"input_tokens":7,"note":"a\"b"}"#))),
        ("req_4", None),
    ] {
        let stored: Option<serde_json::Value> =
            sqlx::query_scalar("SELECT raw_usage FROM usage_events WHERE request_id = $1")
                .bind(id)
                .fetch_one(env.store.pool())
                .await
                .unwrap();
        assert_eq!(stored, want, "{id}");
        let e = env.usage_event(id).await.unwrap();
        assert_eq!(
            e.raw_usage.map(|r| json(r.as_str())),
            want,
            "{id}: read back"
        );
    }
    let e = env.usage_event("req_2").await.unwrap();
    assert_eq!(
        e.anomaly, anomalous.anomaly,
        "the anomaly's report beside it"
    );
}
