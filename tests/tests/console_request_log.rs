//! The request log page and the request lookup in headless Chromium
//! against the real server: filters by time, key, model, status and
//! reason, newest first, keyset pages, tenant scope; each row opens the
//! lookup, which says first, in one sentence of the reader's language, why
//! a request was refused or what an admitted one cost, names the key by its
//! name and shows no internals.

mod browser_common;

use browser_common::{artifacts_dir, Driver, Ui};
use domain::Limits;
use e2e::*;
use fantoccini::Locator;
use std::time::Duration;
use store::TenantRow;

async fn named_tenant(env: &TestEnv, id: &str, name: &str, limits: Limits) {
    let t = TenantRow {
        id: id.into(),
        name: name.into(),
        cost_center: "CC-1".into(),
        priority: "standard".into(),
        limits,
        may_borrow: false,
        borrow_cap_tokens: 0,
        allowed_models: None,
        clamp_max_tokens: false,
        max_queued_requests: None,
        max_open_streams: None,
    };
    env.store.create_tenant("test", &t).await.unwrap();
}

/// The request ids of the log table's rows, top to bottom.
async fn row_ids(ui: &Ui) -> Vec<String> {
    ui.wait("#log-table").await;
    let mut ids = Vec::new();
    for r in
        ui.c.find_all(Locator::Css("#log-table tbody tr[data-request]"))
            .await
            .unwrap()
    {
        ids.push(r.attr("data-request").await.unwrap().unwrap());
    }
    ids
}

async fn select(ui: &Ui, name: &str, value: &str) {
    let sel = ui.wait(&format!("#log-filters select[name={name}]")).await;
    sel.select_by_value(value).await.unwrap();
}

