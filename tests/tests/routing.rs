//! Several deployments behind one model: weighted routing, retries before
//! the first byte, ejection and recovery, model fallbacks (docs/routing.md).
//! Two or three mock upstreams; a dead one is a port nobody listens on.

use domain::pricing::Price;
use domain::Limits;
use e2e::*;
use futures::StreamExt;
use mock_upstream::{MockConfig, MockStats};
use serde_json::{json, Value};
use server::config::Config;
use std::time::Duration;
use store::DeploymentRow;

/// A base URL where the connection is refused.
/// An upstream that refuses connections: ports 1, 2, 3… of loopback, where
/// nothing listens. (A free port bound and dropped could be handed to
/// another test's server meanwhile, which then answered as the "dead" one.)
fn dead_url() -> String {
    static NEXT: std::sync::atomic::AtomicU16 = std::sync::atomic::AtomicU16::new(1);
    let port = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    format!("http://127.0.0.1:{port}/v1")
}

async fn mock() -> (String, MockStats) {
    mock_upstream::spawn(MockConfig::default()).await
}

/// Every request to the mock at `base` fails with `fault` ("500", "429") until cleared (None).
async fn force(base: &str, fault: Option<&str>) {
    let root = base.trim_end_matches("/v1");
    let r = reqwest::Client::new()
        .post(format!("{root}/mock/fault"))
        .json(&json!({ "fault": fault }))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 204);
}

fn dep(name: &str, url: &str, weight: i32, priority: i32) -> DeploymentRow {
    DeploymentRow {
        model_id: String::new(),
        name: name.into(),
        upstream_base_url: url.into(),
        upstream_model: "gpt-4o-mini".into(),
        upstream_api_key_enc: Some(domain::secret::encrypt(
            &hex::decode(ENC_KEY).unwrap().try_into().unwrap(),
            PROVIDER_KEY,
        )),
        weight,
        priority,
        max_inflight: None,
        profile: None,
        enabled: true,
    }
}

/// A chat model `id` (prices per million tokens in micro-USD) served by `deps`.
async fn routed_model(
    env: &TestEnv,
    id: &str,
    price: (i64, i64),
    deps: &[DeploymentRow],
    fallbacks: &[&str],
) {
    env.model(id, "chat", price.0, price.1).await;
    let rows: Vec<DeploymentRow> = deps
        .iter()
        .map(|d| DeploymentRow {
            model_id: id.into(),
            ..d.clone()
        })
        .collect();
    let fallbacks: Vec<String> = fallbacks.iter().map(|s| s.to_string()).collect();
    env.store
        .set_model_routing("test", id, &rows, &fallbacks)
        .await
        .unwrap();
}

/// Tenant `t`, app `a`, a key allowed `models` (None: all); returns the key.
async fn tenant_key(env: &TestEnv, allowed: Option<Vec<&str>>) -> String {
    env.tenant(
        "t",
        Limits {
            monthly_tokens: Some(10_000_000),
            ..Default::default()
        },
        allowed,
    )
    .await;
    env.app("t", "a", Limits::default()).await;
    env.key("t", "a", Limits::default()).await.1
}

fn quick_health(env: &TestEnv, eject_after: u32, ejection_ms: u64) -> Config {
    let mut cfg = env.config();
    cfg.routing.eject_after_failures = eject_after;
    cfg.routing.ejection_ms = ejection_ms;
    cfg.routing.max_ejection_ms = ejection_ms * 4;
    cfg
}

fn body(model: &str, content: &str) -> Value {
    let mut b = chat_body(content, Some(16));
    b["model"] = json!(model);
    b
}

/// A deployment's counter or gauge in /metrics (0 when absent).
async fn metric(addr: &std::net::SocketAddr, name: &str, model: &str, deployment: &str) -> f64 {
    let text = e2e::metrics(*addr).await;
    let (m, d) = (
        format!("model=\"{model}\""),
        format!("deployment=\"{deployment}\""),
    );
    text.lines()
        .filter(|l| l.starts_with(&format!("{name}{{")) && l.contains(&m) && l.contains(&d))
        .find_map(|l| l.rsplit(' ').next()?.parse().ok())
        .unwrap_or(0.0)
}

async fn ledger_rows(env: &TestEnv) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM usage_events")
        .fetch_one(env.store.pool())
        .await
        .unwrap()
}

