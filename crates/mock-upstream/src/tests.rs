//! End-to-end tests against a real bound port.

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::{spawn, MockConfig, StatsSnapshot};

async fn post(url: String, body: Value) -> reqwest::Response {
    reqwest::Client::new()
        .post(url)
        .bearer_auth("sk-provider")
        .json(&body)
        .send()
        .await
        .expect("send")
}

fn chat_body(user: &str) -> Value {
    json!({
        "model": "gpt-4o-mini",
        "messages": [
            {"role": "system", "content": "abcd"},          // ceil(4/4)+3 = 4
            {"role": "user", "content": user},
        ],
    })
}

/// The `data:` payloads of an SSE body.
fn events(body: &str) -> Vec<&str> {
    body.split("\n\n")
        .filter(|e| !e.is_empty())
        .map(|e| e.strip_prefix("data: ").expect("data: prefix"))
        .collect()
}

async fn wait_for(
    stats: &crate::MockStats,
    what: impl Fn(&StatsSnapshot) -> bool,
) -> StatsSnapshot {
    let deadline = Instant::now() + Duration::from_secs(3);
    loop {
        let s = stats.snapshot();
        if what(&s) || Instant::now() > deadline {
            return s;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn non_stream_usage_and_content() {
    let (base, stats) = spawn(MockConfig::default()).await;
    // "hello world!" = 12 chars -> 3 + 3 = 6; system 4; + 3 => 13
    let r = post(
        format!("{base}/chat/completions"),
        chat_body("hello world!"),
    )
    .await;
    assert_eq!(r.status(), 200);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["object"], "chat.completion");
    assert!(v["id"].as_str().unwrap().starts_with("chatcmpl-mock-"));
    assert_eq!(v["model"], "gpt-4o-mini");
    assert_eq!(v["choices"][0]["message"]["role"], "assistant");
    assert_eq!(v["choices"][0]["message"]["content"], " hello".repeat(16));
    assert_eq!(v["choices"][0]["finish_reason"], "stop");
    assert_eq!(
        v["usage"],
        json!({"prompt_tokens": 13, "completion_tokens": 16, "total_tokens": 29})
    );

    let s = stats.snapshot();
    assert_eq!((s.requests, s.chat, s.streams, s.faults), (1, 1, 0, 0));
    assert_eq!(s.last_authorization.as_deref(), Some("Bearer sk-provider"));
    assert_eq!(s.last_model.as_deref(), Some("gpt-4o-mini"));
    assert_eq!(
        s.last_body.unwrap()["messages"][1]["content"],
        "hello world!"
    );
    assert_eq!((s.prompt_tokens, s.completion_tokens), (13, 16));
}

#[tokio::test]
async fn max_tokens_caps_and_content_parts() {
    let (base, _) = spawn(MockConfig::default()).await;
    let body = json!({
        "model": "m",
        "max_completion_tokens": 4,
        "messages": [{"role": "user", "content": [
            {"type": "text", "text": "12345"},                         // 5 chars
            {"type": "image_url", "image_url": {"url": "x"}},
            {"type": "text", "text": "678"},                           // 3 chars
        ]}],
    });
    let v: Value = post(format!("{base}/chat/completions"), body)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(v["choices"][0]["finish_reason"], "length");
    assert_eq!(v["usage"]["completion_tokens"], 4);
    assert_eq!(v["usage"]["prompt_tokens"], 2 + 3 + 3);
}

#[tokio::test]
async fn output_tokens_directive_in_last_user_message_only() {
    let (base, _) = spawn(MockConfig::default()).await;
    let body = json!({"model": "m", "messages": [
        {"role": "user", "content": "[mock:fault=500]"},
        {"role": "assistant", "content": "ok"},
        {"role": "user", "content": "go [mock:output_tokens=5]"},
    ]});
    let r = post(format!("{base}/chat/completions"), body).await;
    assert_eq!(r.status(), 200);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["usage"]["completion_tokens"], 5);
    assert_eq!(v["choices"][0]["finish_reason"], "stop");
}

#[tokio::test]
async fn stream_with_usage_ends_with_usage_and_done() {
    let (base, stats) = spawn(MockConfig::default()).await;
    let mut body = chat_body("hi [mock:output_tokens=3]");
    body["stream"] = json!(true);
    body["stream_options"] = json!({"include_usage": true});
    let r = post(format!("{base}/chat/completions"), body).await;
    assert_eq!(r.headers()["content-type"], "text/event-stream");
    let text = r.text().await.unwrap();
    let ev = events(&text);
    assert_eq!(ev.len(), 1 + 3 + 1 + 1 + 1, "{text}");
    let chunks: Vec<Value> = ev[..6]
        .iter()
        .map(|e| serde_json::from_str(e).unwrap())
        .collect();
    assert_eq!(
        chunks[0]["choices"][0]["delta"],
        json!({"role": "assistant", "content": ""})
    );
    for c in &chunks[1..4] {
        assert_eq!(c["object"], "chat.completion.chunk");
        assert_eq!(c["choices"][0]["delta"]["content"], " hello");
        assert_eq!(c["usage"], Value::Null);
    }
    assert_eq!(chunks[4]["choices"][0]["finish_reason"], "stop");
    assert_eq!(chunks[5]["choices"], json!([]));
    // "hi [mock:output_tokens=3]" = 25 chars -> 7 + 3; system 4; + 3
    assert_eq!(
        chunks[5]["usage"],
        json!({"prompt_tokens": 17, "completion_tokens": 3, "total_tokens": 20})
    );
    assert_eq!(ev[6], "[DONE]");

    let s = wait_for(&stats, |s| s.streams_completed == 1).await;
    assert_eq!(
        (s.streams, s.streams_completed, s.streams_closed_early),
        (1, 1, 0)
    );
    assert_eq!(s.completion_tokens, 3);
}

#[tokio::test]
async fn stream_without_usage_has_no_usage_chunk() {
    let (base, _) = spawn(MockConfig {
        output_tokens: 2,
        ..MockConfig::default()
    })
    .await;
    let mut body = chat_body("hi");
    body["stream"] = json!(true);
    body["max_tokens"] = json!(1);
    let text = post(format!("{base}/chat/completions"), body)
        .await
        .text()
        .await
        .unwrap();
    let ev = events(&text);
    assert_eq!(ev.len(), 1 + 1 + 1 + 1, "{text}");
    assert!(!text.contains("usage"));
    let last: Value = serde_json::from_str(ev[2]).unwrap();
    assert_eq!(last["choices"][0]["finish_reason"], "length");
    assert_eq!(ev[3], "[DONE]");
}

#[tokio::test]
async fn fault_429_and_500() {
    let (base, stats) = spawn(MockConfig::default()).await;
    let r = post(
        format!("{base}/chat/completions"),
        chat_body("x [mock:fault=429]"),
    )
    .await;
    assert_eq!(r.status(), 429);
    assert_eq!(r.headers()["retry-after"], "1");
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["error"]["type"], "rate_limit_error");
    assert_eq!(v["error"]["code"], "rate_limit_exceeded");
    assert_eq!(v["error"]["param"], Value::Null);

    let r = post(
        format!("{base}/completions"),
        json!({"model": "m", "prompt": "[mock:fault=500]"}),
    )
    .await;
    assert_eq!(r.status(), 500);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["error"]["type"], "server_error");
    assert_eq!(stats.snapshot().faults, 2);
}

