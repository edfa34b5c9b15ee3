//! The HTML console against the real server: every role against every
//! console route, tenant isolation in HTML and JSON, CSRF and cookie flags,
//! hostile input rendered escaped, request lookup, and the page shown when
//! PostgreSQL is down.

use domain::Limits;
use e2e::console_web::Web;
use e2e::hostile::{esc, raw_marker, IMG, SCRIPT, SQL};
use e2e::*;
use serde_json::json;
use std::time::Duration;

struct Platform {
    env: TestEnv,
    srv: server::app::Running,
    base: String,
}

/// Tenant `t` (a small token budget, app `a`) and tenant `other` (app `a`),
/// a model, and one console user per role.
async fn platform() -> Platform {
    let env = TestEnv::new().await;
    env.model("gpt-4o-mini", "chat", 150_000, 600_000).await;
    let budget = Limits {
        monthly_tokens: Some(200),
        ..Default::default()
    };
    env.tenant("t", budget, None).await;
    env.app("t", "a", Limits::default()).await;
    env.tenant("other", Limits::default(), None).await;
    env.app("other", "a", Limits::default()).await;
    user(&env, "admin@x.io", "platform_admin", None).await;
    user(&env, "admin2@x.io", "platform_admin", None).await;
    user(&env, "ta@x.io", "tenant_admin", Some("t")).await;
    user(&env, "ta-other@x.io", "tenant_admin", Some("other")).await;
    user(&env, "finance@x.io", "finance", None).await;
    user(&env, "auditor@x.io", "auditor", None).await;
    let srv = env.server().await;
    let base = format!("http://{}", srv.addr);
    Platform { env, srv, base }
}

/// A chat request refused with 402 by tenant t's budget; its x-request-id.
async fn refused_402(base: &str, key: &str) -> String {
    wait_for_key(base, key).await;
    let r = post(
        &format!("{base}/v1/chat/completions"),
        key,
        &chat_body("hello", Some(4000)),
    )
    .await;
    assert_eq!(r.status(), 402);
    r.headers()["x-request-id"].to_str().unwrap().to_string()
}

/// A key issued after the server started reaches its index within a
/// second (LISTEN/NOTIFY).
async fn wait_for_key(base: &str, key: &str) {
    let url = format!("{base}/v1/models");
    let known = eventually(Duration::from_secs(3), || async {
        reqwest::Client::new()
            .get(&url)
            .bearer_auth(key)
            .send()
            .await
            .unwrap()
            .status()
            != 401
    })
    .await;
    assert!(known, "the new key never reached the gateway's index");
}

/// What a role should get: allowed (200, or a 303 that is not to the login
/// page), sent to the login page, or this status.
#[derive(Clone, Copy, Debug)]
enum Want {
    Ok,
    Login,
    Is(u16),
}
use Want::*;

fn check(who: &str, what: &str, page: &e2e::console_web::Page, want: Want) {
    // The login page, maybe with the way back (`?next=`).
    let to_login = page
        .location
        .as_deref()
        .is_some_and(|l| l == "/console/login" || l.starts_with("/console/login?next="));
    let ok = match want {
        Ok => page.status == 200 || (page.status == 303 && !to_login),
        Login => page.status == 303 && to_login,
        Is(s) => page.status == s,
    };
    assert!(
        ok,
        "{what} as {who}: want {want:?}, got {} {:?}\n{}",
        page.status,
        page.location,
        &page.body[..page.body.len().min(600)]
    );
}

