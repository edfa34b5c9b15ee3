//! Rollups: a month loaded through the ledger path bills exactly what its
//! events sum to, and `reconcile --check` names a tampered rollup row.

use e2e::*;
use jobs::JobSettings;
use server::load_ledger::{load, LoadPlan};
use sqlx::Row;
use std::collections::BTreeMap;

const PERIOD: &str = "2026-03";

async fn loaded() -> TestEnv {
    let env = TestEnv::new().await;
    let plan = LoadPlan {
        events: 5_000,
        tenants: 4,
        apps: 3,
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
                sum(output_tokens)::int8 AS o, sum(cost_micro)::int8 AS c
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
        let cost: i64 = r.get("c");
        assert_eq!(
            b["cost_usd"],
            serde_json::to_value(domain::MicroUsd(cost)).unwrap(),
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
             WHERE (period, tenant_id, app_id, key_id, model, day) = (
                SELECT period, tenant_id, app_id, key_id, model, day FROM usage_rollups
                WHERE period = $1 ORDER BY tenant_id, app_id, key_id, model, day LIMIT 1)
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
}