#[tokio::test]
async fn disconnect_after_breaks_the_stream() {
    let (base, stats) = spawn(MockConfig::default()).await;
    let mut body = chat_body("[mock:fault=disconnect_after=3] [mock:output_tokens=50]");
    body["stream"] = json!(true);
    let mut r = post(format!("{base}/chat/completions"), body).await;
    assert_eq!(r.status(), 200);
    let mut got = Vec::new();
    let broken = loop {
        match r.chunk().await {
            Ok(Some(c)) => got.extend_from_slice(&c),
            Ok(None) => break false,
            Err(_) => break true,
        }
    };
    assert!(broken, "stream ended cleanly");
    let text = String::from_utf8(got).unwrap();
    assert_eq!(text.matches("\" hello\"").count(), 3, "{text}");
    assert!(!text.contains("[DONE]") && !text.contains("finish_reason\":\"stop"));
    let s = stats.snapshot();
    assert_eq!(
        (s.faults, s.streams_completed, s.streams_closed_early),
        (1, 0, 0)
    );
}

#[tokio::test]
async fn disconnect_non_stream_gives_no_response() {
    let (base, _) = spawn(MockConfig::default()).await;
    let r = reqwest::Client::new()
        .post(format!("{base}/chat/completions"))
        .json(&chat_body("[mock:fault=disconnect_after=0]"))
        .send()
        .await;
    match r {
        Err(_) => {}
        Ok(r) => assert!(r.text().await.is_err(), "got a complete response"),
    }
}