#[tokio::test]
async fn every_role_against_every_console_route() {
    let p = platform().await;
    let b = &p.base;
    let (key_id, key) = p.env.key("t", "a", Limits::default()).await;
    let rid = refused_402(b, &key).await;
    let names = ["admin", "ta", "ta-other", "finance", "auditor", "nobody"];
    let mut webs = Vec::new();
    for n in &names[..5] {
        webs.push(Web::login(b, &format!("{n}@x.io")).await);
    }
    webs.push(Web::anonymous(b));
    let lookup = format!("/console/requests?id={rid}");
    let key_history = format!("/console/keys/{key_id}/limits");
    let gets: Vec<(&str, [Want; 6])> = vec![
        (
            "/console/tenants/t/limits",
            [Ok, Ok, Is(404), Ok, Ok, Login],
        ),
        (
            "/console/tenants/t/apps/a/limits",
            [Ok, Ok, Is(404), Ok, Ok, Login],
        ),
        (&key_history, [Ok, Ok, Is(404), Ok, Ok, Login]),
        ("/console", [Ok, Ok, Ok, Ok, Ok, Login]),
        ("/console/tenants", [Ok, Ok, Ok, Ok, Ok, Login]),
        (
            "/console/tenants/new",
            [Ok, Is(403), Is(403), Is(403), Is(403), Login],
        ),
        ("/console/tenants/t", [Ok, Ok, Is(404), Ok, Ok, Login]),
        ("/console/tenants/t/apps", [Ok, Ok, Is(404), Ok, Ok, Login]),
        ("/console/apps", [Ok, Ok, Ok, Ok, Ok, Login]),
        ("/console/quota-requests", [Ok, Ok, Ok, Ok, Ok, Login]),
        ("/console/models", [Ok, Ok, Ok, Ok, Ok, Login]),
        (
            "/console/users",
            [Ok, Is(403), Is(403), Is(403), Is(403), Login],
        ),
        ("/console/audit", [Ok, Is(403), Is(403), Is(403), Ok, Login]),
        (
            "/console/audit/verify",
            [Ok, Is(403), Is(403), Is(403), Ok, Login],
        ),
        (
            "/console/audit.csv",
            [Ok, Is(403), Is(403), Is(403), Ok, Login],
        ),
        (
            "/console/no-such-page",
            [Is(404), Is(404), Is(404), Is(404), Is(404), Login],
        ),
        (&lookup, [Ok, Ok, Ok, Ok, Ok, Login]),
        ("/console/borrowing", [Ok, Is(403), Is(403), Ok, Ok, Login]),
        ("/console/analytics", [Ok, Ok, Ok, Ok, Ok, Login]),
        // A tenant admin of another tenant asking for t's analytics by
        // editing the address: not found.
        (
            "/console/analytics?tenant=t",
            [Ok, Ok, Is(404), Ok, Ok, Login],
        ),
        (
            "/console/models/gpt-4o-mini/fairness",
            [Ok, Is(403), Is(403), Is(403), Is(403), Login],
        ),
    ];
    for (path, want) in &gets {
        for (i, w) in webs.iter().enumerate() {
            check(names[i], path, &w.get(path).await, want[i]);
        }
    }

    // The request lookup over JSON: another tenant's request is not found.
    let api_want = [200, 200, 404, 200, 200, 401];
    for (i, n) in names.iter().enumerate() {
        let token = if i < 5 {
            Some(login(b, &format!("{n}@x.io")).await)
        } else {
            None
        };
        let (status, body) = api(
            "GET",
            &format!("{b}/api/v1/requests/{rid}"),
            token.as_deref(),
            None,
        )
        .await;
        assert_eq!(status, api_want[i], "GET /api/v1/requests as {n}: {body}");
    }

    // State changes: each role once, on objects of its own so that one
    // success does not turn the next call into a conflict.
    let ta_id = user_id(&p.env, "ta@x.io").await;
    let admin_id = user_id(&p.env, "admin@x.io").await;
    for (i, w) in webs.iter().enumerate() {
        let who = names[i];
        let role_of = |wants: [Want; 6]| wants[i];
        let tid = format!("new-{i}");
        check(
            who,
            "create tenant",
            &w.post(
                "/console/tenants",
                &[("id", &tid), ("name", "New"), ("priority", "standard")],
            )
            .await,
            role_of([Ok, Is(403), Is(403), Is(403), Is(403), Login]),
        );
        check(
            who,
            "edit tenant",
            &w.post(
                "/console/tenants/t",
                &[("name", "T"), ("priority", "standard")],
            )
            .await,
            role_of([Ok, Is(403), Is(404), Is(403), Is(403), Login]),
        );
        let app = format!("app{i}");
        check(
            who,
            "create app",
            &w.post("/console/tenants/t/apps", &[("id", &app), ("name", &app)])
                .await,
            role_of([Ok, Ok, Is(404), Is(403), Is(403), Login]),
        );
        check(
            who,
            "edit app",
            &w.post("/console/tenants/t/apps/a", &[("name", "A")]).await,
            role_of([Ok, Ok, Is(404), Is(403), Is(403), Login]),
        );
        check(
            who,
            "set the pool",
            &w.post(
                "/console/borrowing/pool",
                &[("max_borrow_share", "5"), ("reclaim_below_share", "20")],
            )
            .await,
            role_of([Ok, Is(403), Is(403), Is(403), Is(403), Login]),
        );
        check(
            who,
            "set a model's fairness",
            &w.post(
                "/console/models/gpt-4o-mini/fairness",
                &[("pool_capacity", "")],
            )
            .await,
            role_of([Ok, Is(403), Is(403), Is(403), Is(403), Login]),
        );
        check(
            who,
            "issue key",
            &w.post("/console/tenants/t/apps/a/keys", &[("name", "k")])
                .await,
            role_of([Ok, Ok, Is(404), Is(403), Is(403), Login]),
        );
        // Restoring t's first limits version: platform admins only.
        let admin_token = login(b, "admin@x.io").await;
        let (_, h) = api(
            "GET",
            &format!("{b}/api/v1/tenants/t/limits/versions"),
            Some(&admin_token),
            None,
        )
        .await;
        let first = h["versions"].as_array().unwrap().last().unwrap()["version"].clone();
        check(
            who,
            "restore limits",
            &w.post(
                &format!("/console/tenants/t/limits/{first}/restore"),
                &[("reason", "matrix")],
            )
            .await,
            role_of([Ok, Is(403), Is(404), Is(403), Is(403), Login]),
        );
        let (kid, _) = p.env.key("t", "a", Limits::default()).await;
        check(
            who,
            "revoke key",
            &w.post(&format!("/console/keys/{kid}/revoke"), &[]).await,
            role_of([Ok, Ok, Is(404), Is(403), Is(403), Login]),
        );
        check(
            who,
            "request quota",
            &w.post(
                "/console/quota-requests",
                &[
                    ("tenant_id", "t"),
                    ("tokens", "10"),
                    ("expires_at", days_ahead_local(30).as_str()),
                    ("reason", "matrix"),
                ],
            )
            .await,
            role_of([Ok, Ok, Ok, Is(403), Is(403), Login]),
        );
        let qid = quota_request_by(&p, "ta@x.io").await;
        check(
            who,
            "approve",
            &w.post(
                &format!("/console/quota-requests/{qid}/approve"),
                &[("note", "ok")],
            )
            .await,
            role_of([Ok, Is(403), Is(403), Is(403), Is(403), Login]),
        );
        let qid = quota_request_by(&p, "ta@x.io").await;
        check(
            who,
            "reject",
            &w.post(
                &format!("/console/quota-requests/{qid}/reject"),
                &[("note", "no")],
            )
            .await,
            role_of([Ok, Is(403), Is(403), Is(403), Is(403), Login]),
        );
        let model = format!("m-{i}");
        check(
            who,
            "create model",
            &w.post(
                "/console/models",
                &[
                    ("id", &model),
                    ("kind", "chat"),
                    ("upstream_base_url", "http://127.0.0.1:9/v1"),
                    ("upstream_model", "m"),
                    ("input_price_per_mtok_usd", "1"),
                    ("output_price_per_mtok_usd", "2"),
                ],
            )
            .await,
            role_of([Ok, Is(403), Is(403), Is(403), Is(403), Login]),
        );
        check(
            who,
            "disable a model",
            &w.post(
                &format!("/console/models/{model}/enabled"),
                &[("enabled", "false")],
            )
            .await,
            role_of([Ok, Is(403), Is(403), Is(403), Is(403), Login]),
        );
        let email = format!("new{i}@x.io");
        check(
            who,
            "create user",
            &w.post(
                "/console/users",
                &[
                    ("email", &email),
                    ("password", "long enough password"),
                    ("role", "finance"),
                ],
            )
            .await,
            role_of([Ok, Is(403), Is(403), Is(403), Is(403), Login]),
        );
        check(
            who,
            "change another's role",
            &w.post(
                &format!("/console/users/{ta_id}/role"),
                &[("role", "tenant_admin"), ("tenant_id", "t")],
            )
            .await,
            role_of([Ok, Is(403), Is(403), Is(403), Is(403), Login]),
        );
        check(
            who,
            "change own role",
            &w.post(
                &format!("/console/users/{admin_id}/role"),
                &[("role", "auditor")],
            )
            .await,
            role_of([Is(403), Is(403), Is(403), Is(403), Is(403), Login]),
        );
        check(
            who,
            "language",
            &w.post("/console/lang", &[("lang", "zh"), ("back", "/console")])
                .await,
            role_of([Ok, Ok, Ok, Ok, Ok, Ok]),
        );
    }
    // The platform admin is still a platform admin.
    let me = p
        .env
        .store
        .user_by_email("admin@x.io")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(me.role, "platform_admin");

    // Isolation: the other tenant's admin sees none of t's objects.
    let other = &webs[2];
    let t_admin = &webs[1];
    let tenants = other.get("/console/tenants").await.body;
    assert!(
        tenants.contains("/console/tenants/other\"") && !tenants.contains("/console/tenants/t\"")
    );
    let quota = other.get("/console/quota-requests").await.body;
    assert!(!quota.contains("<td>t</td>"), "{quota}");
    assert!(
        quota.contains("<td>other</td>"),
        "their own request is listed"
    );
    let look = other.get(&lookup).await.body;
    assert!(
        look.contains("id=\"request-missing\"")
            && !look.contains("tenant_monthly_budget_exhausted")
    );
    let dash = other.get("/console").await.body;
    assert!(!dash.contains("/console/tenants/t\""), "{dash}");
    // …while t's admin sees their apps, keys (prefix only) and the lookup.
    let apps = t_admin.get("/console/tenants/t/apps").await.body;
    assert!(apps.contains("id=\"app-a\"") && apps.contains("app1"));
    let look = t_admin.get(&lookup).await.body;
    assert!(look.contains("tenant_monthly_budget_exhausted"));
    // Logout ends the session.
    let out = t_admin.post("/console/logout", &[]).await;
    assert_eq!(out.status, 303);
    assert!(out.location.as_deref() == Some("/console/login"));
    p.srv.shutdown().await;
}

