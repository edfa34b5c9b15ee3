//! The console's and the admin API's security: `/metrics` not public,
//! revocable sessions, the sign-in back-off (per email across replicas,
//! per IP, never a lock-out), login CSRF; a platform admin disabling a
//! user and setting their password in the browser.

mod browser_common;

use browser_common::browse;
use e2e::console_web::Web;
use e2e::*;
use serde_json::json;
use std::time::Duration;

async fn metrics_status(url: &str, token: Option<&str>) -> u16 {
    let mut rb = reqwest::Client::new().get(url);
    if let Some(t) = token {
        rb = rb.bearer_auth(t);
    }
    rb.send().await.unwrap().status().as_u16()
}

#[tokio::test]
async fn metrics_are_not_public_by_default() {
    let env = TestEnv::new().await;
    // Nothing configured: the main listener has no /metrics.
    let mut cfg = env.config();
    cfg.metrics.token = None;
    let srv = env.server_with(cfg).await;
    let url = format!("http://{}/metrics", srv.addr);
    assert_eq!(metrics_status(&url, None).await, 404);
    assert_eq!(metrics_status(&url, Some(METRICS_TOKEN)).await, 404);
    srv.shutdown().await;

    // A token: only its bearer reads them.
    let srv = env.server().await;
    let url = format!("http://{}/metrics", srv.addr);
    assert_eq!(metrics_status(&url, None).await, 401);
    assert_eq!(
        metrics_status(&url, Some("e2e-metrics-token-wrong")).await,
        401
    );
    assert_eq!(metrics_status(&url, Some(METRICS_TOKEN)).await, 200);
    // The suite's helper reads them the same way.
    metrics(srv.addr).await;
    srv.shutdown().await;

    // A listener of its own serves them there, and only there.
    let mut cfg = env.config();
    cfg.metrics.token = None;
    cfg.metrics.listen = Some("127.0.0.1:0".into());
    let srv = env.server_with(cfg).await;
    let own = srv.metrics_addr.expect("the metrics listener");
    assert_ne!(own, srv.addr);
    assert_eq!(
        metrics_status(&format!("http://{own}/metrics"), None).await,
        200
    );
    let main = format!("http://{}/metrics", srv.addr);
    assert_eq!(metrics_status(&main, None).await, 404);
    srv.shutdown().await;
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

async fn can_read(base: &str, token: &str) -> u16 {
    api("GET", &format!("{base}/api/v1/audit"), Some(token), None)
        .await
        .0
}

#[tokio::test]
async fn revoked_sessions_are_refused() {
    let env = TestEnv::new().await;
    env.tenant("t", domain::Limits::default(), None).await;
    user(&env, "admin@x.io", "platform_admin", None).await;
    user(&env, "aud@x.io", "auditor", None).await;
    user(&env, "aud2@x.io", "auditor", None).await;
    user(&env, "aud3@x.io", "auditor", None).await;
    let srv = env.server().await;
    let b = &format!("http://{}", srv.addr);
    let admin = login(b, "admin@x.io").await;

    // Logout (API): that token stops working, another session goes on.
    let t1 = login(b, "aud@x.io").await;
    let t2 = login(b, "aud@x.io").await;
    assert_eq!(can_read(b, &t1).await, 200);
    let (s, _) = api("POST", &format!("{b}/api/v1/auth/logout"), Some(&t1), None).await;
    assert_eq!(s, 204);
    assert_eq!(
        can_read(b, &t1).await,
        401,
        "a logged-out token still works"
    );
    assert_eq!(can_read(b, &t2).await, 200);

    // Logout (console): the stolen cookie is refused after logout.
    let w = Web::login(b, "aud@x.io").await;
    assert_eq!(w.get("/console/audit").await.status, 200);
    assert_eq!(w.post("/console/logout", &[]).await.status, 303);
    let after = w.get("/console/audit").await;
    assert_eq!(after.status, 303, "the cookie still works after logout");
    assert_eq!(
        after.location.as_deref(),
        Some("/console/login?next=%2Fconsole%2Faudit")
    );

    // Password change: every session of the person ends, the new password works.
    let other = login(b, "aud@x.io").await;
    let (s, _) = api(
        "POST",
        &format!("{b}/api/v1/auth/password"),
        Some(&t2),
        Some(json!({"current_password": PASSWORD, "new_password": "a brand new long password"})),
    )
    .await;
    assert_eq!(s, 204);
    assert_eq!(can_read(b, &t2).await, 401);
    assert_eq!(can_read(b, &other).await, 401);
    let (s, _) = api(
        "POST",
        &format!("{b}/api/v1/auth/login"),
        None,
        Some(json!({"email": "aud@x.io", "password": "a brand new long password"})),
    )
    .await;
    assert_eq!(s, 200);

    // Role change by an admin: the person's sessions end.
    let t = login(b, "aud2@x.io").await;
    let id = user_id(&env, "aud2@x.io").await;
    let (s, _) = api(
        "POST",
        &format!("{b}/api/v1/users/{id}/role"),
        Some(&admin),
        Some(json!({"role": "finance"})),
    )
    .await;
    assert_eq!(s, 200);
    assert_eq!(
        can_read(b, &t).await,
        401,
        "a session outlived a role change"
    );

    // Disabling: refused at once, and no new sign-in.
    let t = login(b, "aud3@x.io").await;
    let w = Web::login(b, "aud3@x.io").await;
    let id = user_id(&env, "aud3@x.io").await;
    let (s, _) = api(
        "POST",
        &format!("{b}/api/v1/users/{id}/disable"),
        Some(&admin),
        Some(json!({"disabled": true})),
    )
    .await;
    assert_eq!(s, 200);
    assert_eq!(can_read(b, &t).await, 401);
    assert_eq!(w.get("/console/audit").await.status, 303);
    let (s, _) = api(
        "POST",
        &format!("{b}/api/v1/auth/login"),
        None,
        Some(json!({"email": "aud3@x.io", "password": PASSWORD})),
    )
    .await;
    assert_eq!(s, 401);
    // Nobody disables themselves; the changes are audited.
    let me = user_id(&env, "admin@x.io").await;
    let (s, _) = api(
        "POST",
        &format!("{b}/api/v1/users/{me}/disable"),
        Some(&admin),
        Some(json!({"disabled": true})),
    )
    .await;
    assert_eq!(s, 403);
    let (_, audit) = api("GET", &format!("{b}/api/v1/audit"), Some(&admin), None).await;
    let actions: Vec<&str> = audit["data"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|r| r["action"].as_str())
        .collect();
    for a in ["user.disable", "user.password_change", "user.role_change"] {
        assert!(actions.contains(&a), "{a} not audited: {actions:?}");
    }
    srv.shutdown().await;
}

#[tokio::test]
async fn a_login_post_without_the_forms_csrf_token_is_refused() {
    let env = TestEnv::new().await;
    user(&env, "aud@x.io", "auditor", None).await;
    let srv = env.server().await;
    let b = &format!("http://{}", srv.addr);
    let anon = Web::anonymous(b);
    let (csrf, cookie) = anon.login_form().await;
    let c = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let post = |fields: Vec<(&'static str, String)>, cookie: Option<String>| {
        let mut rb = c.post(format!("{b}/console/login")).form(&fields);
        if let Some(k) = cookie {
            rb = rb.header("cookie", k);
        }
        rb.send()
    };
    let creds = || {
        vec![
            ("email", "aud@x.io".to_string()),
            ("password", PASSWORD.to_string()),
        ]
    };
    let with = |t: &str| {
        let mut f = creds();
        f.push(("_csrf", t.to_string()));
        f
    };
    // A cross-site form: no token, no cookie (SameSite=Strict).
    let r = post(creds(), None).await.unwrap();
    assert_eq!(r.status(), 403);
    let sets_session = |r: &reqwest::Response| {
        r.headers()
            .get_all("set-cookie")
            .iter()
            .any(|v| v.to_str().unwrap().starts_with("tg_session="))
    };
    assert!(!sets_session(&r));
    let body = r.text().await.unwrap();
    assert!(body.contains("sign-in form has expired"), "{body}");
    // The token without its cookie, the cookie without the token, a wrong
    // token: refused.
    let r = post(with(&csrf), None).await.unwrap();
    assert_eq!(r.status(), 403);
    let r = post(creds(), Some(cookie.clone())).await.unwrap();
    assert_eq!(r.status(), 403);
    let r = post(with("00ff00ff"), Some(cookie.clone())).await.unwrap();
    assert_eq!(r.status(), 403);
    // Another browser's pair does not fit this cookie.
    let (other_csrf, _) = anon.login_form().await;
    let r = post(with(&other_csrf), Some(cookie.clone())).await.unwrap();
    assert_eq!(r.status(), 403);
    // The form's own pair signs in.
    let r = post(with(&csrf), Some(cookie)).await.unwrap();
    assert_eq!(r.status(), 303);
    assert!(sets_session(&r));
    srv.shutdown().await;
}

async fn login_status(base: &str, email: &str, password: &str) -> (u16, Option<u64>) {
    let r = reqwest::Client::new()
        .post(format!("{base}/api/v1/auth/login"))
        .json(&json!({"email": email, "password": password}))
        .send()
        .await
        .unwrap();
    let retry = r
        .headers()
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok());
    (r.status().as_u16(), retry)
}