#[tokio::test]
async fn client_drop_mid_stream_counts_closed_early() {
    let (base, stats) = spawn(MockConfig {
        chunk_delay_ms: 20,
        output_tokens: 100,
        ..MockConfig::default()
    })
    .await;
    let mut body = chat_body("hi");
    body["stream"] = json!(true);
    let mut r = post(format!("{base}/chat/completions"), body).await;
    assert!(r.chunk().await.unwrap().is_some());
    drop(r);
    let s = wait_for(&stats, |s| s.streams_closed_early == 1).await;
    assert_eq!((s.streams_closed_early, s.streams_completed), (1, 0));
    assert!(s.completion_tokens < 100);
}

#[tokio::test]
async fn latency_and_chunk_delay_directives() {
    let (base, _) = spawn(MockConfig::default()).await;
    let t = Instant::now();
    post(
        format!("{base}/chat/completions"),
        chat_body("[mock:latency_ms=100]"),
    )
    .await;
    assert!(t.elapsed() >= Duration::from_millis(100));

    let mut body = chat_body("[mock:chunk_delay_ms=10][mock:output_tokens=5]");
    body["stream"] = json!(true);
    let t = Instant::now();
    post(format!("{base}/chat/completions"), body)
        .await
        .text()
        .await
        .unwrap();
    assert!(t.elapsed() >= Duration::from_millis(50));
}

#[tokio::test]
async fn legacy_completions() {
    let (base, stats) = spawn(MockConfig::default()).await;
    let body = json!({"model": "gpt-3.5-turbo-instruct", "prompt": "12345678", "max_tokens": 3});
    let v: Value = post(format!("{base}/completions"), body)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(v["object"], "text_completion");
    assert!(v["id"].as_str().unwrap().starts_with("cmpl-mock-"));
    assert_eq!(v["choices"][0]["text"], " hello hello hello");
    assert_eq!(v["choices"][0]["finish_reason"], "length");
    assert_eq!(
        v["usage"],
        json!({"prompt_tokens": 2, "completion_tokens": 3, "total_tokens": 5})
    );

    let body = json!({"model": "m", "prompt": ["a", "[mock:output_tokens=2]"], "stream": true,
                      "stream_options": {"include_usage": true}});
    let text = post(format!("{base}/completions"), body)
        .await
        .text()
        .await
        .unwrap();
    let ev = events(&text);
    assert_eq!(ev.len(), 2 + 1 + 1 + 1, "{text}");
    let first: Value = serde_json::from_str(ev[0]).unwrap();
    assert_eq!(first["choices"][0]["text"], " hello");
    let usage: Value = serde_json::from_str(ev[3]).unwrap();
    assert_eq!(usage["usage"]["completion_tokens"], 2);
    assert_eq!(usage["usage"]["prompt_tokens"], 1 + 6);
    assert_eq!(ev[4], "[DONE]");
    assert_eq!(stats.snapshot().completions, 2);
}