async fn user_id(env: &TestEnv, email: &str) -> String {
    env.store
        .user_by_email(email)
        .await
        .unwrap()
        .unwrap()
        .id
        .to_string()
}

/// A fresh pending quota request for tenant t made by `email`; its id.
async fn quota_request_by(p: &Platform, email: &str) -> String {
    let token = login(&p.base, email).await;
    let (status, q) = api(
        "POST",
        &format!("{}/api/v1/quota-requests", p.base),
        Some(&token),
        Some(json!({"tenant_id": "t", "tokens": 5, "expires_at": days_ahead(30), "reason": "x"})),
    )
    .await;
    assert_eq!(status, 201, "{q}");
    q["id"].as_str().unwrap().to_string()
}

async fn key_count(env: &TestEnv) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM virtual_keys")
        .fetch_one(env.store.pool())
        .await
        .unwrap()
}

#[tokio::test]
async fn state_changes_need_the_sessions_csrf_token_and_cookies_are_locked_down() {
    let p = platform().await;
    let b = &p.base;
    let w = Web::login(b, "ta@x.io").await;
    for flag in ["HttpOnly", "SameSite=Strict", "Secure", "Path=/"] {
        assert!(
            w.set_cookie.contains(flag),
            "{flag} missing: {}",
            w.set_cookie
        );
    }
    let issue = "/console/tenants/t/apps/a/keys";
    // No token, a wrong token in the form, a wrong header, another
    // session's token: all refused, nothing created.
    let before = key_count(&p.env).await;
    let none = w.post_raw(issue, &[("name", "k")]).await;
    assert_eq!(none.status, 403);
    assert!(
        none.body.contains("did not come from this console"),
        "{}",
        none.body
    );
    let wrong = w.post_raw(issue, &[("name", "k"), ("_csrf", "00ff")]).await;
    assert_eq!(wrong.status, 403);
    let bad_header = w.hx_post_token(issue, "deadbeef", &[("name", "k")]).await;
    assert_eq!(bad_header.status, 403);
    let other = Web::login(b, "admin@x.io").await;
    assert_ne!(other.csrf, w.csrf, "each session has its own token");
    let foreign = w.hx_post_token(issue, &other.csrf, &[("name", "k")]).await;
    assert_eq!(foreign.status, 403);
    assert_eq!(w.post_raw("/console/logout", &[]).await.status, 403);
    assert_eq!(
        key_count(&p.env).await,
        before,
        "a refused request changed state"
    );

    // With the token (form field or htmx header) it works.
    let ok = w.post(issue, &[("name", "k1")]).await;
    assert_eq!(ok.status, 200, "{}", ok.body);
    let ok = w.hx_post(issue, &[("name", "k2")]).await;
    assert_eq!(ok.status, 200, "{}", ok.body);
    assert!(ok.body.contains("id=\"new-key\"") && ok.body.contains("tg-"));
    assert_eq!(key_count(&p.env).await, before + 2);
    // The key is shown once: the page lists only its prefix.
    let key_text = ok
        .body
        .split("id=\"new-key\">")
        .nth(1)
        .unwrap()
        .split('<')
        .next()
        .unwrap()
        .to_string();
    let page = w.get("/console/tenants/t/apps").await.body;
    assert!(!page.contains(&key_text));
    // Bearer requests are not CSRF-able and need no token.
    let token = login(b, "ta@x.io").await;
    let (status, _) = api(
        "POST",
        &format!("{b}/api/v1/tenants/t/apps"),
        Some(&token),
        Some(json!({"id": "via-api", "name": "x"})),
    )
    .await;
    assert_eq!(status, 200);
    // No state change on GET: a GET to a POST-only route is not served;
    // it goes to the page of the form (here the dashboard), signed in still.
    let get = w.get("/console/logout").await;
    assert_eq!(get.status, 303);
    assert_eq!(get.location.as_deref(), Some("/console"));
    assert_eq!(w.get("/console/tenants/t/apps").await.status, 200);
    p.srv.shutdown().await;

    // `auth.cookie_secure = false` (plain-HTTP development) drops Secure only.
    let mut cfg = p.env.config();
    cfg.auth.cookie_secure = false;
    let srv = p.env.server_with(cfg).await;
    let w = Web::login(&format!("http://{}", srv.addr), "ta@x.io").await;
    assert!(!w.set_cookie.contains("Secure"), "{}", w.set_cookie);
    assert!(w.set_cookie.contains("HttpOnly") && w.set_cookie.contains("SameSite=Strict"));
    srv.shutdown().await;
}