#[tokio::test]
async fn the_login_back_off_spans_replicas_and_never_locks_an_account_out() {
    let env = TestEnv::new().await;
    user(&env, "ta@x.io", "auditor", None).await;
    let a = env.server().await;
    let b = env.server().await;
    let (ua, ub) = (format!("http://{}", a.addr), format!("http://{}", b.addr));
    // Five failures spread over two replicas...
    for (i, u) in [&ua, &ub, &ua, &ub, &ua].into_iter().enumerate() {
        assert_eq!(
            login_status(u, "ta@x.io", "wrong password 123").await.0,
            401,
            "try {i}"
        );
    }
    // ... and the sixth, on either, waits (even with the right password).
    let (s, retry) = login_status(&ub, "ta@x.io", PASSWORD).await;
    assert_eq!(s, 429);
    let retry = retry.expect("Retry-After");
    assert!((1..=300).contains(&retry), "{retry}");
    // A refused attempt does not extend the wait: after it, the owner gets in.
    for _ in 0..3 {
        assert_eq!(
            login_status(&ua, "ta@x.io", "wrong password 123").await.0,
            429
        );
    }
    tokio::time::sleep(Duration::from_millis(retry * 1000 + 100)).await;
    assert_eq!(login_status(&ua, "ta@x.io", PASSWORD).await.0, 200);
    // The success ended the run: five free failures again.
    assert_eq!(
        login_status(&ub, "ta@x.io", "wrong password 123").await.0,
        401
    );
    a.shutdown().await;
    b.shutdown().await;
}

