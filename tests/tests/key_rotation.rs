//! A key's life after it was issued, end to end against real servers,
//! Postgres and Redis (docs/console.md, "Rotating a key" and "Editing a
//! key"): rotation gives the key a new secret while the old one keeps
//! working for the grace period — on every replica, and on a replica
//! started during the grace — then answers 401 (in the client's dialect,
//! saying it was rotated) on every replica at once, and on one started
//! after it; each rotation, edit and revocation is audited with the key's
//! name.

use domain::Limits;
use e2e::*;
use serde_json::{json, Value};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

struct Replicas {
    env: TestEnv,
    a: server::app::Running,
    b: server::app::Running,
    token: String,
}

async fn replicas() -> Replicas {
    let env = TestEnv::new().await;
    env.simple_tenant(Limits::default()).await;
    env.model("gpt-4o", "chat", 2_500_000, 10_000_000).await;
    user(&env, "admin@x.io", "platform_admin", None).await;
    let a = env.server().await;
    let b = env.server().await;
    let token = login(&format!("http://{}", a.addr), "admin@x.io").await;
    Replicas { env, a, b, token }
}

/// An OpenAI-dialect chat call: status and body.
async fn chat(addr: SocketAddr, key: &str) -> (u16, Value) {
    chat_model(addr, key, "gpt-4o-mini").await
}

async fn chat_model(addr: SocketAddr, key: &str, model: &str) -> (u16, Value) {
    let mut body = chat_body("hello", Some(8));
    body["model"] = json!(model);
    let r = post(&format!("http://{addr}/v1/chat/completions"), key, &body).await;
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(Value::Null))
}

async fn status(addr: SocketAddr, key: &str) -> u16 {
    chat(addr, key).await.0
}

/// An Anthropic-dialect call with the key in `x-api-key`.
async fn messages(addr: SocketAddr, key: &str) -> (u16, Value) {
    let r = reqwest::Client::new()
        .post(format!("http://{addr}/v1/messages"))
        .header("x-api-key", key)
        .header("anthropic-version", "2023-06-01")
        .json(&json!({"model": "gpt-4o-mini", "max_tokens": 8,
            "messages": [{"role": "user", "content": "hello"}]}))
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(Value::Null))
}

impl Replicas {
    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.a.addr)
    }

    async fn call(&self, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
        api(method, &self.url(path), Some(&self.token), body).await
    }

    /// A key issued through the API: (id, secret, prefix).
    async fn issue(&self, name: &str) -> (String, String, String) {
        let (st, k) = self
            .call(
                "POST",
                "/api/v1/tenants/t/apps/a/keys",
                Some(json!({ "name": name })),
            )
            .await;
        assert_eq!(st, 201, "{k}");
        let s = |f: &str| k[f].as_str().unwrap().to_string();
        (s("id"), s("key"), s("prefix"))
    }

    async fn rotate(&self, id: &str, body: Option<Value>) -> (u16, Value) {
        self.call("POST", &format!("/api/v1/keys/{id}/rotate"), body)
            .await
    }

    /// The audit rows about `key:<id>` with this action, oldest first.
    async fn audit(&self, id: &str, action: &str) -> Vec<Value> {
        let (st, a) = self.call("GET", "/api/v1/audit?limit=500", None).await;
        assert_eq!(st, 200, "{a}");
        let target = format!("key:{id}");
        let mut rows: Vec<Value> = a["data"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| r["action"] == action && r["target"] == target.as_str())
            .cloned()
            .collect();
        rows.reverse();
        rows
    }
}

/// Until `f` holds on every one of `addrs`, at most `within`.
async fn on_all(addrs: &[SocketAddr], key: &str, want: u16, within: Duration) -> bool {
    for addr in addrs {
        if !eventually(within, || async { status(*addr, key).await == want }).await {
            return false;
        }
    }
    true
}

