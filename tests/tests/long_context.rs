//! Long-context requests (docs/benchmarks.md, "Load scenarios", long): the
//! body limit follows the model's context window, a long input is held at
//! an upper bound that is never below its exact count, and counted exactly
//! (off the async workers) when that bound would break the key's context cap.

use domain::tokens::{chat_input_tokens, TokenizerFamily};
use domain::Limits;
use e2e::*;
use serde_json::json;
use std::time::Duration;

fn body(model: &str, text: &str) -> serde_json::Value {
    json!({"model": model, "max_tokens": 8, "messages": [{"role": "user", "content": text}]})
}

/// The input part of a stored event's estimate (output was `max_tokens` 8).
async fn held_input(env: &TestEnv, r: reqwest::Response, events: i64) -> i64 {
    assert_eq!(r.status(), 200);
    let rid = r.headers()["x-request-id"].to_str().unwrap().to_string();
    let month = this_month();
    assert!(
        eventually(Duration::from_secs(10), || async {
            env.ledger_tokens("t", &month).await.1 == events
        })
        .await
    );
    env.usage_event(&rid).await.unwrap().est_tokens - 8
}

#[tokio::test]
async fn a_million_token_prompt_fits_its_model_and_is_never_held_below_its_count() {
    let env = TestEnv::new().await;
    env.model("gpt-4o-mini", "chat", 150_000, 600_000).await;
    env.model("gpt-4.1", "chat", 2_000_000, 8_000_000).await;
    env.tenant("t", Limits::default(), None).await;
    env.app("t", "a", Limits::default()).await;
    let (_, key) = env.key("t", "a", Limits::default()).await;
    let srv = env.server().await;
    let url = format!("http://{}/v1/chat/completions", srv.addr);

    // ~1M tokens, ~5 MB: more than the global 4 MiB limit.
    let text = "word ".repeat(1_000_000);
    let exact = chat_input_tokens(
        TokenizerFamily::O200k,
        &[json!({"role": "user", "content": text})],
    ) as i64;
    assert!(exact >= 1_000_000, "{exact}");
    let r = post(&url, &key, &body("gpt-4o-mini", &text)).await;
    assert_eq!(r.status(), 413, "a 128k-context model takes 4 MiB");
    let held = held_input(&env, post(&url, &key, &body("gpt-4.1", &text)).await, 1).await;
    assert!(held >= exact, "held {held} < exact {exact}");
    srv.shutdown().await;
}

#[tokio::test]
async fn a_bound_above_the_context_cap_is_settled_by_the_exact_count() {
    let env = TestEnv::new().await;
    env.model("gpt-4.1", "chat", 2_000_000, 8_000_000).await;
    env.tenant("t", Limits::default(), None).await;
    env.app("t", "a", Limits::default()).await;
    // ~70k tokens in ~350 KB: the bound (bytes) is above the cap, the count is not.
    let cap = Limits {
        max_context_tokens: Some(100_000),
        ..Default::default()
    };
    let (_, key) = env.key("t", "a", cap).await;
    let srv = env.server().await;
    let url = format!("http://{}/v1/chat/completions", srv.addr);
    let text = "word ".repeat(70_000);
    let exact = chat_input_tokens(
        TokenizerFamily::O200k,
        &[json!({"role": "user", "content": text})],
    ) as i64;
    let held = held_input(&env, post(&url, &key, &body("gpt-4.1", &text)).await, 1).await;
    assert_eq!(held, exact, "counted exactly, not refused on the bound");
    // Past the cap by the exact count: refused.
    let text = "word ".repeat(120_000);
    let r = post(&url, &key, &body("gpt-4.1", &text)).await;
    assert_eq!(r.status(), 400);
    let b: serde_json::Value = r.json().await.unwrap();
    assert_eq!(b["error"]["code"], "context_length_exceeded", "{b}");
    srv.shutdown().await;
}
