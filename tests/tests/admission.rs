//! What a client sees on the way in: auth, validation, allow-lists, rate
//! limits, headers and OpenAI-shaped errors — and that refusals charge nothing.

use domain::Limits;
use e2e::*;
use serde_json::json;

async fn assert_openai_error(r: reqwest::Response, status: u16, code: &str) -> serde_json::Value {
    assert_eq!(r.status().as_u16(), status);
    assert_eq!(r.headers()["x-tollgate-decision"], "reject");
    assert!(r.headers().contains_key("x-request-id"));
    let b: serde_json::Value = r.json().await.unwrap();
    assert_eq!(b["error"]["code"], code, "{b}");
    assert!(
        b["error"]["message"]
            .as_str()
            .is_some_and(|m| !m.is_empty()),
        "{b}"
    );
    assert!(b["error"]["type"].is_string(), "{b}");
    assert!(b["error"].as_object().unwrap().contains_key("param"), "{b}");
    b
}

#[tokio::test]
async fn bad_requests_are_refused_with_reasons_and_charge_nothing() {
    let env = TestEnv::new().await;
    let (_, key) = env.simple_tenant(Limits::default()).await;
    env.model("deepseek-chat", "chat", 1, 1).await;
    env.tenant("other", Limits::default(), Some(vec!["gpt-4o-mini"]))
        .await;
    env.app("other", "a", Limits::default()).await;
    let (_, other_key) = env.key("other", "a", Limits::default()).await;
    let srv = env.server().await;
    let url = format!("http://{}/v1/chat/completions", srv.addr);

    // Unknown, malformed and missing keys.
    let fake = domain::keys::generate();
    assert_openai_error(
        post(&url, &fake, &chat_body("hi", None)).await,
        401,
        "invalid_api_key",
    )
    .await;
    assert_openai_error(
        post(&url, "sk-not-ours", &chat_body("hi", None)).await,
        401,
        "invalid_api_key",
    )
    .await;
    let r = reqwest::Client::new()
        .post(&url)
        .json(&chat_body("hi", None))
        .send()
        .await
        .unwrap();
    assert_openai_error(r, 401, "invalid_api_key").await;

    // Bad bodies name the field.
    let b = assert_openai_error(
        post(&url, &key, &json!({"model":"gpt-4o-mini"})).await,
        400,
        "invalid_request",
    )
    .await;
    assert_eq!(b["error"]["param"], "messages");
    let mut body = chat_body("hi", None);
    body["temperature"] = json!(7);
    let b = assert_openai_error(post(&url, &key, &body).await, 400, "invalid_request").await;
    assert_eq!(b["error"]["param"], "temperature");
    let mut body = chat_body("hi", None);
    body["api_base"] = json!("http://169.254.169.254/latest");
    let b = assert_openai_error(post(&url, &key, &body).await, 400, "invalid_request").await;
    assert_eq!(b["error"]["param"], "api_base");
    let r = reqwest::Client::new()
        .post(&url)
        .bearer_auth(&key)
        .header("content-type", "application/json")
        .body("{not json")
        .send()
        .await
        .unwrap();
    assert_openai_error(r, 400, "invalid_request").await;
    let huge = "x".repeat(5 << 20);
    let r = post(&url, &key, &chat_body(&huge, None)).await;
    assert_openai_error(r, 413, "invalid_request").await;

    // Unknown model, and a model this tenant may not use.
    let mut body = chat_body("hi", None);
    body["model"] = json!("gpt-99");
    let b = assert_openai_error(post(&url, &key, &body).await, 404, "model_not_found").await;
    assert_eq!(b["error"]["param"], "model");
    let mut body = chat_body("hi", None);
    body["model"] = json!("deepseek-chat");
    assert_openai_error(
        post(&url, &other_key, &body).await,
        403,
        "model_not_allowed",
    )
    .await;

    // Nothing reached the upstream, nothing was held or charged.
    assert_eq!(env.mock.snapshot().requests, 0);
    let month = this_month();
    for t in ["t", "other"] {
        let c = env.counters(t, &month).await;
        assert!(c.iter().all(|(k, v)| k == "_rb" || *v == 0), "{t}: {c:?}");
    }
    srv.shutdown().await;
}