#[tokio::test]
async fn embeddings_are_deterministic() {
    let (base, stats) = spawn(MockConfig::default()).await;
    let body =
        json!({"model": "text-embedding-3-small", "input": ["hello", "hello", "other text"]});
    let v: Value = post(format!("{base}/embeddings"), body)
        .await
        .json()
        .await
        .unwrap();
    let data = v["data"].as_array().unwrap();
    assert_eq!(data.len(), 3);
    assert_eq!(data[2]["index"], 2);
    assert_eq!(data[0]["object"], "embedding");
    assert_eq!(data[0]["embedding"].as_array().unwrap().len(), 8);
    assert_eq!(data[0]["embedding"], data[1]["embedding"]);
    assert_ne!(data[0]["embedding"], data[2]["embedding"]);
    assert_eq!(
        v["usage"],
        json!({"prompt_tokens": 2 + 2 + 3, "total_tokens": 7})
    );

    let body =
        json!({"model": "e", "input": [1, 2, 3], "encoding_format": "base64", "dimensions": 4});
    let v: Value = post(format!("{base}/embeddings"), body)
        .await
        .json()
        .await
        .unwrap();
    let b64 = v["data"][0]["embedding"].as_str().unwrap();
    assert_eq!(b64.len(), 24); // 16 bytes
    assert_eq!(v["usage"]["prompt_tokens"], 3);
    assert_eq!(stats.snapshot().embeddings, 2);
}

