//! The admin API: roles, four eyes, grants on the hot path, audit, key hygiene.

use domain::Limits;
use e2e::*;
use serde_json::json;
use std::time::Duration;

struct Platform {
    env: TestEnv,
    srv: server::app::Running,
    base: String,
    admin: String,
    admin2: String,
    ta: String,
    ta_other: String,
    finance: String,
    auditor: String,
}

async fn platform(tenant_tokens: i64) -> Platform {
    let env = TestEnv::new().await;
    env.model("gpt-4o-mini", "chat", 150_000, 600_000).await;
    env.tenant(
        "t",
        Limits {
            monthly_tokens: Some(tenant_tokens),
            ..Default::default()
        },
        None,
    )
    .await;
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
    Platform {
        admin: login(&base, "admin@x.io").await,
        admin2: login(&base, "admin2@x.io").await,
        ta: login(&base, "ta@x.io").await,
        ta_other: login(&base, "ta-other@x.io").await,
        finance: login(&base, "finance@x.io").await,
        auditor: login(&base, "auditor@x.io").await,
        env,
        srv,
        base,
    }
}

#[tokio::test]
async fn every_role_against_every_route() {
    let p = platform(1_000_000).await;
    let b = &p.base;
    let tenant = json!({"id": "new-t", "name": "New", "limits": {"monthly_tokens": 10}});
    let app = |id: &str| json!({"id": id, "name": id});
    // (method, path, body, [admin, ta(t), ta(other), finance, auditor, nobody])
    let cases: Vec<(&str, String, Option<serde_json::Value>, [u16; 6])> = vec![
        (
            "GET",
            format!("{b}/api/v1/tenants/t"),
            None,
            [200, 200, 404, 200, 200, 401],
        ),
        (
            "PATCH",
            format!("{b}/api/v1/tenants/t"),
            Some(json!({"name": "T"})),
            [200, 403, 404, 403, 403, 401],
        ),
        (
            "GET",
            format!("{b}/api/v1/tenants/t/usage"),
            None,
            [200, 200, 404, 200, 200, 401],
        ),
        (
            "GET",
            format!("{b}/api/v1/audit"),
            None,
            [200, 403, 403, 403, 200, 401],
        ),
        (
            "GET",
            format!("{b}/api/v1/audit/verify"),
            None,
            [200, 403, 403, 403, 200, 401],
        ),
        (
            "GET",
            format!("{b}/api/v1/quota-requests"),
            None,
            [200, 200, 200, 200, 200, 401],
        ),
    ];
    let tokens = [
        Some(&p.admin),
        Some(&p.ta),
        Some(&p.ta_other),
        Some(&p.finance),
        Some(&p.auditor),
        None,
    ];
    for (method, url, body, want) in &cases {
        for (who, token) in tokens.iter().enumerate() {
            let (status, resp) = api(method, url, token.map(|s| s.as_str()), body.clone()).await;
            assert_eq!(status, want[who], "{method} {url} as #{who}: {resp}");
        }
    }
    // Creating: each role once, with distinct ids so a success does not
    // turn the next call into a conflict.
    let creators = [
        (&p.admin, 200),
        (&p.ta, 403),
        (&p.finance, 403),
        (&p.auditor, 403),
    ];
    for (i, (token, want)) in creators.iter().enumerate() {
        let mut t = tenant.clone();
        t["id"] = json!(format!("new-t{i}"));
        assert_eq!(
            api("POST", &format!("{b}/api/v1/tenants"), Some(token), Some(t))
                .await
                .0,
            *want
        );
        let u = json!({"email": format!("u{i}@x.io"), "password": "long enough password", "role": "finance"});
        assert_eq!(
            api("POST", &format!("{b}/api/v1/users"), Some(token), Some(u))
                .await
                .0,
            *want
        );
    }
    let apps = [
        (&p.admin, 200),
        (&p.ta, 200),
        (&p.ta_other, 404),
        (&p.finance, 403),
        (&p.auditor, 403),
    ];
    for (i, (token, want)) in apps.iter().enumerate() {
        let r = api(
            "POST",
            &format!("{b}/api/v1/tenants/t/apps"),
            Some(token),
            Some(app(&format!("app{i}"))),
        )
        .await;
        assert_eq!(r.0, *want, "{r:?}");
    }
    // A tenant admin's list shows only their tenant's requests.
    let req =
        json!({"tenant_id": "other", "tokens": 5, "expires_at": days_ahead(30), "reason": "x"});
    assert_eq!(
        api(
            "POST",
            &format!("{b}/api/v1/quota-requests"),
            Some(&p.ta_other),
            Some(req)
        )
        .await
        .0,
        201
    );
    let (_, mine) = api(
        "GET",
        &format!("{b}/api/v1/quota-requests"),
        Some(&p.ta),
        None,
    )
    .await;
    assert_eq!(mine["data"].as_array().unwrap().len(), 0);
    let req =
        json!({"tenant_id": "other", "tokens": 5, "expires_at": days_ahead(30), "reason": "x"});
    assert_eq!(
        api(
            "POST",
            &format!("{b}/api/v1/quota-requests"),
            Some(&p.ta),
            Some(req)
        )
        .await
        .0,
        404
    );
    p.srv.shutdown().await;
}

