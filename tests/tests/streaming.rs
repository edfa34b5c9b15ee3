//! Streams pass through event by event and settle on the provider's usage.

use domain::provider::{Dialect, ProviderProfile};
use domain::Limits;
use e2e::*;
use futures::StreamExt;
use serde_json::{json, Value};
use std::time::Duration;

#[tokio::test]
async fn a_stream_settles_on_the_providers_final_usage() {
    let env = TestEnv::new().await;
    let (_, key) = env
        .simple_tenant(Limits {
            monthly_tokens: Some(100_000),
            ..Default::default()
        })
        .await;
    let srv = env.server().await;
    let url = format!("http://{}/v1/chat/completions", srv.addr);

    // Client asks for usage: it gets the usage chunk.
    let mut body = chat_body("hello [mock:output_tokens=40]", None);
    body["stream"] = json!(true);
    body["stream_options"] = json!({"include_usage": true});
    let r = post(&url, &key, &body).await;
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["content-type"], "text/event-stream");
    let events = sse_events(r).await;
    assert_eq!(events.last().unwrap(), "data: [DONE]");
    let usage: serde_json::Value =
        serde_json::from_str(events[events.len() - 2].strip_prefix("data: ").unwrap()).unwrap();
    assert_eq!(usage["usage"]["completion_tokens"], 40);
    let prompt = usage["usage"]["prompt_tokens"].as_i64().unwrap();

    // Client does not ask: tollgate still asks the provider, and strips the chunk.
    let mut body = chat_body("hello [mock:output_tokens=10]", None);
    body["stream"] = json!(true);
    let events = sse_events(post(&url, &key, &body).await).await;
    assert!(
        events.iter().all(|e| !e.contains("\"usage\":{")),
        "{events:?}"
    );
    assert_eq!(events.last().unwrap(), "data: [DONE]");
    assert_eq!(
        env.mock.snapshot().last_body.unwrap()["stream_options"]["include_usage"],
        true
    );

    let month = this_month();
    let expected = prompt + 40 + prompt + 10;
    let ok = eventually(Duration::from_secs(5), || async {
        let c = env.counters("t", &month).await;
        c.get("t:ut") == Some(&expected) && c.get("t:ht") == Some(&0)
    })
    .await;
    assert!(ok, "{:?}", env.counters("t", &month).await);
    assert!(
        eventually(Duration::from_secs(5), || async {
            env.ledger_tokens("t", &month).await.0 == expected
        })
        .await
    );
    srv.shutdown().await;
}

#[tokio::test]
async fn a_client_that_leaves_mid_stream_is_charged_for_what_was_generated() {
    let env = TestEnv::new().await;
    let (_, key) = env
        .simple_tenant(Limits {
            monthly_tokens: Some(100_000),
            ..Default::default()
        })
        .await;
    let srv = env.server().await;
    let url = format!("http://{}/v1/chat/completions", srv.addr);
    let mut body = chat_body(
        "hello [mock:output_tokens=200] [mock:chunk_delay_ms=10]",
        Some(200),
    );
    body["stream"] = json!(true);
    let r = post(&url, &key, &body).await;
    let mut s = r.bytes_stream();
    let mut seen = 0;
    while seen < 20 {
        let b = s.next().await.unwrap().unwrap();
        seen += String::from_utf8_lossy(&b).matches("data: ").count();
    }
    drop(s);

    let month = this_month();
    assert!(
        eventually(Duration::from_secs(5), || async {
            env.counters("t", &month).await.get("t:ht") == Some(&0)
        })
        .await
    );
    let used = env.counters("t", &month).await["t:ut"];
    // Charged for the input and the ~20 tokens delivered, not the 256 held
    // nor nothing. The gateway may have counted a few chunks that were in
    // flight when the client left (10 ms apart: at most a handful).
    let e = only_usage_event(&env).await;
    assert_eq!(
        (e.status.as_str(), e.usage_source.as_str()),
        ("client_closed", "counted")
    );
    assert!(
        (19..=25).contains(&e.output_tokens),
        "charged {} output tokens for ~19 delivered",
        e.output_tokens
    );
    assert_eq!(used, e.input_tokens + e.output_tokens);
    assert!(
        eventually(Duration::from_secs(3), || async {
            env.mock.snapshot().streams_closed_early == 1
        })
        .await
    );
    srv.shutdown().await;
}

#[tokio::test]
async fn embeddings_are_held_and_settled() {
    let env = TestEnv::new().await;
    let (_, key) = env.simple_tenant(Limits::default()).await;
    let srv = env.server().await;
    let r = post(
        &format!("http://{}/v1/embeddings", srv.addr),
        &key,
        &json!({"model": "text-embedding-3-small", "input": ["hello world", "second input"]}),
    )
    .await;
    assert_eq!(r.status(), 200);
    let b: serde_json::Value = r.json().await.unwrap();
    assert_eq!(b["data"].as_array().unwrap().len(), 2);
    let charged = b["usage"]["prompt_tokens"].as_i64().unwrap();
    let month = this_month();
    assert!(
        eventually(Duration::from_secs(5), || async {
            env.ledger_tokens("t", &month).await.0 == charged
        })
        .await
    );
    srv.shutdown().await;
}