#[tokio::test]
async fn one_client_ip_guessing_many_emails_is_slowed() {
    let env = TestEnv::new().await;
    user(&env, "aud@x.io", "auditor", None).await;
    let srv = env.server().await;
    let b = &format!("http://{}", srv.addr);
    // Twenty failures from 127.0.0.1, each on another email (no email is
    // over its own limit)...
    for i in 0..20 {
        let (s, _) = login_status(b, &format!("nobody{i}@x.io"), "wrong password 123").await;
        assert_eq!(s, 401, "attempt {i}");
    }
    // ... and the IP waits, whatever email it tries next.
    let (s, retry) = login_status(b, "fresh@x.io", "wrong password 123").await;
    assert_eq!(s, 429);
    assert!(retry.is_some());
    srv.shutdown().await;
}

async fn signs_in(b: &str, email: &str, password: &str) -> u16 {
    api(
        "POST",
        &format!("{b}/api/v1/auth/login"),
        None,
        Some(json!({"email": email, "password": password})),
    )
    .await
    .0
}

/// In the browser: a platform admin disables an auditor (their session
/// ends, they cannot sign in), enables them again, and sets a new password
/// for them (their sessions end, only the new password works); each is
/// audited, and the admin's own row offers none of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_platform_admin_disables_a_user_and_sets_their_password_in_the_console() {
    let env = TestEnv::new().await;
    user(&env, "admin@x.io", "platform_admin", None).await;
    user(&env, "person@x.io", "auditor", None).await;
    let (srv, _driver, ui) = browse(&env, |_| ()).await;
    let b = &ui.base.clone();
    let person = login(b, "person@x.io").await;
    assert_eq!(can_read(b, &person).await, 200);
    ui.login("admin@x.io", None).await;
    ui.go("/console/users").await;
    let me = r#"#users-table tr[data-email="admin@x.io"]"#;
    let row = r#"#users-table tr[data-email="person@x.io"]"#;
    assert_eq!(
        ui.count(&format!("{me} form")).await,
        0,
        "own row has actions"
    );
    assert!(ui
        .text(&format!("{row} .user-state"))
        .await
        .starts_with("active"));

    ui.click(&format!("{row} .user-toggle")).await;
    ui.wait_attr("#users-done", "data-done", "users.done_disabled")
        .await;
    assert!(ui
        .text(&format!("{row} .user-state"))
        .await
        .starts_with("disabled"));
    assert_eq!(
        can_read(b, &person).await,
        401,
        "a disabled user's session works"
    );
    assert_eq!(signs_in(b, "person@x.io", PASSWORD).await, 401);
    // A disabled user has no password form (enable them first).
    assert_eq!(ui.count(&format!("{row} .user-password")).await, 0);

    // Wait for this action's own message: the previous one is still on
    // the page until the browser has followed the redirect.
    ui.click(&format!("{row} .user-toggle")).await;
    ui.wait_attr("#users-done", "data-done", "users.done_enabled")
        .await;
    assert!(ui
        .text(&format!("{row} .user-state"))
        .await
        .starts_with("active"));
    let person = login(b, "person@x.io").await;

    // Too short: refused beside the table, nothing changed.
    ui.fill(
        &format!("{row} .user-password input[name=password]"),
        "short",
    )
    .await;
    ui.c.execute(
        "document.querySelector(arguments[0]).removeAttribute('minlength')",
        vec![json!(format!("{row} .user-password input[name=password]"))],
    )
    .await
    .unwrap();
    ui.click(&format!("{row} .user-password button")).await;
    ui.wait("#role-error").await;
    assert_eq!(can_read(b, &person).await, 200);

    let new = "a new password they chose";
    ui.fill(&format!("{row} .user-password input[name=password]"), new)
        .await;
    ui.click(&format!("{row} .user-password button")).await;
    ui.wait_attr("#users-done", "data-done", "users.done_password")
        .await;
    assert_eq!(
        can_read(b, &person).await,
        401,
        "the old session survived a reset"
    );
    assert_eq!(signs_in(b, "person@x.io", PASSWORD).await, 401);
    assert_eq!(signs_in(b, "person@x.io", new).await, 200);

    let actions: Vec<String> = sqlx::query_scalar(
        "SELECT action FROM audit_log WHERE target = 'user:person@x.io'
           AND action IN ('user.disable', 'user.enable', 'user.password_reset', 'user.password_change')
         ORDER BY id",
    )
    .fetch_all(env.store.pool())
    .await
    .unwrap();
    assert_eq!(
        actions,
        ["user.disable", "user.enable", "user.password_reset"],
        "{actions:?}"
    );

    // The API: not one's own password, and a platform admin only.
    let admin = login(b, "admin@x.io").await;
    let admin_id = user_id_of(&env, "admin@x.io").await;
    let (s, _) = api(
        "POST",
        &format!("{b}/api/v1/users/{admin_id}/password"),
        Some(&admin),
        Some(json!({"password": "another long password"})),
    )
    .await;
    assert_eq!(s, 403);
    let person = login_with(b, "person@x.io", new).await;
    let (s, _) = api(
        "POST",
        &format!("{b}/api/v1/users/{admin_id}/password"),
        Some(&person),
        Some(json!({"password": "another long password"})),
    )
    .await;
    assert_eq!(s, 403);
    srv.shutdown().await;
}

async fn user_id_of(env: &TestEnv, email: &str) -> String {
    sqlx::query_scalar::<_, uuid::Uuid>("SELECT id FROM users WHERE email = $1")
        .bind(email)
        .fetch_one(env.store.pool())
        .await
        .unwrap()
        .to_string()
}

async fn login_with(b: &str, email: &str, password: &str) -> String {
    let (s, body) = api(
        "POST",
        &format!("{b}/api/v1/auth/login"),
        None,
        Some(json!({"email": email, "password": password})),
    )
    .await;
    assert_eq!(s, 200);
    body["token"].as_str().unwrap().to_string()
}