/// Waits until the ledger holds `n` rows, and no more come.
async fn ledger_settles_at(env: &TestEnv, n: i64) {
    let reached = eventually(Duration::from_secs(10), || async {
        ledger_rows(env).await >= n
    })
    .await;
    assert!(reached, "ledger never reached {n} rows");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(ledger_rows(env).await, n, "more ledger rows than requests");
}

#[tokio::test]
async fn a_dead_deployment_costs_no_request_and_is_ejected() {
    let env = TestEnv::new().await;
    let (live, live_stats) = mock().await;
    // The dead one takes nearly all first picks until it is ejected.
    let deps = [dep("dead", &dead_url(), 10, 0), dep("live", &live, 1, 0)];
    routed_model(&env, "m-dead", (1_000_000, 2_000_000), &deps, &[]).await;
    let key = tenant_key(&env, None).await;
    let srv = env.server_with(quick_health(&env, 3, 60_000)).await;
    let url = format!("http://{}/v1/chat/completions", srv.addr);

    let mut ids = Vec::new();
    for _ in 0..20 {
        let r = post(&url, &key, &body("m-dead", "hello")).await;
        assert_eq!(r.status(), 200);
        ids.push(r.headers()["x-request-id"].to_str().unwrap().to_string());
    }
    assert_eq!(
        live_stats.snapshot().chat,
        20,
        "the live upstream saw each request once"
    );
    ledger_settles_at(&env, 20).await;
    for id in &ids {
        let e = env.usage_event(id).await.expect("billed");
        assert_eq!(e.deployment.as_deref(), Some("live"), "{id}");
        assert_eq!(e.status, "ok");
    }
    // The request log names the deployment that answered, too.
    let base = format!("http://{}", srv.addr);
    user(&env, "root@example.com", "platform_admin", None).await;
    let token = login(&base, "root@example.com").await;
    let (status, log) = api(
        "GET",
        &format!("{base}/api/v1/requests?model=m-dead"),
        Some(&token),
        None,
    )
    .await;
    assert_eq!(status, 200, "{log}");
    let rows = log["data"].as_array().expect("rows");
    assert_eq!(rows.len(), 20, "{log}");
    assert!(rows.iter().all(|r| r["deployment"] == "live"), "{log}");
    let m = |name| metric(&srv.addr, name, "m-dead", "dead");
    assert_eq!(m("tollgate_deployment_ejections_total").await, 1.0);
    assert_eq!(m("tollgate_deployment_errors_total").await, 3.0);
    assert_eq!(m("tollgate_deployment_ejected").await, 1.0);
    srv.shutdown().await;
}