#[tokio::test]
async fn a_key_rpm_refusal_leaves_app_and_tenant_counters_unchanged() {
    let env = TestEnv::new().await;
    env.model("gpt-4o-mini", "chat", 150_000, 600_000).await;
    env.tenant(
        "t",
        Limits {
            monthly_tokens: Some(1_000_000),
            rpm: Some(1000),
            ..Default::default()
        },
        None,
    )
    .await;
    env.app(
        "t",
        "a",
        Limits {
            monthly_tokens: Some(500_000),
            input_tpm: Some(100_000),
            ..Default::default()
        },
    )
    .await;
    let (_, key) = env
        .key(
            "t",
            "a",
            Limits {
                rpm: Some(2),
                ..Default::default()
            },
        )
        .await;
    let srv = env.server().await;
    let url = format!("http://{}/v1/chat/completions", srv.addr);

    let r = post(&url, &key, &chat_body("hi", Some(8))).await;
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["x-tollgate-decision"], "allow");
    assert_eq!(r.headers()["x-ratelimit-remaining-requests"], "1");
    assert!(r.headers().contains_key("x-ratelimit-remaining-tokens"));
    assert_eq!(
        post(&url, &key, &chat_body("hi", Some(8))).await.status(),
        200
    );
    let month = this_month();
    let before = env.counters("t", &month).await;

    let r = post(&url, &key, &chat_body("hi", Some(8))).await;
    assert_eq!(r.headers()["x-tollgate-reason"], "key_rpm_exceeded");
    let retry: u64 = r.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((1..=60).contains(&retry));
    assert_openai_error(r, 429, "key_rpm_exceeded").await;

    assert_eq!(env.counters("t", &month).await, before);
    assert_eq!(env.mock.snapshot().chat, 2);
    srv.shutdown().await;
}

