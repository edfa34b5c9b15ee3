//! Every page each role reaches (platform admin, tenant admin, finance,
//! auditor: a crawl of the console's links from the dashboard), in
//! headless Chromium against the real server:
//!
//! - in both languages, no UI string is missing from either: a 中文 page
//!   shows no run of Latin words that is not data (names, ids, model names,
//!   numbers) or a unit kept as is (USD, UTC, token …), an English page no
//!   Chinese;
//! - at 390 × 844 px the navigation folds into a menu button and takes
//!   little height, the page does not scroll sideways, and every table cell
//!   (Cost, State, Revoke, Approve …) can be scrolled into view inside its
//!   table's wrapper and is the element a tap there hits.

mod browser_common;

use browser_common::{artifacts_dir, crawl, Driver, Ui};
use domain::Limits;
use e2e::*;
use serde_json::Value;
use std::time::Duration;
use store::TenantRow;

const ROLES: [(&str, &str); 4] = [
    ("pa@x.io", "platform admin"),
    ("ta@x.io", "tenant admin"),
    ("fin@x.io", "finance"),
    ("aud@x.io", "auditor"),
];

/// Data the pages show as it was typed: whole strings, removed before
/// the words are read.
const DATA: &[&str] = &[
    "pa@x.io",
    "ta@x.io",
    "fin@x.io",
    "aud@x.io",
    "gpt-4o-mini",
    "text-embedding-3-small",
    "ci-key",
    "tg-",
    "Acme Corp",
    "Globex",
    "acme",
    "globex",
    "bot",
    "CC-1",
    "mock",
    "tollgate",
    "test",
    "launch",
    "replica-1",
    // The name of a model's own upstream in the deployments table.
    "default",
];

/// Kept as is in both languages: units, standards and names of things.
const UNIVERSAL: &[&str] = &[
    "USD",
    "UTC",
    "token",
    "ID",
    "API",
    "HTTP",
    "CSV",
    "FOCUS",
    "SSO",
    "URL",
    "JSON",
    "SVG",
    "Postgres",
    "PostgreSQL",
    "ClickHouse",
    "Redis",
    "YYYY",
    "MM",
    "max_tokens",
    "x-request-id",
    "a-z",
    "o200k",
    "cl100k",
    "maxmemory-policy",
    "noeviction",
    "OpenAI",
    "Anthropic",
];

/// A tenant with a readable name.
async fn tenant(env: &TestEnv, id: &str, name: &str, priority: &str, limits: Limits) {
    let t = TenantRow {
        id: id.into(),
        name: name.into(),
        cost_center: "CC-1".into(),
        priority: priority.into(),
        limits,
        may_borrow: true,
        borrow_cap_tokens: 10_000,
        allowed_models: None,
        clamp_max_tokens: false,
        max_queued_requests: None,
        max_open_streams: None,
    };
    env.store.create_tenant("test", &t).await.unwrap();
}