#[tokio::test]
async fn a_deployment_that_fails_and_recovers_gets_its_traffic_back_after_the_back_off() {
    let env = TestEnv::new().await;
    let (a, a_stats) = mock().await;
    let (b, b_stats) = mock().await;
    routed_model(
        &env,
        "m-flaky",
        (1_000_000, 2_000_000),
        &[dep("a", &a, 1, 0), dep("b", &b, 1, 0)],
        &[],
    )
    .await;
    let key = tenant_key(&env, None).await;
    let srv = env.server_with(quick_health(&env, 2, 1_000)).await; // max ejection 4 s
    let url = format!("http://{}/v1/chat/completions", srv.addr);

    force(&a, Some("500")).await;
    for _ in 0..20 {
        let r = post(&url, &key, &body("m-flaky", "hello")).await;
        assert_eq!(r.status(), 200, "retried on b");
    }
    assert_eq!(b_stats.snapshot().chat, 20);
    // Ejected after its 2 failures (a slow machine may see a failed probe or two).
    let failed = a_stats.snapshot().chat;
    assert!((2..=4).contains(&failed), "a saw {failed}");
    let m = |name| metric(&srv.addr, name, "m-flaky", "a");
    assert_eq!(m("tollgate_deployment_errors_total").await, failed as f64);
    assert!(m("tollgate_deployment_ejections_total").await >= 1.0);

    // Recovered: after the back-off the probe succeeds and a is back in rotation.
    force(&a, None).await;
    let t0 = std::time::Instant::now();
    while a_stats.snapshot().chat == failed {
        assert!(t0.elapsed() < Duration::from_secs(6), "a never came back");
        let r = post(&url, &key, &body("m-flaky", "hello")).await;
        assert_eq!(r.status(), 200);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let probed = a_stats.snapshot().chat + b_stats.snapshot().chat - failed - 20;
    let before = a_stats.snapshot().chat;
    for _ in 0..40 {
        let r = post(&url, &key, &body("m-flaky", "hello")).await;
        assert_eq!(r.status(), 200);
    }
    let back = a_stats.snapshot().chat - before;
    assert!(
        (10..=30).contains(&back),
        "a served {back} of 40 after recovering"
    );
    assert_eq!(m("tollgate_deployment_ejected").await, 0.0);
    ledger_settles_at(&env, 60 + probed as i64).await;
    srv.shutdown().await;
}

#[tokio::test]
async fn weights_three_to_one_share_the_traffic_within_ten_percent() {
    let env = TestEnv::new().await;
    let (a, a_stats) = mock().await;
    let (b, b_stats) = mock().await;
    routed_model(
        &env,
        "m-weights",
        (0, 0),
        &[dep("a", &a, 3, 0), dep("b", &b, 1, 0)],
        &[],
    )
    .await;
    let key = tenant_key(&env, None).await;
    let srv = env.server().await;
    let url = format!("http://{}/v1/chat/completions", srv.addr);

    let results = futures::stream::iter(0..400)
        .map(|_| {
            let (url, key) = (url.clone(), key.clone());
            async move {
                post(&url, &key, &body("m-weights", "hi"))
                    .await
                    .status()
                    .as_u16()
            }
        })
        .buffer_unordered(8)
        .collect::<Vec<_>>()
        .await;
    assert!(results.iter().all(|s| *s == 200));
    let (na, nb) = (a_stats.snapshot().chat, b_stats.snapshot().chat);
    assert_eq!(na + nb, 400);
    assert!(
        (270..=330).contains(&na),
        "a served {na}, b {nb} (expected 300 : 100 ± 10 %)"
    );
    srv.shutdown().await;
}

#[tokio::test]
async fn a_stream_is_retried_before_its_first_byte_and_never_after() {
    let env = TestEnv::new().await;
    let (a, a_stats) = mock().await;
    let (b, b_stats) = mock().await;
    // a is picked first (priority 0) and refuses; b (priority 1) serves.
    routed_model(
        &env,
        "m-stream",
        (1_000_000, 2_000_000),
        &[dep("a", &a, 1, 0), dep("b", &b, 1, 1)],
        &[],
    )
    .await;
    let key = tenant_key(&env, None).await;
    let srv = env.server().await;
    let url = format!("http://{}/v1/chat/completions", srv.addr);

    force(&a, Some("500")).await;
    let mut s = body("m-stream", "hello [mock:output_tokens=12]");
    s["stream"] = json!(true);
    let r = post(&url, &key, &s).await;
    assert_eq!(r.status(), 200);
    let rid = r.headers()["x-request-id"].to_str().unwrap().to_string();
    let events = sse_events(r).await;
    assert_eq!(events.last().unwrap(), "data: [DONE]");
    assert_eq!(
        (a_stats.snapshot().streams, b_stats.snapshot().streams),
        (1, 1)
    );
    let e = eventually(Duration::from_secs(5), || async {
        env.usage_event(&rid).await.is_some()
    })
    .await;
    assert!(e);
    let e = env.usage_event(&rid).await.unwrap();
    assert_eq!(
        (e.deployment.as_deref(), e.output_tokens, e.status.as_str()),
        (Some("b"), 12, "ok")
    );

    // Broken after its first bytes: not retried, charged for what was delivered.
    force(&a, None).await;
    let mut s = body(
        "m-stream",
        "hello [mock:output_tokens=40] [mock:fault=disconnect_after=5]",
    );
    s["stream"] = json!(true);
    let r = post(&url, &key, &s).await;
    assert_eq!(r.status(), 200);
    let rid = r.headers()["x-request-id"].to_str().unwrap().to_string();
    let events = sse_events(r).await;
    assert!(
        events.iter().any(|e| e.contains("upstream_error")),
        "{events:?}"
    );
    let streams = a_stats.snapshot().streams + b_stats.snapshot().streams;
    assert_eq!(streams, 3, "the broken stream went to one deployment only");
    ledger_settles_at(&env, 2).await;
    let e = env.usage_event(&rid).await.unwrap();
    assert_eq!(
        (e.output_tokens, e.status.as_str(), e.deployment.as_deref()),
        (5, "upstream_error", Some("a"))
    );
    srv.shutdown().await;
}

#[tokio::test]
async fn every_deployment_down_is_a_503_charging_nothing_or_the_fallback_at_its_price() {
    let env = TestEnv::new().await;
    let (backup, backup_stats) = mock().await;
    routed_model(
        &env,
        "m-backup",
        (3_000_000, 7_000_000),
        &[dep("only", &backup, 1, 0)],
        &[],
    )
    .await;
    let deps = [dep("x", &dead_url(), 1, 0), dep("y", &dead_url(), 1, 0)];
    routed_model(&env, "m-main", (1_000_000, 2_000_000), &deps, &["m-backup"]).await;
    routed_model(&env, "m-lonely", (1_000_000, 2_000_000), &deps, &[]).await;
    let key = tenant_key(&env, None).await;
    // A tenant that may not use the fallback.
    env.tenant("u", Limits::default(), Some(vec!["m-main"]))
        .await;
    env.app("u", "a", Limits::default()).await;
    let (_, narrow_key) = env.key("u", "a", Limits::default()).await;
    let srv = env.server_with(quick_health(&env, 1, 60_000)).await;
    let url = format!("http://{}/v1/chat/completions", srv.addr);

    // No fallback: both deployments tried, 503, nothing held or billed.
    for _ in 0..2 {
        let r = post(&url, &key, &body("m-lonely", "hello")).await;
        assert_eq!(r.status(), 503);
        let v: Value = r.json().await.unwrap();
        assert_eq!(v["error"]["code"], "upstream_unavailable");
    }
    // The requests that find m-main's deployments dead: 503 too.
    let r = post(&url, &key, &body("m-main", "hello")).await;
    assert_eq!(r.status(), 503);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(ledger_rows(&env).await, 0, "nothing charged");

    // Now known down: the fallback serves, at its own price, and says so.
    let r = post(&url, &key, &body("m-main", "hello")).await;
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["x-tollgate-model"], "m-backup");
    let rid = r.headers()["x-request-id"].to_str().unwrap().to_string();
    assert_eq!(backup_stats.snapshot().chat, 1);
    ledger_settles_at(&env, 1).await;
    let e = env.usage_event(&rid).await.unwrap();
    assert_eq!(e.model, "m-backup");
    assert_eq!(e.deployment.as_deref(), Some("only"));
    let price = Price {
        input_micro_per_mtok: 3_000_000,
        output_micro_per_mtok: 7_000_000,
    };
    assert_eq!(e.cost_micro, price.cost(e.input_tokens, e.output_tokens).0);
    assert!(e.cost_micro > 0);

    // A key that may not use the fallback is not served by it.
    let r = post(&url, &narrow_key, &body("m-main", "hello")).await;
    assert_eq!(r.status(), 503);
    assert_eq!(backup_stats.snapshot().chat, 1);
    srv.shutdown().await;
}

