//! The budget promise against providers that behave like real ones
//! (mock-upstream's personalities): the cap field a provider reads, hidden
//! reasoning, absurd usage reports, oversized answers and sloppy SSE framing.

use domain::provider::{CapField, Dialect, ProviderProfile};
use domain::Limits;
use e2e::*;
use futures::StreamExt;
use serde_json::{json, Value};
use std::time::Duration;

fn body(model: &str, content: &str) -> Value {
    json!({"model": model, "messages": [{"role": "user", "content": content}]})
}

/// The tenant's used tokens once every hold is closed.
async fn settled_used(env: &TestEnv) -> i64 {
    let month = this_month();
    assert!(
        eventually(Duration::from_secs(10), || async {
            env.counters("t", &month)
                .await
                .get("t:ht")
                .copied()
                .unwrap_or(0)
                == 0
        })
        .await,
        "holds stay open: {:?}",
        env.counters("t", &month).await
    );
    env.counters("t", &month)
        .await
        .get("t:ut")
        .copied()
        .unwrap_or(0)
}

/// One model of the test's own (its metrics are its own too), one tenant
/// `t` with `limit` tokens, one key.
async fn setup(env: &TestEnv, model: &str, limit: i64, profile: Option<ProviderProfile>) -> String {
    env.model(model, "chat", 150_000, 600_000).await;
    if let Some(p) = profile {
        env.profile(model, p).await;
    }
    env.tenant(
        "t",
        Limits {
            monthly_tokens: Some(limit),
            ..Default::default()
        },
        None,
    )
    .await;
    env.app("t", "a", Limits::default()).await;
    env.key("t", "a", Limits::default()).await.1
}

/// 30 requests, each asking for at most 40 tokens in the field the client
/// chose, against a provider that reads only the other field and would
/// otherwise write 2,000 tokens.
async fn thirty_capped_requests(
    model: &str,
    personality: &str,
    client_field: &str,
    profile: ProviderProfile,
) {
    let env = TestEnv::new().await;
    let key = setup(&env, model, 1_000, Some(profile)).await;
    let srv = env.server().await;
    let url = format!("http://{}/v1/chat/completions", srv.addr);
    let (mut served, mut refused) = (0, 0);
    for _ in 0..30 {
        let mut b = body(
            model,
            &format!("hi [mock:personality={personality}] [mock:output_tokens=2000]"),
        );
        b[client_field] = json!(40);
        let r = post(&url, &key, &b).await;
        match r.status().as_u16() {
            200 => {
                let v: Value = r.json().await.unwrap();
                let n = v["usage"]["completion_tokens"].as_i64().unwrap();
                let text = v["choices"][0]["message"]["content"].as_str().unwrap();
                assert!(n <= 40, "answer of {n} completion tokens");
                assert!(text.matches(" hello").count() <= 40, "{text}");
                served += 1;
            }
            402 => refused += 1,
            s => panic!("unexpected status {s}"),
        }
    }
    let used = settled_used(&env).await;
    assert!(used <= 1_000, "used {used} > 1,000");
    assert!(served >= 10, "served only {served} (refused {refused})");
    srv.shutdown().await;
}

#[tokio::test]
async fn only_max_completion_tokens_sent_to_a_max_tokens_only_provider_stays_capped() {
    // An older vLLM: the profile's default, max_tokens.
    let profile = ProviderProfile::suggested_for("llama-3-70b");
    assert_eq!(profile.cap_field, CapField::MaxTokens);
    thirty_capped_requests(
        "llama-3-70b",
        "max_tokens_only",
        "max_completion_tokens",
        profile,
    )
    .await;
}

#[tokio::test]
async fn only_max_tokens_sent_to_a_max_completion_tokens_only_provider_stays_capped() {
    let profile = ProviderProfile {
        cap_field: CapField::MaxCompletionTokens,
        ..Default::default()
    };
    thirty_capped_requests(
        "azure-o3-deploy",
        "max_completion_tokens_only",
        "max_tokens",
        profile,
    )
    .await;
}