/// Visible text of the page's main part.
async fn main_text(ui: &Ui) -> String {
    ui.text("main").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_request_log_filters_pages_and_opens_a_lookup_that_reads_as_a_sentence() {
    let env = TestEnv::new().await;
    env.model("gpt-4o-mini", "chat", 150_000, 600_000).await;
    let budget = Limits {
        monthly_tokens: Some(200),
        ..Default::default()
    };
    named_tenant(&env, "search", "Search Dept", budget).await;
    env.app("search", "a", Limits::default()).await;
    env.tenant("other", Limits::default(), None).await;
    env.app("other", "a", Limits::default()).await;
    let (bot_id, bot) = env
        .named_key("search", "a", "ci-bot", Limits::default())
        .await;
    let (second_id, second) = env
        .named_key("search", "a", "second", Limits::default())
        .await;
    let (_, other_key) = env
        .named_key("other", "a", "theirs", Limits::default())
        .await;
    user(&env, "ta@x.io", "tenant_admin", Some("search")).await;
    user(&env, "admin@x.io", "platform_admin", None).await;
    let mut cfg = env.config();
    cfg.auth.cookie_secure = false;
    let srv = env.server_with(cfg).await;
    let base = format!("http://{}", srv.addr);
    let url = format!("{base}/v1/chat/completions");

    // search: 2 admitted by ci-bot, 1 by second, then ci-bot refused by the
    // token budget; other: 1 admitted.
    let mut admitted = Vec::new();
    for k in [&bot, &bot, &second] {
        let r = post(&url, k, &chat_body("hello", Some(8))).await;
        assert_eq!(r.status(), 200);
        admitted.push(r.headers()["x-request-id"].to_str().unwrap().to_string());
    }
    // The time filter reads seconds: the refusal comes in a later second.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let before_refusal = chrono::Utc::now();
    let r = post(&url, &bot, &chat_body("hello", Some(4000))).await;
    assert_eq!(r.status(), 402);
    let refused = r.headers()["x-request-id"].to_str().unwrap().to_string();
    let r = post(&url, &other_key, &chat_body("hello", Some(8))).await;
    assert_eq!(r.status(), 200);
    let theirs = r.headers()["x-request-id"].to_str().unwrap().to_string();
    // The ledger and the decision writer store in batches.
    let all = eventually(Duration::from_secs(10), || async {
        env.store
            .request_log(
                &TenantScope::system(),
                &store::RequestLogFilter {
                    limit: 100,
                    ..Default::default()
                },
            )
            .await
            .unwrap()
            .len()
            == 5
    })
    .await;
    assert!(all, "the log never held 5 requests");

    let driver = Driver::start();
    let ui = Ui {
        c: driver.browser().await,
        base: base.clone(),
        shots: artifacts_dir(),
    };
    ui.login("ta@x.io", None).await;
    ui.click("nav.main-nav a[href='/console/requests']").await;

    // Newest first, the tenant admin's tenant only.
    let ids = row_ids(&ui).await;
    assert_eq!(ids.len(), 4, "{ids:?}");
    assert_eq!(ids[0], refused, "newest first");
    assert_eq!(
        &ids[1..],
        &[
            admitted[2].clone(),
            admitted[1].clone(),
            admitted[0].clone()
        ]
    );
    assert!(
        !ids.contains(&theirs),
        "another tenant's request is not listed"
    );
    let table = ui.text("#log-table").await;
    assert!(
        table.contains("ci-bot") && table.contains("second"),
        "{table}"
    );
    assert!(!table.contains(&bot_id), "keys by name, not by id: {table}");
    let first = ui
        .text("#log-table tbody tr:first-child td:first-child")
        .await;
    assert!(
        first.len() == "2026-12-01 14:03:22 UTC".len() && first.ends_with(" UTC"),
        "a time to the second with its zone: {first}"
    );
    ui.shot("log-01-request-log").await;

    // Status: refused only; the reason in words.
    select(&ui, "status", "refused").await;
    ui.click("#log-search").await;
    ui.wait_attr(
        "#log-filters select[name=status] option[selected]",
        "value",
        "refused",
    )
    .await;
    assert_eq!(row_ids(&ui).await, vec![refused.clone()]);
    assert_eq!(
        ui.text("#log-table td.why").await,
        "the tenant's monthly token budget is used up"
    );
    // Reason: the same one; another reason finds nothing.
    select(&ui, "status", "").await;
    select(&ui, "reason", "tenant_monthly_budget_exhausted").await;
    ui.click("#log-search").await;
    ui.wait_attr(
        "#log-filters select[name=reason] option[selected]",
        "value",
        "tenant_monthly_budget_exhausted",
    )
    .await;
    assert_eq!(row_ids(&ui).await, vec![refused.clone()]);
    select(&ui, "reason", "model_not_found").await;
    ui.click("#log-search").await;
    ui.wait("#log-empty").await;
    // Key: the second key's one request.
    select(&ui, "reason", "").await;
    let mut value = String::new();
    for o in
        ui.c.find_all(Locator::Css("#log-filters select[name=key] option"))
            .await
            .unwrap()
    {
        if o.text().await.unwrap().starts_with("second") {
            value = o.attr("value").await.unwrap().unwrap();
        }
    }
    assert!(!value.is_empty(), "the key filter offers the key by name");
    select(&ui, "key", &value).await;
    ui.click("#log-search").await;
    ui.wait_attr(
        "#log-filters select[name=key] option[selected]",
        "value",
        &value,
    )
    .await;
    assert_eq!(row_ids(&ui).await, vec![admitted[2].clone()]);
    // Model and time: from just before the refusal, this model.
    select(&ui, "key", "").await;
    select(&ui, "model", "gpt-4o-mini").await;
    let from = before_refusal;
    ui.c.execute(
        "document.querySelector('#log-filters input[name=from]').value = arguments[0]",
        vec![from.format("%Y-%m-%dT%H:%M:%S").to_string().into()],
    )
    .await
    .unwrap();
    ui.click("#log-search").await;
    ui.wait_attr(
        "#log-filters select[name=model] option[selected]",
        "value",
        "gpt-4o-mini",
    )
    .await;
    let ids = row_ids(&ui).await;
    assert_eq!(ids[0], refused, "{ids:?}");
    assert!(
        !ids.contains(&admitted[0]),
        "requests before the time filter are not listed: {ids:?}"
    );

    // Keyset pages: two rows a page, every request once, then no "older".
    ui.go("/console/requests?per=2").await;
    let mut seen = row_ids(&ui).await;
    assert_eq!(seen.len(), 2);
    ui.click("#log-older").await;
    ui.wait("#log-newest").await;
    seen.extend(row_ids(&ui).await);
    assert_eq!(
        ui.c.find_all(Locator::Css("#log-older"))
            .await
            .unwrap()
            .len(),
        0,
        "four requests fill two pages"
    );
    assert_eq!(seen.len(), 4);
    assert_eq!(seen[0], refused);
    assert_eq!(
        &seen[1..],
        &[
            admitted[2].clone(),
            admitted[1].clone(),
            admitted[0].clone()
        ]
    );

    // The refused row opens its lookup: one sentence, the key by name, no
    // internals.
    ui.go("/console/requests").await;
    ui.click(&format!("#log-table tr[data-request='{refused}'] a.lookup"))
        .await;
    let sentence = ui.text("#request-sentence").await;
    assert!(
        sentence.starts_with("Refused at ")
            && sentence.contains(" UTC: tenant Search Dept had ")
            && sentence.contains("tokens left of its monthly token budget of 200 tokens; this request needed up to 4,"),
        "{sentence}"
    );
    let at = sentence
        .strip_prefix("Refused at ")
        .and_then(|s| s.split(" UTC").next())
        .unwrap();
    assert_eq!(at.len(), "2026-12-01 14:03:22".len(), "to the second: {at}");
    assert_eq!(ui.text("dd[data-fact='req.key']").await, "ci-bot");
    let page = main_text(&ui).await;
    for internal in [
        "MonthlyTokens",
        "null",
        "micro",
        "tenant_monthly_budget_exhausted",
        "tenant:search",
        bot_id.as_str(),
    ] {
        assert!(!page.contains(internal), "{internal} is shown: {page}");
    }
    ui.shot("log-02-lookup-refused").await;

    // The same in 中文.
    ui.click("button[name=lang][value=zh]").await;
    ui.wait("html[lang=zh]").await;
    let zh = ui.text("#request-sentence").await;
    assert!(
        zh.contains("被拒绝") && zh.contains("租户 Search Dept") && zh.contains("200"),
        "{zh}"
    );
    assert!(
        !zh.contains("Refused") && !zh.contains("tokens left"),
        "{zh}"
    );
    ui.shot("log-03-lookup-refused-zh").await;
    ui.click("button[name=lang][value=en]").await;
    ui.wait("html[lang=en]").await;

    // An admitted request: model, tokens in and out, cost as money, latency.
    ui.go("/console/requests").await;
    ui.click(&format!(
        "#log-table tr[data-request='{}'] a.lookup",
        admitted[0]
    ))
    .await;
    let sentence = ui.text("#request-sentence").await;
    let usage = env.usage_event(&admitted[0]).await.unwrap();
    let cost = domain::MicroUsd(usage.cost_micro).shown();
    assert!(
        sentence.starts_with("Admitted at ")
            && sentence.contains(&format!(
                ": gpt-4o-mini, {} tokens in and {} out, cost {cost}, answered in ",
                usage.input_tokens, usage.output_tokens
            )),
        "{sentence}"
    );
    assert!(
        cost.starts_with("$0.") && !cost.contains("000000"),
        "{cost}"
    );
    assert_eq!(ui.text("dd[data-fact='req.key']").await, "ci-bot");
    ui.shot("log-04-lookup-admitted").await;

    // The keys table: each key's spend this month is the sum of its
    // requests' ledger rows (a refusal costs nothing), and the day it was
    // last used.
    let mut bot_cost = 0;
    for rid in &admitted[..2] {
        bot_cost += env.usage_event(rid).await.unwrap().cost_micro;
    }
    let second_cost = env.usage_event(&admitted[2]).await.unwrap().cost_micro;
    ui.go("/console/tenants/search/apps").await;
    let row = |id: &str| format!("#key-{id}");
    assert_eq!(
        ui.text(&format!("{} .key-spend", row(&bot_id))).await,
        domain::MicroUsd(bot_cost).shown()
    );
    assert_eq!(
        ui.text(&format!("{} .key-spend", row(&second_id))).await,
        domain::MicroUsd(second_cost).shown()
    );
    assert_eq!(
        ui.text(&format!("{} .key-last-used", row(&bot_id))).await,
        usage.day
    );
    ui.logout().await;

    // A platform admin reads every tenant and narrows to one.
    ui.login("admin@x.io", None).await;
    ui.go("/console/requests").await;
    assert_eq!(row_ids(&ui).await.len(), 5);
    // The tenant column names the tenant, not its id.
    let cells = ui.text("#log-table tbody").await;
    assert!(cells.contains("Search Dept"), "{cells}");
    select(&ui, "tenant", "other").await;
    ui.click("#log-search").await;
    ui.wait_attr(
        "#log-filters select[name=tenant] option[selected]",
        "value",
        "other",
    )
    .await;
    assert_eq!(row_ids(&ui).await, vec![theirs.clone()]);
    assert!(ui.text("#log-table").await.contains("theirs"));

    ui.c.close().await.unwrap();
    srv.shutdown().await;
}

/// The 401 of a key that exists but was revoked, or has expired, is filed
/// under its tenant and found by its request id (the lookup says which);
/// a flood of them is recorded a few a second per key, the rest counted;
/// an unknown key's 401 is still not recorded (no tenant to file it under).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revoked_or_expired_keys_refusal_is_found_by_its_request_id() {
    let env = TestEnv::new().await;
    let (key_id, key) = env.simple_tenant(Limits::default()).await;
    user(&env, "admin@x.io", "platform_admin", None).await;
    let srv = env.server().await;
    let base = format!("http://{}", srv.addr);
    let token = login(&base, "admin@x.io").await;
    let url = format!("{base}/v1/chat/completions");
    let lookup = |rid: String| {
        let (base, token) = (base.clone(), token.clone());
        async move {
            api(
                "GET",
                &format!("{base}/api/v1/requests/{rid}"),
                Some(&token),
                None,
            )
            .await
        }
    };
    let rid_of = |r: &reqwest::Response| r.headers()["x-request-id"].to_str().unwrap().to_string();

    let (status, _) = api(
        "DELETE",
        &format!("{base}/api/v1/keys/{key_id}"),
        Some(&token),
        None,
    )
    .await;
    assert_eq!(status, 204);
    let refused = eventually(Duration::from_secs(5), || async {
        post(&url, &key, &chat_body("hello", Some(8)))
            .await
            .status()
            == 401
    })
    .await;
    assert!(refused, "the revoked key was still accepted");
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let r = post(&url, &key, &chat_body("hello", Some(8))).await;
    assert_eq!(r.status(), 401);
    let rid = rid_of(&r);
    let body: serde_json::Value = r.json().await.unwrap();
    assert!(
        body.to_string().contains("revoked"),
        "the client is told: {body}"
    );
    let found = eventually(Duration::from_secs(3), || {
        let rid = rid.clone();
        let lookup = &lookup;
        async move { lookup(rid).await.0 == 200 }
    })
    .await;
    assert!(found, "the revoked key's 401 is recorded");
    let (_, d) = lookup(rid.clone()).await;
    let text = d.to_string();
    assert!(
        text.contains("invalid_api_key") && text.contains("revoked"),
        "{d}"
    );
    assert!(text.contains(&key_id), "filed under its key: {d}");
    // The console's lookup says it in words.
    let web = e2e::console_web::Web::login(&base, "admin@x.io").await;
    let page = web.get(&format!("/console/requests?id={rid}")).await;
    assert!(
        page.body.contains("was revoked"),
        "{}",
        &page.body[..page.body.len().min(2000)]
    );

    // A replica started after the revocation never had the key in its
    // index: it learns who the key was from its one miss lookup.
    let other = env.server().await;
    let r = post(
        &format!("http://{}/v1/chat/completions", other.addr),
        &key,
        &chat_body("hello", Some(8)),
    )
    .await;
    assert_eq!(r.status(), 401);
    let rid2 = rid_of(&r);
    let found = eventually(Duration::from_secs(3), || {
        let rid = rid2.clone();
        let lookup = &lookup;
        async move { lookup(rid).await.0 == 200 }
    })
    .await;
    assert!(found, "the other replica's 401 is recorded too");
    assert!(lookup(rid2).await.1.to_string().contains("revoked"));
    other.shutdown().await;

    // A flood in one go: a few a second are recorded, every one answered.
    let mut ids = vec![];
    for _ in 0..40 {
        let r = post(&url, &key, &chat_body("hello", Some(8))).await;
        assert_eq!(r.status(), 401);
        ids.push(rid_of(&r));
    }
    tokio::time::sleep(Duration::from_millis(800)).await;
    let recorded: i64 =
        sqlx::query_scalar("SELECT count(*) FROM request_decisions WHERE request_id = ANY($1)")
            .bind(&ids)
            .fetch_one(env.store.pool())
            .await
            .unwrap();
    assert!((1..=5 * 3).contains(&recorded), "{recorded} of 40 recorded");

    // An expired key: the same, said as expired.
    let (s, k) = api(
        "POST",
        &format!("{base}/api/v1/tenants/t/apps/a/keys"),
        Some(&token),
        Some(serde_json::json!({"name": "short",
            "expires_at": (chrono::Utc::now() + chrono::Duration::seconds(2)).to_rfc3339()})),
    )
    .await;
    assert_eq!(s, 201, "{k}");
    let short = k["key"].as_str().unwrap().to_string();
    assert_eq!(
        post(&url, &short, &chat_body("hello", Some(8)))
            .await
            .status(),
        200
    );
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let r = post(&url, &short, &chat_body("hello", Some(8))).await;
    assert_eq!(r.status(), 401);
    let rid = rid_of(&r);
    let found = eventually(Duration::from_secs(3), || {
        let rid = rid.clone();
        let lookup = &lookup;
        async move { lookup(rid).await.0 == 200 }
    })
    .await;
    assert!(found, "the expired key's 401 is recorded");
    assert!(lookup(rid).await.1.to_string().contains("expired"));

    // A key nobody issued: refused, not recorded.
    let r = post(
        &url,
        &format!("tg-{}", "x".repeat(40)),
        &chat_body("hello", Some(8)),
    )
    .await;
    assert_eq!(r.status(), 401);
    let rid = rid_of(&r);
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(
        lookup(rid).await.0,
        404,
        "an unknown key's 401 is not recorded"
    );
    srv.shutdown().await;
}