#[tokio::test]
async fn a_grant_lets_refused_requests_through_until_it_expires() {
    let p = platform(98).await;
    let b = &p.base;
    let (status, k) = api(
        "POST",
        &format!("{b}/api/v1/tenants/t/apps/a/keys"),
        Some(&p.ta),
        Some(json!({"name": "k"})),
    )
    .await;
    assert_eq!(status, 201, "{k}");
    let key = k["key"].as_str().unwrap().to_string();
    let url = format!("{b}/v1/chat/completions");
    // A new key reaches the gateway's index within a second.
    assert!(
        eventually(Duration::from_secs(1), || async {
            post(&url, &key, &chat_body("hello", Some(16)))
                .await
                .status()
                == 200
        })
        .await
    );
    // 24 tokens each (27 held): three fit in 98, the fourth does not.
    for _ in 0..2 {
        assert_eq!(
            post(&url, &key, &chat_body("hello", Some(16)))
                .await
                .status(),
            200
        );
    }
    assert_eq!(
        post(&url, &key, &chat_body("hello", Some(16)))
            .await
            .status(),
        402
    );

    let expires = chrono::Utc::now() + chrono::Duration::seconds(4);
    let (status, q) = api(
        "POST",
        &format!("{b}/api/v1/quota-requests"),
        Some(&p.ta),
        Some(
            json!({"tenant_id": "t", "tokens": 1000, "expires_at": expires, "reason": "campaign"}),
        ),
    )
    .await;
    assert_eq!(status, 201, "{q}");
    assert_eq!(q["state"], "pending");
    let id = q["id"].as_str().unwrap().to_string();
    // Four eyes: the tenant admin cannot approve at all.
    assert_eq!(
        api(
            "POST",
            &format!("{b}/api/v1/quota-requests/{id}/approve"),
            Some(&p.ta),
            None
        )
        .await
        .0,
        403
    );
    let (status, q) = api(
        "POST",
        &format!("{b}/api/v1/quota-requests/{id}/approve"),
        Some(&p.admin),
        Some(json!({"note": "ok for the campaign"})),
    )
    .await;
    assert_eq!(status, 200, "{q}");
    assert_eq!(q["state"], "active");
    // Decided once.
    assert_eq!(
        api(
            "POST",
            &format!("{b}/api/v1/quota-requests/{id}/reject"),
            Some(&p.admin2),
            None
        )
        .await
        .0,
        409
    );

    let passes = eventually(Duration::from_secs(1), || async {
        post(&url, &key, &chat_body("hello", Some(16)))
            .await
            .status()
            == 200
    })
    .await;
    assert!(
        passes,
        "the approved grant did not reach the hot path within a second"
    );
    let (_, usage) = api(
        "GET",
        &format!("{b}/api/v1/tenants/t/usage"),
        Some(&p.ta),
        None,
    )
    .await;
    assert_eq!(usage["limit_tokens"], 1098);
    assert_eq!(usage["granted_tokens"], 1000);

    tokio::time::sleep_until(
        tokio::time::Instant::now() + (expires - chrono::Utc::now()).to_std().unwrap(),
    )
    .await;
    let r = post(&url, &key, &chat_body("hello", Some(16))).await;
    assert_eq!(r.status(), 402, "an expired grant still counted");

    let (_, audit) = api("GET", &format!("{b}/api/v1/audit"), Some(&p.auditor), None).await;
    let actions: Vec<&str> = audit["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["action"].as_str().unwrap())
        .collect();
    for a in [
        "key.create",
        "quota_request.create",
        "quota_request.approve",
    ] {
        assert!(actions.contains(&a), "{a} missing from {actions:?}");
    }
    p.srv.shutdown().await;
}

#[tokio::test]
async fn nobody_approves_their_own_request() {
    let p = platform(100).await;
    let b = &p.base;
    let req =
        json!({"tenant_id": "t", "tokens": 10, "expires_at": days_ahead(30), "reason": "mine"});
    let (_, q) = api(
        "POST",
        &format!("{b}/api/v1/quota-requests"),
        Some(&p.admin),
        Some(req),
    )
    .await;
    let id = q["id"].as_str().unwrap().to_string();
    let (status, body) = api(
        "POST",
        &format!("{b}/api/v1/quota-requests/{id}/approve"),
        Some(&p.admin),
        None,
    )
    .await;
    assert_eq!(status, 403, "{body}");
    assert_eq!(
        api(
            "POST",
            &format!("{b}/api/v1/quota-requests/{id}/reject"),
            Some(&p.admin2),
            None
        )
        .await
        .0,
        200
    );
    // A second admin account made by the requester is not a second pair of eyes.
    let sock = json!({"email": "sock@x.io", "password": "correct horse battery staple", "role": "platform_admin"});
    assert_eq!(
        api(
            "POST",
            &format!("{b}/api/v1/users"),
            Some(&p.admin),
            Some(sock)
        )
        .await
        .0,
        200
    );
    // Markup is no email address (the console's defect 14): refused naming
    // the field.
    let script = json!({"email": "<script>alert(1)</script>@x.io",
        "password": "correct horse battery staple", "role": "finance"});
    let (status, body) = api(
        "POST",
        &format!("{b}/api/v1/users"),
        Some(&p.admin),
        Some(script),
    )
    .await;
    assert_eq!(status, 400, "{body}");
    assert!(body.to_string().contains("email"), "{body}");
    let sock = login(b, "sock@x.io").await;
    let req =
        json!({"tenant_id": "t", "tokens": 10, "expires_at": days_ahead(30), "reason": "again"});
    let (_, q) = api(
        "POST",
        &format!("{b}/api/v1/quota-requests"),
        Some(&p.admin),
        Some(req),
    )
    .await;
    let id = q["id"].as_str().unwrap().to_string();
    let (status, body) = api(
        "POST",
        &format!("{b}/api/v1/quota-requests/{id}/approve"),
        Some(&sock),
        None,
    )
    .await;
    assert_eq!(status, 403, "{body}");
    assert_eq!(
        api(
            "POST",
            &format!("{b}/api/v1/quota-requests/{id}/approve"),
            Some(&p.admin2),
            None
        )
        .await
        .0,
        200
    );
    p.srv.shutdown().await;
}

#[tokio::test]
async fn a_tampered_audit_row_is_named_and_plain_edits_are_refused() {
    let p = platform(100).await;
    let b = &p.base;
    let (_, v) = api(
        "GET",
        &format!("{b}/api/v1/audit/verify"),
        Some(&p.auditor),
        None,
    )
    .await;
    assert_eq!(v["intact"], true, "{v}");
    let pool = p.env.store.pool();
    let edit = sqlx::query("UPDATE audit_log SET reason = 'nothing to see' WHERE id = 3")
        .execute(pool)
        .await;
    assert!(edit.is_err(), "audit_log accepted an UPDATE");
    assert!(sqlx::query("DELETE FROM audit_log WHERE id = 3")
        .execute(pool)
        .await
        .is_err());
    // A superuser can switch the trigger off; the chain still tells.
    sqlx::query("ALTER TABLE audit_log DISABLE TRIGGER audit_log_no_update")
        .execute(pool)
        .await
        .unwrap();
    sqlx::query("UPDATE audit_log SET after = '{\"limits\":{}}' WHERE id = 3")
        .execute(pool)
        .await
        .unwrap();
    sqlx::query("ALTER TABLE audit_log ENABLE TRIGGER audit_log_no_update")
        .execute(pool)
        .await
        .unwrap();
    let (_, v) = api(
        "GET",
        &format!("{b}/api/v1/audit/verify"),
        Some(&p.admin),
        None,
    )
    .await;
    assert_eq!(
        (v["intact"].clone(), v["first_broken_id"].clone()),
        (json!(false), json!(3)),
        "{v}"
    );
    // And the command line says the same, with exit 1.
    let mut cfg = p.env.config();
    cfg.database.url = p.env.db_url.clone();
    assert!(!server::commands::audit_verify(&cfg).await.unwrap());
    p.srv.shutdown().await;
}

#[tokio::test]
async fn a_new_key_is_shown_once_and_stored_nowhere() {
    let p = platform(1_000_000).await;
    let b = &p.base;
    let (status, k) = api(
        "POST",
        &format!("{b}/api/v1/tenants/t/apps/a/keys"),
        Some(&p.ta),
        Some(json!({"name": "ci"})),
    )
    .await;
    assert_eq!(status, 201);
    let key = k["key"].as_str().unwrap().to_string();
    assert!(key.starts_with(k["prefix"].as_str().unwrap()));
    let used = eventually(Duration::from_secs(1), || async {
        post(
            &format!("{b}/v1/chat/completions"),
            &key,
            &chat_body("hi", None),
        )
        .await
        .status()
            == 200
    })
    .await;
    assert!(used, "the new key never worked");
    let pool = p.env.store.pool();
    for table in [
        "virtual_keys",
        "audit_log",
        "usage_events",
        "users",
        "tenants",
        "apps",
    ] {
        let hits: i64 = sqlx::query_scalar(&format!(
            "SELECT count(*) FROM {table} t WHERE t::text LIKE $1"
        ))
        .bind(format!("%{}%", &key[3..]))
        .fetch_one(pool)
        .await
        .unwrap();
        assert_eq!(hits, 0, "the plaintext key is in {table}");
    }
    let metrics = metrics(p.srv.addr).await;
    assert!(!metrics.contains(&key[3..]));
    // Revoked: refused at once.
    let id = k["id"].as_str().unwrap();
    assert_eq!(
        api(
            "DELETE",
            &format!("{b}/api/v1/keys/{id}"),
            Some(&p.ta_other),
            None
        )
        .await
        .0,
        404
    );
    assert_eq!(
        api(
            "DELETE",
            &format!("{b}/api/v1/keys/{id}"),
            Some(&p.ta),
            None
        )
        .await
        .0,
        204
    );
    let gone = eventually(Duration::from_secs(1), || async {
        post(
            &format!("{b}/v1/chat/completions"),
            &key,
            &chat_body("hi", None),
        )
        .await
        .status()
            == 401
    })
    .await;
    assert!(gone);
    p.srv.shutdown().await;
}

#[tokio::test]
async fn login_failures_are_limited_and_audited() {
    let p = platform(100).await;
    let b = &p.base;
    let bad = json!({"email": "ta@x.io", "password": "not the password at all"});
    for _ in 0..5 {
        assert_eq!(
            api(
                "POST",
                &format!("{b}/api/v1/auth/login"),
                None,
                Some(bad.clone())
            )
            .await
            .0,
            401
        );
    }
    assert_eq!(
        api("POST", &format!("{b}/api/v1/auth/login"), None, Some(bad))
            .await
            .0,
        429
    );
    let (_, audit) = api("GET", &format!("{b}/api/v1/audit"), Some(&p.auditor), None).await;
    let failures = audit["data"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["action"] == "auth.login_failed")
        .count();
    assert_eq!(failures, 5);
    // A forged token (other secret) is refused.
    let forged =
        "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ4IiwiZXhwIjo5OTk5OTk5OTk5LCJpYXQiOjB9.c2lnbmF0dXJl";
    assert_eq!(
        api("GET", &format!("{b}/api/v1/tenants/t"), Some(forged), None)
            .await
            .0,
        401
    );
    p.srv.shutdown().await;
}

#[tokio::test]
async fn the_openapi_document_names_every_route() {
    let env = TestEnv::new().await;
    let srv = env.server().await;
    let doc: serde_json::Value = reqwest::get(format!("http://{}/api/v1/openapi.json", srv.addr))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let paths = doc["paths"].as_object().unwrap();
    // The routes the router serves, from the table it is built from: a new
    // route fails this test until it is documented (and then the injection
    // sweep, driven by the document, covers it).
    assert!(console::API_ROUTES.len() >= 28);
    for (method, path) in console::API_ROUTES {
        assert!(
            paths.get(*path).and_then(|p| p.get(*method)).is_some(),
            "{method} {path} undocumented"
        );
    }
    // And nothing documented that is not served.
    for (path, item) in paths {
        for method in item.as_object().unwrap().keys() {
            assert!(
                console::API_ROUTES.contains(&(method.as_str(), path.as_str())),
                "{method} {path} documented but not served"
            );
        }
    }
    srv.shutdown().await;
}