#[tokio::test]
async fn models_stats_reset_and_bad_body() {
    let (base, stats) = spawn(MockConfig::default()).await;
    let v: Value = reqwest::get(format!("{base}/models"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(v["data"]
        .as_array()
        .unwrap()
        .iter()
        .any(|m| m["id"] == "gpt-4o-mini"));

    let r = reqwest::Client::new()
        .post(format!("{base}/chat/completions"))
        .body("{not json")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["error"]["type"], "invalid_request_error");

    let root = base.trim_end_matches("/v1");
    let s: StatsSnapshot = reqwest::get(format!("{root}/mock/stats"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!((s.requests, s.chat), (2, 1));
    assert_eq!(s.last_authorization, None);
    let r = reqwest::Client::new()
        .post(format!("{root}/mock/reset"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 204);
    assert_eq!(stats.snapshot(), StatsSnapshot::default());
}

#[tokio::test]
async fn audio_stream_sends_openai_audio_deltas_and_audio_usage() {
    let (base, _stats) = spawn(MockConfig::default()).await;
    let mut body = chat_body("hi [mock:output_tokens=5] [mock:audio]");
    body["stream"] = json!(true);
    body["stream_options"] = json!({"include_usage": true});
    let text = post(format!("{base}/chat/completions"), body)
        .await
        .text()
        .await
        .unwrap();
    let ev = events(&text);
    // role, 5 audio pieces, the expiry piece, finish, usage, [DONE]
    assert_eq!(ev.len(), 1 + 5 + 1 + 1 + 1 + 1, "{text}");
    let chunks: Vec<Value> = ev[..9]
        .iter()
        .map(|e| serde_json::from_str(e).unwrap())
        .collect();
    let audio: Vec<&Value> = chunks[1..7]
        .iter()
        .map(|c| &c["choices"][0]["delta"]["audio"])
        .collect();
    let id = audio[0]["id"].as_str().unwrap();
    assert!(id.starts_with("audio_"), "{id}");
    for (i, a) in audio[..5].iter().enumerate() {
        // Only the ChoiceDeltaAudio fields, and no text content.
        assert!(chunks[1 + i]["choices"][0]["delta"]
            .get("content")
            .is_none());
        for k in a.as_object().unwrap().keys() {
            assert!(
                ["id", "data", "transcript", "expires_at"].contains(&k.as_str()),
                "{k}"
            );
        }
        if i % 2 == 0 {
            assert_eq!(a["transcript"], " hello");
        } else {
            let d = a["data"].as_str().unwrap();
            use base64::Engine;
            let pcm = base64::engine::general_purpose::STANDARD.decode(d).unwrap();
            assert_eq!(pcm.len(), 960, "20 ms of 24 kHz 16-bit PCM");
        }
    }
    assert_eq!(audio[5]["id"], id);
    assert!(audio[5]["expires_at"].as_u64().unwrap() > 0);
    assert_eq!(chunks[7]["choices"][0]["finish_reason"], "stop");
    let u = &chunks[8]["usage"];
    assert_eq!(u["completion_tokens"], 5);
    assert_eq!(u["completion_tokens_details"]["audio_tokens"], 2);
    assert_eq!(u["completion_tokens_details"]["text_tokens"], 3);
}

#[tokio::test]
async fn unknown_delta_stream_sends_output_in_a_field_nobody_knows() {
    let (base, stats) = spawn(MockConfig::default()).await;
    let mut body = chat_body("hi [mock:output_tokens=3] [mock:unknown_delta]");
    body["stream"] = json!(true);
    let text = post(format!("{base}/chat/completions"), body)
        .await
        .text()
        .await
        .unwrap();
    let ev = events(&text);
    assert_eq!(ev.len(), 1 + 3 + 1 + 1, "{text}");
    for e in &ev[1..4] {
        let c: Value = serde_json::from_str(e).unwrap();
        assert_eq!(
            c["choices"][0]["delta"],
            json!({"x_future_field": " hello"})
        );
    }
    let s = wait_for(&stats, |s| s.streams_completed == 1).await;
    assert_eq!(s.completion_tokens, 3);
}

#[tokio::test]
async fn a_scripted_call_is_made_once_in_each_dialects_shape() {
    let (base, _) = spawn(MockConfig::default()).await;
    let call = crate::Call::directive("apply_patch", "*** Begin Patch\n*** End Patch\n");
    let ask = format!("patch it {call}");
    // Chat: a function call with the decoded arguments, until a tool answered.
    let tools = json!([{"type": "function", "function": {"name": "other"}},
        {"type": "function", "function": {"name": "apply_patch"}}]);
    let mut body =
        json!({"model": "m", "tools": tools, "messages": [{"role": "user", "content": ask}]});
    let v: Value = post(format!("{base}/chat/completions"), body.clone())
        .await
        .json()
        .await
        .unwrap();
    let c = &v["choices"][0]["message"]["tool_calls"][0]["function"];
    assert_eq!(c["name"], "apply_patch");
    assert_eq!(c["arguments"], "*** Begin Patch\n*** End Patch\n");
    body["messages"]
        .as_array_mut()
        .unwrap()
        .push(json!({"role": "tool", "tool_call_id": "x", "content": "done"}));
    let v: Value = post(format!("{base}/chat/completions"), body)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(v["choices"][0]["finish_reason"], "stop", "{v}");
    // Responses: a custom tool's call is a custom_tool_call with the input.
    let body = json!({"model": "m", "input": [{"role": "user", "content": ask}],
        "tools": [{"type": "custom", "name": "apply_patch"}]});
    let v: Value = post(format!("{base}/responses"), body)
        .await
        .json()
        .await
        .unwrap();
    let item = &v["output"][0];
    assert_eq!(item["type"], "custom_tool_call", "{v}");
    assert_eq!(item["input"], "*** Begin Patch\n*** End Patch\n");
    // Messages: a tool_use whose input is the decoded JSON; a tool that
    // is not offered is not called.
    let call = crate::Call::directive("Bash", r#"{"command":"ls"}"#);
    let body = json!({"model": "m", "max_tokens": 20, "tools": [{"name": "Bash"}],
        "messages": [{"role": "user", "content": [{"type": "text", "text": call}]}]});
    let v: Value = post(format!("{base}/messages"), body)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(v["content"][0]["input"], json!({"command": "ls"}), "{v}");
    let body = json!({"model": "m", "max_tokens": 20, "tools": [{"name": "Read"}],
        "messages": [{"role": "user", "content": call}]});
    let v: Value = post(format!("{base}/messages"), body)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(v["content"][0]["type"], "text", "{v}");
}