#[tokio::test]
async fn the_provider_key_is_the_gateways_and_models_are_listed_per_key() {
    let env = TestEnv::new().await;
    let (_, key) = env.simple_tenant(Limits::default()).await;
    let srv = env.server().await;
    let r = post(
        &format!("http://{}/v1/chat/completions", srv.addr),
        &key,
        &chat_body("hi", None),
    )
    .await;
    assert_eq!(r.status(), 200);
    let snap = env.mock.snapshot();
    assert_eq!(
        snap.last_authorization.as_deref(),
        Some("Bearer sk-provider-secret")
    );
    // No max_tokens from the client: the gateway caps the upstream at its hold.
    assert_eq!(snap.last_body.unwrap()["max_tokens"], 256);

    let models: serde_json::Value = reqwest::Client::new()
        .get(format!("http://{}/v1/models", srv.addr))
        .bearer_auth(&key)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let ids: Vec<&str> = models["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, vec!["gpt-4o-mini", "text-embedding-3-small"]);
    srv.shutdown().await;
}

/// Every answer under `/v1` and `/v1beta` has a shape: a path not served is
/// a 404 and a method a path does not take a 405, each JSON in the dialect
/// the path implies, with a request id; a model is retrieved by id, and an
/// Anthropic client reads the models in Anthropic's shape.
#[tokio::test]
async fn every_answer_has_a_shape_and_a_request_id() {
    let env = TestEnv::new().await;
    let (_, key) = env.simple_tenant(Limits::default()).await;
    let srv = env.server().await;
    let base = format!("http://{}", srv.addr);
    let c = reqwest::Client::new();
    let cases = [
        ("GET", "/v1/nothing/here", 404, "openai"),
        ("POST", "/v1/chat/complete", 404, "openai"),
        ("GET", "/v1/chat/completions", 405, "openai"),
        ("DELETE", "/v1/models", 405, "openai"),
        ("GET", "/v1/messages", 405, "anthropic"),
        ("POST", "/v1/messages/batches", 404, "anthropic"),
        (
            "POST",
            "/v1beta/tunedModels/x:generateContent",
            404,
            "google",
        ),
    ];
    for (method, path, status, shape) in cases {
        let r = c
            .request(method.parse().unwrap(), format!("{base}{path}"))
            .bearer_auth(&key)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), status, "{method} {path}");
        assert!(r.headers().contains_key("x-request-id"), "{method} {path}");
        let reason = if status == 404 {
            "route_not_found"
        } else {
            "method_not_allowed"
        };
        assert_eq!(r.headers()["x-tollgate-reason"], reason, "{method} {path}");
        let b: serde_json::Value = r.json().await.unwrap();
        match shape {
            "openai" => assert_eq!(b["error"]["code"], reason, "{b}"),
            "anthropic" => {
                assert_eq!(b["type"], "error", "{b}");
                assert!(
                    b["error"]["type"].is_string() && b["error"]["message"].is_string(),
                    "{b}"
                );
            }
            _ => {
                assert_eq!(b["error"]["code"], status, "{b}");
                assert_eq!(b["error"]["status"], "NOT_FOUND", "{b}");
            }
        }
    }

    let get = |path: &str, anthropic: bool| {
        let mut r = c.get(format!("{base}{path}")).bearer_auth(&key);
        if anthropic {
            r = r.header("anthropic-version", "2023-06-01");
        }
        r.send()
    };
    let r = get("/v1/models/gpt-4o-mini", false).await.unwrap();
    assert_eq!(r.status(), 200);
    assert!(r.headers().contains_key("x-request-id"));
    let m: serde_json::Value = r.json().await.unwrap();
    assert_eq!(
        (m["id"].as_str(), m["object"].as_str()),
        (Some("gpt-4o-mini"), Some("model"))
    );
    let m: serde_json::Value = get("/v1/models/gpt-4o-mini", true)
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        (m["type"].as_str(), m["id"].as_str()),
        (Some("model"), Some("gpt-4o-mini")),
        "{m}"
    );
    let r = get("/v1/models/nope", false).await.unwrap();
    assert_eq!(r.status(), 404);
    let b: serde_json::Value = r.json().await.unwrap();
    assert_eq!(b["error"]["code"], "model_not_found");
    let r = get("/v1/models/nope", true).await.unwrap();
    assert_eq!(r.status(), 404);
    let b: serde_json::Value = r.json().await.unwrap();
    assert_eq!(
        (b["type"].as_str(), b["error"]["type"].as_str()),
        (Some("error"), Some("not_found_error")),
        "{b}"
    );
    let l: serde_json::Value = get("/v1/models", true).await.unwrap().json().await.unwrap();
    assert_eq!(l["has_more"], false, "{l}");
    assert_eq!(l["first_id"], "gpt-4o-mini", "{l}");
    assert_eq!(l["last_id"], "text-embedding-3-small", "{l}");
    assert_eq!(l["data"][0]["type"], "model", "{l}");
    srv.shutdown().await;
}

#[tokio::test]
async fn upstream_refusals_release_the_hold() {
    let env = TestEnv::new().await;
    let (_, key) = env
        .simple_tenant(Limits {
            monthly_tokens: Some(10_000),
            ..Default::default()
        })
        .await;
    let srv = env.server().await;
    let url = format!("http://{}/v1/chat/completions", srv.addr);
    let r = post(&url, &key, &chat_body("hi [mock:fault=429]", None)).await;
    assert_eq!(r.status(), 429);
    assert_eq!(r.headers()["x-tollgate-reason"], "upstream_rate_limited");
    assert!(r.headers().contains_key("retry-after"));
    let r = post(&url, &key, &chat_body("hi [mock:fault=500]", None)).await;
    assert_openai_error(r, 502, "upstream_error").await;
    // Nothing was charged, and nothing stays held (on the lease path the
    // released estimates go back to the lease, which returns when idle).
    let month = this_month();
    let freed = eventually(std::time::Duration::from_secs(5), || async {
        let c = env.counters("t", &month).await;
        let get = |f: &str| c.get(f).copied().unwrap_or(0);
        (get("t:ut"), get("t:ht")) == (0, 0)
    })
    .await;
    assert!(freed, "{:?}", env.counters("t", &month).await);
    assert_eq!(env.mock.snapshot().faults, 2);
    srv.shutdown().await;
}