/// The text a stream delivered, and whether it ended with `[DONE]`.
async fn read_stream(r: reqwest::Response) -> String {
    let mut body = String::new();
    let mut s = r.bytes_stream();
    while let Some(b) = s.next().await {
        match b {
            Ok(b) => body.push_str(&String::from_utf8_lossy(&b)),
            Err(_) => break,
        }
    }
    body
}

fn delivered_tokens(sse: &str) -> usize {
    sse.split("\n\n")
        .filter_map(|e| e.strip_prefix("data: "))
        .filter_map(|d| serde_json::from_str::<Value>(d).ok())
        .filter_map(|v| {
            v["choices"][0]["delta"]["content"]
                .as_str()
                .map(|c| c.matches(" hello").count())
        })
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_streams_of_a_hidden_reasoning_model_stay_within_the_budget() {
    let env = TestEnv::new().await;
    // A reasoning model whose name says nothing: only its profile knows.
    let model = "deepseek-r1-distill";
    assert!(!ProviderProfile::suggested_for(model).hidden_reasoning);
    let profile = ProviderProfile {
        hidden_reasoning: true,
        ..Default::default()
    };
    let key = setup(&env, model, 3_000, Some(profile)).await;
    let mut cfg = env.config();
    cfg.redis.timeout_ms = 1_000;
    let srv = env.server_with(cfg).await;
    let url = format!("http://{}/v1/chat/completions", srv.addr);
    let client = reqwest::Client::new();
    let runs = (0..10).map(|_| {
        let (client, url, key) = (client.clone(), url.clone(), key.clone());
        async move {
            let mut b = body(
                model,
                "think [mock:hidden_reasoning=600] [mock:output_tokens=50] [mock:chunk_delay_ms=10]",
            );
            b["max_tokens"] = json!(1_000);
            b["stream"] = json!(true);
            b["stream_options"] = json!({"include_usage": true});
            let r = client.post(url).bearer_auth(key).json(&b).send().await.unwrap();
            let status = r.status().as_u16();
            let text = if status == 200 { read_stream(r).await } else { String::new() };
            (status, text)
        }
    });
    let results = futures::future::join_all(runs).await;
    let served: Vec<&String> = results
        .iter()
        .filter(|(s, _)| *s == 200)
        .map(|(_, t)| t)
        .collect();
    for (s, _) in &results {
        assert!([200, 402].contains(s), "status {s}");
    }
    for t in &served {
        assert_eq!(delivered_tokens(t), 50, "{t}");
        // The provider's usage counts the hidden reasoning.
        assert!(t.contains("\"reasoning_tokens\":600"), "{t}");
    }
    let used = settled_used(&env).await;
    assert!(used <= 3_000, "used {used} > 3,000");
    assert!(served.len() >= 2, "served {}", served.len());
    srv.shutdown().await;
}

/// Claude's extended thinking is billed in full and streamed as a summary:
/// a stream that asks for it is held at its whole cap up front (hidden
/// reasoning, whatever the profile), so ten concurrent thinking streams on
/// a 3,000-token budget cannot spend past it. Counting the stream's
/// deltas (the summary and the answer: ~55 tokens each) would admit all
/// ten and spend 6,500 (650 output each).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_thinking_streams_stay_within_the_budget() {
    let env = TestEnv::new().await;
    let model = "claude-thinker";
    let profile = ProviderProfile {
        apis: vec![Dialect::Chat, Dialect::Messages],
        ..Default::default()
    };
    assert!(!profile.hidden_reasoning);
    let key = setup(&env, model, 3_000, Some(profile)).await;
    let srv = env.server().await;
    let url = format!("http://{}/v1/messages", srv.addr);
    let client = reqwest::Client::new();
    let runs = (0..10).map(|_| {
        let (client, url, key) = (client.clone(), url.clone(), key.clone());
        async move {
            let b = json!({"model": model, "max_tokens": 1_000, "stream": true,
                "thinking": {"type": "enabled", "budget_tokens": 800},
                "messages": [{"role": "user", "content":
                    "think [mock:hidden_reasoning=600] [mock:output_tokens=50] [mock:chunk_delay_ms=10]"}]});
            let r = client
                .post(url)
                .header("x-api-key", key)
                .header("anthropic-version", "2023-06-01")
                .json(&b)
                .send()
                .await
                .unwrap();
            let status = r.status().as_u16();
            let text = if status == 200 { read_stream(r).await } else { String::new() };
            (status, text)
        }
    });
    let results = futures::future::join_all(runs).await;
    for (s, _) in &results {
        assert!([200, 402, 429].contains(s), "status {s}");
    }
    let served: Vec<&String> = results
        .iter()
        .filter(|(s, _)| *s == 200)
        .map(|(_, t)| t)
        .collect();
    assert!(served.len() >= 2, "served {}", served.len());
    for t in &served {
        // The summary streamed, the whole thinking billed.
        assert!(t.contains("thinking_delta"), "{t}");
        assert!(t.contains("\"output_tokens\":650"), "{t}");
    }
    let used = settled_used(&env).await;
    assert!(used <= 3_000, "used {used} > 3,000");
    srv.shutdown().await;
}

