//! Single sign-on against a real OpenID provider (oidc-provider-mock, its
//! own process): a tenant admin mapped from a group signs in, just in time
//! and audited; the callback's `state` is checked (a forged one is refused
//! without an audit row); a person in no mapped
//! group is refused; the provider's new signing key is picked up; password
//! sign-in can be turned off.

use e2e::console_web::Web;
use e2e::oidc::OidcProvider;
use e2e::*;
use serde_json::json;
use server::config::OidcConfig;

fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
}

fn set_cookie(r: &reqwest::Response, name: &str) -> Option<String> {
    r.headers()
        .get_all("set-cookie")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find(|v| v.starts_with(&format!("{name}=")) && !v.starts_with(&format!("{name}=;")))
        .map(|v| v.split(';').next().unwrap().to_string())
}

fn query(url: &str, key: &str) -> Option<String> {
    let q = url.split_once('?')?.1;
    serde_urlencoded::from_str::<Vec<(String, String)>>(q)
        .ok()?
        .into_iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v)
}

struct Sso {
    env: TestEnv,
    srv: server::app::Running,
    base: String,
    idp: OidcProvider,
}

async fn sso_platform(password_login: bool) -> Sso {
    let env = TestEnv::new().await;
    env.tenant("sales", domain::Limits::default(), None).await;
    let idp = OidcProvider::start();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let mut cfg = env.config();
    cfg.auth.password_login = password_login;
    cfg.auth.oidc = Some(OidcConfig {
        issuer_url: idp.issuer(),
        client_id: "tollgate-console".into(),
        client_secret: Some("console-client-secret".into()),
        redirect_url: format!("{base}/console/sso/callback"),
        scopes: vec!["email".into(), "profile".into()],
        groups_claim: "groups".into(),
        role_claim: None,
        tenant_claim: None,
        groups: [
            (
                "tg-sales-admins".to_string(),
                "tenant_admin:sales".to_string(),
            ),
            ("tg-platform".to_string(), "platform_admin".to_string()),
        ]
        .into_iter()
        .collect(),
    });
    let srv = env.server_on(cfg, listener).await;
    Sso {
        env,
        srv,
        base,
        idp,
    }
}

/// Result of one sign-in through the provider as `sub`.
struct Outcome {
    status: u16,
    session: Option<String>,
    body: String,
    authorize_url: String,
}

/// Start → the provider's authorization form, answered as `sub` → the
/// callback (with `tamper` applied to the URL it redirects to).
async fn sign_in(p: &Sso, sub: &str, tamper: impl Fn(String) -> String) -> Outcome {
    let c = client();
    let r = c
        .get(format!("{}/console/sso/start", p.base))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 303, "sso start");
    let pending = set_cookie(&r, "tg_sso").expect("the pending sign-in cookie");
    let authorize_url = r.headers()["location"].to_str().unwrap().to_string();
    assert!(
        authorize_url.starts_with(&p.idp.issuer()),
        "{authorize_url}"
    );
    // The provider's consent form, submitted as `sub`.
    let r = c
        .post(&authorize_url)
        .form(&[("sub", sub)])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 302, "the provider's answer");
    let back = r.headers()["location"].to_str().unwrap().to_string();
    assert!(
        back.starts_with(&format!("{}/console/sso/callback?", p.base)),
        "{back}"
    );
    let r = c
        .get(tamper(back))
        .header("cookie", pending)
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    let session = set_cookie(&r, "tg_session");
    Outcome {
        status,
        session,
        body: r.text().await.unwrap(),
        authorize_url,
    }
}

async fn audit_actions(env: &TestEnv) -> Vec<(String, String, serde_json::Value)> {
    sqlx::query_as::<_, (String, String, serde_json::Value)>(
        "SELECT action, actor, after FROM audit_log ORDER BY id",
    )
    .fetch_all(env.store.pool())
    .await
    .unwrap()
}

