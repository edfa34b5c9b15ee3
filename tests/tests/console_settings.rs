//! Settings a platform admin changes in the console instead of the API, in
//! headless Chromium against the real server: the shared pool, a model's
//! fairness (cheaper model, pool capacity, guarantees), an app's name,
//! allowed models and tags, and a whole model switched off and on. Each
//! change is read back through the JSON API or the database (not the page
//! that made it), binds on the gateway where it applies, is audited, and a
//! bad value is refused beside its field with the others at once.

mod browser_common;

use browser_common::{browse, error_fields};
use domain::Limits;
use e2e::*;
use std::time::Duration;

async fn audited(env: &TestEnv, action: &str) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM audit_log WHERE action = $1")
        .bind(action)
        .fetch_one(env.store.pool())
        .await
        .unwrap()
}

/// Status and reason of one chat request naming `model`, retried until it
/// answers `want` (the catalog listener applies a change in milliseconds;
/// 10 s at most). The last status and reason seen.
async fn until_status(url: &str, key: &str, model: &str, want: u16) -> (u16, String) {
    let t0 = std::time::Instant::now();
    loop {
        let mut body = chat_body("hi", Some(8));
        body["model"] = model.into();
        let r = post(url, key, &body).await;
        let status = r.status().as_u16();
        let reason = r
            .headers()
            .get("x-tollgate-reason")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_string();
        if status == want || t0.elapsed() > Duration::from_secs(10) {
            return (status, reason);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pool_and_a_models_fairness_are_set_in_the_console_and_read_back_by_the_api() {
    let env = TestEnv::new().await;
    env.model("gpt-4o", "chat", 2_500_000, 10_000_000).await;
    env.model("gpt-4o-mini", "chat", 150_000, 600_000).await;
    env.tenant("core-a", Limits::default(), None).await;
    env.tenant("std-b", Limits::default(), None).await;
    sqlx::query("UPDATE tenants SET priority = 'core' WHERE id = 'core-a'")
        .execute(env.store.pool())
        .await
        .unwrap();
    user(&env, "admin@x.io", "platform_admin", None).await;
    user(&env, "fin@x.io", "finance", None).await;
    let (srv, _driver, ui) = browse(&env, |_| ()).await;
    let admin = login(&ui.base, "admin@x.io").await;
    ui.login("admin@x.io", None).await;

    // The pool: a bad share and a negative size are shown together, and
    // nothing is stored.
    ui.go("/console/borrowing").await;
    ui.fill("#pool-form input[name=monthly_tokens]", "-5").await;
    ui.fill("#pool-form input[name=max_borrow_share]", "150")
        .await;
    ui.click("#pool-form button[type=submit]").await;
    ui.wait("#pool-form .field-error").await;
    assert_eq!(
        error_fields(&ui, "#pool-form").await,
        vec!["max_borrow_share", "monthly_tokens"]
    );
    assert_eq!(audited(&env, "pool.update").await, 0);
    // Then good values, in percent.
    ui.fill("#pool-form input[name=monthly_tokens]", "5,000,000")
        .await;
    ui.fill("#pool-form input[name=monthly_cost_usd]", "$1,250.50")
        .await;
    ui.fill("#pool-form input[name=max_borrow_share]", "12.5")
        .await;
    ui.fill("#pool-form input[name=reclaim_below_share]", "25 %")
        .await;
    ui.click("#pool-form button[type=submit]").await;
    ui.wait("#pool-saved").await;
    let (s, p) = api(
        "GET",
        &format!("{}/api/v1/pool", ui.base),
        Some(&admin),
        None,
    )
    .await;
    assert_eq!(s, 200, "{p}");
    assert_eq!(p["monthly_tokens"], 5_000_000);
    assert_eq!(p["monthly_cost_usd"], "1250.500000");
    assert_eq!(p["max_borrow_share"], 0.125);
    assert_eq!(p["reclaim_below_share"], 0.25);
    assert_eq!(audited(&env, "pool.update").await, 1);
    // The form shows what is stored.
    ui.go("/console/borrowing").await;
    let v = ui
        .wait("#pool-form input[name=max_borrow_share]")
        .await
        .prop("value")
        .await
        .unwrap();
    assert_eq!(v.as_deref(), Some("12.5"));

    // A model's fairness: guarantees of a standard tenant and a capacity
    // of 0 are refused beside their fields together, then a core tenant's
    // guarantees are stored.
    ui.go("/console/models").await;
    ui.click("tr[data-model='gpt-4o'] a.fairness-link").await;
    ui.wait("#fairness-form").await;
    assert!(ui.text("#core-tenants").await.contains("core-a"));
    ui.c.execute(
        "document.querySelector('#fairness-form select[name=degrade_to]').value = 'gpt-4o-mini'",
        vec![],
    )
    .await
    .unwrap();
    ui.fill("#fairness-form input[name=pool_capacity]", "0")
        .await;
    ui.fill("#fairness-form input[name=guarantees]", "std-b=2")
        .await;
    ui.click("#fairness-form button[type=submit]").await;
    ui.wait("#fairness-form .field-error").await;
    assert_eq!(
        error_fields(&ui, "#fairness-form").await,
        vec!["guarantees", "pool_capacity"],
        "both at once"
    );
    assert_eq!(audited(&env, "model.fairness").await, 0);
    ui.fill("#fairness-form input[name=pool_capacity]", "8")
        .await;
    ui.fill("#fairness-form input[name=guarantees]", "core-a=3")
        .await;
    ui.click("#fairness-form button[type=submit]").await;
    ui.wait("#fairness-saved").await;
    let (s, m) = api(
        "GET",
        &format!("{}/api/v1/models/gpt-4o", ui.base),
        Some(&admin),
        None,
    )
    .await;
    assert_eq!(s, 200, "{m}");
    assert_eq!(m["degrade_to"], "gpt-4o-mini");
    assert_eq!(m["pool_capacity"], 8);
    let slots: Vec<(String, i32)> =
        sqlx::query_as("SELECT tenant_id, slots FROM model_guarantees WHERE model_id = 'gpt-4o'")
            .fetch_all(env.store.pool())
            .await
            .unwrap();
    assert_eq!(slots, vec![("core-a".to_string(), 3)]);
    assert_eq!(audited(&env, "model.fairness").await, 1);
    ui.shot("settings-01-fairness").await;
    ui.logout().await;

    // Finance reads the pool but has no form.
    ui.login("fin@x.io", None).await;
    ui.go("/console/borrowing").await;
    ui.wait("#pool").await;
    assert_eq!(ui.count("#pool-form").await, 0);
    ui.c.close().await.unwrap();
    srv.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_apps_allowed_models_and_a_disabled_model_bind_on_the_hot_path() {
    let env = TestEnv::new().await;
    let (_, key) = env.simple_tenant(Limits::default()).await;
    env.model("gpt-4o", "chat", 2_500_000, 10_000_000).await;
    user(&env, "admin@x.io", "platform_admin", None).await;
    user(&env, "ta@x.io", "tenant_admin", Some("t")).await;
    env.tenant("other", Limits::default(), None).await;
    user(&env, "other@x.io", "tenant_admin", Some("other")).await;
    user(&env, "fin@x.io", "finance", None).await;
    let (srv, _driver, ui) = browse(&env, |_| ()).await;
    let gw = format!("{}/v1/chat/completions", ui.base);
    assert_eq!(until_status(&gw, &key, "gpt-4o", 200).await.0, 200);

    // The tenant admin edits the app: a bad tag and an unknown model are
    // shown together with what was typed, then the app is renamed, kept to
    // one model and tagged.
    ui.login("ta@x.io", None).await;
    ui.go("/console/tenants/t/apps").await;
    ui.click("#app-a details.app-edit summary").await;
    let form = "#app-a form.app-edit-form";
    ui.fill(
        &format!("{form} input[name=allowed_models]"),
        "gpt-4o-mini, no-such-model",
    )
    .await;
    ui.fill(
        &format!("{form} input[name=default_tags]"),
        "Project=apollo",
    )
    .await;
    ui.click(&format!("{form} button[type=submit]")).await;
    ui.wait(&format!("{form} .field-error")).await;
    assert_eq!(
        error_fields(&ui, form).await,
        vec!["allowed_models", "default_tags"]
    );
    let typed = ui
        .wait(&format!("{form} input[name=allowed_models]"))
        .await
        .prop("value")
        .await
        .unwrap();
    assert_eq!(typed.as_deref(), Some("gpt-4o-mini, no-such-model"));
    ui.fill(&format!("{form} input[name=name]"), "Search backend")
        .await;
    ui.fill(&format!("{form} input[name=allowed_models]"), "gpt-4o-mini")
        .await;
    ui.fill(
        &format!("{form} input[name=default_tags]"),
        "project=apollo",
    )
    .await;
    ui.click(&format!("{form} button[type=submit]")).await;
    // The page before the save has the card too: wait for the new name.
    let renamed = eventually(Duration::from_secs(10), || async {
        ui.text("#app-a h2").await.contains("Search backend")
    })
    .await;
    assert!(renamed, "{}", ui.text("#app-a h2").await);
    let (name, allowed, attribution): (String, Option<Vec<String>>, serde_json::Value) =
        sqlx::query_as("SELECT name, allowed_models, attribution FROM apps WHERE id = 'a'")
            .fetch_one(env.store.pool())
            .await
            .unwrap();
    assert_eq!(name, "Search backend");
    assert_eq!(allowed, Some(vec!["gpt-4o-mini".to_string()]));
    assert_eq!(attribution["default_tags"]["project"], "apollo");
    assert_eq!(audited(&env, "app.update").await, 1);
    // On the gateway: the other model is now refused for this app.
    let (s, reason) = until_status(&gw, &key, "gpt-4o", 403).await;
    assert_eq!((s, reason.as_str()), (403, "model_not_allowed"));
    assert_eq!(until_status(&gw, &key, "gpt-4o-mini", 200).await.0, 200);
    // The API lifts the restriction with null.
    let ta = login(&ui.base, "ta@x.io").await;
    let (s, a) = api(
        "PATCH",
        &format!("{}/api/v1/tenants/t/apps/a", ui.base),
        Some(&ta),
        Some(serde_json::json!({"allowed_models": null})),
    )
    .await;
    assert_eq!(s, 200, "{a}");
    assert_eq!(a["allowed_models"], serde_json::Value::Null);
    assert_eq!(a["name"], "Search backend", "fields not given stay");
    // Another tenant's admin does not find the app; finance may not change it.
    for (who, want) in [("other@x.io", 404), ("fin@x.io", 403)] {
        let token = login(&ui.base, who).await;
        let (s, body) = api(
            "PATCH",
            &format!("{}/api/v1/tenants/t/apps/a", ui.base),
            Some(&token),
            Some(serde_json::json!({"name": "taken over"})),
        )
        .await;
        assert_eq!(s, want, "{who}: {body}");
    }
    assert_eq!(until_status(&gw, &key, "gpt-4o", 200).await.0, 200);
    ui.logout().await;

    // The platform admin takes gpt-4o out of service: requests naming it
    // are answered as for an unknown model, then served again once it is
    // back.
    ui.login("admin@x.io", None).await;
    ui.go("/console/models").await;
    ui.click("tr[data-model='gpt-4o'] form.model-enabled button")
        .await;
    ui.wait("tr[data-model='gpt-4o'].disabled").await;
    let (s, reason) = until_status(&gw, &key, "gpt-4o", 404).await;
    assert_eq!((s, reason.as_str()), (404, "model_not_found"));
    assert_eq!(
        until_status(&gw, &key, "gpt-4o-mini", 200).await.0,
        200,
        "others stay"
    );
    ui.shot("settings-02-model-disabled").await;
    ui.click("tr[data-model='gpt-4o'] form.model-enabled button")
        .await;
    ui.wait("tr[data-model='gpt-4o']:not(.disabled)").await;
    assert_eq!(until_status(&gw, &key, "gpt-4o", 200).await.0, 200);
    let switched: Vec<serde_json::Value> = sqlx::query_scalar(
        "SELECT after FROM audit_log WHERE action = 'model.enabled' ORDER BY id",
    )
    .fetch_all(env.store.pool())
    .await
    .unwrap();
    assert_eq!(
        switched,
        vec![
            serde_json::json!({"enabled": false}),
            serde_json::json!({"enabled": true})
        ]
    );
    // A tenant admin may not switch a model.
    let (s, _) = api(
        "PATCH",
        &format!("{}/api/v1/models/gpt-4o", ui.base),
        Some(&ta),
        Some(serde_json::json!({"enabled": false})),
    )
    .await;
    assert_eq!(s, 403);
    ui.c.close().await.unwrap();
    srv.shutdown().await;
}