#[tokio::test]
async fn absurd_usage_is_billed_at_the_bound_and_shown_as_an_anomaly() {
    let env = TestEnv::new().await;
    let model = "absurd-gpt";
    let limit = 2_000;
    let key = setup(&env, model, limit, None).await;
    user(&env, "ops@example.com", "platform_admin", None).await;
    let srv = env.server().await;
    let base = format!("http://{}", srv.addr);
    let url = format!("{base}/v1/chat/completions");
    let mut rids = Vec::new();
    // ≈2^63 once, i64::MAX once (parses as an i64), negative once.
    for absurd in ["huge", "max", "negative"] {
        let mut b = body(
            model,
            &format!("hi [mock:absurd_usage={absurd}] [mock:output_tokens=10]"),
        );
        b["max_tokens"] = json!(20);
        let r = post(&url, &key, &b).await;
        assert_eq!(r.status(), 200);
        rids.push(r.headers()["x-request-id"].to_str().unwrap().to_string());
        let used = settled_used(&env).await;
        assert!((0..=limit).contains(&used), "used {used} after {absurd}");
    }
    // Then normal requests: the counters never wrapped.
    for _ in 0..5 {
        let mut b = body(model, "hi [mock:output_tokens=10]");
        b["max_tokens"] = json!(20);
        assert_eq!(post(&url, &key, &b).await.status(), 200);
    }
    let used = settled_used(&env).await;
    assert!((0..=limit).contains(&used), "used {used}");
    let month = this_month();
    assert!(
        eventually(Duration::from_secs(10), || async {
            env.ledger_tokens("t", &month).await == (used, 8)
        })
        .await,
        "ledger {:?} vs used {used}",
        env.ledger_tokens("t", &month).await
    );
    // Billed at the bound: the cap sent (20), the input estimate for a
    // negative input; the raw report kept.
    let huge = env.usage_event(&rids[0]).await.unwrap();
    assert_eq!(huge.output_tokens, 20);
    let a = huge.anomaly.as_ref().expect("anomaly recorded");
    assert_eq!(a.kind, "output_above_cap");
    assert_eq!(a.reported["completion_tokens"].as_u64(), Some(1 << 63));
    let max = env.usage_event(&rids[1]).await.unwrap();
    assert_eq!(max.output_tokens, 20);
    assert_eq!(max.anomaly.unwrap().kind, "output_above_cap");
    let neg = env.usage_event(&rids[2]).await.unwrap();
    assert_eq!(neg.anomaly.as_ref().unwrap().kind, "negative");
    assert!(neg.input_tokens > 0 && neg.input_tokens < 100, "{neg:?}");
    // In metrics, request lookup and the notices.
    let m = metrics(srv.addr).await;
    let line = m
        .lines()
        .find(|l| {
            l.starts_with("tollgate_usage_anomalies_total")
                && l.contains(&format!("model=\"{model}\""))
                && l.contains("output_above_cap")
        })
        .unwrap_or_else(|| panic!("no anomaly metric in\n{m}"));
    assert!(line.ends_with(" 2"), "{line}");
    let token = login(&base, "ops@example.com").await;
    let (status, v) = api(
        "GET",
        &format!("{base}/api/v1/requests/{}", rids[0]),
        Some(&token),
        None,
    )
    .await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["usage"]["anomaly"]["kind"], "output_above_cap");
    assert_eq!(v["usage"]["output_tokens"], 20);
    assert!(
        eventually(Duration::from_secs(5), || async {
            let (_, n) = api("GET", &format!("{base}/api/v1/notices"), Some(&token), None).await;
            n.to_string().contains("usage_anomaly")
        })
        .await,
        "no usage_anomaly notice"
    );
    srv.shutdown().await;
}

