//! Limits history and rollback, in headless Chromium against the real
//! server: a platform admin tightens a tenant's limits, loosens them, sees
//! both changes as limits before → after, restores the tight version with a
//! reason, and the gateway refuses a request after the rollback with the
//! tight limit's reason code. The rollback is in the history and the audit
//! log; a tenant admin reads the history but restores nothing; the API
//! restores an app's and a key's limits the same way and refuses a restore
//! without a reason.

mod browser_common;

use browser_common::{browse, error_fields, Ui};
use domain::Limits;
use e2e::*;
use fantoccini::Locator;
use std::time::Duration;

/// Sets the tenant form's requests-per-minute and saves.
async fn save_rpm(ui: &Ui, rpm: &str) {
    ui.go("/console/tenants/t").await;
    ui.fill("#tenant-form input[name=rpm]", rpm).await;
    ui.click("#tenant-submit").await;
    ui.wait("#tenant-saved").await;
}

/// The `x-tollgate-reason` of one chat request ("" when admitted).
async fn reason_of(url: &str, key: &str) -> String {
    let r = post(url, key, &chat_body("hi", Some(8))).await;
    let reason = r
        .headers()
        .get("x-tollgate-reason")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    if r.status() == 200 {
        return String::new();
    }
    assert_eq!(r.status(), 429, "{reason}");
    reason
}

