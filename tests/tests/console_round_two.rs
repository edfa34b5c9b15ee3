//! Issue #52's defects that blocked a task or confused (a browser walk of
//! four roles), each fixed and held here in headless Chromium against the
//! real server: free text has a maximum length (a 200,000-character reason
//! is refused, the dashboard stays small); two tabs editing one tenant — the
//! second save is refused, naming the change; an htmx action after the
//! session ended goes to the login page and back, the input kept (a deep
//! link too); the quota table's buttons sit in its Actions column; an audit
//! entry's values are readable at 1280 and 390 px; restoring the limits in
//! force reads as "no change", not "unlimited"; a form's POST result
//! reloads and switches language without a bare 405.

mod browser_common;

use browser_common::{browse, Ui};
use domain::Limits;
use e2e::*;
use serde_json::{json, Value};

fn rpm(n: i64) -> Limits {
    Limits {
        rpm: Some(n),
        ..Default::default()
    }
}

/// A quota request through the API: (status, body).
async fn ask_quota(base: &str, token: &str, reason: &str) -> (u16, Value) {
    let expires = (chrono::Utc::now() + chrono::Duration::days(2)).to_rfc3339();
    api(
        "POST",
        &format!("{base}/api/v1/quota-requests"),
        Some(token),
        Some(json!({"tenant_id": "t", "tokens": 1000, "expires_at": expires, "reason": reason})),
    )
    .await
}