#[tokio::test]
async fn an_oversized_upstream_answer_is_a_clean_502_and_the_hold_is_settled() {
    let env = TestEnv::new().await;
    let model = "big-answer";
    let key = setup(&env, model, 100_000, None).await;
    let mut cfg = env.config();
    cfg.gateway.max_upstream_body_bytes = 64 << 10;
    let srv = env.server_with(cfg).await;
    let url = format!("http://{}/v1/chat/completions", srv.addr);
    let mut b = body(model, "hi [mock:body_bytes=200000]");
    b["max_tokens"] = json!(30);
    let r = post(&url, &key, &b).await;
    assert_eq!(r.status(), 502);
    let rid = r.headers()["x-request-id"].to_str().unwrap().to_string();
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["error"]["code"], "upstream_response_too_large", "{v}");
    assert_eq!(v["error"]["type"], "api_error");
    // The hold is closed, charged at the estimate (the provider generated it).
    let used = settled_used(&env).await;
    assert!(used > 30, "used {used}");
    assert!(
        eventually(Duration::from_secs(5), || async {
            env.usage_event(&rid).await.is_some()
        })
        .await
    );
    let e = env.usage_event(&rid).await.unwrap();
    assert_eq!((e.status.as_str(), e.output_tokens), ("upstream_error", 30));
    // A normal answer still passes.
    let mut b = body(model, "hi");
    b["max_tokens"] = json!(30);
    assert_eq!(post(&url, &key, &b).await.status(), 200);
    srv.shutdown().await;
}

fn stream_req(model: &str, content: &str, max_tokens: i64) -> Value {
    let mut b = body(model, content);
    b["max_tokens"] = json!(max_tokens);
    b["stream"] = json!(true);
    b
}

#[tokio::test]
async fn an_unterminated_last_event_is_metered_like_any_other() {
    let env = TestEnv::new().await;
    // An o200k name: counted exactly (other families add 10 %).
    let model = "gpt-4o-sloppy-sse";
    let key = setup(&env, model, 100_000, None).await;
    let srv = env.server().await;
    let url = format!("http://{}/v1/chat/completions", srv.addr);
    // 300 tokens in one last event without its blank line: past the first
    // slice (256), so the hold must be extended for it.
    let r = post(
        &url,
        &key,
        &stream_req(
            model,
            "hi [mock:unterminated] [mock:output_tokens=300]",
            1_000,
        ),
    )
    .await;
    assert_eq!(r.status(), 200);
    let rid = r.headers()["x-request-id"].to_str().unwrap().to_string();
    let sse = read_stream(r).await;
    assert_eq!(delivered_tokens(&sse), 300, "{sse}");
    assert!(sse.ends_with("\n\n"), "sent unterminated: {sse:?}");
    settled_used(&env).await;
    assert!(
        eventually(Duration::from_secs(5), || async {
            env.usage_event(&rid).await.is_some()
        })
        .await
    );
    let e = env.usage_event(&rid).await.unwrap();
    assert_eq!((e.output_tokens, e.usage_source.as_str()), (300, "counted"));
    assert_eq!(e.overrun_tokens, 0, "{e:?}");
    srv.shutdown().await;
}

