//! The defects of a browser walk through the console, each fixed and held
//! here in headless Chromium against the real server: a new tenant lands on
//! its page; money reads `$125,000.00`; the key table follows an issue and a
//! revoke, with a copy button; four eyes shows no buttons to a person who may
//! not decide, says why in the reader's language, names requester and
//! decider, and holds through a line of account creation.

mod browser_common;

use browser_common::browse;
use domain::Limits;
use e2e::*;
use fantoccini::Locator;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_tenant_lands_on_its_own_page_and_money_reads_plainly() {
    let env = TestEnv::new().await;
    env.model("gpt-4o-mini", "chat", 150_000, 75_000).await;
    user(&env, "admin@x.io", "platform_admin", None).await;
    let (srv, _driver, ui) = browse(&env, |_| ()).await;
    ui.login("admin@x.io", None).await;

    ui.go("/console/tenants/new").await;
    ui.fill("#tenant-form input[name=id]", "acme").await;
    ui.fill("#tenant-form input[name=name]", "Acme Corp").await;
    ui.fill("#tenant-form input[name=monthly_cost_usd]", "125000")
        .await;
    ui.click("#tenant-submit").await;
    // The browser is on the new tenant's page: one layout, not a page
    // pasted inside the form, and it says the tenant was saved.
    ui.wait("#tenant-saved").await;
    let url = ui.c.current_url().await.unwrap();
    assert_eq!(url.path(), "/console/tenants/acme", "{url}");
    assert_eq!(ui.count("header.top").await, 1, "one layout on the page");
    assert_eq!(ui.text("h1 code").await, "acme");
    ui.shot("walk-01-tenant-created").await;

    // Money: thousands separators and cents; sub-cent digits only when
    // there are some (a price of $0.075 per million tokens).
    ui.go("/console/tenants").await;
    let row = ui.text("#tenants-table").await;
    assert!(row.contains("$125,000.00/mo"), "{row}");
    ui.go("/console/tenants/acme").await;
    let typed = ui
        .wait("#tenant-form input[name=monthly_cost_usd]")
        .await
        .prop("value")
        .await
        .unwrap()
        .unwrap_or_default();
    assert_eq!(typed, "$125,000.00", "the form shows the amount as read");
    ui.go("/console/models").await;
    // A platform admin reads the prices in their row's price form.
    let prices = ui
        .c
        .execute(
            "return Array.from(document.querySelectorAll('form.model-prices input[name$=_usd]')).map(e => e.value)",
            vec![],
        )
        .await
        .unwrap();
    let prices: Vec<String> = serde_json::from_value(prices).unwrap();
    assert_eq!(prices, ["$0.15", "$0.075"], "{prices:?}");
    // Saving the form unchanged keeps the budget (the shown form parses).
    ui.go("/console/tenants/acme").await;
    ui.click("#tenant-submit").await;
    ui.wait("#tenant-saved").await;
    let t = env
        .store
        .tenant(&TenantScope::system(), "acme")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        t.limits.monthly_cost_usd,
        Some(domain::MicroUsd(125_000_000_000))
    );

    ui.c.close().await.unwrap();
    srv.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_key_table_follows_an_issue_and_a_revoke_and_the_key_can_be_copied() {
    let env = TestEnv::new().await;
    env.tenant("t", Limits::default(), None).await;
    env.app("t", "a", Limits::default()).await;
    user(&env, "ta@x.io", "tenant_admin", Some("t")).await;
    let (srv, _driver, ui) = browse(&env, |_| ()).await;
    ui.login("ta@x.io", None).await;
    ui.go("/console/tenants/t/apps").await;
    assert!(ui.text("#keys-a").await.contains("No keys yet"));

    // Issue: the key is shown once, and the table lists it straight away.
    ui.fill("#key-box-a input[name=name]", "walk key").await;
    ui.click("#key-box-a button.issue-key").await;
    let key = ui.text("#new-key").await;
    assert!(key.starts_with("tg-"), "{key}");
    ui.wait("#keys-a tr[data-state=active]").await;
    let table = ui.text("#keys-a").await;
    assert!(table.contains("walk key"), "{table}");
    assert!(!table.contains("No keys yet"), "{table}");
    // The copy button copies it and says so.
    ui.click("#copy-key").await;
    let t0 = std::time::Instant::now();
    while ui.text("#copy-key").await != "Copied" {
        assert!(
            t0.elapsed() < std::time::Duration::from_secs(5),
            "the copy button never said Copied"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    ui.shot("walk-02-key-issued-in-table").await;

    // Revoke: the row itself says revoked and offers no Revoke button.
    ui.c.execute("window.confirm = () => true", vec![])
        .await
        .unwrap();
    ui.click("#keys-a button.danger").await;
    ui.wait("#keys-a tr[data-state=revoked]").await;
    // The table's own row changed (not a row pasted inside a cell).
    assert_eq!(ui.count("#keys-a tr").await, 2, "the head and one key");
    let state = ui.text("#keys-a tbody > tr > td.key-state").await;
    assert_eq!(state, "revoked");
    assert_eq!(ui.count("#keys-a button.danger").await, 0);
    assert_eq!(ui.count("header.top").await, 1);
    ui.shot("walk-03-key-revoked").await;
    let keys = env
        .store
        .keys_of(&TenantScope::system(), "t")
        .await
        .unwrap();
    assert!(
        keys[0].revoked_at.is_some(),
        "the key is revoked in the store"
    );

    ui.c.close().await.unwrap();
    srv.shutdown().await;
}

/// A platform admin created by `by` (None: the first admin, made by the CLI).
async fn admin_by(env: &TestEnv, email: &str, by: Option<&str>) -> String {
    let hash = store::passwords::hash(PASSWORD).unwrap();
    env.store
        .create_user_by(
            "test",
            by.map(|b| b.parse().unwrap()),
            email,
            &hash,
            "platform_admin",
            None,
        )
        .await
        .unwrap()
        .to_string()
}

/// A pending request for tenant `t` made by `email` through the API.
async fn request_as(base: &str, email: &str, reason: &str) {
    let token = login(base, email).await;
    let (status, body) = api(
        "POST",
        &format!("{base}/api/v1/quota-requests"),
        Some(&token),
        Some(serde_json::json!({"tenant_id": "t", "tokens": 1000,
            "expires_at": days_ahead(30), "reason": reason})),
    )
    .await;
    assert_eq!(status, 201, "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_eyes_shows_no_buttons_to_who_may_not_decide_and_says_why() {
    let env = TestEnv::new().await;
    env.tenant("t", Limits::default(), None).await;
    // root (the first admin) made a, a made b, b made c; ops is a second
    // admin the operator made.
    let root = admin_by(&env, "root@x.io", None).await;
    let a = admin_by(&env, "a@x.io", Some(&root)).await;
    let b = admin_by(&env, "b@x.io", Some(&a)).await;
    admin_by(&env, "c@x.io", Some(&b)).await;
    admin_by(&env, "ops@x.io", None).await;
    let (srv, _driver, ui) = browse(&env, |_| ()).await;
    request_as(&ui.base, "a@x.io", "from a").await;
    request_as(&ui.base, "root@x.io", "from root").await;

    // c is below a and root, at any depth: no buttons on either request,
    // the reason in Chinese, the requester named.
    ui.login("c@x.io", None).await;
    ui.click("button[name=lang][value=zh]").await;
    ui.wait("html[lang=zh]").await;
    ui.go("/console/quota-requests").await;
    let rows = ui.c.find_all(Locator::Css("#quota-rows tr")).await.unwrap();
    assert_eq!(rows.len(), 2);
    for r in rows {
        let text = r.text().await.unwrap();
        let buttons = r
            .find_all(Locator::Css("button.approve, button.reject"))
            .await
            .unwrap()
            .len();
        assert_eq!(buttons, 0, "c may not decide: {text}");
        assert!(
            text.contains("同一账号创建链"),
            "the reason in 中文: {text}"
        );
        let by = if text.contains("from a") {
            "a@x.io"
        } else {
            "root@x.io"
        };
        assert!(text.contains(by), "requested by {by}: {text}");
    }
    ui.shot("walk-04-four-eyes-refused-zh").await;
    // The rule the page shows is the rule the decision enforces.
    let token = login(&ui.base, "c@x.io").await;
    let pending = env
        .store
        .quota_requests(&TenantScope::system())
        .await
        .unwrap();
    let of_a = pending.iter().find(|q| q.reason == "from a").unwrap();
    let (status, _) = api(
        "POST",
        &format!("{}/api/v1/quota-requests/{}/approve", ui.base, of_a.id),
        Some(&token),
        Some(serde_json::json!({"note": "sneaky"})),
    )
    .await;
    assert_eq!(status, 403, "c may not approve a's request");
    ui.click("button[name=lang][value=en]").await;
    ui.wait("html[lang=en]").await;
    ui.logout().await;

    // a may not decide its own request, and says so.
    ui.login("a@x.io", None).await;
    ui.go("/console/quota-requests").await;
    let page = ui.text("#quota-rows").await;
    assert!(page.contains("You made this request"), "{page}");
    assert_eq!(ui.count("#quota-rows button.approve").await, 0);
    ui.logout().await;

    // ops, outside root's line, decides the first admin's request; the row
    // names requester and decider.
    ui.login("ops@x.io", None).await;
    ui.go("/console/quota-requests").await;
    assert_eq!(ui.count("#quota-rows button.approve").await, 2);
    let root_row = ui.c.find_all(Locator::Css("#quota-rows tr")).await.unwrap();
    let mut id = String::new();
    for r in root_row {
        if r.text().await.unwrap().contains("from root") {
            id = r.attr("id").await.unwrap().unwrap();
        }
    }
    ui.fill(&format!("#{id} input[name=note]"), "fine").await;
    ui.click(&format!("#{id} button.approve")).await;
    ui.wait(&format!("#{id} .pill[data-state=active]")).await;
    let decided = ui.text(&format!("#{id}")).await;
    assert!(
        decided.contains("root@x.io") && decided.contains("ops@x.io"),
        "requested by root, decided by ops: {decided}"
    );
    ui.shot("walk-05-four-eyes-decided").await;

    ui.c.close().await.unwrap();
    srv.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn error_pages_keep_the_navigation_and_an_unknown_page_is_the_consoles_404() {
    let env = TestEnv::new().await;
    env.tenant("t", Limits::default(), None).await;
    user(&env, "ta@x.io", "tenant_admin", Some("t")).await;
    let (srv, _driver, ui) = browse(&env, |_| ()).await;
    ui.login("ta@x.io", None).await;

    // A page the role may not see: 403, inside the console's layout.
    ui.go("/console/users").await;
    ui.wait("#error-message").await;
    assert!(ui.count("nav.main-nav a").await > 0);
    ui.wait("#logout").await;
    // An address the console does not have: its own 404, same layout.
    ui.go("/console/no-such-page").await;
    assert_eq!(ui.text("#error-message").await, "Not found.");
    assert!(ui.text("h1").await.contains("404"));
    ui.wait("#logout").await;
    assert!(ui.text("nav.main-nav").await.contains("Apps & keys"));
    ui.shot("walk-06-console-404").await;
    // Signed out, an unknown console page asks to sign in first.
    ui.logout().await;
    ui.go("/console/no-such-page").await;
    ui.wait("input[name=email]").await;

    ui.c.close().await.unwrap();
    srv.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_audit_entry_reads_as_field_changes_and_exports_as_csv() {
    let env = TestEnv::new().await;
    let rpm = Limits {
        rpm: Some(60),
        ..Default::default()
    };
    env.tenant("t", rpm, None).await;
    user(&env, "admin@x.io", "platform_admin", None).await;
    let (srv, _driver, ui) = browse(&env, |_| ()).await;
    ui.login("admin@x.io", None).await;
    // Change one limit through the form.
    ui.go("/console/tenants/t").await;
    ui.fill("#tenant-form input[name=rpm]", "120").await;
    ui.click("#tenant-submit").await;
    ui.wait("#tenant-saved").await;

    ui.go("/console/audit?action=tenant.update").await;
    let cell = "#audit-table tr[data-field='limits.rpm']";
    assert_eq!(ui.text(&format!("{cell} td.before")).await, "60");
    assert_eq!(ui.text(&format!("{cell} td.after")).await, "120");
    // Only what changed: the name stayed, so it is not listed.
    assert_eq!(ui.count("#audit-table tr[data-field='name']").await, 0);
    ui.shot("walk-07-audit-field-changes").await;

    // The export of the same filter, one line per field change.
    let href = ui
        .wait("#audit-csv")
        .await
        .attr("href")
        .await
        .unwrap()
        .unwrap();
    assert!(href.contains("action=tenant.update"), "{href}");
    let web = e2e::console_web::Web::login(&ui.base, "admin@x.io").await;
    let csv = web.get(&href).await;
    assert_eq!(csv.status, 200);
    // A byte-order mark first (a spreadsheet reads it as UTF-8), then the
    // header.
    let mut lines = csv.body.lines();
    assert_eq!(
        lines.next(),
        Some("\u{feff}id,at_utc,actor,action,target,field,before,after,reason")
    );
    let rows: Vec<&str> = lines.collect();
    assert!(
        rows.iter()
            .any(|l| l.contains(",tenant.update,tenant:t,limits.rpm,60,120,")),
        "{rows:#?}"
    );
    assert!(
        rows.iter().all(|l| l.contains("tenant.update")),
        "{rows:#?}"
    );

    ui.c.close().await.unwrap();
    srv.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_too_large_number_and_a_negative_default_max_output_are_refused_by_name() {
    let env = TestEnv::new().await;
    env.tenant("t", Limits::default(), None).await;
    user(&env, "admin@x.io", "platform_admin", None).await;
    let (srv, _driver, ui) = browse(&env, |_| ()).await;
    ui.login("admin@x.io", None).await;

    // 23 digits: "too large", not "not a whole number".
    ui.go("/console/tenants/t").await;
    ui.fill("#tenant-form input[name=rpm]", "12345678901234567890123")
        .await;
    ui.click("#tenant-submit").await;
    assert_eq!(
        ui.text("#tenant-form .field-error[data-field=rpm]").await,
        "too large"
    );

    // A negative default max output is refused, not stored as 1.
    ui.go("/console/models").await;
    ui.fill("#model-form input[name=id]", "neg-model").await;
    ui.fill(
        "#model-form input[name=upstream_base_url]",
        "https://api.example.com/v1",
    )
    .await;
    ui.fill("#model-form input[name=upstream_model]", "gpt-4o-mini")
        .await;
    ui.fill("#model-form input[name=input_price_per_mtok_usd]", "1")
        .await;
    ui.fill("#model-form input[name=output_price_per_mtok_usd]", "2")
        .await;
    ui.fill("#model-form input[name=default_max_output_tokens]", "-5")
        .await;
    ui.click("#model-form button[type=submit]").await;
    assert_eq!(
        ui.text("#model-form .field-error[data-field=default_max_output_tokens]")
            .await,
        "must be at least 1"
    );
    let models = env.store.models().await.unwrap();
    assert!(
        models.iter().all(|m| m.id != "neg-model"),
        "the model was not created"
    );

    ui.c.close().await.unwrap();
    srv.shutdown().await;
}