/// Two tenants with limits of every unit, an app with keys, admitted and
/// refused requests, a pending quota request, one user per role.
async fn platform(env: &TestEnv) -> server::app::Running {
    env.model("gpt-4o-mini", "chat", 150_000, 600_000).await;
    env.model("text-embedding-3-small", "embedding", 20_000, 0)
        .await;
    let limits = Limits {
        monthly_tokens: Some(1_000_000),
        monthly_cost_usd: Some(domain::MicroUsd(125_000_000_000)),
        daily_cost_soft_usd: Some(domain::MicroUsd(50_000_000)),
        rpm: Some(600),
        input_tpm: Some(100_000),
        output_tpm: Some(50_000),
        max_inflight: Some(8),
        ..Default::default()
    };
    tenant(env, "acme", "Acme Corp", "core", limits.clone()).await;
    tenant(env, "globex", "Globex", "batch", Limits::default()).await;
    env.app("acme", "bot", limits).await;
    let ok = env
        .named_key("acme", "bot", "ci-key", Limits::default())
        .await
        .1;
    let tiny = env
        .named_key(
            "acme",
            "bot",
            "ci-key",
            Limits {
                monthly_tokens: Some(50),
                ..Default::default()
            },
        )
        .await
        .1;
    let hash = store::passwords::hash(PASSWORD).unwrap();
    for (email, role, t) in [
        ("pa@x.io", "platform_admin", None),
        ("ta@x.io", "tenant_admin", Some("acme")),
        ("fin@x.io", "finance", None),
        ("aud@x.io", "auditor", None),
    ] {
        env.store
            .create_user("test", email, &hash, role, t)
            .await
            .unwrap();
    }
    // A finished job run of each outcome, and a notice of each kind.
    let now = chrono::Utc::now();
    for (job, outcome, error) in [
        ("reconcile", "ok", None),
        (
            "rollover",
            "failed",
            Some("database error: connection refused"),
        ),
        ("stale-holds", "differences", None),
    ] {
        let id = env
            .store
            .claim_job_run(job, None, now, "replica-1")
            .await
            .unwrap()
            .unwrap();
        env.store
            .finish_job_run(
                id,
                outcome,
                &serde_json::json!({"rows": 3}),
                &Value::Null,
                error,
            )
            .await
            .unwrap();
    }
    // And one still running (it may be abandoned by the server's own run
    // of the job meanwhile: either state's word is on the page).
    env.store
        .claim_job_run("stale-holds", None, now, "replica-1")
        .await
        .unwrap()
        .unwrap();
    env.store
        .add_notice(
            Some("acme"),
            "usage_anomaly",
            "model gpt-4o-mini: the provider reported usage the gateway does not believe (output_above_cap); request req_1 was billed at 10 input + 20 output tokens, its raw report is kept in the ledger",
            &serde_json::json!({"request_id": "req_1", "model": "gpt-4o-mini", "kind": "output_above_cap",
                "reported": {"output_tokens": 999999}, "billed_input_tokens": 10, "billed_output_tokens": 20}),
        )
        .await
        .unwrap();
    env.store
        .add_notice(
            None,
            "job_failed",
            "job rollover failed: database error: connection refused",
            &serde_json::json!({"job": "rollover", "run_id": 2}),
        )
        .await
        .unwrap();
    env.store
        .add_notice(
            None,
            "redis_eviction_policy",
            "Redis maxmemory-policy is allkeys-lru; the quota store needs noeviction",
            &serde_json::json!({"setting": "maxmemory-policy"}),
        )
        .await
        .unwrap();
    let mut cfg = env.config();
    cfg.auth.cookie_secure = false;
    let srv = env.server_with(cfg).await;
    let base = format!("http://{}", srv.addr);
    let url = format!("{base}/v1/chat/completions");
    for _ in 0..2 {
        assert_eq!(
            post(&url, &ok, &chat_body("hello", Some(8))).await.status(),
            200
        );
    }
    assert_eq!(
        post(&url, &tiny, &chat_body("hello", Some(4000)))
            .await
            .status(),
        402
    );
    let token = login(&base, "ta@x.io").await;
    let (status, body) = api(
        "POST",
        &format!("{base}/api/v1/quota-requests"),
        Some(&token),
        Some(serde_json::json!({"tenant_id": "acme", "tokens": 5000,
            "expires_at": days_ahead(30), "reason": "launch"})),
    )
    .await;
    assert_eq!(status, 201, "{body}");
    let logged = eventually(Duration::from_secs(10), || async {
        env.store
            .request_log(
                &TenantScope::system(),
                &store::RequestLogFilter {
                    limit: 10,
                    ..Default::default()
                },
            )
            .await
            .unwrap()
            .len()
            == 3
    })
    .await;
    assert!(logged, "the requests never reached the log");
    srv
}

/// The text nodes of the page's body, one string each, without code,
/// scripts, the language switch (its "English" and "中文" are the
/// languages' own names), the stored values an audit entry changed
/// (before → after, as they were stored) and the charts' SVG (their series
/// names are the chart code's, reworked separately).
async fn texts(ui: &Ui) -> Vec<String> {
    let v = ui
        .c
        .execute(
            r#"const out = [];
               const w = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
               while (w.nextNode()) {
                 const n = w.currentNode;
                 if (n.parentElement.closest('code, pre, script, style, svg, form.lang, table.changes td')) continue;
                 const t = n.textContent.trim();
                 if (t) out.push(t);
               }
               return out;"#,
            vec![],
        )
        .await
        .unwrap();
    v.as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap_or_default().to_string())
        .collect()
}

/// The words of `text` that are neither data, nor numbers, nor ids, nor
/// universal: on a 中文 page, English that is missing its translation.
fn latin_words(text: &str, data: &[String]) -> Vec<String> {
    // Phrases first (data with a space in it: "Acme Corp").
    let mut t = text.to_string();
    for d in data.iter().filter(|d| d.contains(' ')) {
        t = t.replace(d.as_str(), " ");
    }
    let mut wholes: Vec<&str> = data
        .iter()
        .map(String::as_str)
        .chain(UNIVERSAL.iter().copied())
        .filter(|d| d.len() > 3 || d.contains(['@', '-', '_']))
        .collect();
    wholes.sort_by_key(|d| std::cmp::Reverse(d.len()));
    let mut out = Vec::new();
    for chunk in t.split(|c: char| c.is_whitespace() || !c.is_ascii()) {
        let b = chunk.as_bytes();
        // An identifier: letters joined by . : _ @ = (tenant.update,
        // tenant:acme, max_tokens, docs/providers.md), not money.
        let is_id = !chunk.contains('$')
            && b.windows(3).any(|w| {
                w[0].is_ascii_alphanumeric()
                    && b".:_@=".contains(&w[1])
                    && w[2].is_ascii_alphanumeric()
            });
        if is_id {
            continue;
        }
        let mut chunk = chunk.to_string();
        for d in &wholes {
            chunk = chunk.replace(d, " ");
        }
        for run in chunk.split(|c: char| !c.is_ascii_alphanumeric()) {
            if run.is_empty() || run.bytes().any(|c| c.is_ascii_digit()) {
                continue;
            }
            let known = UNIVERSAL.contains(&run) || data.iter().any(|d| d == run);
            if !known {
                out.push(run.to_string());
            }
        }
    }
    out
}