/// A streaming request of `dialect` ("chat", "responses", "messages") for
/// `model` with `content` as the user's text.
fn dialect_stream(dialect: &str, model: &str, content: &str, cap: i64) -> (String, Value) {
    let body = match dialect {
        "chat" => json!({"model": model, "stream": true, "max_tokens": cap,
            "messages": [{"role": "user", "content": content}]}),
        "responses" => json!({"model": model, "stream": true, "max_output_tokens": cap,
            "input": content}),
        "gemini" => json!({"contents": [{"role": "user", "parts": [{"text": content}]}],
            "generationConfig": {"maxOutputTokens": cap}}),
        _ => json!({"model": model, "stream": true, "max_tokens": cap,
            "messages": [{"role": "user", "content": content}]}),
    };
    let path = match dialect {
        "chat" => "v1/chat/completions".to_string(),
        "gemini" => format!("v1beta/models/{model}:streamGenerateContent?alt=sse"),
        d => format!("v1/{d}"),
    };
    (path, body)
}

/// The booked status of request `rid`, once the ledger has it.
async fn booked_status(env: &TestEnv, rid: &str) -> String {
    let ok = eventually(Duration::from_secs(10), || async {
        env.usage_event(rid).await.is_some()
    })
    .await;
    assert!(ok, "no usage event for {rid}");
    env.usage_event(rid).await.unwrap().status
}

/// Every dialect — chat, Responses, Messages, Gemini; translated to chat and
/// passed through to a provider that speaks it — books a stream as what it was: read
/// to its end `ok`, stopped at the budget `cut_off`, left by its client
/// `client_closed`.
#[tokio::test]
async fn every_dialect_books_a_stream_as_what_it_was() {
    let env = TestEnv::new().await;
    let (_, key) = env
        .simple_tenant(Limits {
            monthly_tokens: Some(10_000_000),
            ..Default::default()
        })
        .await;
    env.model("native-model", "chat", 150_000, 600_000).await;
    env.profile(
        "native-model",
        ProviderProfile {
            apis: vec![Dialect::Chat, Dialect::Responses, Dialect::Messages],
            ..ProviderProfile::default()
        },
    )
    .await;
    let srv = env.server().await;
    let cases = [
        ("chat", "gpt-4o-mini"),
        ("responses", "gpt-4o-mini"),
        ("messages", "gpt-4o-mini"),
        ("responses", "native-model"),
        ("messages", "native-model"),
        ("gemini", "gpt-4o-mini"),
    ];
    for (i, (dialect, model)) in cases.into_iter().enumerate() {
        let case = format!("{dialect} {model}");
        let send = |key: String, content: &'static str, cap: i64| {
            let (path, body) = dialect_stream(dialect, model, content, cap);
            let url = format!("http://{}/{path}", srv.addr);
            async move {
                let r = post(&url, &key, &body).await;
                assert_eq!(r.status(), 200);
                let rid = r.headers()["x-request-id"].to_str().unwrap().to_string();
                (rid, r)
            }
        };

        // Read to its end.
        let (rid, r) = send(key.clone(), "hello [mock:output_tokens=30]", 100).await;
        let events = sse_events(r).await;
        assert!(events.len() > 3, "{case}: {events:?}");
        assert_eq!(booked_status(&env, &rid).await, "ok", "{case}");
        if dialect == "gemini" {
            // Gemini's last event: the finish reason and the usage.
            let last: Value =
                serde_json::from_str(events.last().unwrap().strip_prefix("data: ").unwrap())
                    .unwrap();
            assert_eq!(last["candidates"][0]["finishReason"], "STOP", "{last}");
            assert_eq!(last["usageMetadata"]["candidatesTokenCount"], 30, "{last}");
        }
        if (dialect, model) == ("messages", "native-model") {
            // A native provider's message_start carries its own input count:
            // the one billed.
            let start = events
                .iter()
                .find(|e| e.starts_with("event: message_start"))
                .unwrap();
            let start: Value = serde_json::from_str(start.split_once("data: ").unwrap().1).unwrap();
            let billed = env.usage_event(&rid).await.unwrap().input_tokens;
            assert_eq!(start["message"]["usage"]["input_tokens"], billed, "{start}");
        }

        // Stopped at the budget.
        let tenant = format!("cut{i}");
        env.tenant(
            &tenant,
            Limits {
                monthly_tokens: Some(1_000),
                ..Default::default()
            },
            None,
        )
        .await;
        env.app(&tenant, "a", Limits::default()).await;
        let (_, cut_key) = env.key(&tenant, "a", Limits::default()).await;
        let (rid, r) = send(
            cut_key,
            "hello [mock:output_tokens=5000] [mock:chunk_delay_ms=1]",
            5000,
        )
        .await;
        sse_events(r).await;
        assert_eq!(booked_status(&env, &rid).await, "cut_off", "{case}");

        // Left by its client.
        let (rid, r) = send(
            key.clone(),
            "hello [mock:output_tokens=200] [mock:chunk_delay_ms=10]",
            200,
        )
        .await;
        let mut s = r.bytes_stream();
        let mut seen = 0;
        while seen < 10 {
            let b = s.next().await.unwrap().unwrap();
            seen += String::from_utf8_lossy(&b).matches("data: ").count();
        }
        drop(s);
        assert_eq!(booked_status(&env, &rid).await, "client_closed", "{case}");
    }
    srv.shutdown().await;
}