fn assert_escaped(page: &str, what: &str) {
    assert_eq!(raw_marker(page), None, "raw markup in {what}");
}

#[tokio::test]
async fn hostile_names_reasons_and_notes_are_stored_and_rendered_escaped() {
    let p = platform().await;
    let b = &p.base;
    let admin = Web::login(b, "admin@x.io").await;
    let ta = Web::login(b, "ta@x.io").await;
    // Ids are checked (the error is next to the field, the value escaped);
    // names take anything and are stored as given.
    let bad = admin
        .post("/console/tenants", &[("id", SCRIPT), ("name", "x")])
        .await;
    assert_eq!(bad.status, 422);
    assert!(bad.body.contains("data-field=\"id\""), "{}", bad.body);
    assert_escaped(&bad.body, "the tenant form");
    assert!(
        bad.body.contains(&esc(SCRIPT)),
        "the typed id comes back escaped"
    );
    let made = admin
        .post(
            "/console/tenants",
            &[("id", "evil"), ("name", SCRIPT), ("cost_center", SQL)],
        )
        .await;
    assert_eq!(made.status, 303, "{}", made.body);
    let made = ta
        .post(
            "/console/tenants/t/apps",
            &[("id", "evil-app"), ("name", IMG)],
        )
        .await;
    assert_eq!(made.status, 303, "{}", made.body);
    let key = ta
        .hx_post("/console/tenants/t/apps/a/keys", &[("name", SQL)])
        .await;
    assert_eq!(key.status, 200);
    let req = ta
        .post(
            "/console/quota-requests",
            &[
                ("tokens", "100"),
                ("expires_at", days_ahead_local(30).as_str()),
                ("reason", IMG),
            ],
        )
        .await;
    assert_eq!(req.status, 303, "{}", req.body);
    let qid: uuid::Uuid = sqlx::query_scalar("SELECT id FROM quota_requests WHERE reason = $1")
        .bind(IMG)
        .fetch_one(p.env.store.pool())
        .await
        .expect("the reason is stored as typed");
    let ok = admin
        .post(
            &format!("/console/quota-requests/{qid}/approve"),
            &[("note", SCRIPT)],
        )
        .await;
    assert_eq!(ok.status, 303);
    let user = admin
        .post(
            "/console/users",
            &[("email", "x@x.io"), ("password", SQL), ("role", "finance")],
        )
        .await;
    assert_eq!(user.status, 303, "{}", user.body);
    let short = admin
        .post(
            "/console/users",
            &[
                ("email", SCRIPT),
                ("password", "short"),
                ("role", "finance"),
            ],
        )
        .await;
    assert_eq!(short.status, 422);
    assert!(
        short.body.contains("data-field=\"email\""),
        "{}",
        short.body
    );
    assert_escaped(&short.body, "the user form");

    for (who, path) in [
        (&admin, "/console/tenants"),
        (&admin, "/console/tenants/evil"),
        (&ta, "/console/tenants/t/apps"),
        (&ta, "/console/quota-requests"),
        (&admin, "/console/quota-requests"),
        (&admin, "/console"),
        (&admin, "/console/audit"),
        (&admin, "/console/users"),
    ] {
        let page = who.get(path).await;
        assert_eq!(page.status, 200, "{path}");
        assert_escaped(&page.body, path);
    }
    let tenants = admin.get("/console/tenants").await.body;
    assert!(tenants.contains(&esc(SCRIPT)));
    assert!(tenants.contains(&esc(SQL)), "the cost center");
    let quota = ta.get("/console/quota-requests").await.body;
    assert!(quota.contains(&esc(IMG)), "{quota}");
    assert!(quota.contains(&esc(SCRIPT)), "the note");
    let apps = ta.get("/console/tenants/t/apps").await.body;
    assert!(apps.contains(&esc(SQL)), "the key name is shown as typed");
    assert!(apps.contains(&esc(IMG)), "the app name");
    // The tables are all still there, with the hostile values as data.
    let (tenants_n, names): (i64, Vec<String>) = (
        sqlx::query_scalar("SELECT count(*) FROM tenants")
            .fetch_one(p.env.store.pool())
            .await
            .unwrap(),
        sqlx::query_scalar("SELECT name FROM virtual_keys")
            .fetch_all(p.env.store.pool())
            .await
            .unwrap(),
    );
    assert_eq!(tenants_n, 3);
    assert!(names.contains(&SQL.to_string()));
    p.srv.shutdown().await;
}