fn has_chinese(text: &str) -> bool {
    text.chars().any(|c| {
        ('\u{3000}'..='\u{303f}').contains(&c)
            || ('\u{4e00}'..='\u{9fff}').contains(&c)
            || ('\u{ff00}'..='\u{ffef}').contains(&c)
    })
}

async fn set_lang(ui: &Ui, lang: &str) {
    ui.go("/console").await;
    let on =
        ui.c.find(fantoccini::Locator::Css(&format!("html[lang={lang}]")))
            .await
            .is_ok();
    if !on {
        ui.click(&format!("button[name=lang][value={lang}]")).await;
        ui.wait(&format!("html[lang={lang}]")).await;
    }
}

async fn browser(driver: &Driver, base: &str) -> Ui {
    Ui {
        c: driver.browser().await,
        base: base.to_string(),
        shots: artifacts_dir(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_page_of_every_role_has_each_string_in_both_languages() {
    let env = TestEnv::new().await;
    let srv = platform(&env).await;
    let base = format!("http://{}", srv.addr);
    let driver = Driver::start();
    let ui = browser(&driver, &base).await;
    let mut data: Vec<String> = DATA.iter().map(|s| s.to_string()).collect();
    // The server's own job runs name its replica (a housekeeping run may be
    // shown while it runs and deleted a moment later, when it had nothing
    // to do, so it cannot be looked up afterwards): data.
    data.push(srv.gateway.cfg().replica.clone());
    data.push(
        env.store
            .keys_of(&TenantScope::system(), "acme")
            .await
            .unwrap()[0]
            .prefix
            .clone(),
    );
    let mut missing: Vec<String> = Vec::new();
    let mut pages = 0;
    for (email, role) in ROLES {
        ui.login(email, None).await;
        set_lang(&ui, "en").await;
        let walk = crawl(&ui, 80).await;
        assert!(walk.len() >= 8, "{role} reached only {walk:?}");
        // Every role reaches usage analytics from the navigation.
        assert!(
            walk.iter().any(|h| h.starts_with("/console/analytics")),
            "{role}: no usage analytics in {walk:?}"
        );
        for lang in ["en", "zh"] {
            set_lang(&ui, lang).await;
            for href in &walk {
                ui.go(href).await;
                ui.wait(&format!("html[lang={lang}]")).await;
                pages += 1;
                for t in texts(&ui).await {
                    if lang == "zh" {
                        // One word for tenant: 租户, never 部门.
                        if t.contains("部门") {
                            missing.push(format!("{role} zh {href}: 部门 in {t:?}"));
                        }
                        if t.starts_with("replica-") && !data.contains(&t) {
                            // The seeded runs' names and any other replica's.
                            data.extend(job_replicas(&env).await);
                        }
                        let words = latin_words(&t, &data);
                        if !words.is_empty() {
                            missing.push(format!("{role} zh {href}: {words:?} in {t:?}"));
                        }
                    } else if has_chinese(&t) {
                        missing.push(format!("{role} en {href}: {t:?}"));
                    }
                }
            }
        }
        if email == "ta@x.io" {
            ui.go("/console/tenants/acme/apps").await;
            ui.shot("every-page-apps-zh").await;
        }
        set_lang(&ui, "en").await;
        ui.logout().await;
    }
    missing.sort();
    missing.dedup();
    assert!(
        missing.is_empty(),
        "{} strings without their translation on {pages} pages:\n{}",
        missing.len(),
        missing.join("\n")
    );
    ui.c.close().await.unwrap();
    srv.shutdown().await;
}

/// The replicas named by job runs (the seeded ones and the server's own).
async fn job_replicas(env: &TestEnv) -> Vec<String> {
    sqlx::query_scalar("SELECT DISTINCT replica FROM job_runs")
        .fetch_all(env.store.pool())
        .await
        .unwrap()
}

/// What a phone shows of the page: the header's height, whether the page
/// scrolls sideways, and every table cell that cannot be scrolled into view
/// or is covered where a tap would land.
const PHONE_CHECK: &str = r#"
const header = document.querySelector('header.top').getBoundingClientRect().height;
const wide = document.documentElement.scrollWidth - window.innerWidth;
const hidden = [];
for (const cell of document.querySelectorAll('main table th, main table td')) {
  if (cell.closest('table.changes') && cell.closest('table.changes') !== cell.closest('table')) continue;
  const r0 = cell.getBoundingClientRect();
  if (r0.width === 0 && r0.height === 0) continue;
  cell.scrollIntoView({block: 'center', inline: 'center'});
  const r = cell.getBoundingClientRect();
  // The middle of the part of the cell on the screen (a wide cell that
  // spans the table is wider than the phone).
  const x = (Math.max(r.left, 0) + Math.min(r.right, window.innerWidth)) / 2;
  const y = (Math.max(r.top, 0) + Math.min(r.bottom, window.innerHeight)) / 2;
  const hit = document.elementFromPoint(x, y);
  if (!hit || !(cell === hit || cell.contains(hit))) {
    const t = cell.closest('table');
    hidden.push((t.id || t.className || 'table') + ': ' + cell.textContent.trim().slice(0, 30));
  }
}
window.scrollTo(0, 0);
return {header, wide, hidden: hidden.slice(0, 10), width: window.innerWidth};
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_390_px_the_menu_folds_and_every_table_cell_is_reachable() {
    let env = TestEnv::new().await;
    let srv = platform(&env).await;
    let base = format!("http://{}", srv.addr);
    let driver = Driver::start();
    let ui = browser(&driver, &base).await;
    let mut problems: Vec<String> = Vec::new();
    let mut cells_pages = 0;
    for (email, role) in ROLES {
        ui.c.set_window_size(1280, 900).await.unwrap();
        ui.login(email, None).await;
        let walk = crawl(&ui, 80).await;
        assert!(
            walk.iter().any(|h| h.starts_with("/console/analytics")),
            "{role}: no usage analytics in {walk:?}"
        );
        if email == "pa@x.io" {
            for (path, name) in [
                ("/console/tenants", "tenants"),
                ("/console/quota-requests", "quota"),
                ("/console/requests", "requests"),
            ] {
                ui.go(path).await;
                ui.shot(&format!("phone-1280-{name}")).await;
            }
        }
        ui.c.set_window_size(390, 844).await.unwrap();
        for href in &walk {
            ui.go(href).await;
            ui.wait("header.top").await;
            let v: Value = ui.c.execute(PHONE_CHECK, vec![]).await.unwrap();
            assert!(
                v["width"].as_f64().unwrap() <= 400.0,
                "the window is a phone's: {v}"
            );
            let header = v["header"].as_f64().unwrap();
            if header > 72.0 {
                problems.push(format!("{role} {href}: the header is {header} px high"));
            }
            if v["wide"].as_f64().unwrap() > 1.0 {
                problems.push(format!(
                    "{role} {href}: the page scrolls sideways by {} px",
                    v["wide"]
                ));
            }
            for h in v["hidden"].as_array().unwrap() {
                problems.push(format!("{role} {href}: cell out of reach: {h}"));
            }
            if v["hidden"].as_array().unwrap().is_empty() {
                cells_pages += 1;
            }
        }
        // The menu button opens the navigation; its links work.
        ui.go("/console").await;
        ui.click("#nav-button").await;
        let link = ui.wait("nav.main-nav a[href='/console/requests']").await;
        assert!(link.is_displayed().await.unwrap(), "{role}: the menu opens");
        if email == "pa@x.io" {
            ui.shot("phone-390-menu-open").await;
        }
        link.click().await.unwrap();
        ui.wait("#log-table").await;
        if email == "pa@x.io" {
            for (path, name) in [
                ("/console/tenants", "tenants"),
                ("/console/quota-requests", "quota"),
                ("/console/requests", "requests"),
                ("/console/tenants/acme/apps", "apps"),
            ] {
                ui.go(path).await;
                ui.shot(&format!("phone-390-{name}")).await;
            }
            // The last column of the quota table (Approve / Reject),
            // scrolled to inside its wrapper.
            ui.go("/console/quota-requests").await;
            ui.c.execute(
                "const c = document.querySelector('#quota-rows tr td:last-child'); \
                 c.scrollIntoView({block: 'center', inline: 'center'});",
                vec![],
            )
            .await
            .unwrap();
            ui.shot("phone-390-quota-last-column").await;
        }
        // Log out through the menu, as a phone user does.
        ui.click("#nav-button").await;
        ui.logout().await;
    }
    assert!(cells_pages > 20, "only {cells_pages} pages checked");
    assert!(problems.is_empty(), "at 390 px:\n{}", problems.join("\n"));
    ui.c.close().await.unwrap();
    srv.shutdown().await;
}
