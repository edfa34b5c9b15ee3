//! Hardening of sign-in, four eyes and the compose stack (issue #49), each
//! against the real server: bogus SSO callbacks write no audit row and are
//! rate-limited; a rotating `X-Forwarded-For` behind a trusted proxy is
//! limited like one client; SSO-only and password accounts refuse a wrong
//! password in the same time; the four-eyes walk-around (reset a person's
//! password, promote them, approve as them) is refused and audited; the
//! compose file's healthchecks answer 2xx against a real server and the
//! Dockerfile names what the repository holds.

use e2e::console_web::Web;
use e2e::*;
use serde_json::json;
use server::config::OidcConfig;
use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// One test of this file at a time: the timing test compares medians of
/// sign-ins, and the others sign in (argon2) and flood the SSO callback —
/// run beside it they would load one kind of try more than the other.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

async fn audit_rows(env: &TestEnv) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM audit_log")
        .fetch_one(env.store.pool())
        .await
        .unwrap()
}

fn base_of(srv: &server::app::Running) -> String {
    format!("http://{}", srv.addr)
}

/// A client whose connections leave from `from` (any 127.0.0.0/8 address
/// is this machine), so each try is its own client to the per-IP back-off.
fn client_from(from: Ipv4Addr) -> reqwest::Client {
    reqwest::Client::builder()
        .local_address(IpAddr::V4(from))
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
}

// ---------------------------------------------------------------- item 3

#[tokio::test]
async fn bogus_sso_callbacks_write_no_audit_row_and_are_rate_limited() {
    let _one = ONE_AT_A_TIME.lock().await;
    let env = TestEnv::new().await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let mut cfg = env.config();
    // No provider needs to answer: nothing here gets as far as it.
    cfg.auth.oidc = Some(OidcConfig {
        issuer_url: "http://127.0.0.1:9".into(),
        client_id: "tollgate-console".into(),
        client_secret: None,
        redirect_url: format!("{base}/console/sso/callback"),
        scopes: vec![],
        groups_claim: "groups".into(),
        role_claim: None,
        tenant_claim: None,
        groups: Default::default(),
    });
    let srv = env.server_on(cfg, listener).await;
    let before = audit_rows(&env).await;
    let junk = "x".repeat(16 * 1024);
    let c = reqwest::Client::new();
    let mut statuses: BTreeMap<u16, usize> = BTreeMap::new();
    let t0 = Instant::now();
    for i in 0..300 {
        let r = c
            .get(format!("{base}/console/sso/callback"))
            .query(&[("error", junk.as_str()), ("state", &format!("s{i}"))])
            .send()
            .await
            .unwrap();
        *statuses.entry(r.status().as_u16()).or_default() += 1;
    }
    let written = audit_rows(&env).await - before;
    assert_eq!(
        written,
        0,
        "300 bogus SSO callbacks wrote {written} audit rows in {:?} (statuses {statuses:?})",
        t0.elapsed()
    );
    let limited = statuses.get(&429).copied().unwrap_or(0);
    assert!(
        limited >= 250,
        "300 bogus SSO callbacks were not rate-limited: statuses {statuses:?}"
    );
    // The same address's password sign-in shares the budget.
    let (s, _) = api(
        "POST",
        &format!("{base}/api/v1/auth/login"),
        None,
        Some(json!({"email": "nobody@x.io", "password": "wrong wrong wrong"})),
    )
    .await;
    assert_eq!(s, 429);
    srv.shutdown().await;
}

// ---------------------------------------------------------------- item 4