#[tokio::test]
async fn a_request_refused_with_402_can_be_looked_up_with_its_counters() {
    let p = platform().await;
    let b = &p.base;
    let (key_id, key) = p.env.key("t", "a", Limits::default()).await;
    // One admitted request, then one the budget refuses.
    wait_for_key(b, &key).await;
    let ok = post(
        &format!("{b}/v1/chat/completions"),
        &key,
        &chat_body("hi", Some(8)),
    )
    .await;
    assert_eq!(ok.status(), 200);
    let admitted = ok.headers()["x-request-id"].to_str().unwrap().to_string();
    let rid = refused_402(b, &key).await;
    let token = login(b, "ta@x.io").await;
    let url = format!("{b}/api/v1/requests/{rid}");
    let found = eventually(Duration::from_secs(5), || async {
        api("GET", &url, Some(&token), None).await.0 == 200
    })
    .await;
    assert!(found, "the refusal was never recorded");
    let (_, r) = api("GET", &url, Some(&token), None).await;
    assert_eq!(r["outcome"], "refused", "{r}");
    let d = &r["decision"];
    assert_eq!(d["reason"], "tenant_monthly_budget_exhausted");
    assert_eq!(d["status"], 402);
    assert_eq!(d["scope"], "tenant:t");
    assert_eq!(d["key_id"], key_id);
    assert_eq!(d["detail"]["limit_value"], 200);
    let headroom = d["detail"]["headroom_tokens"]
        .as_i64()
        .expect("headroom at the time");
    assert!((0..200).contains(&headroom), "{r}");
    assert!(d["detail"]["est_output_tokens"].as_i64().unwrap() >= 4000);
    assert!(r["usage"].is_null());

    // The console page shows the same.
    let w = Web::login(b, "ta@x.io").await;
    let page = w.get(&format!("/console/requests?id={rid}")).await.body;
    assert!(page.contains("data-outcome=\"refused\""), "{page}");
    // The reason code stays for scripts; people read a sentence.
    assert!(page.contains("data-reason=\"tenant_monthly_budget_exhausted\""));
    assert!(
        page.contains("Refused at ") && page.contains("tenant t had "),
        "{page}"
    );
    assert!(
        page.contains(&format!("data-counter=\"headroom_tokens\">{headroom}<")),
        "{page}"
    );
    assert!(page.contains("data-counter=\"limit_value\">200<"));

    // The admitted one shows its usage once the ledger has it.
    let url = format!("{b}/api/v1/requests/{admitted}");
    let settled = eventually(Duration::from_secs(5), || async {
        api("GET", &url, Some(&token), None).await.0 == 200
    })
    .await;
    assert!(settled);
    let (_, r) = api("GET", &url, Some(&token), None).await;
    assert_eq!(r["outcome"], "admitted");
    assert!(r["usage"]["output_tokens"].as_i64().unwrap() > 0);
    // Unknown ids and another tenant's are the same 404.
    let other = login(b, "ta-other@x.io").await;
    assert_eq!(
        api(
            "GET",
            &format!("{b}/api/v1/requests/{rid}"),
            Some(&other),
            None
        )
        .await
        .0,
        404
    );
    assert_eq!(
        api(
            "GET",
            &format!("{b}/api/v1/requests/req_nope"),
            Some(&token),
            None
        )
        .await
        .0,
        404
    );
    p.srv.shutdown().await;
}