#[tokio::test]
async fn a_tenant_admin_signs_in_through_the_provider_mapped_from_a_group() {
    let mut p = sso_platform(true).await;
    p.idp
        .user(
            "alice-sub",
            json!({"email": "alice@corp.example", "email_verified": true,
                   "groups": ["staff", "tg-sales-admins"]}),
        )
        .await;
    let out = sign_in(&p, "alice-sub", |u| u).await;
    // PKCE (S256), state and nonce went to the provider.
    for k in ["code_challenge", "state", "nonce"] {
        assert!(
            query(&out.authorize_url, k).is_some(),
            "{k}: {}",
            out.authorize_url
        );
    }
    assert_eq!(
        query(&out.authorize_url, "code_challenge_method").as_deref(),
        Some("S256")
    );
    assert_eq!(out.status, 200, "{}", out.body);
    let session = out.session.expect("a session cookie");
    // Signed in as a tenant admin of sales, on the console's pages.
    let mut w = Web::anonymous(&p.base);
    w.cookie = session;
    let home = w.get("/console").await;
    assert_eq!(home.status, 200);
    assert!(home.body.contains("alice@corp.example"), "{}", home.body);
    assert!(
        home.body.contains("Tenant admin") && home.body.contains("sales"),
        "{}",
        home.body
    );
    assert_eq!(w.get("/console/tenants/sales").await.status, 200);
    assert_eq!(w.get("/console/users").await.status, 403);
    // Created just in time, audited as the provider's doing.
    let audit = audit_actions(&p.env).await;
    let created = audit
        .iter()
        .find(|(a, _, after)| a == "user.create" && after["email"] == "alice@corp.example")
        .expect("the new user is audited");
    assert_eq!(created.1, format!("sso:{}", p.idp.issuer()));
    assert_eq!(created.2["role"], "tenant_admin");
    assert_eq!(created.2["tenant_id"], "sales");
    assert_eq!(created.2["via"], "sso");

    // The same person again: the same account, no second creation.
    let again = sign_in(&p, "alice-sub", |u| u).await;
    assert_eq!(again.status, 200);
    let n = audit_actions(&p.env)
        .await
        .iter()
        .filter(|(a, _, _)| a == "user.create")
        .count();
    assert_eq!(n, 1);

    // The provider rotates its signing key: the new key is fetched.
    p.idp.rotate_keys();
    p.idp
        .user(
            "alice-sub",
            json!({"email": "alice@corp.example", "groups": ["tg-sales-admins"]}),
        )
        .await;
    let rotated = sign_in(&p, "alice-sub", |u| u).await;
    assert_eq!(rotated.status, 200, "{}", rotated.body);
    assert!(rotated.session.is_some());
    p.srv.shutdown().await;
}

#[tokio::test]
async fn a_forged_state_and_an_unmapped_person_are_refused() {
    let p = sso_platform(true).await;
    p.idp
        .user(
            "bob-sub",
            json!({"email": "bob@corp.example", "groups": ["tg-sales-admins"]}),
        )
        .await;
    // The callback with another state (a login CSRF through SSO).
    let forged = sign_in(&p, "bob-sub", |u| {
        let state = query(&u, "state").unwrap();
        u.replace(&format!("state={state}"), "state=forged-state")
    })
    .await;
    assert_eq!(forged.status, 400, "{}", forged.body);
    assert!(forged.session.is_none());
    assert!(
        forged.body.contains("Single sign-on did not complete"),
        "{}",
        forged.body
    );

    // Signed in at the provider, but in no mapped group: no account.
    p.idp
        .user(
            "eve-sub",
            json!({"email": "eve@corp.example", "groups": ["staff"]}),
        )
        .await;
    let eve = sign_in(&p, "eve-sub", |u| u).await;
    assert_eq!(eve.status, 403);
    assert!(eve.session.is_none());
    assert!(eve.body.contains("no tollgate role"), "{}", eve.body);
    assert!(p
        .env
        .store
        .user_by_email("eve@corp.example")
        .await
        .unwrap()
        .is_none());
    // Only eve's refusal is a sign-in attempt worth an audit row: the
    // forged state belongs to no sign-in this server started (anyone can
    // call the callback; the back-off limits them, the audit log does not
    // grow).
    let audit = audit_actions(&p.env).await;
    let refusals: Vec<_> = audit
        .iter()
        .filter(|(a, _, _)| a == "auth.sso_refused")
        .collect();
    assert_eq!(refusals.len(), 1, "{audit:?}");
    assert!(
        refusals[0].2.to_string().contains("eve@corp.example"),
        "{refusals:?}"
    );
    p.srv.shutdown().await;
}

#[tokio::test]
async fn password_sign_in_can_be_turned_off() {
    let p = sso_platform(false).await;
    user(&p.env, "admin@x.io", "platform_admin", None).await;
    let page = Web::anonymous(&p.base).get("/console/login").await;
    assert_eq!(page.status, 200);
    assert!(page.body.contains("id=\"sso-login\""), "{}", page.body);
    assert!(!page.body.contains("type=\"password\""), "{}", page.body);
    let (s, _) = api(
        "POST",
        &format!("{}/api/v1/auth/login", p.base),
        None,
        Some(json!({"email": "admin@x.io", "password": PASSWORD})),
    )
    .await;
    assert_eq!(s, 403);
    p.srv.shutdown().await;
}