#[tokio::test]
async fn key_changes_reach_the_running_gateway_within_a_second() {
    let env = TestEnv::new().await;
    let (key_id, key) = env.simple_tenant(Limits::default()).await;
    let srv = env.server().await;
    let url = format!("http://{}/v1/chat/completions", srv.addr);
    assert_eq!(post(&url, &key, &chat_body("hi", None)).await.status(), 200);

    let (_, fresh) = env.key("t", "a", Limits::default()).await;
    let t0 = std::time::Instant::now();
    let ok = eventually(std::time::Duration::from_secs(1), || async {
        post(&url, &fresh, &chat_body("hi", None)).await.status() == 200
    })
    .await;
    assert!(ok, "new key not usable after {:?}", t0.elapsed());

    env.store
        .revoke_key("test", key_id.parse().unwrap())
        .await
        .unwrap();
    let gone = eventually(std::time::Duration::from_secs(1), || async {
        post(&url, &key, &chat_body("hi", None)).await.status() == 401
    })
    .await;
    assert!(gone, "revoked key still accepted");
    srv.shutdown().await;
}

#[tokio::test]
async fn a_large_prompt_is_estimated_with_the_real_tokenizer() {
    let env = TestEnv::new().await;
    let (_, key) = env.simple_tenant(Limits::default()).await;
    let srv = env.server().await;
    // ~200 KB of text: tokenized off the request workers, then held in full.
    let big = "the quick brown fox jumps over the lazy dog ".repeat(4600);
    let r = post(
        &format!("http://{}/v1/chat/completions", srv.addr),
        &key,
        &chat_body(&big, Some(8)),
    )
    .await;
    assert_eq!(r.status(), 200);
    let rid = r.headers()["x-request-id"].to_str().unwrap().to_string();
    let month = this_month();
    assert!(
        eventually(std::time::Duration::from_secs(5), || async {
            env.ledger_tokens("t", &month).await.1 == 1
        })
        .await
    );
    let e = env.usage_event(&rid).await.unwrap();
    // 9 words, 9 tokens, 4600 times: the estimate is the BPE count (+ chat
    // overhead), not a guess from the byte length.
    let est_input = e.est_tokens - 8;
    assert!(
        (41_400..41_420).contains(&est_input),
        "estimated {est_input} input tokens"
    );
    srv.shutdown().await;
}

#[tokio::test]
async fn a_non_stream_client_that_leaves_is_charged_the_whole_answer() {
    let env = TestEnv::new().await;
    let (_, key) = env.simple_tenant(Limits::default()).await;
    let srv = env.server().await;
    let client = reqwest::Client::builder()
        .timeout(std::time::Duration::from_millis(150))
        .build()
        .unwrap();
    let r = client
        .post(format!("http://{}/v1/chat/completions", srv.addr))
        .bearer_auth(&key)
        .json(&chat_body("hello [mock:latency_ms=600]", Some(40)))
        .send()
        .await;
    assert!(r.is_err(), "the client should have timed out");
    let e = only_usage_event(&env).await;
    // The provider generates (and bills) a non-stream answer whole.
    assert_eq!(
        (e.status.as_str(), e.usage_source.as_str(), e.output_tokens),
        ("client_closed", "estimated", 40)
    );
    srv.shutdown().await;
}

#[tokio::test]
async fn a_model_url_with_credentials_is_refused() {
    let env = TestEnv::new().await;
    e2e::user(&env, "admin@x.io", "platform_admin", None).await;
    let srv = env.server().await;
    let base = format!("http://{}", srv.addr);
    let token = e2e::login(&base, "admin@x.io").await;
    let m = json!({"id": "m1", "upstream_base_url": "https://user:secret@api.example.com/v1", "upstream_model": "x",
        "input_price_per_mtok_usd": "1", "output_price_per_mtok_usd": "2"});
    let (status, body) = e2e::api(
        "POST",
        &format!("{base}/api/v1/models"),
        Some(&token),
        Some(m),
    )
    .await;
    assert_eq!(status, 400, "{body}");
    assert!(!body.to_string().contains("secret"));
    srv.shutdown().await;
}