/// Signs in on the login page the browser is on (no navigation first).
async fn sign_in_here(ui: &Ui, email: &str) {
    ui.fill("input[name=email]", email).await;
    ui.fill("input[name=password]", e2e::console_web::PASSWORD)
        .await;
    ui.click("button[type=submit]").await;
    ui.wait("#logout").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_200000_character_reason_is_refused_with_its_limit_and_the_dashboard_stays_small() {
    let env = TestEnv::new().await;
    env.tenant("t", Limits::default(), None).await;
    env.app("t", "a", Limits::default()).await;
    user(&env, "admin@x.io", "platform_admin", None).await;
    user(&env, "admin2@x.io", "platform_admin", None).await;
    user(&env, "ta@x.io", "tenant_admin", Some("t")).await;
    let (srv, _driver, ui) = browse(&env, |_| ()).await;
    let token = login(&ui.base, "ta@x.io").await;

    // The API: 400, naming the field and the maximum.
    let huge = "x".repeat(200_000);
    let (status, body) = ask_quota(&ui.base, &token, &huge).await;
    assert_eq!(
        status,
        400,
        "{}",
        &body.to_string()[..200.min(body.to_string().len())]
    );
    assert_eq!(body["error"]["param"], "reason", "{body}");
    let msg = body["error"]["message"].as_str().unwrap();
    assert!(msg.contains("at most 2,000 characters"), "{msg}");
    // The longest allowed reason is taken, and shown clipped.
    let (status, body) = ask_quota(&ui.base, &token, &"long reason ".repeat(166)).await;
    assert_eq!(status, 201, "{body}");
    let (status, _) = ask_quota(&ui.base, &token, "launch week").await;
    assert_eq!(status, 201);

    // The console form: a maxlength, and the same refusal beside the field
    // when the text comes past it anyway (a script, an old browser).
    ui.login("ta@x.io", None).await;
    ui.go("/console/quota-requests").await;
    let max = ui
        .wait("#request-form textarea[name=reason]")
        .await
        .attr("maxlength")
        .await
        .unwrap();
    assert_eq!(max.as_deref(), Some("2000"));
    ui.fill("#request-form input[name=tokens]", "5000").await;
    ui.c.execute(
        "document.querySelector('#request-form input[name=expires_at]').value = arguments[0];
         const r = document.querySelector('#request-form textarea[name=reason]');
         r.removeAttribute('maxlength');
         r.value = 'y'.repeat(200000);",
        vec![json!(days_ahead_local(30))],
    )
    .await
    .unwrap();
    ui.click("#request-submit").await;
    let err = ui
        .text("#request-form .field-error[data-field=reason]")
        .await;
    assert!(err.contains("at most 2,000 characters"), "{err}");
    ui.shot("r2-01-reason-too-long").await;
    ui.logout().await;

    // The second admin's dashboard: small, the long reason a few lines
    // with an ellipsis and all of it in the title.
    ui.login("admin2@x.io", None).await;
    let html = ui.c.source().await.unwrap();
    assert!(
        html.len() < 100_000,
        "the dashboard is {} bytes",
        html.len()
    );
    let cells =
        ui.c.execute(
            "return Array.from(document.querySelectorAll('td.reason .clip')).map(e =>
                [e.getBoundingClientRect().height, (e.getAttribute('title') || '').length])",
            vec![],
        )
        .await
        .unwrap();
    let cells: Vec<(f64, usize)> = serde_json::from_value(cells).unwrap();
    let long = cells
        .iter()
        .find(|(_, n)| *n > 1000)
        .expect("the long reason's cell");
    assert!(long.0 < 90.0, "the long reason takes {} px", long.0);
    ui.shot("r2-02-dashboard-long-reason").await;

    ui.c.close().await.unwrap();
    srv.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_tabs_editing_one_tenant_the_second_save_is_refused_naming_the_change() {
    let env = TestEnv::new().await;
    env.tenant("t", rpm(60), None).await;
    env.app("t", "a", Limits::default()).await;
    let (key_id, _) = env.key("t", "a", rpm(10)).await;
    user(&env, "admin@x.io", "platform_admin", None).await;
    let (srv, _driver, ui) = browse(&env, |_| ()).await;
    ui.login("admin@x.io", None).await;

    // Tab one opens the tenant; tab two opens it too and raises rpm.
    ui.go("/console/tenants/t").await;
    ui.wait("#tenant-form").await;
    let one = ui.c.window().await.unwrap();
    let two = ui.c.new_window(true).await.unwrap().handle;
    ui.c.switch_to_window(two).await.unwrap();
    ui.go("/console/tenants/t").await;
    ui.fill("#tenant-form input[name=rpm]", "700").await;
    ui.click("#tenant-submit").await;
    ui.wait("#tenant-saved").await;

    // Tab one, still showing rpm 60, renames the tenant: refused, saying
    // who changed what since it was opened; what was typed stays.
    ui.c.switch_to_window(one).await.unwrap();
    ui.fill("#tenant-form input[name=name]", "Renamed").await;
    ui.click("#tenant-submit").await;
    let notice = ui.text("#stale").await;
    assert!(notice.contains("Changed since you opened it"), "{notice}");
    assert!(notice.contains("admin@x.io"), "{notice}");
    let change = ui.text("#stale [data-field='limits.rpm']").await;
    assert!(change.contains("60") && change.contains("700"), "{change}");
    assert_eq!(ui.count("#tenant-saved").await, 0);
    let typed = ui
        .wait("#tenant-form input[name=name]")
        .await
        .prop("value")
        .await
        .unwrap();
    assert_eq!(typed.as_deref(), Some("Renamed"));
    ui.shot("r2-03-tenant-changed-meanwhile").await;
    let t = env
        .store
        .tenant(&TenantScope::system(), "t")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(t.limits.rpm, Some(700), "tab two's change stands");
    assert_eq!(t.name, "t", "tab one's stale save was not stored");

    // The API: the version as ETag; a change on an older one is 409.
    let token = login(&ui.base, "admin@x.io").await;
    let c = reqwest::Client::new();
    let url = format!("{}/api/v1/tenants/t", ui.base);
    let r = c.get(&url).bearer_auth(&token).send().await.unwrap();
    let etag = r.headers()["etag"].to_str().unwrap().to_string();
    let body: Value = r.json().await.unwrap();
    assert_eq!(etag, format!("\"{}\"", body["version"]), "{body}");
    let patch = |if_match: String, rpm: i64| {
        c.patch(&url)
            .bearer_auth(&token)
            .header("if-match", if_match)
            .json(&json!({"limits": {"rpm": rpm}}))
            .send()
    };
    let r = patch(etag.clone(), 800).await.unwrap();
    assert_eq!(r.status(), 200);
    let r = patch(etag.clone(), 900).await.unwrap();
    assert_eq!(r.status(), 409, "a change on a stale version");
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["error"]["code"], "version_conflict", "{body}");
    // …also as a body field, and for a key's limits.
    let stale = body_version(&etag) - 1;
    let (status, body) = api(
        "PATCH",
        &url,
        Some(&token),
        Some(json!({"name": "x", "version": stale})),
    )
    .await;
    assert_eq!(status, 409, "{body}");
    let key_url = format!("{}/api/v1/keys/{key_id}/limits", ui.base);
    let (_, hist) = api("GET", &format!("{key_url}/versions"), Some(&token), None).await;
    let v = hist["version"].as_i64().expect("the key's version");
    let (status, body) = api(
        "PUT",
        &key_url,
        Some(&token),
        Some(json!({"limits": {"rpm": 5}, "version": v})),
    )
    .await;
    assert_eq!(
        (status, body["version"].as_i64()),
        (200, Some(v + 1)),
        "{body}"
    );
    let (status, body) = api(
        "PUT",
        &key_url,
        Some(&token),
        Some(json!({"limits": {"rpm": 6}, "version": v})),
    )
    .await;
    assert_eq!(status, 409, "{body}");

    // The key's limits form in the console, opened before that change.
    ui.go(&format!("/console/keys/{key_id}/limits")).await;
    ui.wait("#limits-form").await;
    api(
        "PUT",
        &key_url,
        Some(&token),
        Some(json!({"limits": {"rpm": 7}})),
    )
    .await;
    ui.fill("#limits-form input[name=rpm]", "8").await;
    ui.click("#limits-submit").await;
    let change = ui.text("#stale [data-field='limits.rpm']").await;
    assert!(change.contains('5') && change.contains('7'), "{change}");

    ui.c.close().await.unwrap();
    srv.shutdown().await;
}