#[tokio::test]
async fn rotating_forwarded_for_behind_a_trusted_proxy_is_limited_like_one_client() {
    let _one = ONE_AT_A_TIME.lock().await;
    let env = TestEnv::new().await;
    let mut cfg = env.config();
    cfg.auth.client_ip_header = Some("x-forwarded-for".into());
    // This test is the proxy: it connects from 127.0.0.1 and appends the
    // client's address, as nginx's $proxy_add_x_forwarded_for does.
    cfg.auth.trusted_proxies = vec!["127.0.0.1/32".into()];
    let srv = env.server_with(cfg).await;
    let base = base_of(&srv);
    let login = |from: Ipv4Addr, xff: String, i: usize| {
        let base = base.clone();
        async move {
            client_from(from)
                .post(format!("{base}/api/v1/auth/login"))
                .header("x-forwarded-for", xff)
                .json(&json!({"email": format!("nobody{i}@x.io"), "password": "wrong wrong wrong"}))
                .send()
                .await
                .unwrap()
                .status()
                .as_u16()
        }
    };
    let proxy = Ipv4Addr::new(127, 0, 0, 1);
    let mut limited_at = None;
    for i in 0..40 {
        // The client writes what it likes on the left; the proxy appends
        // the address it really connected from.
        let xff = format!("198.18.{}.{}, 203.0.113.7", i / 250, i % 250 + 1);
        match login(proxy, xff, i).await {
            429 => {
                limited_at = Some(i);
                break;
            }
            s => assert_eq!(s, 401, "try {i}"),
        }
    }
    assert_eq!(
        limited_at,
        Some(20),
        "40 sign-ins from one client rotating its X-Forwarded-For were limited at try {limited_at:?}"
    );
    // Another client behind the same proxy has its own budget.
    assert_eq!(
        login(proxy, "198.18.0.1, 203.0.113.8".into(), 100).await,
        401
    );
    // A peer that is not a trusted proxy: its header is ignored, the peer
    // is the client (a fresh one here, though it names the limited address).
    assert_eq!(
        login(Ipv4Addr::new(127, 0, 0, 2), "203.0.113.7".into(), 101).await,
        401
    );
    srv.shutdown().await;
}

// ---------------------------------------------------------------- item 7

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

#[tokio::test]
async fn sso_only_and_password_accounts_refuse_a_wrong_password_in_the_same_time() {
    let _one = ONE_AT_A_TIME.lock().await;
    const TRIES: usize = 21;
    let env = TestEnv::new().await;
    // One account per try (the per-email back-off allows five), and each
    // try from its own address (the per-IP one allows twenty).
    for i in 0..2 * TRIES + 4 {
        user(&env, &format!("pw{i}@x.io"), "finance", None).await;
        let subject = format!("sub-{i}");
        let email = format!("sso{i}@x.io");
        let id = store::SsoIdentity {
            issuer: "https://idp.example",
            subject: &subject,
            email: &email,
            email_verified: true,
            role: "finance",
            tenant: None,
        };
        env.store.sso_sign_in(&id).await.unwrap().unwrap();
    }
    let srv = env.server().await;
    let base = base_of(&srv);
    let (csrf, login_cookie) = Web::anonymous(&base).login_form().await;
    let mut n = 0u32;
    let mut from = || {
        n += 1;
        Ipv4Addr::new(127, 1, (n / 250) as u8, (n % 250) as u8 + 1)
    };
    // One wrong-password sign-in: (console form?, account) → its time.
    let try_once = |console: bool, email: String, from: Ipv4Addr| {
        let (base, csrf, cookie) = (base.clone(), csrf.clone(), login_cookie.clone());
        async move {
            let c = client_from(from);
            let t0 = Instant::now();
            let r = if console {
                c.post(format!("{base}/console/login"))
                    .header("cookie", cookie)
                    .form(&[
                        ("email", email.as_str()),
                        ("password", "not the password at all"),
                        ("_csrf", csrf.as_str()),
                    ])
                    .send()
                    .await
                    .unwrap()
            } else {
                c.post(format!("{base}/api/v1/auth/login"))
                    .json(&json!({"email": email, "password": "not the password at all"}))
                    .send()
                    .await
                    .unwrap()
            };
            let status = r.status().as_u16();
            let _ = r.bytes().await.unwrap();
            let took = t0.elapsed();
            assert_eq!(status, 401, "{email}");
            took
        }
    };
    let mut account = 0usize;
    for console in [false, true] {
        // Warm up both kinds (pools, the dummy hash).
        for k in 0..2 {
            try_once(console, format!("pw{}@x.io", account + k), from()).await;
            try_once(console, format!("sso{}@x.io", account + k), from()).await;
        }
        account += 2;
        let (mut pw, mut sso) = (Vec::new(), Vec::new());
        // Interleaved, each kind first in turn, so load on the machine
        // falls on both alike.
        for i in 0..TRIES {
            let (a, b) = (
                format!("pw{}@x.io", account + i),
                format!("sso{}@x.io", account + i),
            );
            if i % 2 == 0 {
                pw.push(try_once(console, a, from()).await);
                sso.push(try_once(console, b, from()).await);
            } else {
                sso.push(try_once(console, b, from()).await);
                pw.push(try_once(console, a, from()).await);
            }
        }
        account += TRIES;
        let (m_pw, m_sso) = (median(pw), median(sso));
        let gap = m_pw.abs_diff(m_sso).as_secs_f64() / m_pw.max(m_sso).as_secs_f64();
        let surface = if console { "console" } else { "API" };
        assert!(
            gap <= 0.20,
            "{surface} sign-in: a wrong password takes {m_pw:?} (median) on a password account but {m_sso:?} on an SSO-only one ({:.0} % apart)",
            gap * 100.0
        );
    }
    srv.shutdown().await;
}