#[tokio::test]
async fn hostile_bodies_get_a_clear_400_and_charge_nothing() {
    let env = TestEnv::new().await;
    let (_, key) = env.simple_tenant(Limits::default()).await;
    let srv = env.server().await;
    let url = format!("http://{}/v1/chat/completions", srv.addr);
    let deep = format!("{}{}", "[".repeat(5000), "]".repeat(5000));
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("invalid UTF-8", b"{\"model\":\"gpt-4o-mini\",\"messages\":[{\"role\":\"user\",\"content\":\"\xff\xfe\"}]}".to_vec()),
        ("deep nesting", format!("{{\"model\":\"gpt-4o-mini\",\"messages\":{deep}}}").into_bytes()),
        ("huge number", br#"{"model":"gpt-4o-mini","messages":[{"role":"user","content":"x"}],"max_tokens":1e300}"#.to_vec()),
        ("negative", br#"{"model":"gpt-4o-mini","messages":[{"role":"user","content":"x"}],"max_tokens":-5}"#.to_vec()),
        ("string number", br#"{"model":"gpt-4o-mini","messages":[{"role":"user","content":"x"}],"max_tokens":"64"}"#.to_vec()),
        ("NaN", br#"{"model":"gpt-4o-mini","messages":[{"role":"user","content":"x"}],"temperature":NaN}"#.to_vec()),
        ("not an object", b"[1,2,3]".to_vec()),
        ("empty", b"".to_vec()),
        ("model is a number", br#"{"model":7,"messages":[{"role":"user","content":"x"}]}"#.to_vec()),
        ("content is a number", br#"{"model":"gpt-4o-mini","messages":[{"role":"user","content":7}]}"#.to_vec()),
        ("nested base_url", br#"{"model":"gpt-4o-mini","messages":[{"role":"user","content":"x","meta":{"base_url":"http://x"}}]}"#.to_vec()),
        ("SQL in the model", br#"{"model":"x'; DROP TABLE usage_events; --","messages":[{"role":"user","content":"x"}]}"#.to_vec()),
    ];
    let client = reqwest::Client::new();
    for (what, body) in cases {
        let r = client
            .post(&url)
            .bearer_auth(&key)
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .unwrap();
        let status = r.status().as_u16();
        let b: serde_json::Value = r.json().await.unwrap_or_default();
        assert!((400..500).contains(&status), "{what}: {status} {b}");
        assert!(
            b["error"]["message"]
                .as_str()
                .is_some_and(|m| !m.is_empty()),
            "{what}: {b}"
        );
    }
    // Nothing reached the upstream or the books, and the ledger is intact.
    assert_eq!(env.mock.snapshot().requests, 0);
    let c = env.counters("t", &this_month()).await;
    assert!(c.iter().all(|(k, v)| k == "_rb" || *v == 0), "{c:?}");
    assert_eq!(
        post(&url, &key, &chat_body("still alive", None))
            .await
            .status(),
        200
    );
    srv.shutdown().await;
}

/// A client resending every 429 at once gets one refusal per connection
/// per `fair.refusal_delay_ms`: a rate refusal is answered after the pause,
/// a bad request and an unknown key at once.
#[tokio::test]
async fn rate_refusals_are_paced_and_other_refusals_answer_at_once() {
    let env = TestEnv::new().await;
    let (_, key) = env
        .simple_tenant(Limits {
            rpm: Some(1),
            ..Default::default()
        })
        .await;
    let mut cfg = env.config();
    cfg.fair.refusal_delay_ms = 1_500;
    let srv = env.server_with(cfg).await;
    let url = format!("http://{}/v1/chat/completions", srv.addr);
    assert_eq!(
        post(&url, &key, &chat_body("hi", Some(8))).await.status(),
        200
    );
    let t = std::time::Instant::now();
    let r = post(&url, &key, &chat_body("hi", Some(8))).await;
    assert_eq!(r.status(), 429);
    assert!(
        t.elapsed() >= std::time::Duration::from_millis(1_000),
        "the 429 came after {:?}",
        t.elapsed()
    );
    let t = std::time::Instant::now();
    let mut bad = chat_body("hi", Some(8));
    bad["max_tokens"] = json!(-1);
    assert_eq!(post(&url, &key, &bad).await.status(), 400);
    assert_eq!(
        post(&url, "tg-unknown", &chat_body("hi", Some(8)))
            .await
            .status(),
        401
    );
    assert!(
        t.elapsed() < std::time::Duration::from_millis(1_000),
        "a 400 and a 401 took {:?}",
        t.elapsed()
    );
    srv.shutdown().await;
}

/// Gemini API clients (Gemini CLI): the key in `x-goog-api-key`, `?key=`
/// or a bearer token; generateContent answered in Gemini's shape with
/// `usageMetadata` and billed; countTokens and the model list unbilled;
/// refusals in Google's error shape.
#[tokio::test]
async fn gemini_clients_are_served_in_their_own_shape() {
    let env = TestEnv::new().await;
    let (_, key) = env.simple_tenant(Limits::default()).await;
    let srv = env.server().await;
    let base = format!("http://{}/v1beta", srv.addr);
    let c = reqwest::Client::new();
    let body = json!({"systemInstruction": {"parts": [{"text": "be brief"}]},
        "contents": [{"role": "user", "parts": [{"text": "hello [mock:output_tokens=7]"}]}],
        "generationConfig": {"maxOutputTokens": 50}});
    let r = c
        .post(format!("{base}/models/gpt-4o-mini:generateContent"))
        .header("x-goog-api-key", &key)
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let rid = r.headers()["x-request-id"].to_str().unwrap().to_string();
    let a: serde_json::Value = r.json().await.unwrap();
    assert_eq!(a["candidates"][0]["content"]["role"], "model", "{a}");
    assert_eq!(a["candidates"][0]["finishReason"], "STOP", "{a}");
    assert_eq!(a["usageMetadata"]["candidatesTokenCount"], 7, "{a}");
    let booked = eventually(std::time::Duration::from_secs(5), || async {
        env.usage_event(&rid).await.is_some()
    })
    .await;
    assert!(booked);
    let e = env.usage_event(&rid).await.unwrap();
    assert_eq!(
        (e.input_tokens, e.output_tokens),
        (a["usageMetadata"]["promptTokenCount"].as_i64().unwrap(), 7)
    );
    // countTokens with ?key=: a count, nothing booked.
    let r = c
        .post(format!("{base}/models/gpt-4o-mini:countTokens?key={key}"))
        .json(&json!({"contents": body["contents"]}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let n: serde_json::Value = r.json().await.unwrap();
    assert!(n["totalTokens"].as_i64().unwrap() > 0, "{n}");
    // The models, with a bearer token.
    let l: serde_json::Value = c
        .get(format!("{base}/models"))
        .bearer_auth(&key)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(l["models"][0]["name"], "models/gpt-4o-mini", "{l}");
    let m: serde_json::Value = c
        .get(format!("{base}/models/gpt-4o-mini?key={key}"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(m["name"], "models/gpt-4o-mini", "{m}");
    // Refusals in Google's shape.
    let empty = serde_json::json!({"contents": []});
    for (url, sent, status, google) in [
        (
            format!("{base}/models/nope:generateContent"),
            &body,
            404,
            "NOT_FOUND",
        ),
        (
            format!("{base}/models/gpt-4o-mini:streamGenerateContent"),
            &empty,
            400,
            "INVALID_ARGUMENT",
        ),
    ] {
        let r = c
            .post(&url)
            .header("x-goog-api-key", &key)
            .json(sent)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), status, "{url}");
        assert!(r.headers().contains_key("x-request-id"));
        let e: serde_json::Value = r.json().await.unwrap();
        assert_eq!(
            (e["error"]["code"].as_i64(), e["error"]["status"].as_str()),
            (Some(status as i64), Some(google)),
            "{e}"
        );
    }
    let r = c
        .post(format!("{base}/models/gpt-4o-mini:generateContent"))
        .header("x-goog-api-key", "tg-nope")
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    let e: serde_json::Value = r.json().await.unwrap();
    assert_eq!(e["error"]["status"], "UNAUTHENTICATED", "{e}");
    srv.shutdown().await;
}
