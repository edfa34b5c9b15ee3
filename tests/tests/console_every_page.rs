//! Every page each role reaches (platform admin, tenant admin, finance,
//! auditor: a crawl of the console's links from the dashboard), in
//! headless Chromium against the real server:
//!
//! - in both languages, no UI string is missing from either: a 中文 page
//!   shows no run of Latin words that is not data (names, ids, model names,
//!   numbers) or a unit kept as is (USD, UTC, token …), an English page no
//!   Chinese;
//! - in both languages and at 1280 and 390 px, no visible text shows raw
//!   code (a reason, notice or action code: `budget_used_90`,
//!   `TENANT_UPDATE`, `key.revoke`, `tenant:acme`), raw JSON (`{"`, `":`)
//!   or a UUID: a key, tenant, app or user shows its name. Only an element
//!   marked `data-shows-id` (an id that is the thing's only name: a request
//!   id) may show an id, and only one marked `data-verbatim` (a provider's
//!   usage object as sent, a format a person types) machine text;
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

/// The widths every page is read at: a desktop's and a phone's.
const WIDTHS: [(u32, u32); 2] = [(1280, 900), (390, 844)];

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
    // A revoked key (the audit's key.revoke names it) and a limits change
    // in dollars (the audit shows dollars, not micro-dollars).
    let (gone, _) = env
        .named_key("acme", "bot", "ci-key", Limits::default())
        .await;
    env.store
        .revoke_key("test", gone.parse().unwrap())
        .await
        .unwrap();
    env.store
        .set_tenant_limits(
            "test",
            "globex",
            &Limits {
                monthly_cost_usd: Some(domain::MicroUsd(2_500_000)),
                ..Default::default()
            },
        )
        .await
        .unwrap();
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
    // Counts as the jobs write them.
    for (job, outcome, counts, error) in [
        (
            "reconcile",
            "ok",
            serde_json::json!({"periods": 1, "tenants": 2, "differences": 0, "rollup_differences": 0}),
            None,
        ),
        (
            "rollover",
            "failed",
            serde_json::json!({}),
            Some("database error: connection refused"),
        ),
        (
            "stale-holds",
            "differences",
            serde_json::json!({"tenants": 2, "closed_stale": 1, "closed_orphaned": 0,
                "outbox_stored": 1, "leases_expired": 0}),
            None,
        ),
        (
            "alerts",
            "ok",
            serde_json::json!({"scopes": 3, "alerts_recorded": 2, "delivered": 0, "delivery_failures": 0}),
            None,
        ),
    ] {
        let id = env
            .store
            .claim_job_run(job, None, now, "replica-1")
            .await
            .unwrap()
            .unwrap();
        env.store
            .finish_job_run(id, outcome, &counts, &Value::Null, error)
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
            "model gpt-4o-mini: the provider reported usage the gateway does not believe (output_above_cap); request req_0190f3c2a1b27c3d8e9f0a1b2c3d4e5f was billed at 10 input + 20 output tokens, its raw report is kept in the ledger",
            &serde_json::json!({"request_id": "req_0190f3c2a1b27c3d8e9f0a1b2c3d4e5f", "model": "gpt-4o-mini", "kind": "output_above_cap",
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
    // Budget alerts as the alerts and forecast jobs record them: a
    // tenant's cost, an app's tokens, a forecast.
    let period = now.format("%Y-%m").to_string();
    for (scope, measure, threshold, payload) in [
        (
            "tenant:acme",
            "cost",
            "used_90",
            serde_json::json!({"type": "budget_alert", "tenant_id": "acme", "scope": "tenant:acme",
                "period": period, "measure": "cost", "threshold_percent": 90,
                "used": "0.000096", "limit": "0.000100", "at": now}),
        ),
        (
            "app:acme/bot",
            "tokens",
            "used_70",
            serde_json::json!({"type": "budget_alert", "tenant_id": "acme", "scope": "app:acme/bot",
                "period": period, "measure": "tokens", "threshold_percent": 70,
                "used": 720_000, "limit": 1_000_000, "at": now}),
        ),
        (
            "tenant:acme",
            "cost",
            "forecast_over_budget",
            serde_json::json!({"type": "forecast_over_budget", "tenant_id": "acme",
                "scope": "tenant:acme", "period": period, "measure": "cost",
                "forecast": "130000.000000", "limit": "125000.000000", "at": now}),
        ),
    ] {
        let recorded = env
            .store
            .record_alert(&store::NewAlert {
                tenant_id: "acme".into(),
                scope: scope.into(),
                period: period.clone(),
                measure: measure.into(),
                threshold: threshold.into(),
                notice: format!("{scope} {measure} {threshold}"),
                payload,
                webhook: false,
                at: now,
            })
            .await
            .unwrap();
        assert!(recorded);
    }
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

/// One text node of the page's body.
struct Text {
    text: String,
    /// Inside code, a script, the language switch (its "English" and
    /// "中文" are the languages' own names), the stored values an audit
    /// entry changed (before → after, as they were stored) or the charts'
    /// SVG (their series names are the chart code's, reworked separately):
    /// left out of the translation check, not of the raw scan.
    code: bool,
    /// Inside an element marked `data-shows-id`: an id that is the thing's
    /// only name (a request id), allowed to look like one.
    shows_id: bool,
    /// Inside an element marked `data-verbatim`: a provider's own usage
    /// object as it sent it (the request lookup's evidence), JSON on
    /// purpose.
    verbatim: bool,
}

/// Every text node of the page's body (closed `<details>` opened first;
/// a folded menu's text is read too: a tap shows it), without scripts,
/// styles and the language switch.
async fn texts(ui: &Ui) -> Vec<Text> {
    let v =
        ui.c.execute(
            r#"document.querySelectorAll('details').forEach(d => d.open = true);
               const out = [];
               const w = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
               while (w.nextNode()) {
                 const n = w.currentNode;
                 const e = n.parentElement;
                 if (e.closest('script, style, template, form.lang')) continue;
                 const t = n.textContent.trim();
                 if (!t) continue;
                 out.push([t, !!e.closest('code, pre, svg, table.changes td'),
                           !!e.closest('[data-shows-id]'), !!e.closest('[data-verbatim]')]);
               }
               return out;"#,
            vec![],
        )
        .await
        .unwrap();
    v.as_array()
        .unwrap()
        .iter()
        .map(|n| Text {
            text: n[0].as_str().unwrap_or_default().to_string(),
            code: n[1].as_bool().unwrap_or_default(),
            shows_id: n[2].as_bool().unwrap_or_default(),
            verbatim: n[3].as_bool().unwrap_or_default(),
        })
        .collect()
}

/// Words of the API that the console names as they are (a request's
/// `max_tokens` parameter, the field a provider reads its output cap
/// from): not codes.
const API_WORDS: &[&str] = &[
    "max_completion_tokens",
    "max_tokens",
    "x-request-id",
    "maxmemory-policy",
];

/// `text` without the seeded data (whole words only: "test" is data, not
/// a part of "latest") and the API's words.
fn without_data(text: &str, data: &[String]) -> String {
    let mut wholes: Vec<&str> = data
        .iter()
        .map(String::as_str)
        .chain(API_WORDS.iter().copied())
        .collect();
    wholes.sort_by_key(|d| std::cmp::Reverse(d.len()));
    let mut t = text.to_string();
    for d in wholes {
        if d.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
            let re = regex::Regex::new(&format!(r"(?-u:\b){}(?-u:\b)", regex::escape(d))).unwrap();
            t = re.replace_all(&t, " ").into_owned();
        } else {
            t = t.replace(d, " ");
        }
    }
    t
}

/// What a reader should never see in `n`: raw codes (snake_case,
/// UPPER_SNAKE, dotted or colon-joined identifiers: `budget_used_90`,
/// `TENANT_UPDATE`, `key.revoke`, `tenant:acme`), raw JSON, and UUIDs
/// outside an element marked as showing an id.
fn raw_findings(n: &Text, data: &[String]) -> Vec<String> {
    use std::sync::OnceLock;
    static RES: OnceLock<[regex::Regex; 4]> = OnceLock::new();
    let [snake, dotted, uuid, doc_path] = RES.get_or_init(|| {
        [
            // Letters or digits joined by underscores (a letter among them).
            regex::Regex::new(r"(?-u:\b)[A-Za-z0-9]+(?:_[A-Za-z0-9]+)+(?-u:\b)").unwrap(),
            // A word of two letters or more joined to another by '.' or ':'
            // (not "e.g.", not a time, not "http://").
            regex::Regex::new(r"(?-u:\b)[a-z][a-z_]+[.:][a-z][a-z0-9_\-]*").unwrap(),
            regex::Regex::new(r"(?i)[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
                .unwrap(),
            regex::Regex::new(r"(?-u:\b)[a-z_-]+(?:/[a-z_-]+)*/[a-z_-]+\.md(?-u:\b)").unwrap(),
        ]
    });
    let mut out = Vec::new();
    if n.verbatim {
        return out;
    }
    if n.text.contains("{\"") || n.text.contains("\":") {
        out.push(format!("raw JSON in {:?}", n.text));
    }
    if n.shows_id {
        return out;
    }
    if let Some(m) = uuid.find(&n.text) {
        out.push(format!("UUID {} in {:?}", m.as_str(), n.text));
    }
    // A path to a document (docs/providers.md) is a reference, not a code.
    let t = doc_path.replace_all(&n.text, " ");
    let t = without_data(&uuid.replace_all(&t, " "), data);
    for re in [snake, dotted] {
        for m in re.find_iter(&t) {
            if !m.as_str().bytes().any(|b| b.is_ascii_alphabetic()) {
                continue;
            }
            out.push(format!("code {} in {:?}", m.as_str(), n.text));
        }
    }
    out
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
async fn every_page_of_every_role_has_each_string_in_both_languages_and_no_raw_code() {
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
    let mut raw: Vec<String> = Vec::new();
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
            for (width, height) in WIDTHS {
                ui.c.set_window_size(width, height).await.unwrap();
                for href in &walk {
                    ui.go(href).await;
                    ui.wait(&format!("html[lang={lang}]")).await;
                    pages += 1;
                    for n in texts(&ui).await {
                        for f in raw_findings(&n, &data) {
                            raw.push(format!("{role} {lang} {href}: {f}"));
                        }
                        if n.code {
                            continue;
                        }
                        let t = n.text;
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
            ui.c.set_window_size(1280, 900).await.unwrap();
        }
        if email == "ta@x.io" {
            ui.go("/console/tenants/acme/apps").await;
            ui.shot("every-page-apps-zh").await;
        }
        set_lang(&ui, "en").await;
        if email == "pa@x.io" {
            seeds_are_shown(&ui, &walk).await;
        }
        ui.logout().await;
    }
    missing.sort();
    missing.dedup();
    raw.sort();
    raw.dedup();
    assert!(
        raw.is_empty(),
        "{} raw codes, JSON or ids on {pages} pages (both languages, 1280 and 390 px):\n{}",
        raw.len(),
        raw.join("\n")
    );
    assert!(
        missing.is_empty(),
        "{} strings without their translation on {pages} pages:\n{}",
        missing.len(),
        missing.join("\n")
    );
    ui.c.close().await.unwrap();
    srv.shutdown().await;
}

/// The scan read what it is meant to: the pages with the seeded notices,
/// audit rows, job counts and refusals are in the walk, and show them in
/// words (English).
async fn seeds_are_shown(ui: &Ui, walk: &[String]) {
    for page in [
        "/console/notices",
        "/console/jobs",
        "/console/audit",
        "/console/bills",
    ] {
        assert!(walk.iter().any(|h| h == page), "{page} not in {walk:?}");
    }
    ui.go("/console/notices").await;
    let notices = ui.text("#notices-table").await;
    for want in [
        "Tenant Acme Corp has used 90 % or more",
        "$0.000096 of $0.0001",
        "App bot of Acme Corp has used 70 %",
        "720,000 of 1,000,000",
        "output above the cap sent",
    ] {
        assert!(notices.contains(want), "{want:?} in {notices}");
    }
    assert_eq!(
        ui.count("#notices-table a.request-id[data-shows-id]").await,
        1
    );
    ui.go("/console/jobs").await;
    let runs = ui.text("#runs-table").await;
    assert!(runs.contains("stale holds closed: 1"), "{runs}");
    assert!(ui.count("#runs-table ul.counts li").await >= 13, "{runs}");
    ui.go("/console/audit").await;
    let revoked = ui.text("#audit-table tr[data-action='key.revoke']").await;
    assert!(
        revoked.contains("key revoked") && revoked.contains("key ci-key"),
        "{revoked}"
    );
    let limits = ui
        .text("#audit-table tr[data-action='tenant.limits'][data-target='tenant:globex']")
        .await;
    assert!(
        limits.contains("tenant Globex") && limits.contains("$2.50"),
        "{limits}"
    );
    ui.go("/console/bills").await;
    assert!(
        ui.count(".refused-reason").await >= 1,
        "a refusal by reason"
    );
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