#[tokio::test]
async fn the_admin_api_adds_edits_and_disables_deployments_and_shows_their_health() {
    let env = TestEnv::new().await;
    let (a, a_stats) = mock().await;
    let (b, b_stats) = mock().await;
    let srv = env.server().await;
    let base = format!("http://{}", srv.addr);
    user(&env, "root@example.com", "platform_admin", None).await;
    let token = login(&base, "root@example.com").await;
    let call = |method: &'static str, path: &'static str, body: Option<Value>| {
        let (url, token) = (format!("{base}{path}"), token.clone());
        async move { api(method, &url, Some(&token), body).await }
    };
    let model = json!({"id": "m-api", "input_price_per_mtok_usd": "1", "output_price_per_mtok_usd": "2",
    "deployments": [
        {"name": "a", "upstream_base_url": a, "upstream_model": "gpt-4o-mini", "upstream_api_key": PROVIDER_KEY},
        {"name": "b", "upstream_base_url": b, "upstream_model": "gpt-4o-mini", "weight": 0}
    ]});
    let (status, _) = call("POST", "/api/v1/models", Some(model)).await;
    assert_eq!(status, 200);
    // Both forms at once are refused.
    let both = json!({"id": "m-both", "input_price_per_mtok_usd": "1", "output_price_per_mtok_usd": "2",
        "upstream_base_url": a, "upstream_model": "x",
        "deployments": [{"upstream_base_url": a, "upstream_model": "x"}]});
    let (status, _) = call("POST", "/api/v1/models", Some(both)).await;
    assert_eq!(status, 400);

    let key = tenant_key(&env, None).await;
    let url = format!("{base}/v1/chat/completions");
    let served = |n: usize| {
        let (url, key) = (url.clone(), key.clone());
        async move {
            for _ in 0..n {
                let r = post(&url, &key, &body("m-api", "hi")).await;
                assert_eq!(r.status(), 200);
            }
        }
    };
    let wait_reload = || tokio::time::sleep(Duration::from_millis(500));
    wait_reload().await;
    served(4).await;
    assert_eq!(
        (a_stats.snapshot().chat, b_stats.snapshot().chat),
        (4, 0),
        "weight 0 drains b"
    );
    assert!(a_stats
        .snapshot()
        .last_authorization
        .unwrap()
        .ends_with(PROVIDER_KEY));

    // Edit b to take traffic and disable a.
    let edit = json!({"upstream_base_url": b, "upstream_model": "gpt-4o-mini", "weight": 1});
    let (status, _) = call("PUT", "/api/v1/models/m-api/deployments/b", Some(edit)).await;
    assert_eq!(status, 200);
    let (status, listed) = call(
        "PATCH",
        "/api/v1/models/m-api/deployments/a",
        Some(json!({"enabled": false})),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(listed["deployments"][0]["enabled"], false);
    assert!(
        !listed.to_string().contains(PROVIDER_KEY),
        "the key is never returned"
    );
    wait_reload().await;
    served(4).await;
    assert_eq!((a_stats.snapshot().chat, b_stats.snapshot().chat), (4, 4));

    let (status, listed) = call("GET", "/api/v1/models/m-api/deployments", None).await;
    assert_eq!(status, 200);
    let b_row = &listed["deployments"][1];
    assert_eq!(
        (b_row["name"].as_str(), b_row["health"]["state"].as_str()),
        (Some("b"), Some("healthy"))
    );
    srv.shutdown().await;
}

#[tokio::test]
async fn the_models_page_lists_deployments_with_their_health_and_disables_one() {
    let env = TestEnv::new().await;
    let dead = dead_url();
    let (live, _) = mock().await;
    routed_model(
        &env,
        "m-page",
        (0, 0),
        &[dep("gone", &dead, 1, 0), dep("here", &live, 1, 0)],
        &[],
    )
    .await;
    let key = tenant_key(&env, None).await;
    let srv = env.server_with(quick_health(&env, 1, 60_000)).await;
    let base = format!("http://{}", srv.addr);
    for _ in 0..4 {
        let r = post(
            &format!("{base}/v1/chat/completions"),
            &key,
            &body("m-page", "hi"),
        )
        .await;
        assert_eq!(r.status(), 200);
    }
    user(&env, "root@example.com", "platform_admin", None).await;
    let web = console_web::Web::login(&base, "root@example.com").await;
    let page = web.get("/console/models").await;
    assert_eq!(page.status, 200);
    let table = &page.body[page.body.find("deployments-table").unwrap()..];
    let row = |name: &str| {
        let at = table.find(&format!("<td>{name}</td>")).unwrap();
        table[at..table[at..].find("</tr>").unwrap() + at].to_string()
    };
    assert!(row("gone").contains("ejected"), "{}", row("gone"));
    assert!(row("here").contains("healthy"), "{}", row("here"));
    assert!(!page.body.contains(PROVIDER_KEY));

    let done = web
        .post(
            "/console/models/m-page/deployments/here/enabled",
            &[("enabled", "false")],
        )
        .await;
    assert_eq!(
        (done.status, done.location.as_deref()),
        (303, Some("/console/models"))
    );
    let rows = env.store.deployments_of("m-page").await.unwrap();
    assert!(!rows.iter().find(|d| d.name == "here").unwrap().enabled);
    // Another deployment through the form; its key is stored encrypted.
    let done = web
        .post(
            "/console/models/deployments",
            &[
                ("model", "m-page"),
                ("name", "new"),
                ("upstream_base_url", live.as_str()),
                ("upstream_model", "gpt-4o-mini"),
                ("upstream_api_key", "sk-form"),
                ("weight", "2"),
            ],
        )
        .await;
    assert_eq!(done.status, 303, "{}", done.body);
    let rows = env.store.deployments_of("m-page").await.unwrap();
    let new = rows.iter().find(|d| d.name == "new").unwrap();
    assert_eq!(new.weight, 2);
    assert!(
        !String::from_utf8_lossy(new.upstream_api_key_enc.as_ref().unwrap()).contains("sk-form")
    );
    srv.shutdown().await;
}