// ---------------------------------------------------------------- item 8

async fn login_with(base: &str, email: &str, password: &str) -> String {
    let (s, body) = api(
        "POST",
        &format!("{base}/api/v1/auth/login"),
        None,
        Some(json!({"email": email, "password": password})),
    )
    .await;
    assert_eq!(s, 200, "login {email}: {body}");
    body["token"].as_str().unwrap().to_string()
}

/// Signs in through the console's form with this password; the session
/// cookie (`tg_session=…`).
async fn console_session(base: &str, email: &str, password: &str) -> String {
    let (csrf, login_cookie) = Web::anonymous(base).login_form().await;
    let r = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
        .post(format!("{base}/console/login"))
        .header("cookie", login_cookie)
        .form(&[("email", email), ("password", password), ("_csrf", &csrf)])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 303, "console login of {email}");
    let set = r.headers()["set-cookie"].to_str().unwrap();
    set.split(';').next().unwrap().to_string()
}

async fn console_get(cookie: &str, url: &str) -> String {
    let r = reqwest::Client::new()
        .get(url)
        .header("cookie", cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "{url}");
    r.text().await.unwrap()
}

#[tokio::test]
async fn the_four_eyes_walk_around_is_refused_and_audited() {
    let _one = ONE_AT_A_TIME.lock().await;
    let env = TestEnv::new().await;
    env.tenant("sales", domain::Limits::default(), None).await;
    // Three people the operator made: nobody is in anyone's creation line.
    user(&env, "a@x.io", "platform_admin", None).await;
    user(&env, "ops@x.io", "platform_admin", None).await;
    let u = user(&env, "u@x.io", "finance", None).await;
    let srv = env.server().await;
    let base = base_of(&srv);
    let ta = login(&base, "a@x.io").await;
    let expires = (chrono::Utc::now() + chrono::Duration::days(2)).to_rfc3339();
    let (s, q) = api(
        "POST",
        &format!("{base}/api/v1/quota-requests"),
        Some(&ta),
        Some(
            json!({"tenant_id": "sales", "tokens": 100000, "expires_at": expires,
                    "reason": "launch week"}),
        ),
    )
    .await;
    assert_eq!(s, 201, "{q}");
    let id = q["id"].as_str().unwrap().to_string();

    // A takes over U: a new password A knows, and the power to approve.
    let chosen = "a password A chose for U";
    let (s, b) = api(
        "POST",
        &format!("{base}/api/v1/users/{u}/password"),
        Some(&ta),
        Some(json!({"password": chosen})),
    )
    .await;
    assert_eq!(s, 204, "{b}");
    let (s, b) = api(
        "POST",
        &format!("{base}/api/v1/users/{u}/role"),
        Some(&ta),
        Some(json!({"role": "platform_admin"})),
    )
    .await;
    assert_eq!(s, 200, "{b}");

    // …and approves A's own request as U.
    let tu = login_with(&base, "u@x.io", chosen).await;
    for verb in ["approve", "reject"] {
        let (s, b) = api(
            "POST",
            &format!("{base}/api/v1/quota-requests/{id}/{verb}"),
            Some(&tu),
            Some(json!({"note": "looks fine"})),
        )
        .await;
        assert_eq!(
            s, 403,
            "U, whose password and role A set an instant ago, could {verb} A's request: {b}"
        );
        assert_eq!(b["error"]["code"], "four_eyes_violation", "{b}");
    }
    let refused: Vec<(String, String, serde_json::Value)> = sqlx::query_as(
        "SELECT actor, target, after FROM audit_log \
         WHERE action = 'quota_request.four_eyes_refused' ORDER BY id",
    )
    .fetch_all(env.store.pool())
    .await
    .unwrap();
    assert_eq!(refused.len(), 2, "{refused:?}");
    assert!(refused.iter().all(|r| r.0 == "user:u@x.io"));
    assert_eq!(refused[0].0, "user:u@x.io");
    assert_eq!(refused[0].1, format!("quota_request:{id}"));
    assert!(
        refused[0]
            .2
            .to_string()
            .contains("account_set_by_the_other"),
        "{refused:?}"
    );

    // The console decides through the same function: U sees no buttons on
    // A's request but the rule, and a forged form post is refused with it.
    let console = console_session(&base, "u@x.io", chosen).await;
    let page = console_get(&console, &format!("{base}/console/quota-requests")).await;
    let rule = "you and the requester set one another";
    assert!(page.contains(rule), "{page}");
    assert!(
        !page.contains(&format!("/console/quota-requests/{id}/approve")),
        "{page}"
    );
    let csrf = e2e::console_web::csrf_of(&page).unwrap();
    let r = reqwest::Client::new()
        .post(format!("{base}/console/quota-requests/{id}/approve"))
        .header("cookie", &console)
        .form(&[("note", "ok"), ("_csrf", &csrf)])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
    assert!(r.text().await.unwrap().contains(rule));

    // The other way round: A does not decide a request U makes either.
    let (s, q2) = api(
        "POST",
        &format!("{base}/api/v1/quota-requests"),
        Some(&tu),
        Some(
            json!({"tenant_id": "sales", "tokens": 5, "expires_at": expires,
                    "reason": "U's own"}),
        ),
    )
    .await;
    assert_eq!(s, 201, "{q2}");
    let (s, b) = api(
        "POST",
        &format!(
            "{base}/api/v1/quota-requests/{}/approve",
            q2["id"].as_str().unwrap()
        ),
        Some(&ta),
        None,
    )
    .await;
    assert_eq!(
        (s, &b["error"]["code"]),
        (403, &json!("four_eyes_violation"))
    );

    // A second pair of eyes A never touched decides A's request.
    let to = login(&base, "ops@x.io").await;
    let (s, b) = api(
        "POST",
        &format!("{base}/api/v1/quota-requests/{id}/approve"),
        Some(&to),
        None,
    )
    .await;
    assert_eq!(s, 200, "{b}");
    assert_eq!(b["state"], "active");
    srv.shutdown().await;
}

