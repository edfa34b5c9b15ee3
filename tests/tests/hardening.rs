//! What an outside audit confirmed against the running gateway, each with a
//! test that failed before its fix (docs/reliability.md, "Hardening"):
//! client-chosen metric labels, a provider key re-pointed to another host,
//! client upstreams nested in arrays of arrays, `count_tokens` outside every
//! limit, the provider's own error text, and replicas whose clocks disagree
//! at the end of a month.

use domain::Limits;
use e2e::*;
use futures::StreamExt;
use serde_json::{json, Value};
use std::time::Duration;

/// A process's resident set, in kB.
fn rss_kb(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .expect("VmRSS in /proc/pid/status")
}

async fn metrics_on(port: u16) -> String {
    let r = reqwest::Client::new()
        .get(format!("http://127.0.0.1:{port}/metrics"))
        .bearer_auth(METRICS_TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    r.text().await.unwrap()
}

/// `n` chat requests naming models nobody created (each name new), 32 at
/// a time; every one must be a 404.
async fn unknown_models(url: &str, key: &str, n: usize, tag: &str) {
    let client = reqwest::Client::new();
    let statuses: Vec<u16> = futures::stream::iter(0..n)
        .map(|i| {
            let (client, url, key) = (client.clone(), url.to_string(), key.to_string());
            let model = format!("nosuch-{tag}-{i}-{}", uuid::Uuid::new_v4().simple());
            async move {
                let body = json!({"model": model, "messages": [{"role": "user", "content": "hi"}]});
                client
                    .post(&url)
                    .bearer_auth(&key)
                    .json(&body)
                    .send()
                    .await
                    .map(|r| r.status().as_u16())
                    .unwrap_or(0)
            }
        })
        .buffer_unordered(32)
        .collect()
        .await;
    assert!(statuses.iter().all(|s| *s == 404), "not all 404");
}

/// Item 1: the model a client names is its to choose; as a metric label it
/// was a series the recorder kept for ever (31,000 names: /metrics 11.7 MB,
/// RSS +35 MB). Only catalog ids reach labels now.
#[tokio::test]
async fn thirty_thousand_random_model_names_leave_metrics_small_and_memory_flat() {
    let env = TestEnv::new().await;
    let (_, key) = env.simple_tenant(Limits::default()).await;
    let port = free_port();
    let mut gw = replica_command(&env, port).spawn().expect("tollgate runs");
    wait_healthy(port).await;
    let url = format!("http://127.0.0.1:{port}/v1/chat/completions");
    // A known model once, so its series exist; then a first round of
    // unknown ones to warm up the allocator and connection pools.
    let r = post(&url, &key, &chat_body("hi", Some(4))).await;
    assert_eq!(r.status(), 200);
    unknown_models(&url, &key, 2_000, "warm").await;
    let before = rss_kb(gw.id());
    unknown_models(&url, &key, 30_000, "flood").await;
    let after = rss_kb(gw.id());
    let text = metrics_on(port).await;
    let _ = gw.kill();
    let _ = gw.wait();
    eprintln!(
        "/metrics {} bytes; RSS {before} -> {after} kB over 30,000 unknown models",
        text.len()
    );
    assert!(
        !text.contains("nosuch-"),
        "a client's model name reached a metric label"
    );
    assert!(
        text.contains("model=\"unknown\""),
        "refusals of unknown models are counted under model=\"unknown\""
    );
    assert!(
        text.len() < 100 * 1024,
        "/metrics is {} bytes after 32,000 unknown models",
        text.len()
    );
    let grown_mb = after.saturating_sub(before) as f64 / 1024.0;
    assert!(
        grown_mb < 10.0,
        "RSS grew {grown_mb:.1} MB over 30,000 unknown models ({before} -> {after} kB)"
    );
}

/// Item 2: a deployment moved to another origin without a key given again
/// does not keep (and send) the key given for the old one; an edit that
/// stays on its origin keeps it. Audited.
#[tokio::test]
async fn a_deployment_moved_to_another_host_does_not_send_its_old_key() {
    let env = TestEnv::new().await;
    let (a, a_stats) = mock_upstream::spawn(Default::default()).await;
    let (b, b_stats) = mock_upstream::spawn(Default::default()).await;
    let srv = env.server().await;
    let base = format!("http://{}", srv.addr);
    user(&env, "root@example.com", "platform_admin", None).await;
    let token = login(&base, "root@example.com").await;
    let model = json!({"id": "m", "input_price_per_mtok_usd": "1", "output_price_per_mtok_usd": "2",
        "deployments": [{"name": "d", "upstream_base_url": a, "upstream_model": "gpt-4o-mini",
            "upstream_api_key": PROVIDER_KEY}]});
    let (status, _) = api(
        "POST",
        &format!("{base}/api/v1/models"),
        Some(&token),
        Some(model),
    )
    .await;
    assert_eq!(status, 200);
    env.tenant("t", Limits::default(), None).await;
    env.app("t", "a", Limits::default()).await;
    let (_, key) = env.key("t", "a", Limits::default()).await;
    let chat = format!("{base}/v1/chat/completions");
    let body =
        json!({"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4});
    let put = |d: Value| {
        let (url, token) = (
            format!("{base}/api/v1/models/m/deployments/d"),
            token.clone(),
        );
        async move { api("PUT", &url, Some(&token), Some(d)).await }
    };
    let served = |n: usize| {
        let (url, key, body) = (chat.clone(), key.clone(), body.clone());
        async move {
            for _ in 0..n {
                let r = post(&url, &key, &body).await;
                assert_eq!(r.status(), 200);
            }
        }
    };
    let reload = || tokio::time::sleep(Duration::from_millis(600));
    reload().await;
    served(1).await;
    assert_eq!(
        a_stats.snapshot().last_authorization.as_deref(),
        Some(format!("Bearer {PROVIDER_KEY}").as_str())
    );

    // The same origin (another path, another weight): the key stays.
    let (status, listed) = put(json!({"upstream_base_url": format!("{a}/"),
        "upstream_model": "gpt-4o-mini", "weight": 2}))
    .await;
    assert_eq!(status, 200, "{listed}");
    assert_eq!(listed["deployments"][0]["has_upstream_api_key"], true);

    // Another origin, no key: the old one is dropped, not sent there.
    let (status, listed) =
        put(json!({"upstream_base_url": b, "upstream_model": "gpt-4o-mini"})).await;
    assert_eq!(status, 200, "{listed}");
    assert_eq!(listed["deployments"][0]["has_upstream_api_key"], false);
    reload().await;
    served(2).await;
    let seen = b_stats.snapshot();
    assert_eq!(seen.chat, 2, "the moved deployment serves");
    assert_eq!(
        seen.last_authorization, None,
        "the key given for {a} was sent to {b}"
    );
    let after: Vec<Value> = sqlx::query_scalar(
        "SELECT after FROM audit_log WHERE action = 'model.deployment' ORDER BY id",
    )
    .fetch_all(env.store.pool())
    .await
    .unwrap();
    let last = after.last().expect("the move is audited");
    assert!(
        last["upstream_api_key"]
            .as_str()
            .is_some_and(|s| s.starts_with("dropped")),
        "{last}"
    );
    assert!(!after.iter().any(|a| a.to_string().contains(PROVIDER_KEY)));

    // Given again with the move, it is kept.
    let (status, listed) = put(
        json!({"upstream_base_url": a, "upstream_model": "gpt-4o-mini",
        "upstream_api_key": PROVIDER_KEY}),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(listed["deployments"][0]["has_upstream_api_key"], true);
    srv.shutdown().await;
}

/// Item 5: client upstreams and credentials are refused through any
/// nesting, arrays of arrays included, naming the path.
#[tokio::test]
async fn client_upstreams_in_arrays_of_arrays_are_refused_naming_the_path() {
    let env = TestEnv::new().await;
    let (_, key) = env.simple_tenant(Limits::default()).await;
    let srv = env.server().await;
    let url = format!("http://{}/v1/chat/completions", srv.addr);
    let mut body = chat_body("hi", Some(4));
    body["x"] = json!([[{"api_base": format!("{}/evil", env.mock_url), "api_key": "sk-client"}]]);
    let r = post(&url, &key, &body).await;
    assert_eq!(r.status(), 400);
    let e: Value = r.json().await.unwrap();
    assert_eq!(e["error"]["param"], "x[0][0].api_base", "{e}");
    assert_eq!(env.mock.snapshot().chat, 0, "nothing was forwarded");
    srv.shutdown().await;
}

fn count_body(words: usize) -> Value {
    json!({"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "word ".repeat(words)}]})
}

async fn count(url: &str, key: &str, body: &Value) -> (u16, Value, Option<String>) {
    let r = reqwest::Client::new()
        .post(url)
        .header("x-api-key", key)
        .header("anthropic-version", "2023-06-01")
        .json(body)
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    let retry = r
        .headers()
        .get("retry-after")
        .map(|v| v.to_str().unwrap().to_string());
    (status, r.json().await.unwrap_or(Value::Null), retry)
}

/// Item 6: `count_tokens` was outside every limit (20 × 540 KB counted on
/// a key whose chat calls were 429). A count takes a request of every RPM
/// that applies, and a key has a minute's allowance of counted tokens.
#[tokio::test]
async fn count_tokens_is_under_the_keys_rpm_and_a_count_allowance() {
    let env = TestEnv::new().await;
    env.simple_tenant(Limits::default()).await;
    let (_, one_rpm) = env
        .key(
            "t",
            "a",
            Limits {
                rpm: Some(1),
                ..Default::default()
            },
        )
        .await;
    let (_, other) = env.key("t", "a", Limits::default()).await;
    let mut cfg = env.config();
    cfg.gateway.count_tokens_per_minute = 5_000;
    let srv = env.server_with(cfg).await;
    let base = format!("http://{}", srv.addr);
    let count_url = format!("{base}/v1/messages/count_tokens");

    let r = post(
        &format!("{base}/v1/chat/completions"),
        &one_rpm,
        &chat_body("hi", Some(4)),
    )
    .await;
    assert_eq!(r.status(), 200);
    let (status, e, retry) = count(&count_url, &one_rpm, &count_body(10)).await;
    assert_eq!(status, 429, "a count past the key's RPM: {e}");
    assert_eq!(e["type"], "error", "Anthropic's shape: {e}");
    assert_eq!(e["error"]["code"], "key_rpm_exceeded", "{e}");
    assert!(retry.is_some(), "Retry-After");

    // The allowance: a first large count passes (and may take it below
    // zero), the next waits for the refill.
    let (status, n, _) = count(&count_url, &other, &count_body(8_000)).await;
    assert_eq!(status, 200, "{n}");
    assert!(n["input_tokens"].as_i64().unwrap() >= 8_000);
    let (status, e, retry) = count(&count_url, &other, &count_body(10)).await;
    assert_eq!(status, 429, "{e}");
    assert_eq!(e["error"]["code"], "key_count_tokens_exceeded", "{e}");
    let secs: u64 = retry.expect("Retry-After").parse().unwrap();
    assert!((1..=60).contains(&secs), "{secs}");
    srv.shutdown().await;
}

/// Item 9: a provider's 400 names its own models and accounts; the client
/// gets the status and a reason code, platform admins the provider's words
/// in the request log, tenant admins not.
#[tokio::test]
async fn a_providers_error_text_does_not_reach_the_client() {
    let env = TestEnv::new().await;
    let (_, key) = env.simple_tenant(Limits::default()).await;
    user(&env, "root@example.com", "platform_admin", None).await;
    user(&env, "ta@example.com", "tenant_admin", Some("t")).await;
    let srv = env.server().await;
    let base = format!("http://{}", srv.addr);
    for (path, body) in [
        (
            "/v1/chat/completions",
            chat_body("[mock:fault=400] hi", Some(4)),
        ),
        (
            "/v1/messages",
            json!({"model": "gpt-4o-mini", "max_tokens": 4,
                "messages": [{"role": "user", "content": "[mock:fault=400] hi"}]}),
        ),
    ] {
        let r = reqwest::Client::new()
            .post(format!("{base}{path}"))
            .bearer_auth(&key)
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 400, "{path}");
        let rid = r.headers()["x-request-id"].to_str().unwrap().to_string();
        let text = r.text().await.unwrap();
        for leak in ["org-7Hq2", "acme-internal", "mock:"] {
            assert!(
                !text.contains(leak),
                "{path}: {leak} reached the client: {text}"
            );
        }
        assert!(text.contains("upstream_rejected_request"), "{path}: {text}");

        let admin = login(&base, "root@example.com").await;
        let ta = login(&base, "ta@example.com").await;
        let lookup = format!("{base}/api/v1/requests/{rid}");
        let found = eventually(Duration::from_secs(5), || async {
            api("GET", &lookup, Some(&admin), None).await.0 == 200
        })
        .await;
        assert!(found, "{path}: the refusal is in the request log");
        let (_, seen) = api("GET", &lookup, Some(&admin), None).await;
        let detail = &seen["decision"]["detail"];
        assert_eq!(detail["upstream_status"], 400, "{seen}");
        assert!(
            detail["upstream_error"]
                .as_str()
                .is_some_and(|s| s.contains("org-7Hq2")),
            "platform admins read the provider's words: {seen}"
        );
        let (status, seen) = api("GET", &lookup, Some(&ta), None).await;
        assert_eq!(status, 200);
        assert!(
            !seen.to_string().contains("org-7Hq2"),
            "tenant admins do not: {seen}"
        );
    }
    srv.shutdown().await;
}

/// Item 10: months and days are the platform's — Redis' clock, not each
/// replica's. Two replicas 30 s apart (one still on the 31st, one already
/// in January) each book a request made at ~23:59:50 Redis time in
/// December, and report their skew.
#[tokio::test]
async fn replicas_thirty_seconds_apart_book_a_months_last_seconds_in_redis_month() {
    // Redis' clock reads 23:59:40 on the last day of the month now; the
    // replicas' 23:59:25 (15 s behind) and 23:59:55 (15 s ahead).
    let target = "2026-12-31T23:59:40Z"
        .parse::<chrono::DateTime<chrono::Utc>>()
        .unwrap();
    let offset_ms = (target - chrono::Utc::now()).num_milliseconds();
    let redis = e2e::redis_clock::shifted_redis(&shared_redis_url(), offset_ms).await;
    let t0 = std::time::Instant::now();
    let env = TestEnv::with_redis(redis, Default::default()).await;
    let (_, key) = env.simple_tenant(Limits::default()).await;
    let spawn = |at: &str| {
        let port = free_port();
        let child = replica_command(&env, port)
            .envs(faketime_env(at))
            .env("TOLLGATE__BILLING__SCHEDULER", "false")
            .env("TOLLGATE__GATEWAY__ADMISSION", "per_request")
            .spawn()
            .expect("tollgate runs");
        (port, child)
    };
    let elapsed = t0.elapsed().as_secs();
    let behind = spawn(&format!("2026-12-31 23:59:{:02}", 25 + elapsed));
    let ahead = spawn(&format!("2026-12-31 23:59:{:02}", 55 + elapsed));
    wait_healthy(behind.0).await;
    wait_healthy(ahead.0).await;
    // Redis now reads ~23:59:50 (a test that got here later than 15 s
    // after Redis started proves nothing: Redis would be in January).
    let since = t0.elapsed();
    assert!(
        since < Duration::from_secs(15),
        "replicas took {since:?} to start"
    );
    tokio::time::sleep(Duration::from_secs(10).saturating_sub(since)).await;
    let mut ids = Vec::new();
    for port in [behind.0, ahead.0] {
        let r = post(
            &format!("http://127.0.0.1:{port}/v1/chat/completions"),
            &key,
            &chat_body("hi", Some(4)),
        )
        .await;
        assert_eq!(r.status(), 200);
        ids.push(r.headers()["x-request-id"].to_str().unwrap().to_string());
    }
    let skews: Vec<f64> = {
        let mut v = Vec::new();
        for port in [behind.0, ahead.0] {
            let text = metrics_on(port).await;
            let line = text
                .lines()
                .find(|l| l.starts_with("tollgate_clock_skew_seconds"))
                .expect("the skew is reported");
            v.push(line.split_whitespace().last().unwrap().parse().unwrap());
        }
        v
    };
    let stored = ledger_reaches(&env, 2, Duration::from_secs(10)).await;
    for (_, mut c) in [behind, ahead] {
        let _ = c.kill();
        let _ = c.wait();
    }
    assert!(stored, "both requests reach the ledger");
    for id in &ids {
        let e = env.usage_event(id).await.expect("booked");
        assert_eq!(e.period, "2026-12", "{id} booked in {}", e.period);
        assert_eq!(e.day, "2026-12-31", "{id}");
        let at = domain::request_id::time_of(id).unwrap();
        assert_eq!(
            at.format("%Y-%m-%d %H:%M").to_string(),
            "2026-12-31 23:59",
            "{id} carries Redis' time"
        );
    }
    // Redis' counters of December hold both (settled: used, nothing held).
    let booked: i64 = {
        let mut sum = 0;
        for id in &ids {
            let e = env.usage_event(id).await.unwrap();
            sum += e.input_tokens + e.output_tokens;
        }
        sum
    };
    let c = env.counters("t", "2026-12").await;
    assert_eq!(c.get("t:ut").copied(), Some(booked), "{c:?}");
    assert!(env.counters("t", "2027-01").await.is_empty());
    assert!(
        (skews[0] - 15.0).abs() < 3.0 && (skews[1] + 15.0).abs() < 3.0,
        "skews {skews:?}"
    );
}

/// The paths the docs are written with (`/v1/…`, `/api/v1/…`, `/console/…`,
/// `/metrics`, `/healthz`), placeholders filled in and queries dropped.
fn documented_paths() -> Vec<(String, String)> {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut files = vec![root.join("README.md")];
    for e in std::fs::read_dir(root.join("docs")).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "md") {
            files.push(p);
        }
    }
    let re = regex::Regex::new(
        r"`(?:(?:GET|POST|PUT|PATCH|DELETE) )?(/(?:v1|v1beta|api/v1|console|metrics|healthz|readyz)[^`\s]*)`",
    )
    .unwrap();
    let placeholder = regex::Regex::new(r"\{[^}/]*\}|<[^>/]*>|:[a-z_]+").unwrap();
    let mut out = Vec::new();
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap();
        let name = f.file_name().unwrap().to_string_lossy().into_owned();
        for c in re.captures_iter(&text) {
            let raw = &c[1];
            // Families and examples, not routes: `/v1/*`, `/console/…`.
            if raw.contains('*') || raw.contains('…') || raw.contains("...") {
                continue;
            }
            // A family's prefix (`/api/v1`, `/console/`), not a route.
            if ["/api/v1", "/v1", "/v1beta", "/console"].contains(&raw.trim_end_matches('/'))
                || raw.ends_with('/')
            {
                continue;
            }
            let path = raw.split(['?', '#']).next().unwrap();
            let path = placeholder.replace_all(path, "x");
            let path = path.trim_end_matches(['.', ',', ')', ':', ';']);
            out.push((name.clone(), path.to_string()));
        }
    }
    out.sort();
    out.dedup();
    out
}

/// Item 12: every route the README and docs name is served (asked without
/// credentials, a route answers 401, 403, 405, a redirect or a page; one
/// that does not exist, 404).
#[tokio::test]
async fn every_route_the_docs_name_is_served() {
    let env = TestEnv::new().await;
    let srv = env.server().await;
    let base = format!("http://{}", srv.addr);
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let paths = documented_paths();
    assert!(paths.len() > 30, "the docs name routes: {}", paths.len());
    // Served only when configured: single sign-on (`auth.oidc`; tested in
    // tests/tests/console_sso.rs).
    const WHEN_CONFIGURED: &[&str] = &["/console/sso/start", "/console/sso/callback"];
    let mut missing = Vec::new();
    for (file, path) in paths
        .iter()
        .filter(|(_, p)| !WHEN_CONFIGURED.contains(&p.as_str()))
    {
        let status = client
            .get(format!("{base}{path}"))
            .send()
            .await
            .unwrap()
            .status()
            .as_u16();
        if status == 404 {
            missing.push(format!("{file}: {path}"));
        }
    }
    assert!(
        missing.is_empty(),
        "the docs name routes nobody serves:\n{}",
        missing.join("\n")
    );
    srv.shutdown().await;
}
