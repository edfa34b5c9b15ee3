//! The key index at scale: a key created through the API works at once on
//! every replica, a revoked one stops within a second on every replica, and
//! random keys cannot turn into Postgres load.

use domain::Limits;
use e2e::*;
use futures::future::join_all;
use futures::StreamExt;
use serde_json::json;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

struct Two {
    _env: TestEnv,
    a: server::app::Running,
    b: server::app::Running,
    token: String,
}

async fn two_replicas() -> Two {
    let env = TestEnv::new().await;
    env.simple_tenant(Limits::default()).await;
    user(&env, "admin@x.io", "platform_admin", None).await;
    let a = env.server().await;
    let b = env.server().await;
    let token = login(&format!("http://{}", a.addr), "admin@x.io").await;
    Two {
        _env: env,
        a,
        b,
        token,
    }
}

async fn chat(addr: std::net::SocketAddr, key: &str) -> u16 {
    post(
        &format!("http://{addr}/v1/chat/completions"),
        key,
        &chat_body("hello", Some(8)),
    )
    .await
    .status()
    .as_u16()
}

/// Creates a key through replica A's admin API; returns (id, key).
async fn create_key(t: &Two, name: &str) -> (String, String) {
    let (status, k) = api(
        "POST",
        &format!("http://{}/api/v1/tenants/t/apps/a/keys", t.a.addr),
        Some(&t.token),
        Some(json!({ "name": name })),
    )
    .await;
    assert_eq!(status, 201, "{k}");
    (
        k["id"].as_str().unwrap().to_string(),
        k["key"].as_str().unwrap().to_string(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_hundred_new_keys_work_at_once_on_both_replicas() {
    let t = two_replicas().await;
    let calls = (0..100).map(|i| {
        let t = &t;
        async move {
            let (_, key) = create_key(t, &format!("k{i}")).await;
            // The first call, the moment the create call returned: on the
            // replica that created it, and on the other.
            let (on_a, on_b) = tokio::join!(chat(t.a.addr, &key), chat(t.b.addr, &key));
            [on_a, on_b]
        }
    });
    let statuses: Vec<u16> = join_all(calls).await.into_iter().flatten().collect();
    let ok = statuses.iter().filter(|s| **s == 200).count();
    assert_eq!(
        ok, 200,
        "first calls of 100 new keys on 2 replicas: {statuses:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_revoked_key_answers_401_within_a_second_on_both_replicas() {
    let t = two_replicas().await;
    let (id, key) = create_key(&t, "doomed").await;
    // B learns this key by its miss lookup, A by the notification (or the
    // other way round): both caches must let go of it.
    assert_eq!(chat(t.b.addr, &key).await, 200);
    assert_eq!(chat(t.a.addr, &key).await, 200);
    let (status, _) = api(
        "DELETE",
        &format!("http://{}/api/v1/keys/{id}", t.a.addr),
        Some(&t.token),
        None,
    )
    .await;
    assert!(status == 200 || status == 204, "revoke: {status}");
    let revoked = Instant::now();
    for addr in [t.a.addr, t.b.addr] {
        let gone = eventually(Duration::from_secs(1), || async {
            chat(addr, &key).await == 401
        })
        .await;
        assert!(
            gone && revoked.elapsed() < Duration::from_millis(1500),
            "revoked key still served on {addr} after {:?}",
            revoked.elapsed()
        );
    }
    // And it stays revoked: no cache brings it back.
    for _ in 0..10 {
        assert_eq!(chat(t.a.addr, &key).await, 401);
        assert_eq!(chat(t.b.addr, &key).await, 401);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn random_keys_are_all_refused_and_bounded_in_postgres() {
    let t = two_replicas().await;
    let (_, known) = create_key(&t, "known").await;
    assert_eq!(chat(t.a.addr, &known).await, 200);
    let stats = &t.a.gateway.catalog().keys().stats;
    let lookups_before = stats.lookups.load(Ordering::Relaxed);

    // One unknown key asked 50 times at once is one lookup (single flight,
    // then the negative cache).
    let one = domain::keys::generate();
    let same = join_all((0..50).map(|_| chat(t.a.addr, &one))).await;
    assert!(same.iter().all(|s| *s == 401), "{same:?}");
    assert_eq!(stats.lookups.load(Ordering::Relaxed) - lookups_before, 1);

    let started = Instant::now();
    let lookups0 = stats.lookups.load(Ordering::Relaxed);
    let client = reqwest::Client::new();
    let url = format!("http://{}/v1/chat/completions", t.a.addr);
    let body = chat_body("hello", Some(8));
    let attack = futures::stream::iter(0..10_000)
        .map(|_| {
            let (client, url, body) = (client.clone(), url.clone(), body.clone());
            async move {
                let r = client
                    .post(url)
                    .bearer_auth(domain::keys::generate())
                    .json(&body)
                    .send()
                    .await
                    .unwrap();
                r.status().as_u16()
            }
        })
        .buffer_unordered(64)
        .collect::<Vec<u16>>();
    // Known keys keep working meanwhile.
    let known_calls = async {
        let mut s = Vec::new();
        for _ in 0..20 {
            s.push(chat(t.a.addr, &known).await);
        }
        s
    };
    let (attack, known_statuses) = tokio::join!(attack, known_calls);
    let elapsed = started.elapsed().as_secs_f64();
    assert_eq!(attack.len(), 10_000);
    assert!(
        attack.iter().all(|s| *s == 401),
        "a random key was not refused"
    );
    assert!(
        known_statuses.iter().all(|s| *s == 200),
        "{known_statuses:?}"
    );
    let lookups = stats.lookups.load(Ordering::Relaxed) - lookups0;
    let refused = stats.refused.load(Ordering::Relaxed);
    // The default bound: 100 a second with a burst of 100.
    let bound = 100.0 + 100.0 * elapsed + 5.0;
    assert!(
        (lookups as f64) <= bound,
        "{lookups} Postgres lookups in {elapsed:.1}s (bound {bound:.0})"
    );
    assert!(
        refused > 0 && lookups + refused >= 9_000,
        "lookups {lookups}, refused {refused}"
    );
}

/// `Store::load_keys` (the scale benchmark's catalog loader) writes keys
/// running replicas accept (a burst past what the listener applies one by
/// one, so a full load or a miss lookup finds them): the first, a middle and
/// the last key answer 200 on each replica; the rows are create_key's
/// (allowed models included) and one audit record per statement.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn keys_loaded_in_bulk_work_on_running_replicas() {
    let t = two_replicas().await;
    let st = &t._env.store;
    let plain: Vec<String> = (0..6_000).map(|_| domain::keys::generate()).collect();
    let rows: Vec<store::NewKey> = plain
        .iter()
        .enumerate()
        .map(|(i, k)| store::NewKey {
            tenant_id: "t".into(),
            app_id: "a".into(),
            name: format!("bulk-{i}"),
            prefix: domain::keys::display_prefix(k),
            key_hash: domain::keys::keyed_hash(PEPPER.as_bytes(), k),
            limits: Limits::default(),
            allowed_models: (i == 5_999).then(|| vec!["gpt-4o-mini".to_string()]),
            expires_at: None,
            attribution: Default::default(),
        })
        .collect();
    let mut ids = Vec::new();
    for chunk in rows.chunks(3_000) {
        ids.extend(st.load_keys("test:bulk", chunk).await.unwrap());
    }
    assert_eq!(ids.len(), 6_000);
    let pool = sqlx::PgPool::connect(&t._env.db_url).await.unwrap();
    let (stored, audited): (i64, i64) = sqlx::query_as(
        "SELECT (SELECT count(*) FROM virtual_keys WHERE name LIKE 'bulk-%'),
                (SELECT count(*) FROM audit_log WHERE action = 'key.load' AND actor = 'test:bulk')",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!((stored, audited), (6_000, 2));
    let models: Option<Vec<String>> =
        sqlx::query_scalar("SELECT allowed_models FROM virtual_keys WHERE name = 'bulk-5999'")
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!(models, Some(vec!["gpt-4o-mini".to_string()]));
    for k in [&plain[0], &plain[2_999], &plain[5_999]] {
        let deadline = Instant::now() + Duration::from_secs(5);
        for addr in [t.a.addr, t.b.addr] {
            let mut s = chat(addr, k).await;
            while s != 200 && Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(20)).await;
                s = chat(addr, k).await;
            }
            assert_eq!(s, 200, "a bulk-loaded key on {addr}");
        }
    }
}

/// Model aliases: made through replica A's admin API (platform admin only,
/// audited), served on replica B within a second — a tenant's alias over a
/// global one, an exact alias over a pattern, the longest pattern first —
/// booked under the model that served it, answered under the name asked,
/// listed by `GET /v1/models` when exact; deleted, the name is unknown again.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn model_aliases_reach_every_replica_and_serve_in_order() {
    let env = TestEnv::new().await;
    let (_, key) = env.simple_tenant(Limits::default()).await;
    env.model("cheap", "chat", 10_000, 20_000).await;
    env.model("tenant-model", "chat", 10_000, 20_000).await;
    user(&env, "admin@x.io", "platform_admin", None).await;
    user(&env, "ta@x.io", "tenant_admin", Some("t")).await;
    let a = env.server().await;
    let b = env.server().await;
    let base_a = format!("http://{}", a.addr);
    let token = login(&base_a, "admin@x.io").await;
    let alias = |body: serde_json::Value| {
        let (url, token) = (format!("{base_a}/api/v1/model-aliases"), token.clone());
        async move { api("POST", &url, Some(&token), Some(body)).await }
    };
    // Before: an unknown name.
    let msg = |model: &str| json!({"model": model, "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]});
    let url_b = format!("http://{}/v1/messages", b.addr);
    assert_eq!(
        post(&url_b, &key, &msg("claude-opus-4-8")).await.status(),
        404
    );

    let (s, made) = alias(json!({"alias": "claude-*", "model": "cheap"})).await;
    assert_eq!(s, 200, "{made}");
    let (s, opus) = alias(json!({"alias": "claude-opus-*", "model": "gpt-4o-mini"})).await;
    assert_eq!(s, 200, "{opus}");
    let (s, _) = alias(json!({"alias": "claude-opus-4-1", "model": "cheap"})).await;
    assert_eq!(s, 200);
    // The same name twice in one scope; a pattern of nothing; no such model.
    assert_eq!(
        alias(json!({"alias": "claude-*", "model": "gpt-4o-mini"}))
            .await
            .0,
        409
    );
    assert_eq!(alias(json!({"alias": "*", "model": "cheap"})).await.0, 400);
    assert_eq!(alias(json!({"alias": "x", "model": "nope"})).await.0, 400);
    // A tenant admin may not read or write them.
    let ta = login(&base_a, "ta@x.io").await;
    let (s, _) = api(
        "GET",
        &format!("{base_a}/api/v1/model-aliases"),
        Some(&ta),
        None,
    )
    .await;
    assert_eq!(s, 403);

    // Served on the other replica within a second, in order.
    let served = |asked: &'static str| {
        let (url, key) = (url_b.clone(), key.clone());
        async move {
            let r = post(&url, &key, &msg(asked)).await;
            let status = r.status().as_u16();
            let rid = r.headers()["x-request-id"].to_str().unwrap().to_string();
            let body: serde_json::Value = r.json().await.unwrap_or_default();
            (status, rid, body)
        }
    };
    let t0 = Instant::now();
    while served("claude-opus-4-8").await.0 != 200 {
        assert!(
            t0.elapsed() < Duration::from_secs(1),
            "no alias on replica B"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    for (asked, model) in [
        ("claude-opus-4-8", "gpt-4o-mini"), // the longer pattern
        ("claude-opus-4-1", "cheap"),       // exact over pattern
        ("claude-3-5-haiku", "cheap"),      // the only pattern
    ] {
        let (s, rid, body) = served(asked).await;
        assert_eq!(s, 200, "{asked}: {body}");
        assert_eq!(body["model"], asked, "answered under the name asked");
        let booked = eventually(Duration::from_secs(5), || async {
            env.usage_event(&rid).await.is_some()
        })
        .await;
        assert!(booked);
        assert_eq!(env.usage_event(&rid).await.unwrap().model, model, "{asked}");
    }
    // The tenant's own alias wins over every global one.
    let (s, mine) =
        alias(json!({"alias": "claude-*", "model": "tenant-model", "tenant_id": "t"})).await;
    assert_eq!(s, 200, "{mine}");
    let t0 = Instant::now();
    loop {
        let (_, rid, _) = served("claude-opus-4-1").await;
        if eventually(Duration::from_secs(5), || async {
            env.usage_event(&rid).await.is_some()
        })
        .await
            && env.usage_event(&rid).await.unwrap().model == "tenant-model"
        {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(3),
            "the tenant's alias never won"
        );
    }
    // Listed when exact (a pattern names no one model).
    let models: serde_json::Value = reqwest::Client::new()
        .get(format!("http://{}/v1/models", b.addr))
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
    assert!(ids.contains(&"claude-opus-4-1"), "{ids:?}");
    assert!(!ids.iter().any(|i| i.contains('*')), "{ids:?}");
    // Audited.
    let (_, audit) = api("GET", &format!("{base_a}/api/v1/audit"), Some(&token), None).await;
    assert!(audit.to_string().contains("model_alias.create"), "{audit}");
    // Re-pointed, then deleted: unknown again.
    let id = mine["id"].as_i64().unwrap();
    let (s, _) = api(
        "PATCH",
        &format!("{base_a}/api/v1/model-aliases/{id}"),
        Some(&token),
        Some(json!({"model": "cheap"})),
    )
    .await;
    assert_eq!(s, 200);
    let (_, list) = api(
        "GET",
        &format!("{base_a}/api/v1/model-aliases"),
        Some(&token),
        None,
    )
    .await;
    for a in list["data"].as_array().unwrap() {
        let id = a["id"].as_i64().unwrap();
        let (s, _) = api(
            "DELETE",
            &format!("{base_a}/api/v1/model-aliases/{id}"),
            Some(&token),
            None,
        )
        .await;
        assert_eq!(s, 200);
    }
    let t0 = Instant::now();
    while served("claude-opus-4-8").await.0 != 404 {
        assert!(
            t0.elapsed() < Duration::from_secs(1),
            "a deleted alias still served"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    a.shutdown().await;
    b.shutdown().await;
}