fn refused_as_rotated(body: &Value) {
    assert_eq!(body["error"]["code"], "invalid_api_key", "{body}");
    let msg = body["error"]["message"].as_str().unwrap_or_default();
    assert!(msg.contains("rotated"), "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_old_secret_works_until_the_grace_ends_then_401_everywhere_audited() {
    let r = replicas().await;
    let (id, old, old_prefix) = r.issue("payments-prod").await;
    assert_eq!(status(r.a.addr, &old).await, 200);
    assert_eq!(status(r.b.addr, &old).await, 200);

    let (st, rot) = r.rotate(&id, Some(json!({"grace_secs": 3}))).await;
    assert_eq!(st, 200, "{rot}");
    let new = rot["key"].as_str().unwrap().to_string();
    assert_ne!(new, old);
    assert!(domain::keys::is_well_formed(&new), "{rot}");
    assert_eq!(rot["name"], "payments-prod");
    assert_eq!(rot["previous_prefix"], old_prefix.as_str());
    assert_eq!(rot["prefix"].as_str(), Some(&new[..12]));
    let grace_ends: chrono::DateTime<chrono::Utc> =
        rot["grace_ends_at"].as_str().unwrap().parse().unwrap();
    let left = grace_ends - chrono::Utc::now();
    assert!(
        left > chrono::Duration::milliseconds(1500) && left <= chrono::Duration::seconds(3),
        "grace ends in {left}"
    );

    // During the grace: both secrets work on both replicas, once the
    // change has reached them and after.
    for _ in 0..3 {
        for addr in [r.a.addr, r.b.addr] {
            assert_eq!(status(addr, &new).await, 200, "new secret on {addr}");
            assert_eq!(status(addr, &old).await, 200, "old secret on {addr}");
        }
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
    let (st, shown) = r.call("GET", &format!("/api/v1/keys/{id}"), None).await;
    assert_eq!(st, 200, "{shown}");
    assert_eq!(shown["previous_secret"]["valid"], true, "{shown}");
    assert_eq!(shown["previous_secret"]["prefix"], old_prefix.as_str());
    assert_eq!(shown["prefix"], rot["prefix"]);
    // A replica started during the grace (a restart) loads both secrets.
    let c = r.env.server().await;
    assert_eq!(
        status(c.addr, &old).await,
        200,
        "old secret on a new replica"
    );
    assert_eq!(
        status(c.addr, &new).await,
        200,
        "new secret on a new replica"
    );

    // The grace ends: the old secret is refused on every replica at once
    // (each entry carries its end; no notification is needed), saying
    // why, in each client's dialect.
    let wait = (grace_ends - chrono::Utc::now())
        .to_std()
        .unwrap_or_default();
    tokio::time::sleep(wait + Duration::from_millis(100)).await;
    for addr in [r.a.addr, r.b.addr, c.addr] {
        let (st, body) = chat(addr, &old).await;
        assert_eq!(st, 401, "old secret after the grace on {addr}: {body}");
        refused_as_rotated(&body);
        assert_eq!(status(addr, &new).await, 200, "new secret on {addr}");
    }
    let (st, body) = messages(r.b.addr, &old).await;
    assert_eq!(st, 401, "{body}");
    assert_eq!(body["type"], "error", "{body}");
    assert_eq!(body["error"]["type"], "authentication_error", "{body}");
    let (st, body) = messages(r.b.addr, &new).await;
    assert_eq!(st, 200, "{body}");
    // A replica started after the grace: the old secret was rotated, the
    // new one works.
    let d = r.env.server().await;
    let (st, body) = chat(d.addr, &old).await;
    assert_eq!(st, 401, "{body}");
    refused_as_rotated(&body);
    assert_eq!(status(d.addr, &new).await, 200);
    // It stays refused (no cache brings it back).
    for _ in 0..5 {
        for addr in [r.a.addr, r.b.addr] {
            assert_eq!(status(addr, &old).await, 401);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (_, shown) = r.call("GET", &format!("/api/v1/keys/{id}"), None).await;
    assert_eq!(shown["previous_secret"]["valid"], false, "{shown}");

    // Audited: who, the key's name, both prefixes, the grace and its end.
    let rows = r.audit(&id, "key.rotate").await;
    assert_eq!(rows.len(), 1, "{rows:?}");
    let after = &rows[0]["after"];
    assert_eq!(
        rows[0]["actor"].as_str().map(|a| a.contains("admin@x.io")),
        Some(true),
        "{rows:?}"
    );
    assert_eq!(after["name"], "payments-prod");
    assert_eq!(after["previous_prefix"], old_prefix.as_str());
    assert_eq!(after["prefix"], rot["prefix"]);
    assert_eq!(after["grace_secs"], 3);
    assert_eq!(after["grace_ends_at"], rot["grace_ends_at"]);
    assert_eq!(rows[0]["before"]["prefix"], old_prefix.as_str());
    // The secret itself is in no audit row.
    let (_, all) = r.call("GET", "/api/v1/audit?limit=500", None).await;
    let text = all.to_string();
    assert!(!text.contains(&new) && !text.contains(&old));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn rotation_without_grace_again_during_grace_and_revocation() {
    let r = replicas().await;
    let both = [r.a.addr, r.b.addr];

    // No grace: the old secret stops within the propagation time.
    let (id, old, _) = r.issue("no-grace").await;
    assert_eq!(status(r.b.addr, &old).await, 200);
    let (st, rot) = r.rotate(&id, Some(json!({"grace_secs": 0}))).await;
    assert_eq!(st, 200, "{rot}");
    let t0 = Instant::now();
    assert!(on_all(&both, &old, 401, Duration::from_millis(1500)).await);
    assert!(t0.elapsed() < Duration::from_secs(2));
    let (_, body) = chat(r.b.addr, &old).await;
    refused_as_rotated(&body);
    let new = rot["key"].as_str().unwrap();
    assert_eq!(status(r.b.addr, new).await, 200);

    // The default grace is 24 hours; a second rotation during a grace ends
    // the first secret's at once (one previous secret at a time).
    let (id, first, first_prefix) = r.issue("twice").await;
    let (st, one) = r.rotate(&id, None).await;
    assert_eq!(st, 200, "{one}");
    let ends: chrono::DateTime<chrono::Utc> =
        one["grace_ends_at"].as_str().unwrap().parse().unwrap();
    let hours = (ends - chrono::Utc::now()).num_minutes();
    assert!((1435..=1440).contains(&hours), "default grace: {hours} min");
    let second = one["key"].as_str().unwrap().to_string();
    assert!(on_all(&both, &first, 200, Duration::from_secs(1)).await);
    let (st, two) = r.rotate(&id, Some(json!({"grace_secs": 600}))).await;
    assert_eq!(st, 200, "{two}");
    assert_eq!(two["ended_early"], first_prefix.as_str(), "{two}");
    let third = two["key"].as_str().unwrap().to_string();
    assert!(on_all(&both, &first, 401, Duration::from_millis(1500)).await);
    assert!(on_all(&both, &second, 200, Duration::from_millis(500)).await);
    assert!(on_all(&both, &third, 200, Duration::from_millis(500)).await);
    let rows = r.audit(&id, "key.rotate").await;
    assert_eq!(rows.len(), 2);
    assert_eq!(rows[1]["after"]["ended_early"], first_prefix.as_str());

    // Revoked during the grace: both secrets stop.
    let (st, _) = r.call("DELETE", &format!("/api/v1/keys/{id}"), None).await;
    assert_eq!(st, 204);
    assert!(on_all(&both, &second, 401, Duration::from_millis(1500)).await);
    assert!(on_all(&both, &third, 401, Duration::from_millis(1500)).await);
    let (_, body) = chat(r.a.addr, &second).await;
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("revoked"),
        "{body}"
    );
    let rows = r.audit(&id, "key.revoke").await;
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0]["before"]["name"], "twice");
    assert_eq!(rows[0]["after"]["state"], "revoked");
    // A revoked key cannot be rotated.
    let (st, e) = r.rotate(&id, None).await;
    assert_eq!(st, 404, "{e}");

    // The grace is bounded.
    let (id, _, _) = r.issue("bounds").await;
    for bad in [json!({"grace_secs": -1}), json!({"grace_secs": 604_801})] {
        let (st, e) = r.rotate(&id, Some(bad)).await;
        assert_eq!(st, 400, "{e}");
        assert_eq!(e["error"]["param"], "grace_secs", "{e}");
    }
    let (st, e) = r.rotate(&id, Some(json!({"grace": 5}))).await;
    assert_eq!(st, 400, "{e}");
    // A body without its Content-Type is refused, not ignored (ignored, the
    // default 24-hour grace would keep the old secret a day).
    let r0 = reqwest::Client::new()
        .post(r.url(&format!("/api/v1/keys/{id}/rotate")))
        .bearer_auth(&r.token)
        .body(r#"{"grace_secs": 0}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(r0.status(), 400);
    let e: Value = r0.json().await.unwrap();
    assert_eq!(e["error"]["param"], "body", "{e}");
    let (st, e) = r.rotate(&id, Some(json!({"grace_secs": 604_800}))).await;
    assert_eq!(st, 200, "{e}");

    // Another tenant's admin does not find the key.
    r.env.tenant("other", Limits::default(), None).await;
    user(&r.env, "other@x.io", "tenant_admin", Some("other")).await;
    let other = login(&format!("http://{}", r.a.addr), "other@x.io").await;
    let (st, e) = api(
        "POST",
        &r.url(&format!("/api/v1/keys/{id}/rotate")),
        Some(&other),
        None,
    )
    .await;
    assert_eq!(st, 404, "{e}");
    // The tenant's own admin may rotate it.
    user(&r.env, "ta@x.io", "tenant_admin", Some("t")).await;
    let ta = login(&format!("http://{}", r.a.addr), "ta@x.io").await;
    let (st, e) = api(
        "POST",
        &r.url(&format!("/api/v1/keys/{id}/rotate")),
        Some(&ta),
        Some(json!({"grace_secs": 60})),
    )
    .await;
    assert_eq!(st, 200, "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_keys_name_expiry_and_models_change_after_issue() {
    let r = replicas().await;
    let both = [r.a.addr, r.b.addr];
    let (id, key, _) = r.issue("batch").await;
    assert_eq!(chat_model(r.b.addr, &key, "gpt-4o").await.0, 200);
    let path = format!("/api/v1/keys/{id}");
    let (st, k) = r.call("GET", &path, None).await;
    assert_eq!(st, 200, "{k}");
    let v1 = k["version"].as_i64().unwrap();

    // Name and allowed models: the gateway learns them within a second.
    let (st, k) = r
        .call(
            "PATCH",
            &path,
            Some(
                json!({"name": "batch-nightly", "allowed_models": ["gpt-4o-mini"], "version": v1}),
            ),
        )
        .await;
    assert_eq!(st, 200, "{k}");
    assert_eq!(k["name"], "batch-nightly");
    assert_eq!(k["allowed_models"], json!(["gpt-4o-mini"]));
    assert_eq!(k["version"], v1 + 1);
    for addr in both {
        let refused = eventually(Duration::from_millis(1500), || async {
            chat_model(addr, &key, "gpt-4o").await.0 == 403
        })
        .await;
        assert!(refused, "gpt-4o still allowed on {addr}");
        assert_eq!(status(addr, &key).await, 200);
    }
    // A stale version is refused, naming the conflict; nothing changes.
    let (st, e) = r
        .call("PATCH", &path, Some(json!({"name": "lost", "version": v1})))
        .await;
    assert_eq!(st, 409, "{e}");
    assert_eq!(e["error"]["code"], "version_conflict", "{e}");
    // Bad values are refused by field.
    for (body, param) in [
        (json!({"name": ""}), "name"),
        (json!({"name": "x".repeat(201)}), "name"),
        (json!({"expires_at": "2001-01-01T00:00:00Z"}), "expires_at"),
        (json!({"allowed_models": ["nosuch"]}), "allowed_models[0]"),
    ] {
        let (st, e) = r.call("PATCH", &path, Some(body.clone())).await;
        assert_eq!(st, 400, "{body}: {e}");
        assert_eq!(e["error"]["param"], param, "{body}: {e}");
    }
    // Every model again, and an expiry two seconds away: then 401 expired.
    let soon = chrono::Utc::now() + chrono::Duration::seconds(2);
    let (st, k) = r
        .call(
            "PATCH",
            &path,
            Some(json!({"allowed_models": null, "expires_at": soon})),
        )
        .await;
    assert_eq!(st, 200, "{k}");
    assert_eq!(k["allowed_models"], Value::Null);
    assert_eq!(k["name"], "batch-nightly", "fields not given stay");
    for addr in both {
        let ok = eventually(Duration::from_millis(1500), || async {
            chat_model(addr, &key, "gpt-4o").await.0 == 200
        })
        .await;
        assert!(ok, "gpt-4o not allowed again on {addr}");
    }
    let wait = (soon - chrono::Utc::now()).to_std().unwrap_or_default();
    tokio::time::sleep(wait + Duration::from_millis(100)).await;
    for addr in both {
        let (st, body) = chat(addr, &key).await;
        assert_eq!(st, 401, "{body}");
        assert!(body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("expired"));
    }
    // An expired key is not edited back to life here (issue a new one).
    let (st, e) = r
        .call("PATCH", &path, Some(json!({"expires_at": null})))
        .await;
    assert_eq!(st, 404, "{e}");

    // Audited with the fields before and after.
    let rows = r.audit(&id, "key.update").await;
    assert_eq!(rows.len(), 2, "{rows:?}");
    assert_eq!(rows[0]["before"]["name"], "batch");
    assert_eq!(rows[0]["after"]["name"], "batch-nightly");
    assert_eq!(rows[0]["after"]["allowed_models"], json!(["gpt-4o-mini"]));
    assert!(rows[1]["after"]["expires_at"].is_string());
}
