//! Helpers shared by the fair_* tests (borrowing, reclaim, queues, degrade).
#![allow(dead_code)]

use domain::Limits;
use e2e::*;
use serde_json::{json, Value};
use store::TenantRow;

/// A tenant with a priority and borrowing policy, an app `a` and one key.
pub async fn tenant(
    env: &TestEnv,
    id: &str,
    priority: &str,
    limits: Limits,
    borrow_cap: Option<i64>,
) -> String {
    let t = TenantRow {
        id: id.into(),
        name: id.into(),
        cost_center: "CC".into(),
        priority: priority.into(),
        limits,
        may_borrow: borrow_cap.is_some(),
        borrow_cap_tokens: borrow_cap.unwrap_or(0),
        allowed_models: None,
        clamp_max_tokens: false,
        max_queued_requests: None,
        max_open_streams: None,
    };
    env.store.create_tenant("test", &t).await.unwrap();
    env.app(id, "a", Limits::default()).await;
    env.key(id, "a", Limits::default()).await.1
}

/// The test config with a 1 s Redis timeout and a 10 s wait for an
/// on-demand borrow: these tests load the shared machine, and CPU
/// starvation must not turn into fail-closed 503s or a borrow landing only
/// for the next request (they test fairness and borrowing, not latency).
pub fn config(env: &TestEnv) -> server::config::Config {
    let mut c = env.config();
    c.redis.timeout_ms = 1_000;
    c.fair.borrow_wait_ms = 10_000;
    c
}

/// A platform admin's API token.
pub async fn admin(env: &TestEnv, base: &str) -> String {
    user(env, "root@example.com", "platform_admin", None).await;
    login(base, "root@example.com").await
}

pub async fn set_pool(base: &str, token: &str, tokens: i64, share: f64, reclaim_below: f64) {
    let (s, b) = api(
        "PUT",
        &format!("{base}/api/v1/pool"),
        Some(token),
        Some(json!({"monthly_tokens": tokens, "max_borrow_share": share, "reclaim_below_share": reclaim_below})),
    )
    .await;
    assert_eq!(s, 200, "{b}");
}

pub async fn get(base: &str, token: &str, path: &str) -> Value {
    let (s, b) = api("GET", &format!("{base}{path}"), Some(token), None).await;
    assert_eq!(s, 200, "{path}: {b}");
    b
}

/// A chat body with a mock directive (e.g. latency) and a small max_tokens.
pub fn body(directive: &str, max_tokens: i64) -> Value {
    json!({"model": "gpt-4o-mini", "max_tokens": max_tokens,
        "messages": [{"role": "user", "content": format!("hello {directive}")}]})
}

pub fn reason(r: &reqwest::Response) -> String {
    r.headers()
        .get("x-tollgate-reason")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string()
}

pub fn decision(r: &reqwest::Response) -> String {
    r.headers()
        .get("x-tollgate-decision")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string()
}