// ---------------------------------------------------------------- item 11

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

fn read(rel: &str) -> String {
    std::fs::read_to_string(repo().join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

/// What the tests need of a compose service.
#[derive(Debug, Default)]
struct Service {
    command: Vec<String>,
    ports: Vec<String>,
    /// The healthcheck's `test:` as exec form (`["CMD", …]`,
    /// `["CMD-SHELL", "…"]`; a plain string is CMD-SHELL).
    healthcheck: Option<Vec<String>>,
}

/// A YAML value in flow form: a list of double-quoted strings (which is
/// JSON) or a plain or quoted scalar.
fn flow(v: &str) -> Vec<String> {
    let v = v.trim();
    if v.starts_with('[') {
        serde_json::from_str(v).unwrap_or_else(|e| panic!("flow list {v}: {e}"))
    } else {
        vec![v.trim_matches('"').trim_matches('\'').to_string()]
    }
}

/// The services of docker-compose.yml, read by a strict little reader of
/// the block YAML it is written in (two-space indentation, lists in flow
/// form or as `- item`). A line it does not understand fails the test
/// rather than being skipped.
fn compose_services(text: &str) -> BTreeMap<String, Service> {
    let mut out: BTreeMap<String, Service> = BTreeMap::new();
    let (mut top, mut service, mut key) = (String::new(), String::new(), String::new());
    let mut in_healthcheck = false;
    for (n, raw) in text.lines().enumerate() {
        let line = raw.trim_end();
        if line.trim().is_empty() || line.trim_start().starts_with('#') {
            continue;
        }
        let indent = line.len() - line.trim_start().len();
        let body = line.trim_start();
        assert!(indent % 2 == 0, "line {}: odd indentation", n + 1);
        if let Some(item) = body.strip_prefix("- ") {
            if top == "services" && indent == 6 && key == "ports" {
                out.get_mut(&service).unwrap().ports.extend(flow(item));
            }
            continue;
        }
        let (k, v) = body
            .split_once(':')
            .unwrap_or_else(|| panic!("line {}: not a `key: value`: {body}", n + 1));
        let (k, v) = (k.trim().to_string(), v.trim());
        match indent {
            0 => top = k,
            2 if top == "services" => {
                service = k.clone();
                out.insert(k, Service::default());
                in_healthcheck = false;
            }
            4 if top == "services" => {
                in_healthcheck = k == "healthcheck";
                let s = out.get_mut(&service).unwrap();
                match k.as_str() {
                    "command" => s.command = flow(v),
                    "ports" if !v.is_empty() => s.ports = flow(v),
                    _ => {}
                }
                key = k;
            }
            6 if top == "services" && in_healthcheck && k == "test" => {
                let mut t = flow(v);
                if !v.starts_with('[') {
                    t.insert(0, "CMD-SHELL".into());
                }
                out.get_mut(&service).unwrap().healthcheck = Some(t);
            }
            _ => {}
        }
    }
    out
}

/// The URLs a healthcheck command fetches.
fn urls(test: &[String]) -> Vec<String> {
    test.iter()
        .flat_map(|a| a.split_whitespace())
        .filter(|w| w.starts_with("http://") || w.starts_with("https://"))
        .map(|w| w.trim_matches(|c| c == '"' || c == '\'').to_string())
        .collect()
}

/// `http://host:port/path?q` → (port, path?q).
fn port_and_path(url: &str) -> (u16, String) {
    let rest = url.split_once("://").unwrap().1;
    let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    let port = authority
        .rsplit_once(':')
        .map(|(_, p)| p.parse().unwrap())
        .unwrap_or(80);
    (
        port,
        if path.is_empty() {
            "/".into()
        } else {
            path.into()
        },
    )
}

#[tokio::test]
async fn the_compose_healthchecks_answer_2xx_against_a_real_server() {
    let _one = ONE_AT_A_TIME.lock().await;
    let services = compose_services(&read("docker-compose.yml"));
    for s in ["postgres", "redis", "clickhouse", "tollgate"] {
        assert!(services.contains_key(s), "service {s} in {services:?}");
    }
    let env = TestEnv::new().await;
    // The same `serve` (compose runs `tollgate-dev demo`, which seeds data first).
    let srv = env.server().await;
    let ours = base_of(&srv);
    let clickhouse = std::env::var("TOLLGATE_TEST_CLICKHOUSE_URL")
        .unwrap_or_else(|_| "http://127.0.0.1:8123".into());
    let tollgate = &services["tollgate"];
    let listen_port: u16 = tollgate
        .command
        .iter()
        .skip_while(|a| *a != "--listen")
        .nth(1)
        .and_then(|l| l.rsplit_once(':'))
        .map(|(_, p)| p.parse().unwrap())
        .expect("the tollgate service's command names --listen");
    let mut checked = 0;
    for (name, s) in &services {
        let Some(test) = &s.healthcheck else {
            panic!("service {name} has no healthcheck: nothing could depend on it");
        };
        for url in urls(test) {
            let (port, path) = port_and_path(&url);
            let target = match name.as_str() {
                "tollgate" => {
                    assert_eq!(
                        port, listen_port,
                        "{name}: {url} is not the port tollgate listens on"
                    );
                    &ours
                }
                "clickhouse" => &clickhouse,
                other => panic!(
                    "{other}'s healthcheck fetches {url}: teach this test where that service runs"
                ),
            };
            let r = reqwest::get(format!("{target}{path}")).await.unwrap();
            let status = r.status();
            let body = r.text().await.unwrap();
            assert!(
                status.is_success(),
                "service {name}'s healthcheck {test:?} fetches {path}: {status} {body}"
            );
            // `… | grep -q Ok`: the body must say so too.
            if let Some(want) = test
                .iter()
                .flat_map(|a| a.split_once("grep -q ").map(|(_, w)| w.to_string()))
                .next()
            {
                let want = want.split_whitespace().next().unwrap().to_string();
                assert!(
                    body.contains(&want),
                    "{name}: {path} answered {body:?}, not {want}"
                );
            }
            checked += 1;
        }
    }
    let ours_checked = urls(tollgate.healthcheck.as_ref().unwrap()).len();
    assert!(
        ours_checked >= 1,
        "the tollgate service's healthcheck fetches nothing: {tollgate:?}"
    );
    assert!(checked >= 2);
    // The port the server listens on is the one published.
    assert!(
        tollgate
            .ports
            .iter()
            .any(|p| p.ends_with(&format!(":{listen_port}"))),
        "{:?}",
        tollgate.ports
    );
    srv.shutdown().await;
}

/// `base` joined with a relative path, `..` resolved.
fn resolve(base: &std::path::Path, rel: &str) -> PathBuf {
    let mut p = base.to_path_buf();
    for c in rel.split('/') {
        match c {
            ".." => {
                p.pop();
            }
            "." | "" => {}
            c => p.push(c),
        }
    }
    p
}

/// The top-level directories (other than crates/) whose files the
/// workspace's sources embed at compile time: `include_str!`,
/// `include_bytes!` (relative to the file), `sqlx::migrate!` and askama's
/// template dirs (relative to the crate).
fn embedded_top_dirs() -> std::collections::BTreeSet<String> {
    let root = repo();
    let mut found = Vec::new();
    let mut todo = vec![root.join("crates")];
    while let Some(dir) = todo.pop() {
        for e in std::fs::read_dir(&dir).unwrap().flatten() {
            let path = e.path();
            if path.is_dir() {
                if path.file_name().is_some_and(|n| n != "target") {
                    todo.push(path);
                }
                continue;
            }
            let name = path.file_name().unwrap().to_string_lossy().to_string();
            let text = std::fs::read_to_string(&path).unwrap_or_default();
            if name == "askama.toml" {
                for lit in text.split('"').skip(1).step_by(2) {
                    found.push(resolve(path.parent().unwrap(), lit));
                }
            } else if name.ends_with(".rs") {
                for (mac, from_crate) in [
                    ("include_str!(\"", false),
                    ("include_bytes!(\"", false),
                    ("migrate!(\"", true),
                ] {
                    for part in text.split(mac).skip(1) {
                        let lit = part.split('"').next().unwrap();
                        let base = if from_crate {
                            let mut c = path.parent().unwrap();
                            while !c.join("Cargo.toml").exists() {
                                c = c.parent().unwrap();
                            }
                            c.to_path_buf()
                        } else {
                            path.parent().unwrap().to_path_buf()
                        };
                        found.push(resolve(&base, lit));
                    }
                }
            }
        }
    }
    found
        .iter()
        .filter_map(|p| p.strip_prefix(&root).ok())
        .filter_map(|p| p.components().next())
        .map(|c| c.as_os_str().to_string_lossy().to_string())
        .filter(|c| c != "crates")
        .collect()
}

#[test]
fn the_dockerfile_builds_and_ships_what_the_repository_holds() {
    let docker = read("Dockerfile");
    // The stages: the last is the production image (what `docker build .`
    // gives), built on the `runtime` stage that installs the packages;
    // compose builds the `demo` stage (the runtime and tollgate-dev).
    let stages: Vec<&str> = docker.split("\nFROM ").collect();
    let stage = |name: &str| -> &str {
        stages
            .iter()
            .find(|s| {
                s.lines()
                    .next()
                    .unwrap_or("")
                    .ends_with(&format!(" AS {name}"))
            })
            .unwrap_or_else(|| panic!("the Dockerfile has no stage {name}"))
    };
    let production = *stages.last().unwrap();
    assert!(
        production.starts_with("runtime AS production"),
        "the last stage is the production image on the runtime stage"
    );
    let line_in = |text: &str, prefix: &str| -> Vec<String> {
        text.lines()
            .filter(|l| l.starts_with(prefix))
            .map(|l| l[prefix.len()..].trim().to_string())
            .collect()
    };
    let line = |prefix: &str| line_in(production, prefix);
    // The binary's name, as the server crate declares it.
    let cargo = read("crates/server/Cargo.toml");
    let package = cargo
        .lines()
        .find_map(|l| l.strip_prefix("name = "))
        .unwrap()
        .trim_matches('"');
    let bin = cargo
        .split("[[bin]]")
        .nth(1)
        .and_then(|b| b.lines().find_map(|l| l.strip_prefix("name = ")))
        .expect("crates/server/Cargo.toml declares a [[bin]]")
        .trim_matches('"');
    let entrypoint = flow(&line("ENTRYPOINT")[0]);
    assert_eq!(entrypoint, vec![bin.to_string()], "ENTRYPOINT");
    assert!(
        docker.contains(&format!("-p {package} --bin {bin}")),
        "the Dockerfile builds `-p {package} --bin {bin}`"
    );
    assert!(docker.contains(&format!("target/release/{bin} /usr/local/bin/{bin}")));
    // The directories outside crates/ that the binary's sources embed
    // (read from the sources themselves): the build context must hold them
    // (not .dockerignore'd), and the runtime image carries them too.
    let embedded = embedded_top_dirs();
    for d in ["migrations", "sql", "templates", "static"] {
        assert!(
            embedded.contains(d),
            "{d}/ is no longer embedded? {embedded:?}"
        );
    }
    let copied: Vec<String> = docker
        .lines()
        .find_map(|l| l.trim().strip_prefix("&& for d in "))
        .and_then(|l| l.split_once("; do"))
        .map(|(dirs, _)| dirs.split_whitespace().map(str::to_string).collect())
        .expect("the Dockerfile's `for d in …` copy of data directories");
    let ignored = read(".dockerignore");
    for d in &embedded {
        assert!(copied.iter().any(|c| c == d), "the image leaves out {d}/");
        let entries = std::fs::read_dir(repo().join(d))
            .unwrap_or_else(|e| panic!("{d}/: {e}"))
            .count();
        assert!(entries > 0, "{d}/ is empty");
        assert!(
            !ignored
                .lines()
                .map(|l| l.trim().trim_start_matches("**/").trim_end_matches('/'))
                .any(|l| l == d),
            ".dockerignore leaves {d}/ out of the build context"
        );
    }
    // CMD is a `serve` that listens on the exposed port, as compose's is.
    let cmd = flow(&line("CMD")[0]);
    assert_eq!(cmd[0], "serve", "{cmd:?}");
    let expose = line_in(stage("runtime"), "EXPOSE")[0].clone();
    assert!(
        cmd.iter().any(|a| a.ends_with(&format!(":{expose}"))),
        "CMD {cmd:?} does not listen on EXPOSE {expose}"
    );
    // The healthcheck's program is installed in the runtime image.
    let services = compose_services(&read("docker-compose.yml"));
    let test = services["tollgate"].healthcheck.clone().unwrap();
    let program = if test[0] == "CMD" {
        test[1].clone()
    } else {
        test[1].split_whitespace().next().unwrap().to_string()
    };
    let runtime = stage("runtime");
    assert!(
        runtime.contains("apt-get install") && runtime.contains(&format!(" {program}")),
        "the healthcheck runs {program}, which the runtime image does not install"
    );
    // Compose runs the demo: the demo stage's tollgate-dev, built by the
    // Dockerfile, listening on the exposed port.
    let demo = stage("demo");
    assert!(
        demo.starts_with("runtime AS demo"),
        "the demo stage is on the runtime"
    );
    assert_eq!(flow(&line_in(demo, "ENTRYPOINT")[0]), vec!["tollgate-dev"]);
    assert!(docker.contains("-p tollgate-devtools --bin tollgate-dev"));
    assert!(docker.contains("target/release/tollgate-dev /usr/local/bin/tollgate-dev"));
    let demo_cmd = flow(&line_in(demo, "CMD")[0]);
    assert_eq!(demo_cmd[0], "demo", "{demo_cmd:?}");
    assert!(demo_cmd.iter().any(|a| a.ends_with(&format!(":{expose}"))));
    assert_eq!(services["tollgate"].command[0], "demo");
    // The production image carries no tollgate-dev.
    assert!(
        !production.contains("tollgate-dev"),
        "tollgate-dev in the production image"
    );
}