fn body_version(etag: &str) -> i64 {
    etag.trim_matches('"').parse().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_htmx_action_after_the_session_ended_signs_in_again_and_comes_back_with_the_input() {
    let env = TestEnv::new().await;
    env.tenant("t", Limits::default(), None).await;
    env.app("t", "a", Limits::default()).await;
    user(&env, "ta@x.io", "tenant_admin", Some("t")).await;
    // A key named before names had a maximum: 300 characters.
    env.named_key("t", "a", &"k".repeat(300), Limits::default())
        .await;
    let (srv, _driver, ui) = browse(&env, |_| ()).await;
    ui.login("ta@x.io", None).await;
    ui.go("/console/tenants/t/apps").await;
    // Its Revoke button stays on the card, the table needs no sideways
    // scrolling, and the name reads in full on demand.
    let geo =
        ui.c.execute(
            "const t = document.querySelector('#keys-a');
             const b = t.querySelector('button.danger').getBoundingClientRect();
             return [b.right, t.getBoundingClientRect().right, t.scrollWidth, t.clientWidth,
                     (t.querySelector('tbody td:first-child [title]') || {getAttribute: () => ''})
                       .getAttribute('title').length];",
            vec![],
        )
        .await
        .unwrap();
    let (button, card, scroll, client, title): (f64, f64, f64, f64, usize) =
        serde_json::from_value(geo).unwrap();
    assert!(
        button <= card && scroll <= client + 1.0,
        "Revoke at {button:.0} px, the card ends at {card:.0} (scroll {scroll} of {client})"
    );
    assert!(title >= 100, "the name's title holds {title} characters");
    ui.fill("#key-box-a input[name=name]", "kept key").await;

    // The session ends (its time is up) while the page is open.
    sqlx::query("UPDATE sessions SET expires_at = now() - interval '1 minute'")
        .execute(env.store.pool())
        .await
        .unwrap();
    ui.click("#key-box-a button.issue-key").await;
    // A whole page load of the login page, with the way back — not a login
    // form swapped into the card.
    ui.wait("input[name=password]").await;
    let url = ui.c.current_url().await.unwrap();
    assert_eq!(url.path(), "/console/login", "{url}");
    assert_eq!(
        url.query_pairs()
            .find(|(k, _)| k == "next")
            .map(|(_, v)| v.to_string()),
        Some("/console/tenants/t/apps".to_string()),
        "{url}"
    );
    assert_eq!(ui.count("#key-box-a").await, 0);
    ui.shot("r2-04-session-ended-login").await;

    // Signing in comes back to the page, the name typed still there, and
    // nothing was issued meanwhile.
    sign_in_here(&ui, "ta@x.io").await;
    let url = ui.c.current_url().await.unwrap();
    assert_eq!(url.path(), "/console/tenants/t/apps", "{url}");
    let kept = ui
        .wait("#key-box-a input[name=name]")
        .await
        .prop("value")
        .await
        .unwrap();
    assert_eq!(kept.as_deref(), Some("kept key"));
    let keys: i64 = sqlx::query_scalar("SELECT count(*) FROM virtual_keys")
        .fetch_one(env.store.pool())
        .await
        .unwrap();
    assert_eq!(keys, 1, "only the long-named key");
    ui.shot("r2-05-back-with-the-input").await;

    // A deep link opened while signed out comes back after signing in.
    ui.logout().await;
    ui.go("/console/quota-requests?x=1").await;
    ui.wait("input[name=password]").await;
    sign_in_here(&ui, "ta@x.io").await;
    let url = ui.c.current_url().await.unwrap();
    assert_eq!(
        (url.path(), url.query()),
        ("/console/quota-requests", Some("x=1")),
        "{url}"
    );
    // …and nowhere else: a way back to another site is ignored.
    ui.logout().await;
    ui.go("/console/login?next=//evil.example/console/x").await;
    sign_in_here(&ui, "ta@x.io").await;
    let url = ui.c.current_url().await.unwrap();
    assert_eq!(url.host_str(), Some("127.0.0.1"), "{url}");
    assert_eq!(url.path(), "/console", "{url}");

    ui.c.close().await.unwrap();
    srv.shutdown().await;
}

/// Each element's box against the width its text needs on one line: an
/// entry is `[text, width, needed, clipped]`.
const VALUE_WIDTHS: &str = r#"
const out = [];
for (const el of document.querySelectorAll(arguments[0])) {
  const text = el.textContent.trim();
  if (!text) continue;
  const probe = document.createElement('span');
  probe.style.whiteSpace = 'nowrap';
  probe.style.font = getComputedStyle(el).font;
  probe.textContent = text;
  document.body.appendChild(probe);
  const needed = probe.getBoundingClientRect().width;
  probe.remove();
  const r = el.getBoundingClientRect();
  // Past the right edge of its table's scroll box: seen only by scrolling
  // sideways.
  const box = el.closest('.scroll').getBoundingClientRect();
  out.push([text.slice(0, 40), r.width, needed, el.scrollWidth > el.clientWidth + 1, r.right > box.right + 1]);
}
return out;
"#;

/// Values squeezed below what they need (or ~10 characters), clipped, or —
/// when `wide` (a 1280 px screen) — off the right edge of their table.
async fn squeezed(ui: &Ui, css: &str, wide: bool) -> Vec<String> {
    let v = ui.c.execute(VALUE_WIDTHS, vec![json!(css)]).await.unwrap();
    let rows: Vec<(String, f64, f64, bool, bool)> = serde_json::from_value(v).unwrap();
    assert!(!rows.is_empty(), "no values under {css}");
    rows.into_iter()
        // A value gets the width it needs, or at least ~10 characters'.
        .filter(|(_, w, needed, clipped, off)| {
            *clipped || *w + 1.0 < needed.min(80.0) || (wide && *off)
        })
        .map(|(t, w, n, c, off)| {
            format!(
                "{t:?}: {w:.0} px of {n:.0} needed{}{}",
                if c { ", clipped" } else { "" },
                if off {
                    ", off the table's right edge"
                } else {
                    ""
                }
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quota_buttons_sit_in_the_actions_column_and_audit_values_read_at_both_widths() {
    let env = TestEnv::new().await;
    env.model("gpt-4o-mini", "chat", 150_000, 600_000).await;
    env.model("claude-3-5-haiku-latest", "chat", 800_000, 4_000_000)
        .await;
    env.tenant("marketing-cn", rpm(60), None).await;
    user(
        &env,
        "platform.admin.one@example-corp.io",
        "platform_admin",
        None,
    )
    .await;
    user(
        &env,
        "second.platform.admin@example-corp.io",
        "platform_admin",
        None,
    )
    .await;
    user(
        &env,
        "tenant.admin@marketing.example-corp.io",
        "tenant_admin",
        Some("marketing-cn"),
    )
    .await;
    user(&env, "auditor@example-corp.io", "auditor", None).await;
    let (srv, _driver, ui) = browse(&env, |_| ()).await;
    let base = ui.base.clone();

    // Changes with several fields, made by people with long addresses.
    let admin = login(&base, "platform.admin.one@example-corp.io").await;
    let (status, body) = api(
        "PATCH",
        &format!("{base}/api/v1/tenants/marketing-cn"),
        Some(&admin),
        Some(
            json!({"name": "Marketing China (Shanghai office)", "cost_center": "CC-4411-MKT",
            "priority": "core", "allowed_models": ["gpt-4o-mini", "claude-3-5-haiku-latest"],
            "limits": {"rpm": 700, "monthly_cost_usd": "12500.50", "max_output_tokens": 4096}}),
        ),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let ta = login(&base, "tenant.admin@marketing.example-corp.io").await;
    let expires = (chrono::Utc::now() + chrono::Duration::days(3)).to_rfc3339();
    let (status, body) = api(
        "POST",
        &format!("{base}/api/v1/quota-requests"),
        Some(&ta),
        Some(json!({"tenant_id": "marketing-cn", "tokens": 200000, "expires_at": expires,
            "reason": "Product launch in Shanghai: the campaign assistant needs more tokens this week"})),
    )
    .await;
    assert_eq!(status, 201, "{body}");

    // The quota table: Approve and Reject under "Actions", the people's
    // cells ordinary table cells.
    ui.login("second.platform.admin@example-corp.io", None)
        .await;
    ui.go("/console/quota-requests").await;
    ui.wait("#quota-rows button.approve").await;
    let geo = ui
        .c
        .execute(
            "const th = Array.from(document.querySelectorAll('thead th')).pop().getBoundingClientRect();
             const b = document.querySelector('#quota-rows button.approve').getBoundingClientRect();
             const r = document.querySelector('#quota-rows button.reject').getBoundingClientRect();
             const who = Array.from(document.querySelectorAll('#quota-rows td.who')).map(e => getComputedStyle(e).display);
             return [th.left, th.right, b.left, r.right, who];",
            vec![],
        )
        .await
        .unwrap();
    let (th_l, th_r, b_l, r_r, who): (f64, f64, f64, f64, Vec<String>) =
        serde_json::from_value(geo).unwrap();
    assert!(who.iter().all(|d| d == "table-cell"), "{who:?}");
    assert!(
        b_l >= th_l - 1.0 && r_r <= th_r + 1.0,
        "the buttons [{b_l:.0}, {r_r:.0}] are not under Actions [{th_l:.0}, {th_r:.0}]"
    );
    ui.shot("r2-06-quota-actions-column").await;
    ui.logout().await;

    // The auditor's pages: every value before → after readable.
    ui.login("auditor@example-corp.io", None).await;
    let mut problems = Vec::new();
    for (w, h) in [(1280, 900), (390, 844)] {
        ui.c.set_window_size(w, h).await.unwrap();
        for page in ["/console", "/console/audit"] {
            ui.go(page).await;
            ui.wait("table.changes").await;
            for p in squeezed(
                &ui,
                "table.changes td.before, table.changes td.after",
                w >= 1280,
            )
            .await
            {
                problems.push(format!("{w} px {page}: {p}"));
            }
            ui.shot(&format!("r2-07-audit-{w}{}", page.replace('/', "-")))
                .await;
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));

    ui.c.close().await.unwrap();
    srv.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restoring_the_limits_in_force_reads_as_no_change_and_a_forms_result_reloads_without_405() {
    let env = TestEnv::new().await;
    env.tenant("t", rpm(60), None).await;
    user(&env, "admin@x.io", "platform_admin", None).await;
    let (srv, _driver, ui) = browse(&env, |_| ()).await;
    let token = login(&ui.base, "admin@x.io").await;
    let url = format!("{}/api/v1/tenants/t", ui.base);
    for n in [120, 60] {
        let (status, body) = api(
            "PATCH",
            &url,
            Some(&token),
            Some(json!({"limits": {"rpm": n}})),
        )
        .await;
        assert_eq!(status, 200, "{body}");
    }
    // The first version (rpm 60) is the limits in force again.
    let (_, hist) = api("GET", &format!("{url}/limits/versions"), Some(&token), None).await;
    let versions = hist["versions"].as_array().unwrap();
    assert_eq!(versions.len(), 3, "{hist}");
    let first = versions[2]["version"].as_i64().unwrap();

    ui.login("admin@x.io", None).await;
    ui.go("/console/tenants/t/limits").await;
    ui.fill(
        &format!("#restore-{first} input[name=reason]"),
        "back to the start",
    )
    .await;
    ui.click(&format!("#restore-{first} button.restore-version"))
        .await;
    ui.wait("#limits-restored").await;
    // Recorded as what it was: a restore that changed nothing, with its
    // reason — not "no limits set (unlimited)" (the tenant has rpm 60).
    let top = ui.text("#limits-history > tbody > tr[data-current]").await;
    assert!(
        top.contains("no change") && top.contains("back to the start"),
        "{top}"
    );
    assert!(!top.contains("no limits set"), "{top}");
    ui.shot("r2-08-restore-same-recorded").await;

    // A restore without a reason (past the browser's `required`) is a
    // plain form's POST answered with the history and the error.
    let older = ui
        .wait("#limits-history form.restore")
        .await
        .attr("id")
        .await
        .unwrap()
        .unwrap();
    ui.c.execute(
        "document.querySelectorAll('form.restore input[name=reason]').forEach(i => i.required = false)",
        vec![],
    )
    .await
    .unwrap();
    ui.click(&format!("#{older} button.restore-version")).await;
    ui.wait(&format!("#{older} .field-error[data-field=reason]"))
        .await;
    let posted = ui.c.current_url().await.unwrap();
    assert!(posted.path().ends_with("/restore"), "{posted}");

    // That page came from a plain POST: switching the language, and a GET
    // of its address (a reload, a bookmark), land on the history, never on
    // a bare 405.
    ui.click("button[name=lang][value=zh]").await;
    ui.wait("html[lang=zh]").await;
    assert_eq!(ui.count("#limits-history").await, 1);
    ui.click("button[name=lang][value=en]").await;
    ui.wait("html[lang=en]").await;
    ui.go(posted.path()).await;
    let url = ui.c.current_url().await.unwrap();
    assert_eq!(url.path(), "/console/tenants/t/limits", "{url}");
    assert_eq!(ui.count("#limits-history").await, 1);
    for path in [
        "/console/users/0/role",
        "/console/borrowing/pool",
        "/console/logout",
    ] {
        let r = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .unwrap()
            .get(format!("{}{path}", ui.base))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 303, "GET {path}");
    }

    ui.c.close().await.unwrap();
    srv.shutdown().await;
}
