//! Issue #52's "confuses" defects 8–14 (a browser walk of four roles),
//! each fixed and held here in headless Chromium against the real server:
//! the deployment form shows every field's problem at once, in words, and
//! keeps what was typed; a stale tab's action names the thing and refreshes
//! its row; notices and refusal reasons read in the reader's language; a
//! tenant that spent its cost budget is flagged; granted tokens mean one
//! thing and app grants show; implausible values are refused or flagged.

mod browser_common;

use browser_common::{browse, error_fields, Ui};
use domain::Limits;
use e2e::*;
use serde_json::json;

/// The `value` property of the element `css` finds.
async fn value_of(ui: &Ui, css: &str) -> String {
    ui.wait(css)
        .await
        .prop("value")
        .await
        .unwrap()
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_deployment_form_shows_every_problem_in_words_and_keeps_what_was_typed() {
    let env = TestEnv::new().await;
    env.model("gpt-4o-mini", "chat", 150_000, 600_000).await;
    user(&env, "admin@x.io", "platform_admin", None).await;
    let (srv, _driver, ui) = browse(&env, |_| ()).await;
    ui.login("admin@x.io", None).await;
    ui.go("/console/models").await;

    // Three fields wrong at once: a priority out of range, a weight that
    // is no number, an upstream address without a scheme.
    let typed = [
        ("model", "gpt-4o-mini"),
        ("name", "east-1"),
        ("upstream_base_url", "api.example.com/v1"),
        ("upstream_model", "gpt-4o-mini-2024"),
        ("upstream_api_key", "sk-typed-once"),
        ("weight", "heavy"),
        ("priority", "500"),
        ("max_inflight", "8"),
    ];
    for (field, v) in typed {
        if field == "model" {
            // A picker of the models there are (#52, defect 19).
            ui.select("#deployment-form select[name=model]", v).await;
        } else {
            ui.fill(&format!("#deployment-form input[name={field}]"), v)
                .await;
        }
    }
    ui.click("#deployment-form button[type=submit]").await;
    ui.wait("#deployment-refused").await;

    // Not a bare error page: the models page, every problem beside its
    // field at once, in words (no internal field name in the message).
    assert_eq!(
        error_fields(&ui, "#deployment-form").await,
        ["priority", "upstream_base_url", "weight"]
    );
    let priority = ui
        .text("#deployment-form .field-error[data-field=priority]")
        .await;
    assert_eq!(priority, "must be between 0 and 100");
    let weight = ui
        .text("#deployment-form .field-error[data-field=weight]")
        .await;
    assert_eq!(weight, "must be a whole number");
    // The field's label is the one the form shows.
    let label = ui
        .text("#deployment-form label:has(.field-error[data-field=priority])")
        .await;
    assert!(label.starts_with("Priority (0 = best)"), "{label}");
    assert_eq!(ui.count("#error-message").await, 0, "no error page");
    // Everything typed is still there, the provider key too.
    for (field, v) in typed {
        let tag = if field == "model" { "select" } else { "input" };
        assert_eq!(
            value_of(&ui, &format!("#deployment-form {tag}[name={field}]")).await,
            v,
            "{field}"
        );
    }
    ui.shot("r2-10-deployment-form-errors").await;
    assert!(env
        .store
        .deployments_of("gpt-4o-mini")
        .await
        .unwrap()
        .is_empty());

    // In Chinese too.
    ui.click("button[name=lang][value=zh]").await;
    ui.wait("html[lang=zh]").await;
    ui.go("/console/models").await;
    ui.select("#deployment-form select[name=model]", "gpt-4o-mini")
        .await;
    ui.fill("#deployment-form input[name=name]", "east-1").await;
    ui.fill(
        "#deployment-form input[name=upstream_base_url]",
        "https://api.example.com/v1",
    )
    .await;
    ui.fill("#deployment-form input[name=upstream_model]", "m")
        .await;
    ui.fill("#deployment-form input[name=priority]", "-1").await;
    ui.click("#deployment-form button[type=submit]").await;
    ui.wait("#deployment-refused").await;
    assert_eq!(error_fields(&ui, "#deployment-form").await, ["priority"]);
    let msg = ui
        .text("#deployment-form .field-error[data-field=priority]")
        .await;
    assert_eq!(msg, "须在 0 到 100 之间");
    ui.click("button[name=lang][value=en]").await;
    ui.wait("html[lang=en]").await;

    // Corrected, it is saved, with the key typed the first time.
    ui.go("/console/models").await;
    for (field, v) in typed {
        let v = match field {
            "upstream_base_url" => "https://api.example.com/v1",
            "weight" => "3",
            "priority" => "5",
            _ => v,
        };
        if field == "model" {
            ui.select("#deployment-form select[name=model]", v).await;
        } else {
            ui.fill(&format!("#deployment-form input[name={field}]"), v)
                .await;
        }
    }
    ui.click("#deployment-form button[type=submit]").await;
    // (The model's own upstream stays beside it, as deployment `default`.)
    let east = || async {
        env.store
            .deployments_of("gpt-4o-mini")
            .await
            .unwrap()
            .into_iter()
            .find(|d| d.name == "east-1")
    };
    let saved = eventually(std::time::Duration::from_secs(10), || async {
        east().await.is_some()
    })
    .await;
    assert!(saved, "the corrected deployment was saved");
    ui.wait("#deployments-table").await;
    assert_eq!(ui.count("#deployment-refused").await, 0);
    let d = east().await.unwrap();
    assert_eq!((d.weight, d.priority), (3, 5));
    assert!(
        d.upstream_api_key_enc.is_some(),
        "the key typed the first time"
    );

    // The API answers the same problems in English, naming the field.
    let token = login(&ui.base, "admin@x.io").await;
    let (status, body) = api(
        "PUT",
        &format!("{}/api/v1/models/gpt-4o-mini/deployments/east-2", ui.base),
        Some(&token),
        Some(json!({"upstream_base_url": "https://api.example.com/v1",
            "upstream_model": "m", "priority": 500})),
    )
    .await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["param"], "priority", "{body}");
    assert_eq!(
        body["error"]["message"], "priority: must be between 0 and 100",
        "{body}"
    );

    ui.c.close().await.unwrap();
    srv.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_tabs_action_names_what_changed_and_refreshes_its_row() {
    let env = TestEnv::new().await;
    env.tenant("marketing-cn", Limits::default(), None).await;
    env.app("marketing-cn", "a", Limits::default()).await;
    let (key_id, _) = env
        .named_key("marketing-cn", "a", "campaign bot", Limits::default())
        .await;
    user(&env, "admin@x.io", "platform_admin", None).await;
    user(&env, "admin2@x.io", "platform_admin", None).await;
    user(&env, "ta@x.io", "tenant_admin", Some("marketing-cn")).await;
    let (srv, _driver, ui) = browse(&env, |_| ()).await;
    let base = ui.base.clone();
    let ta = login(&base, "ta@x.io").await;
    let expires = (chrono::Utc::now() + chrono::Duration::days(3)).to_rfc3339();
    let (status, body) = api(
        "POST",
        &format!("{base}/api/v1/quota-requests"),
        Some(&ta),
        Some(
            json!({"tenant_id": "marketing-cn", "tokens": 200000, "expires_at": expires,
            "reason": "launch week"}),
        ),
    )
    .await;
    assert_eq!(status, 201, "{body}");
    let request = body["id"].as_str().unwrap().to_string();

    // The first admin's tab shows the request pending; meanwhile the
    // second admin approves it.
    ui.login("admin@x.io", None).await;
    ui.go("/console/quota-requests").await;
    let row = format!("#q-{request}");
    ui.wait(&format!("{row} button.reject")).await;
    let admin2 = login(&base, "admin2@x.io").await;
    let (status, body) = api(
        "POST",
        &format!("{base}/api/v1/quota-requests/{request}/approve"),
        Some(&admin2),
        Some(json!({"note": "ok for the launch"})),
    )
    .await;
    assert_eq!(status, 200, "{body}");

    // The stale tab rejects it: refused, the row now says approved, and
    // the message names the request, its decider and that nothing changed.
    ui.click(&format!("{row} button.reject")).await;
    ui.wait(&format!("{row} .row-notice")).await;
    let notice = ui.text(&format!("{row} .row-notice")).await;
    for part in [
        "marketing-cn",
        "200,000 tokens",
        "already approved",
        "admin2@x.io",
        "nothing was changed",
    ] {
        assert!(notice.contains(part), "{part:?} not in {notice:?}");
    }
    assert_eq!(
        ui.wait(&format!("{row} [data-state]"))
            .await
            .attr("data-state")
            .await
            .unwrap()
            .as_deref(),
        Some("active")
    );
    assert_eq!(ui.count(&format!("{row} button.approve")).await, 0);
    let flash = ui.text("#flash").await;
    assert!(!flash.contains("already exists"), "{flash}");
    ui.shot("r2-11-stale-quota-row").await;
    let q = env
        .store
        .quota_request(&TenantScope::system(), request.parse().unwrap())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(q.state, "approved", "the stale reject changed nothing");

    // A key revoked in another tab: the stale tab's Revoke and Rotate
    // name the key, and its row turns revoked.
    ui.go("/console/tenants/marketing-cn/apps").await;
    let krow = format!("#key-{key_id}");
    ui.wait(&format!("{krow}[data-state=active]")).await;
    ui.c.execute("window.confirm = () => true", vec![])
        .await
        .unwrap();
    let (status, _) = api(
        "DELETE",
        &format!("{base}/api/v1/keys/{key_id}"),
        Some(&ta),
        None,
    )
    .await;
    assert_eq!(status, 204);
    ui.click(&format!("{krow} button.rotate")).await;
    ui.wait(&format!("{krow}[data-state=revoked] .row-notice"))
        .await;
    let notice = ui.text(&format!("{krow} .row-notice")).await;
    assert!(
        notice.contains("“campaign bot” was already revoked") && !notice.contains(&key_id),
        "{notice}"
    );
    assert_eq!(ui.count("#new-key").await, 0, "no secret was made");
    assert_eq!(ui.count(&format!("{krow} button.rotate")).await, 0);
    ui.shot("r2-12-stale-key-row").await;
    // …and Revoke, from a tab opened before.
    ui.go("/console/tenants/marketing-cn/apps?revoked=1").await;
    ui.wait(&format!("{krow}[data-state=revoked]")).await;
    ui.c.execute(
        "document.querySelector(arguments[0]).outerHTML = arguments[1];
         htmx.process(document.querySelector(arguments[0]));",
        vec![json!(krow), json!(stale_key_row(&key_id))],
    )
    .await
    .unwrap();
    ui.click(&format!("{krow} button.stale-revoke")).await;
    ui.wait(&format!("{krow}[data-state=revoked] .row-notice"))
        .await;
    let notice = ui.text(&format!("{krow} .row-notice")).await;
    assert!(
        notice.contains("“campaign bot” was already revoked"),
        "{notice}"
    );
    assert!(!ui.text("#flash").await.contains("Not found"));

    ui.c.close().await.unwrap();
    srv.shutdown().await;
}

/// The key's row as a tab opened before its revocation still shows it:
/// active, with its Revoke form.
fn stale_key_row(id: &str) -> String {
    format!(
        r#"<tr id="key-{id}" data-state="active"><td class="key-actions"><form class="inline" method="post" action="/console/keys/{id}/revoke" hx-post="/console/keys/{id}/revoke" hx-target="closest tr" hx-swap="outerHTML"><button class="danger stale-revoke">Revoke</button></form></td></tr>"#
    )
}

/// Chat requests on `key` until one is refused for the budget (402);
/// returns how many were answered. Another refusal (a 503 when Redis is
/// slow on a loaded machine: the gateway fails closed) is waited out.
async fn spend_until_refused(base: &str, key: &str) -> (usize, u16) {
    let (mut served, mut other) = (0, Vec::new());
    for i in 0..150 {
        let r = post(
            &format!("{base}/v1/chat/completions"),
            key,
            &chat_body(&format!("hello {i}"), Some(1)),
        )
        .await;
        match r.status().as_u16() {
            200 => served += 1,
            402 => {
                if !other.is_empty() {
                    eprintln!("refusals other than 402 on the way: {other:?}");
                }
                return (served, 402);
            }
            s => {
                other.push(s);
                tokio::time::sleep(std::time::Duration::from_millis(200)).await;
            }
        }
    }
    panic!("150 requests and no 402 ({served} answered, others: {other:?})");
}

/// The page at `path` once `css` is on it (reloaded for up to 15 s: the
/// gateway books refusals and usage a moment after answering).
async fn reload_until(ui: &Ui, path: &str, css: &str) {
    let t0 = std::time::Instant::now();
    loop {
        ui.go(path).await;
        if ui.count(css).await > 0 {
            return;
        }
        if t0.elapsed() > std::time::Duration::from_secs(15) {
            ui.shot("failure").await;
            panic!("{css} never appeared on {path}");
        }
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    }
}

/// Tenant marketing-cn ("Marketing China", app campaigns) with a cost
/// budget of $0.00004, spent: some twenty one-token answers, then 402
/// (past 90 %: what is left is less than a request holds). Users: two
/// platform admins, its tenant admin, finance. The server, the browser.
async fn spent_budget(env: &TestEnv) -> (server::app::Running, browser_common::Driver, Ui) {
    env.model("gpt-4o-mini", "chat", 150_000, 600_000).await;
    let budget = Limits {
        monthly_cost_usd: Some(domain::MicroUsd(40)),
        ..Default::default()
    };
    env.tenant("marketing-cn", budget, None).await;
    env.app("marketing-cn", "campaigns", Limits::default())
        .await;
    let (_, key) = env
        .key("marketing-cn", "campaigns", Limits::default())
        .await;
    user(env, "admin@x.io", "platform_admin", None).await;
    user(env, "admin2@x.io", "platform_admin", None).await;
    user(env, "ta@x.io", "tenant_admin", Some("marketing-cn")).await;
    user(env, "finance@x.io", "finance", None).await;
    let (srv, driver, ui) = browse(env, |_| ()).await;
    let base = ui.base.clone();
    let admin = login(&base, "admin@x.io").await;
    let (status, body) = api(
        "PATCH",
        &format!("{base}/api/v1/tenants/marketing-cn"),
        Some(&admin),
        Some(json!({"name": "Marketing China"})),
    )
    .await;
    assert_eq!(status, 200, "{body}");

    // Spent: the gateway answers 402.
    let (served, status) = spend_until_refused(&base, &key).await;
    assert!(served > 0);
    assert_eq!(status, 402);

    (srv, driver, ui)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn notices_and_refusals_read_in_words() {
    let env = TestEnv::new().await;
    let (srv, _driver, ui) = spent_budget(&env).await;

    // The alerts job notices 70 % and 90 % of the cost budget.
    let runner = env
        .job_runner(None, jobs::JobSettings::default(), "replica-a")
        .await;
    match runner
        .run(jobs::JobName::Alerts, chrono::Utc::now(), None)
        .await
        .unwrap()
    {
        jobs::RunResult::Ran { report, .. } => {
            assert_eq!(report.counts["alerts_recorded"], 2, "{:?}", report.counts)
        }
        other => panic!("{other:?}"),
    }

    // Notices: a title per kind, the tenant by name, dollars — no raw
    // kind, scope or bare amounts.
    ui.login("admin@x.io", None).await;
    ui.go("/console/notices").await;
    let table = ui.text("#notices-table tbody").await;
    assert!(table.contains("90 % of a budget used"), "{table}");
    assert!(table.contains("70 % of a budget used"), "{table}");
    assert!(
        table.contains("Tenant Marketing China has used 90 % or more of its monthly cost budget"),
        "{table}"
    );
    assert!(table.contains(" of $0.00004."), "{table}");
    for raw in [
        "budget_used",
        "tenant:marketing-cn",
        "marketing-cn",
        " of 0.0",
    ] {
        assert!(!table.contains(raw), "{raw:?} in {table}");
    }
    ui.shot("r2-13-notices-en").await;
    ui.click("button[name=lang][value=zh]").await;
    ui.wait("html[lang=zh]").await;
    let table = ui.text("#notices-table tbody").await;
    assert!(table.contains("预算已用 90%"), "{table}");
    assert!(table.contains("租户 Marketing China 在"), "{table}");
    assert!(table.contains("每月费用预算"), "{table}");
    ui.shot("r2-14-notices-zh").await;
    ui.click("button[name=lang][value=en]").await;
    ui.wait("html[lang=en]").await;

    // The bill's refusals by reason: a phrase, the code in its title.
    reload_until(&ui, "/console/bills", ".refused-reason").await;
    let reason = ui.wait(".refused-reason").await;
    let text = reason.text().await.unwrap();
    assert!(
        text.starts_with("the tenant's monthly cost budget is used up: "),
        "{text}"
    );
    assert_eq!(
        reason.attr("title").await.unwrap().as_deref(),
        Some("tenant_monthly_cost_exhausted")
    );

    ui.c.close().await.unwrap();
    srv.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spent_budget_is_flagged_until_a_grant_raises_it() {
    let env = TestEnv::new().await;
    let (srv, _driver, ui) = spent_budget(&env).await;
    let base = ui.base.clone();
    ui.login("admin@x.io", None).await;

    // The spent budget is flagged: the platform admin's dashboard lists
    // the tenant, its page has the badge and a full cost bar.
    reload_until(
        &ui,
        "/console",
        "#budgets-spent tr[data-tenant=marketing-cn] .budget-spent[data-measure=cost]",
    )
    .await;
    ui.shot("r2-15-dashboard-budget-spent").await;
    ui.go("/console/tenants/marketing-cn").await;
    let badge = ui.text("#budget-spent").await;
    assert!(
        badge.contains("cost budget spent") && badge.contains("402"),
        "{badge}"
    );
    let bar = ui.wait("meter.cost-bar").await.attr("value").await.unwrap();
    assert_eq!(bar.as_deref(), Some("100"));
    ui.shot("r2-16-tenant-budget-spent").await;
    ui.logout().await;
    // …the tenant admin's and finance's dashboards too.
    for who in ["ta@x.io", "finance@x.io"] {
        ui.login(who, None).await;
        let row = ui.text(".usage-table tr[data-tenant=marketing-cn]").await;
        assert!(row.contains("cost budget spent"), "{who}: {row}");
        ui.logout().await;
    }

    // A grant of a dollar raises the budget: no longer flagged.
    let ta = login(&base, "ta@x.io").await;
    let expires = (chrono::Utc::now() + chrono::Duration::days(3)).to_rfc3339();
    let (status, body) = api(
        "POST",
        &format!("{base}/api/v1/quota-requests"),
        Some(&ta),
        Some(
            json!({"tenant_id": "marketing-cn", "cost_usd": "1.00", "expires_at": expires,
            "reason": "launch week"}),
        ),
    )
    .await;
    assert_eq!(status, 201, "{body}");
    let admin2 = login(&base, "admin2@x.io").await;
    let (status, body) = api(
        "POST",
        &format!(
            "{base}/api/v1/quota-requests/{}/approve",
            body["id"].as_str().unwrap()
        ),
        Some(&admin2),
        None,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    ui.login("admin@x.io", None).await;
    ui.go("/console/tenants/marketing-cn").await;
    ui.wait("meter.cost-bar").await;
    assert_eq!(ui.count("#budget-spent").await, 0);
    ui.go("/console").await;
    assert_eq!(ui.count("#budgets-spent").await, 0);

    ui.c.close().await.unwrap();
    srv.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn granted_tokens_say_which_and_an_apps_grant_shows_on_the_tenant_page() {
    let env = TestEnv::new().await;
    env.model("gpt-4o-mini", "chat", 150_000, 600_000).await;
    let budget = Limits {
        monthly_tokens: Some(1_000_000),
        ..Default::default()
    };
    env.tenant("marketing-cn", budget, None).await;
    env.app("marketing-cn", "campaigns", Limits::default())
        .await;
    user(&env, "admin@x.io", "platform_admin", None).await;
    user(&env, "ta@x.io", "tenant_admin", Some("marketing-cn")).await;
    let (srv, _driver, ui) = browse(&env, |_| ()).await;
    let base = ui.base.clone();
    let ta = login(&base, "ta@x.io").await;
    let admin = login(&base, "admin@x.io").await;
    let expires = (chrono::Utc::now() + chrono::Duration::days(3)).to_rfc3339();
    for grant in [
        json!({"tenant_id": "marketing-cn", "tokens": 30000, "expires_at": expires,
            "reason": "whole tenant"}),
        json!({"tenant_id": "marketing-cn", "app_id": "campaigns", "tokens": 200000,
            "cost_usd": "5", "expires_at": expires, "reason": "the campaign app"}),
    ] {
        let (status, body) = api(
            "POST",
            &format!("{base}/api/v1/quota-requests"),
            Some(&ta),
            Some(grant),
        )
        .await;
        assert_eq!(status, 201, "{body}");
        let id = body["id"].as_str().unwrap();
        let (status, body) = api(
            "POST",
            &format!("{base}/api/v1/quota-requests/{id}/approve"),
            Some(&admin),
            None,
        )
        .await;
        assert_eq!(status, 200, "{body}");
    }

    // The tenant admin sees both grants take effect on the tenant page,
    // the app's too.
    ui.login("ta@x.io", None).await;
    // (Headers are upper-cased by the style sheet.)
    let label = ui.text(".usage-table thead th:last-child").await;
    assert_eq!(label.to_lowercase(), "active grants, tenant-wide (tokens)");
    let granted = ui
        .text(".usage-table tr[data-tenant=marketing-cn] td:last-child")
        .await;
    assert_eq!(granted, "30,000");
    ui.go("/console/tenants/marketing-cn").await;
    let app = ui.text("#active-grants tr[data-app=campaigns]").await;
    assert!(
        app.contains("app campaigns") && app.contains("200,000") && app.contains("$5.00"),
        "{app}"
    );
    assert!(app.contains("admin@x.io"), "{app}");
    let whole = ui.text("#active-grants tr[data-app='']").await;
    assert!(
        whole.contains("the whole tenant") && whole.contains("30,000"),
        "{whole}"
    );
    let effective = ui.text("#effective-limit").await;
    assert!(effective.contains("1,030,000"), "{effective}");
    ui.shot("r2-17-tenant-active-grants").await;
    ui.logout().await;

    // The bills' column says what it counts: approved in the month,
    // the tenant's and its apps' alike (230,000).
    ui.login("admin@x.io", None).await;
    ui.go("/console/bills").await;
    let head = ui.text("#bill-table thead").await.to_lowercase();
    assert!(
        head.contains("grants approved this month, tenant and apps (tokens)"),
        "{head}"
    );
    ui.click("button[name=lang][value=zh]").await;
    ui.wait("html[lang=zh]").await;
    ui.go("/console/tenants/marketing-cn").await;
    let app = ui.text("#active-grants tr[data-app=campaigns]").await;
    assert!(app.contains("应用 campaigns"), "{app}");

    ui.c.close().await.unwrap();
    srv.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn implausible_values_are_refused_or_flagged() {
    let env = TestEnv::new().await;
    env.model("gpt-4o-mini", "chat", 150_000, 600_000).await;
    let tenant_limits = Limits {
        rpm: Some(60),
        ..Default::default()
    };
    env.tenant("marketing-cn", tenant_limits, None).await;
    env.app("marketing-cn", "campaigns", Limits::default())
        .await;
    let (key_id, _) = env
        .named_key(
            "marketing-cn",
            "campaigns",
            "campaign bot",
            Limits::default(),
        )
        .await;
    user(&env, "admin@x.io", "platform_admin", None).await;
    user(&env, "ta@x.io", "tenant_admin", Some("marketing-cn")).await;
    let (srv, _driver, ui) = browse(&env, |_| ()).await;
    let base = ui.base.clone();

    // A "temporary" grant until 2099: refused by the API, naming the
    // maximum (auth.max_grant_days, 90 by default)…
    let ta = login(&base, "ta@x.io").await;
    let url = format!("{base}/api/v1/quota-requests");
    let ask = |expires: String| {
        api(
            "POST",
            &url,
            Some(&ta),
            Some(
                json!({"tenant_id": "marketing-cn", "tokens": 1000, "expires_at": expires,
                "reason": "launch"}),
            ),
        )
    };
    let (status, body) = ask("2099-01-01T00:00:00Z".into()).await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["param"], "expires_at", "{body}");
    let msg = body["error"]["message"].as_str().unwrap();
    assert!(msg.contains("at most 90 days"), "{msg}");
    let (status, body) = ask((chrono::Utc::now() + chrono::Duration::days(89)).to_rfc3339()).await;
    assert_eq!(status, 201, "{body}");

    // …and by the console's form, which says the longest beside the field.
    ui.login("ta@x.io", None).await;
    ui.go("/console/quota-requests").await;
    let hint = ui.text("#request-form #expiry-hint").await;
    assert!(hint.contains("at most 90 days"), "{hint}");
    let max = ui
        .wait("#request-form input[name=expires_at]")
        .await
        .attr("max")
        .await
        .unwrap()
        .unwrap_or_default();
    assert!(max.len() == 16 && max.as_str() > "2026-", "{max}");
    ui.fill("#request-form input[name=tokens]", "5000").await;
    ui.fill("#request-form textarea[name=reason]", "launch")
        .await;
    // Past the browser's `max` (a script, an old browser).
    ui.c.execute(
        "const e = document.querySelector('#request-form input[name=expires_at]');
         e.removeAttribute('max'); e.value = '2099-01-01T00:00';",
        vec![],
    )
    .await
    .unwrap();
    ui.click("#request-submit").await;
    let err = ui
        .text("#request-form .field-error[data-field=expires_at]")
        .await;
    assert!(err.contains("too far ahead"), "{err}");
    ui.shot("r2-18-grant-too-long").await;
    let pending: i64 = sqlx::query_scalar("SELECT count(*) FROM quota_requests")
        .fetch_one(env.store.pool())
        .await
        .unwrap();
    assert_eq!(pending, 1, "only the 89-day request");

    // A key's limits above its tenant's: saved, with a visible hint.
    ui.go(&format!("/console/keys/{key_id}/limits")).await;
    assert_eq!(ui.count("#limits-above").await, 0);
    ui.fill("#limits-form input[name=rpm]", "500").await;
    ui.click("#limits-submit").await;
    ui.wait("#limits-saved").await;
    let hint = ui.text("#limits-above li[data-field=rpm]").await;
    assert!(
        hint.contains("Requests per minute: 500")
            && hint.contains("marketing-cn")
            && hint.ends_with(": 60"),
        "{hint}"
    );
    ui.shot("r2-19-key-limits-above-tenant").await;
    ui.logout().await;

    // An email that is markup is not an address.
    ui.login("admin@x.io", None).await;
    ui.go("/console/users").await;
    ui.c.execute(
        "const f = document.querySelector('#user-form');
         f.querySelector('input[name=email]').type = 'text';
         f.querySelector('input[name=email]').value = '<script>alert(1)</script>@x.io';
         f.querySelector('input[name=password]').value = 'a long enough password';",
        vec![],
    )
    .await
    .unwrap();
    ui.click("#user-form button[type=submit]").await;
    let err = ui.text("#user-form .field-error[data-field=email]").await;
    assert_eq!(err, "not an email address");
    assert!(env
        .store
        .users()
        .await
        .unwrap()
        .iter()
        .all(|u| !u.email.contains("script")));

    ui.c.close().await.unwrap();
    srv.shutdown().await;
}