#[tokio::test]
async fn an_unterminated_last_event_past_the_budget_is_cut_not_forwarded() {
    let env = TestEnv::new().await;
    let model = "sloppy-sse-tight";
    // Room for the input and the first slice (256), not for 400 tokens.
    let limit = 320;
    let key = setup(&env, model, limit, None).await;
    let srv = env.server().await;
    let url = format!("http://{}/v1/chat/completions", srv.addr);
    let r = post(
        &url,
        &key,
        &stream_req(
            model,
            "hi [mock:unterminated] [mock:output_tokens=400]",
            1_000,
        ),
    )
    .await;
    assert_eq!(r.status(), 200);
    let sse = read_stream(r).await;
    assert_eq!(delivered_tokens(&sse), 0, "{sse}");
    assert!(sse.contains("tenant_monthly_budget_exhausted"), "{sse}");
    let used = settled_used(&env).await;
    assert!(used <= limit, "used {used} > {limit}");
    srv.shutdown().await;
}

#[tokio::test]
async fn the_profile_is_read_written_and_validated_through_the_admin_api() {
    let env = TestEnv::new().await;
    user(&env, "ops@example.com", "platform_admin", None).await;
    let srv = env.server().await;
    let base = format!("http://{}", srv.addr);
    let token = login(&base, "ops@example.com").await;
    let new = |id: &str, extra: Value| {
        let mut m = json!({"id": id, "upstream_base_url": env.mock_url, "upstream_model": id,
            "input_price_per_mtok_usd": "1", "output_price_per_mtok_usd": "2"});
        for (k, v) in extra.as_object().unwrap() {
            m[k] = v.clone();
        }
        m
    };
    // Unset: the name's suggestion.
    let (s, v) = api(
        "POST",
        &format!("{base}/api/v1/models"),
        Some(&token),
        Some(new("o3-mini", json!({}))),
    )
    .await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["profile"]["cap_field"], "max_completion_tokens");
    assert_eq!(v["profile"]["hidden_reasoning"], true);
    let (s, v) = api(
        "POST",
        &format!("{base}/api/v1/models"),
        Some(&token),
        Some(new(
            "minimax-m1",
            json!({"cap_field": "both", "hidden_reasoning": false}),
        )),
    )
    .await;
    assert_eq!(s, 200, "{v}");
    let (s, v) = api(
        "GET",
        &format!("{base}/api/v1/models/minimax-m1"),
        Some(&token),
        None,
    )
    .await;
    assert_eq!(s, 200);
    assert_eq!(
        v["profile"],
        json!({"cap_field": "both", "hidden_reasoning": false, "apis": ["chat"]})
    );
    // An unknown cap field: 400 naming the field, nothing stored.
    let (s, v) = api(
        "POST",
        &format!("{base}/api/v1/models"),
        Some(&token),
        Some(new("bad-model", json!({"cap_field": "max_output_tokens"}))),
    )
    .await;
    assert_eq!(s, 400);
    assert_eq!(v["error"]["param"], "cap_field", "{v}");
    let (s, _) = api(
        "GET",
        &format!("{base}/api/v1/models/bad-model"),
        Some(&token),
        None,
    )
    .await;
    assert_eq!(s, 404);
    let (s, v) = api(
        "PATCH",
        &format!("{base}/api/v1/models/minimax-m1"),
        Some(&token),
        Some(json!({"cap_field": "maxtokens"})),
    )
    .await;
    assert_eq!((s, v["error"]["param"].as_str()), (400, Some("cap_field")));
    let (s, v) = api(
        "PATCH",
        &format!("{base}/api/v1/models/minimax-m1"),
        Some(&token),
        Some(json!({"hidden_reasoning": true})),
    )
    .await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["profile"]["hidden_reasoning"], true);
    assert_eq!(v["profile"]["cap_field"], "both");
    srv.shutdown().await;
}