/// Sends requests until one is refused for `want` (10 s at most); the
/// last reason seen.
async fn until_refused(url: &str, key: &str, want: &str) -> String {
    let t0 = std::time::Instant::now();
    loop {
        let r = reason_of(url, key).await;
        if r == want || t0.elapsed() > Duration::from_secs(10) {
            return r;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rollback_restores_the_tight_limits_on_the_hot_path_and_is_audited() {
    let env = TestEnv::new().await;
    let (_, key) = env.simple_tenant(Limits::default()).await;
    user(&env, "admin@x.io", "platform_admin", None).await;
    user(&env, "ta@x.io", "tenant_admin", Some("t")).await;
    let (srv, _driver, ui) = browse(&env, |_| ()).await;
    let gw = format!("{}/v1/chat/completions", ui.base);
    ui.login("admin@x.io", None).await;

    // Tight (1 request a minute), then loose (1,000).
    save_rpm(&ui, "1").await;
    save_rpm(&ui, "1000").await;
    ui.click("#tenant-limits-history").await;
    ui.wait("#limits-history").await;
    assert_eq!(
        ui.c.current_url().await.unwrap().path(),
        "/console/tenants/t/limits"
    );
    // Newest first: loosened (1 → 1,000), tightened (unlimited → 1), created.
    let rows =
        ui.c.find_all(Locator::Css("#limits-history > tbody > tr"))
            .await
            .unwrap();
    assert_eq!(rows.len(), 3, "{}", ui.text("#limits-history").await);
    let newest = rows[0].text().await.unwrap();
    assert!(newest.contains("admin@x.io"), "{newest}");
    assert!(newest.contains("UTC") || ui.text("#limits-history thead").await.contains("UTC"));
    let rpm_change = |i: usize| {
        let rows = &rows;
        async move {
            let row = &rows[i];
            let f = row.find(Locator::Css("tr[data-field=rpm]")).await.unwrap();
            (
                f.find(Locator::Css(".before"))
                    .await
                    .unwrap()
                    .text()
                    .await
                    .unwrap(),
                f.find(Locator::Css(".after"))
                    .await
                    .unwrap()
                    .text()
                    .await
                    .unwrap(),
            )
        }
    };
    assert_eq!(rpm_change(0).await, ("1".into(), "1,000".into()));
    assert_eq!(rpm_change(1).await, ("unlimited".into(), "1".into()));
    assert!(rows[0].attr("data-current").await.unwrap().is_some());
    // The version in force offers no restore; the two earlier ones do.
    assert_eq!(ui.count("form.restore").await, 2);
    let tight = rows[1].attr("data-version").await.unwrap().unwrap();
    ui.shot("limits-01-history").await;

    // Loose: requests pass, more than one a minute.
    for _ in 0..3 {
        assert_eq!(reason_of(&gw, &key).await, "", "loosened: admitted");
    }

    // Roll back to the tight version, with a reason.
    ui.fill(
        &format!("#restore-{tight} input[name=reason]"),
        "launch over: back to 1 rpm",
    )
    .await;
    ui.click(&format!("#restore-{tight} button.restore-version"))
        .await;
    ui.wait("#limits-restored").await;
    let newest = ui.text("#limits-history > tbody > tr:first-child").await;
    assert!(newest.contains("Restored an earlier version"), "{newest}");
    assert!(newest.contains("launch over: back to 1 rpm"), "{newest}");
    assert!(
        newest.contains("1,000") && newest.contains("in force"),
        "{newest}"
    );
    ui.shot("limits-02-restored").await;
    let t = env
        .store
        .tenant(&TenantScope::system(), "t")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(t.limits.rpm, Some(1), "the store holds the tight limit");

    // The hot path: three requests were admitted this minute, so with 1 rpm
    // back in force the next is refused for the tenant's rpm (the catalog
    // reloads on the change; allow it a few seconds).
    assert_eq!(
        until_refused(&gw, &key, "tenant_rpm_exceeded").await,
        "tenant_rpm_exceeded",
        "after the rollback"
    );

    // The audit log has the rollback, its reason and the limits it changed.
    ui.go("/console/audit?action=limits_restore").await;
    let audit = ui.text("#audit-table tbody").await;
    // The action by its name, the stored code kept in the row's attributes.
    assert!(audit.contains("tenant limits restored"), "{audit}");
    assert!(audit.contains("launch over: back to 1 rpm"), "{audit}");
    assert!(
        ui.count("#audit-table tr[data-action='tenant.limits_restore'][data-target='tenant:t']")
            .await
            > 0,
        "{audit}"
    );
    let rpm = ui.text("#audit-table tr[data-field='limits.rpm']").await;
    assert!(rpm.contains("1,000") && rpm.contains('1'), "{rpm}");

    // A tenant admin reads the history, in Chinese too, and restores nothing.
    ui.logout().await;
    ui.login("ta@x.io", None).await;
    ui.go("/console/tenants/t/limits").await;
    assert_eq!(ui.count("#limits-history > tbody > tr").await, 4);
    assert_eq!(ui.count("form.restore").await, 0);
    ui.click("button[name=lang][value=zh]").await;
    ui.wait("html[lang=zh]").await;
    assert!(ui.text("h1").await.contains("限额历史"));
    assert!(ui
        .text("#limits-history")
        .await
        .contains("恢复了较早的版本"));
    ui.shot("limits-03-tenant-admin-zh").await;
    ui.click("button[name=lang][value=en]").await;
    ui.wait("html[lang=en]").await;

    ui.c.close().await.unwrap();
    srv.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_restores_app_and_key_limits_with_a_reason_and_only_for_platform_admins() {
    let env = TestEnv::new().await;
    env.model("gpt-4o-mini", "chat", 150_000, 600_000).await;
    env.tenant("t", Limits::default(), None).await;
    let tight = Limits {
        rpm: Some(1),
        ..Default::default()
    };
    env.app("t", "a", Limits::default()).await;
    let (key_id, key) = env.key("t", "a", tight).await;
    user(&env, "admin@x.io", "platform_admin", None).await;
    user(&env, "ta@x.io", "tenant_admin", Some("t")).await;
    let srv = env.server().await;
    let base = format!("http://{}", srv.addr);
    let admin = login(&base, "admin@x.io").await;
    let ta = login(&base, "ta@x.io").await;

    // The key's limits loosened (the console has no key editor yet: the
    // test writes the change and its audit row as an edit path would).
    sqlx::query("UPDATE virtual_keys SET limits = '{\"rpm\": 500}' WHERE id = $1::uuid")
        .bind(&key_id)
        .execute(env.store.pool())
        .await
        .unwrap();
    env.store
        .audit(
            store::NewAudit::new("ops", "key.limits", format!("key:{key_id}"))
                .before(serde_json::json!({"limits": {"rpm": 1}}))
                .after(serde_json::json!({"limits": {"rpm": 500}})),
        )
        .await
        .unwrap();
    let gw = format!("{base}/v1/chat/completions");
    // Loose: more than one request a minute is admitted, once the change
    // has reached the gateway's index (a notification away, ≤ 1 s).
    let mut admitted = 0;
    let t0 = std::time::Instant::now();
    while admitted < 2 && t0.elapsed() < Duration::from_secs(5) {
        if post(&gw, &key, &chat_body("hi", Some(8))).await.status() == 200 {
            admitted += 1;
        } else {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    assert!(
        admitted >= 2,
        "rpm 500 in force: {admitted} admitted in 5 s"
    );
    let hist = format!("{base}/api/v1/keys/{key_id}/limits/versions");
    let (s, h) = api("GET", &hist, Some(&ta), None).await;
    assert_eq!(s, 200, "{h}");
    let versions = h["versions"].as_array().unwrap();
    assert_eq!(versions.len(), 2, "{h}");
    assert_eq!(versions[0]["current"], true);
    assert_eq!(versions[0]["changes"][0]["field"], "rpm");
    assert_eq!(versions[0]["changes"][0]["after"], "500");
    let created = versions[1]["version"].as_i64().unwrap();

    let restore = format!("{base}/api/v1/keys/{key_id}/limits/versions/{created}/restore");
    let body = |reason: &str| Some(serde_json::json!({"reason": reason}));
    // A tenant admin may not; a blank reason is refused; a version of
    // another owner is not found.
    assert_eq!(api("POST", &restore, Some(&ta), body("x")).await.0, 403);
    let (s, e) = api("POST", &restore, Some(&admin), body("  ")).await;
    assert_eq!(s, 400, "{e}");
    assert_eq!(e["error"]["param"], "reason", "{e}");
    let app_hist = format!("{base}/api/v1/tenants/t/apps/a/limits/versions");
    let (s, a) = api("GET", &app_hist, Some(&admin), None).await;
    assert_eq!(s, 200, "{a}");
    let app_version = a["versions"][0]["version"].as_i64().unwrap();
    let (s, _) = api(
        "POST",
        &format!("{base}/api/v1/keys/{key_id}/limits/versions/{app_version}/restore"),
        Some(&admin),
        body("x"),
    )
    .await;
    assert_eq!(s, 404, "an app's version is not the key's");

    // The restore: the key's limits are the created ones again.
    let (s, r) = api("POST", &restore, Some(&admin), body("back to 1 rpm")).await;
    assert_eq!(s, 200, "{r}");
    assert_eq!(r["limits"]["rpm"], 1);
    let (_, h) = api("GET", &hist, Some(&admin), None).await;
    assert_eq!(h["versions"][0]["action"], "key.limits_restore", "{h}");
    assert_eq!(h["versions"][0]["reason"], "back to 1 rpm");
    let rpm: serde_json::Value =
        sqlx::query_scalar("SELECT limits -> 'rpm' FROM virtual_keys WHERE id = $1::uuid")
            .bind(&key_id)
            .fetch_one(env.store.pool())
            .await
            .unwrap();
    assert_eq!(rpm, 1);
    // On the hot path: the key's 1 rpm refuses the next request.
    assert_eq!(
        until_refused(&gw, &key, "key_rpm_exceeded").await,
        "key_rpm_exceeded",
        "after the key's rollback"
    );

    // An app's restore goes the same way.
    let (s, r) = api(
        "POST",
        &format!("{base}/api/v1/tenants/t/apps/a/limits/versions/{app_version}/restore"),
        Some(&admin),
        body("same again"),
    )
    .await;
    assert_eq!(s, 200, "{r}");
    let (_, a) = api("GET", &app_hist, Some(&admin), None).await;
    // A restore that changed nothing is still a version, with its reason.
    let versions = a["versions"].as_array().unwrap();
    assert_eq!(versions.len(), 2, "{a}");
    assert_eq!(versions[0]["reason"], "same again");
    assert_eq!(versions[0]["current"], true);
    srv.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_allowed_model_is_refused_beside_the_field_with_the_other_errors() {
    let env = TestEnv::new().await;
    env.model("gpt-4o-mini", "chat", 150_000, 600_000).await;
    env.tenant("t", Limits::default(), None).await;
    env.app("t", "a", Limits::default()).await;
    user(&env, "admin@x.io", "platform_admin", None).await;
    let (srv, _driver, ui) = browse(&env, |_| ()).await;
    ui.login("admin@x.io", None).await;

    // Tenant form: an unknown model and a bad number, both shown at once.
    ui.go("/console/tenants/t").await;
    ui.fill(
        "#tenant-form input[name=allowed_models]",
        "gpt-4o-mini, gpt-9",
    )
    .await;
    ui.fill("#tenant-form input[name=rpm]", "ten").await;
    ui.click("#tenant-submit").await;
    ui.wait("#tenant-form .field-error").await;
    assert_eq!(
        error_fields(&ui, "#tenant-form").await,
        ["allowed_models", "rpm"]
    );
    let msg = ui
        .text("#tenant-form .field-error[data-field=allowed_models]")
        .await;
    assert!(msg.contains("does not serve"), "{msg}");
    // A valid number alone still leaves the model refused.
    ui.fill("#tenant-form input[name=rpm]", "10").await;
    ui.click("#tenant-submit").await;
    let t0 = std::time::Instant::now();
    let mut now = error_fields(&ui, "#tenant-form").await;
    while now != ["allowed_models"] && t0.elapsed() < Duration::from_secs(10) {
        tokio::time::sleep(Duration::from_millis(100)).await;
        now = error_fields(&ui, "#tenant-form").await;
    }
    assert_eq!(now, ["allowed_models"], "only the model is wrong now");
    let t = env
        .store
        .tenant(&TenantScope::system(), "t")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(t.allowed_models, None, "nothing stored");
    assert_eq!(t.limits.rpm, None);
    ui.shot("limits-04-unknown-model").await;

    // App form: the same message, with the other errors, in 中文.
    ui.click("button[name=lang][value=zh]").await;
    ui.wait("html[lang=zh]").await;
    ui.go("/console/tenants/t/apps").await;
    ui.fill("#app-form input[name=id]", "b").await;
    ui.fill("#app-form input[name=name]", "B").await;
    ui.fill("#app-form input[name=allowed_models]", "nope")
        .await;
    ui.fill("#app-form input[name=max_inflight]", "many").await;
    ui.click("#app-submit").await;
    ui.wait("#app-form .field-error").await;
    assert_eq!(
        error_fields(&ui, "#app-form").await,
        ["allowed_models", "max_inflight"]
    );
    let msg = ui
        .text("#app-form .field-error[data-field=allowed_models]")
        .await;
    assert!(msg.contains("本网关未提供的模型"), "{msg}");
    ui.click("button[name=lang][value=en]").await;
    ui.wait("html[lang=en]").await;

    // Key form: refused beside the field; a known model issues the key.
    ui.go("/console/tenants/t/apps").await;
    ui.fill("#key-box-a input[name=name]", "k1").await;
    ui.fill("#key-box-a input[name=allowed_models]", "gpt-9")
        .await;
    ui.click("#key-box-a button.issue-key").await;
    let msg = ui
        .text("#key-box-a .field-error[data-field=allowed_models]")
        .await;
    assert!(msg.contains("does not serve"), "{msg}");
    ui.fill("#key-box-a input[name=name]", "k2").await;
    ui.fill("#key-box-a input[name=allowed_models]", "gpt-4o-mini")
        .await;
    ui.click("#key-box-a button.issue-key").await;
    assert!(ui.text("#new-key").await.starts_with("tg-"));

    // The API names the element.
    let admin = login(&ui.base, "admin@x.io").await;
    let (s, e) = api(
        "PATCH",
        &format!("{}/api/v1/tenants/t", ui.base),
        Some(&admin),
        Some(serde_json::json!({"allowed_models": ["gpt-4o-mini", "gpt-9"]})),
    )
    .await;
    assert_eq!(s, 400, "{e}");
    assert_eq!(e["error"]["param"], "allowed_models[1]", "{e}");

    ui.c.close().await.unwrap();
    srv.shutdown().await;
}

/// The key form's own limits: a bad number is refused beside its field with
/// the form kept as typed (the limits open), and a key issued with one
/// request a minute gets its first answer and then 429 `key_rpm_exceeded`
/// — its tenant and app are unlimited.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_issued_with_its_own_limits_in_the_console_is_held_to_them() {
    let env = TestEnv::new().await;
    env.model("gpt-4o-mini", "chat", 150_000, 600_000).await;
    env.tenant("t", Limits::default(), None).await;
    env.app("t", "a", Limits::default()).await;
    user(&env, "ta@x.io", "tenant_admin", Some("t")).await;
    let (srv, _driver, ui) = browse(&env, |_| ()).await;
    let gw = format!("{}/v1/chat/completions", ui.base);
    ui.login("ta@x.io", None).await;
    ui.go("/console/tenants/t/apps").await;
    ui.fill("#key-box-a input[name=name]", "limited").await;
    ui.click("#key-box-a .key-limits summary").await;
    ui.fill("#key-box-a input[name=rpm]", "1").await;
    ui.fill("#key-box-a input[name=monthly_tokens]", "lots")
        .await;
    ui.click("#key-box-a button.issue-key").await;
    ui.wait("#key-box-a .field-error").await;
    assert_eq!(error_fields(&ui, "#key-box-a").await, ["monthly_tokens"]);
    let kept = ui
        .wait("#key-box-a input[name=rpm]")
        .await
        .prop("value")
        .await
        .unwrap();
    assert_eq!(kept.as_deref(), Some("1"), "the form forgot what was typed");
    assert_eq!(
        ui.wait("#key-box-a input[name=name]")
            .await
            .prop("value")
            .await
            .unwrap()
            .as_deref(),
        Some("limited")
    );
    ui.fill("#key-box-a input[name=monthly_tokens]", "").await;
    ui.click("#key-box-a button.issue-key").await;
    let key = ui.text("#new-key").await;
    assert!(key.starts_with("tg-"), "{key}");
    let stored: serde_json::Value =
        sqlx::query_scalar("SELECT limits FROM virtual_keys WHERE name = 'limited'")
            .fetch_one(env.store.pool())
            .await
            .unwrap();
    let limits: Limits = serde_json::from_value(stored.clone()).unwrap();
    assert_eq!(
        limits,
        Limits {
            rpm: Some(1),
            ..Default::default()
        },
        "{stored}"
    );

    assert_eq!(reason_of(&gw, &key).await, "");
    assert_eq!(reason_of(&gw, &key).await, "key_rpm_exceeded");
    ui.c.close().await.unwrap();
    srv.shutdown().await;
}

/// The ledger event of one admitted request, once the writer stored it.
async fn booked(env: &TestEnv, rid: &str) -> domain::usage::UsageEvent {
    for _ in 0..100 {
        if let Some(e) = env.usage_event(rid).await {
            return e;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("{rid} never reached the ledger");
}

/// A platform admin changes a model's prices on the models page: requests
/// settled afterwards cost the new price (computed here from their tokens),
/// the one booked before keeps its cost, the change is audited before →
/// after, and a price that is not money is refused beside the model's row.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_price_changed_in_the_console_prices_the_next_requests_only() {
    let env = TestEnv::new().await;
    let (_, key) = env.simple_tenant(Limits::default()).await;
    let m = env.store.models().await.unwrap();
    let m = m.iter().find(|m| m.id == "gpt-4o-mini").unwrap();
    let (in_price, out_price) = (m.input_price_micro_per_mtok, m.output_price_micro_per_mtok);
    assert_ne!((in_price, out_price), (3_000_000, 12_000_000));
    user(&env, "admin@x.io", "platform_admin", None).await;
    let (srv, _driver, ui) = browse(&env, |_| ()).await;
    let gw = format!("{}/v1/chat/completions", ui.base);
    let send = || async {
        let r = post(&gw, &key, &chat_body("hello", Some(8))).await;
        assert_eq!(r.status(), 200);
        r.headers()["x-request-id"].to_str().unwrap().to_string()
    };
    let cost_at = |e: &domain::usage::UsageEvent, input: i64, output: i64| {
        (e.input_tokens * input + e.output_tokens * output + 999_999) / 1_000_000
    };
    let first = booked(&env, &send().await).await;
    assert_eq!(first.cost_micro, cost_at(&first, in_price, out_price));

    ui.login("admin@x.io", None).await;
    ui.go("/console/models").await;
    let form = r#"form.model-prices[data-model="gpt-4o-mini"]"#;
    ui.fill(
        &format!("{form} input[name=input_price_per_mtok_usd]"),
        "lots",
    )
    .await;
    ui.click(&format!("{form} button")).await;
    let err = ui
        .wait(&format!(
            "{form} .field-error[data-field=input_price_per_mtok_usd]"
        ))
        .await;
    assert!(!err.text().await.unwrap().is_empty());
    ui.fill(
        &format!("{form} input[name=input_price_per_mtok_usd]"),
        "$3.00",
    )
    .await;
    ui.fill(
        &format!("{form} input[name=output_price_per_mtok_usd]"),
        "12",
    )
    .await;
    ui.click(&format!("{form} button")).await;
    ui.wait("#prices-saved").await;
    assert_eq!(
        ui.wait(&format!("{form} input[name=output_price_per_mtok_usd]"))
            .await
            .prop("value")
            .await
            .unwrap()
            .as_deref(),
        Some("$12.00")
    );

    // The catalog reaches the gateway a notification later.
    let mut repriced = false;
    for _ in 0..50 {
        let e = booked(&env, &send().await).await;
        if e.cost_micro == cost_at(&e, 3_000_000, 12_000_000) {
            repriced = true;
            break;
        }
        assert_eq!(
            e.cost_micro,
            cost_at(&e, in_price, out_price),
            "neither price"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(repriced, "requests never cost the new price");
    let again = env.usage_event(&first.request_id).await.unwrap();
    assert_eq!(again.cost_micro, first.cost_micro, "a booked cost changed");

    let (before, after): (serde_json::Value, serde_json::Value) = sqlx::query_as(
        "SELECT before, after FROM audit_log WHERE action = 'model.prices' AND target = 'model:gpt-4o-mini'",
    )
    .fetch_one(env.store.pool())
    .await
    .unwrap();
    assert_eq!(before["input_price_micro_per_mtok"], in_price, "{before}");
    assert_eq!(after["output_price_micro_per_mtok"], 12_000_000, "{after}");

    // The API: a negative price names its field; a profile-only patch
    // leaves the prices.
    let admin = login(&ui.base, "admin@x.io").await;
    let url = format!("{}/api/v1/models/gpt-4o-mini", ui.base);
    let (s, e) = api(
        "PATCH",
        &url,
        Some(&admin),
        Some(serde_json::json!({"output_price_per_mtok_usd": "-1"})),
    )
    .await;
    assert_eq!(s, 400, "{e}");
    assert_eq!(e["error"]["param"], "output_price_per_mtok_usd", "{e}");
    let (s, m) = api(
        "PATCH",
        &url,
        Some(&admin),
        Some(serde_json::json!({"hidden_reasoning": false})),
    )
    .await;
    assert_eq!(s, 200, "{m}");
    assert_eq!(m["input_price_per_mtok_usd"], "3.000000", "{m}");
    ui.c.close().await.unwrap();
    srv.shutdown().await;
}

/// A tenant admin changes an app's limits on its limits page: a bad number
/// is refused beside its field, one request a minute is saved, the history
/// shows the change on top, and the gateway holds the app to it
/// (429 `app_rpm_exceeded`). The API sets a key's limits the same way,
/// for its own tenant only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_apps_limits_changed_on_its_page_bind_on_the_hot_path() {
    let env = TestEnv::new().await;
    let (_, key) = env.simple_tenant(Limits::default()).await;
    env.tenant("other", Limits::default(), None).await;
    env.app("other", "a", Limits::default()).await;
    let (other_key, _) = env.key("other", "a", Limits::default()).await;
    let (own_key, _) = env.key("t", "a", Limits::default()).await;
    user(&env, "ta@x.io", "tenant_admin", Some("t")).await;
    user(&env, "aud@x.io", "auditor", None).await;
    let (srv, _driver, ui) = browse(&env, |_| ()).await;
    let gw = format!("{}/v1/chat/completions", ui.base);
    assert_eq!(reason_of(&gw, &key).await, "");
    ui.login("ta@x.io", None).await;
    ui.go("/console/tenants/t/apps/a/limits").await;
    ui.fill("#limits-form input[name=max_inflight]", "many")
        .await;
    ui.fill("#limits-form input[name=rpm]", "1").await;
    ui.click("#limits-submit").await;
    ui.wait("#limits-form .field-error").await;
    assert_eq!(error_fields(&ui, "#limits-form").await, ["max_inflight"]);
    ui.fill("#limits-form input[name=max_inflight]", "").await;
    ui.click("#limits-submit").await;
    ui.wait("#limits-saved").await;
    let newest = ui
        .text("#limits-history > tbody > tr[data-current] td.changes")
        .await;
    assert!(newest.contains('1'), "{newest}");
    assert_eq!(
        until_refused(&gw, &key, "app_rpm_exceeded").await,
        "app_rpm_exceeded"
    );
    let action: String = sqlx::query_scalar(
        "SELECT action FROM audit_log WHERE target = 'app:t/a' ORDER BY id DESC LIMIT 1",
    )
    .fetch_one(env.store.pool())
    .await
    .unwrap();
    assert_eq!(action, "app.limits");

    // The API: a key of one's own tenant, not another's; an auditor reads
    // but sets nothing.
    let ta = login(&ui.base, "ta@x.io").await;
    let aud = login(&ui.base, "aud@x.io").await;
    let body = serde_json::json!({"limits": {"monthly_tokens": 1000}});
    let put = |id: &str, token: &str| {
        let (url, token, body) = (
            format!("{}/api/v1/keys/{id}/limits", ui.base),
            token.to_string(),
            body.clone(),
        );
        async move { api("PUT", &url, Some(&token), Some(body)).await }
    };
    assert_eq!(put(&own_key, &ta).await.0, 200);
    assert_eq!(put(&other_key, &ta).await.0, 404);
    assert_eq!(put(&own_key, &aud).await.0, 403);
    let (s, e) = api(
        "PUT",
        &format!("{}/api/v1/keys/{own_key}/limits", ui.base),
        Some(&ta),
        Some(serde_json::json!({"limits": {"rpm": -1}})),
    )
    .await;
    assert_eq!(s, 400, "{e}");
    ui.c.close().await.unwrap();
    srv.shutdown().await;
}