/// Ids of the audit rows a console page shows, in order.
fn audit_ids(html: &str) -> Vec<i64> {
    let re = regex::Regex::new(r#"<tr id="audit-(\d+)""#).unwrap();
    re.captures_iter(html)
        .map(|c| c[1].parse().unwrap())
        .collect()
}

/// The href of the element with this id, unescaped.
fn href_of(html: &str, id: &str) -> Option<String> {
    let re = regex::Regex::new(&format!(r#"href="([^"]*)" id="{id}""#)).unwrap();
    re.captures(html)
        .map(|c| c[1].replace("&#38;", "&").replace("&amp;", "&"))
}

#[tokio::test]
async fn the_audit_log_pages_by_id_newest_first_with_times_in_utc() {
    let p = platform().await;
    let b = &p.base;
    for i in 0..230 {
        p.env
            .store
            .audit(store::NewAudit::new(
                "test",
                "paging.row",
                format!("row:{i}"),
            ))
            .await
            .unwrap();
    }
    let w = Web::login(b, "auditor@x.io").await;
    // Three pages of the filtered log (100, 100, 30), each strictly below
    // the last id of the one before; then no "older" link.
    let mut url = "/console/audit?action=paging".to_string();
    let mut seen: Vec<i64> = Vec::new();
    let mut sizes = Vec::new();
    loop {
        let page = w.get(&url).await;
        assert_eq!(page.status, 200, "{}", page.body);
        let ids = audit_ids(&page.body);
        assert!(ids.windows(2).all(|w| w[0] > w[1]), "newest first: {ids:?}");
        if let (Some(last), Some(first)) = (seen.last(), ids.first()) {
            assert!(first < last, "a page starts below the one before");
        }
        assert!(page.body.contains(" UTC</td>"), "times are labelled UTC");
        assert_eq!(seen.is_empty(), !page.body.contains("id=\"audit-newest\""));
        sizes.push(ids.len());
        seen.extend(ids);
        match href_of(&page.body, "audit-older") {
            Some(next) => {
                assert!(next.contains("action=paging"), "the filter is kept: {next}");
                url = next;
            }
            None => break,
        }
    }
    assert_eq!(sizes, [100, 100, 30]);
    assert_eq!(seen.len(), 230);

    // A filter that cannot match is refused (422), says so and lists
    // nothing (it listed every row, as if unfiltered): an unreadable time,
    // a From after its To.
    for q in [
        "action=paging&from=yesterday",
        "action=paging&from=2026-12-02T00:00&to=2026-12-01T00:00",
    ] {
        let page = w.get(&format!("/console/audit?{q}")).await;
        assert_eq!(page.status, 422, "{}", page.body);
        assert!(
            page.body.contains("id=\"audit-bad-filter\""),
            "{q}: {}",
            page.body
        );
        assert!(audit_ids(&page.body).is_empty(), "{q}: no rows");
    }

    // The API pages the same way.
    let token = login(b, "auditor@x.io").await;
    let (status, first) = api(
        "GET",
        &format!("{b}/api/v1/audit?limit=5"),
        Some(&token),
        None,
    )
    .await;
    assert_eq!(status, 200, "{first}");
    let next = first["next_before"].as_i64().expect("more rows");
    assert_eq!(first["data"].as_array().unwrap().len(), 5);
    assert_eq!(first["data"][4]["id"].as_i64(), Some(next));
    let (_, second) = api(
        "GET",
        &format!("{b}/api/v1/audit?limit=5&before={next}"),
        Some(&token),
        None,
    )
    .await;
    assert!(second["data"][0]["id"].as_i64().unwrap() < next);
    p.srv.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_says_the_database_is_unreachable_when_postgres_is_down() {
    let pg = PgProc::start();
    let env = TestEnv::with_services(&pg.admin_url(), shared_redis_url(), Default::default()).await;
    env.tenant("t", Limits::default(), None).await;
    user(&env, "admin@x.io", "platform_admin", None).await;
    let srv = env.server().await;
    let b = format!("http://{}", srv.addr);
    let w = Web::login(&b, "admin@x.io").await;
    assert_eq!(w.get("/console/tenants").await.status, 200);

    pg.down();
    let page = w.get("/console/tenants").await;
    assert_eq!(page.status, 503, "{}", page.body);
    assert!(
        page.body.contains("The database is unreachable"),
        "{}",
        page.body
    );
    assert!(
        page.body.contains("<html"),
        "a whole page, not a blank error"
    );
    let zh = w
        .post("/console/lang", &[("lang", "zh"), ("back", "/console")])
        .await;
    assert_eq!(zh.status, 303);
    // The login form needs no database.
    assert_eq!(Web::anonymous(&b).get("/console/login").await.status, 200);
    let (status, body) = api(
        "GET",
        &format!("{b}/api/v1/tenants/t"),
        Some("not-a-token"),
        None,
    )
    .await;
    assert_eq!(status, 401, "{body}");

    pg.up();
    let back = eventually(Duration::from_secs(20), || async {
        w.get("/console/tenants").await.status == 200
    })
    .await;
    assert!(back, "the console did not come back with PostgreSQL");
    srv.shutdown().await;
}
