//! Per-tenant caps (docs/fair.md, "Per-tenant caps"): a tenant's own
//! `max_queued_requests` (429 `tenant_queue_full` once that many wait,
//! another tenant untouched) and `max_open_streams` (429
//! `tenant_stream_cap` on one stream too many, its place given back however
//! a stream ends), set through the admin API; and the wait of a request
//! that queued and was then admitted, in the request log.

mod fair_common;

use domain::Limits;
use e2e::*;
use fair_common::*;
use futures::StreamExt;
use serde_json::{json, Value};
use std::time::Duration;

fn one_inflight() -> Limits {
    Limits {
        max_inflight: Some(1),
        ..Default::default()
    }
}

/// Sets a tenant's fields through the admin API and waits until this
/// replica's catalog has them.
async fn patch_tenant(
    srv: &server::app::Running,
    base: &str,
    token: &str,
    id: &str,
    body: Value,
) -> Value {
    let (s, b) = api(
        "PATCH",
        &format!("{base}/api/v1/tenants/{id}"),
        Some(token),
        Some(body),
    )
    .await;
    assert_eq!(s, 200, "{b}");
    let (q, st) = (
        b["max_queued_requests"].as_i64(),
        b["max_open_streams"].as_i64(),
    );
    assert!(
        eventually(Duration::from_secs(10), || async {
            let c = srv.gateway.catalog().get();
            let t = &c.tenants[id];
            t.max_queued_requests.map(|v| v as i64) == q
                && t.max_open_streams.map(|v| v as i64) == st
        })
        .await,
        "the catalog sees the change"
    );
    b
}

fn stream_body(directive: &str) -> Value {
    json!({"model": "gpt-4o-mini", "max_tokens": 40, "stream": true,
        "messages": [{"role": "user", "content": format!("hello {directive}")}]})
}

#[tokio::test]
async fn a_tenants_queue_cap_refuses_its_third_waiter_and_queued_waits_are_logged() {
    let env = TestEnv::new().await;
    env.model("gpt-4o-mini", "chat", 150_000, 600_000).await;
    let capped = tenant(&env, "capped", "standard", one_inflight(), None).await;
    let free = tenant(&env, "free", "standard", one_inflight(), None).await;
    let mut cfg = config(&env);
    // Nobody times out here: the waits are the point.
    cfg.fair.max_wait_ms_standard = 20_000;
    let srv = env.server_with(cfg).await;
    let base = format!("http://{}", srv.addr);
    let token = admin(&env, &base).await;
    // The API: the cap is validated, audited, shown, and reaches the gateway.
    let (s, b) = api(
        "PATCH",
        &format!("{base}/api/v1/tenants/capped"),
        Some(&token),
        Some(json!({"max_queued_requests": 0})),
    )
    .await;
    assert_eq!(s, 400, "{b}");
    let t = patch_tenant(
        &srv,
        &base,
        &token,
        "capped",
        json!({"max_queued_requests": 2}),
    )
    .await;
    assert_eq!(t["max_queued_requests"], 2);
    assert_eq!(t["max_open_streams"], Value::Null);
    let (s, audit) = api(
        "GET",
        &format!("{base}/api/v1/audit?limit=50"),
        Some(&token),
        None,
    )
    .await;
    assert_eq!(s, 200, "{audit}");
    let change = audit["data"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["action"] == "tenant.update" && r["target"] == "tenant:capped")
        .unwrap_or_else(|| panic!("{audit}"));
    assert_eq!(
        change["before"]["max_queued_requests"],
        Value::Null,
        "{change}"
    );
    assert_eq!(change["after"]["max_queued_requests"], 2, "{change}");

    let url = format!("{base}/v1/chat/completions");
    // Each tenant: one request in flight (its limit) and then more that wait.
    let send = |key: &String, n: usize| {
        (0..n)
            .map(|_| {
                let (url, key) = (url.clone(), key.clone());
                tokio::spawn(async move {
                    let r = post(&url, &key, &body("[mock:latency_ms=700]", 8)).await;
                    let rid = r.headers()["x-request-id"].to_str().unwrap().to_string();
                    (r.status().as_u16(), decision(&r), reason(&r), rid)
                })
            })
            .collect::<Vec<_>>()
    };
    let mut capped_first = send(&capped, 1);
    let mut free_all = send(&free, 1);
    tokio::time::sleep(Duration::from_millis(200)).await;
    capped_first.extend(send(&capped, 2));
    free_all.extend(send(&free, 4));
    // Two of capped's wait: its queue is full at 2, though the platform's
    // cap (64) is far off.
    assert!(
        eventually(Duration::from_secs(10), || async {
            srv.gateway.queue().full_for("capped", Some(2)).is_some()
        })
        .await,
        "capped's two requests wait"
    );
    let r = post(&url, &capped, &body("", 8)).await;
    assert_eq!(r.status(), 429);
    assert_eq!(reason(&r), "tenant_queue_full");
    let e: Value = r.json().await.unwrap();
    assert_eq!(e["error"]["code"], "tenant_queue_full", "{e}");
    // In the Messages dialect, Anthropic's shape.
    let r = reqwest::Client::new()
        .post(format!("{base}/v1/messages"))
        .header("x-api-key", &capped)
        .header("anthropic-version", "2023-06-01")
        .json(&json!({"model": "gpt-4o-mini", "max_tokens": 8,
            "messages": [{"role": "user", "content": "hello"}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 429);
    assert_eq!(reason(&r), "tenant_queue_full");
    let e: Value = r.json().await.unwrap();
    assert_eq!(e["type"], "error", "{e}");
    assert_eq!(e["error"]["type"], "rate_limit_error", "{e}");
    // The other tenant, with the platform's cap, is not affected: all
    // five of its requests (one in flight, four waiting) go through.
    for h in free_all {
        let (status, _, why, _) = h.await.unwrap();
        assert_eq!(status, 200, "free: {why}");
    }
    let mut queued = Vec::new();
    for h in capped_first {
        let (status, decision, why, rid) = h.await.unwrap();
        assert_eq!(status, 200, "capped: {why}");
        if decision == "queue" {
            assert_eq!(why, "tenant_inflight_exceeded");
            queued.push(rid);
        }
    }
    assert_eq!(queued.len(), 2, "two of capped's requests waited");

    // The request log shows each wait: the lookup and the list.
    for rid in &queued {
        // Written in batches, with the ledger's.
        let found = lookup(&base, &token, rid, |b| {
            !b["decision"].is_null() && !b["usage"].is_null()
        })
        .await;
        assert_eq!(found["outcome"], "admitted", "{found}");
        let d = &found["decision"];
        assert_eq!(d["decision"], "queued", "{found}");
        assert_eq!(d["reason"], "tenant_inflight_exceeded", "{found}");
        assert_eq!(d["status"], 200, "{found}");
        assert!(d["detail"]["waited_ms"].as_i64().unwrap() > 0, "{found}");
        assert_eq!(d["detail"]["queue_reason"], "tenant_inflight_exceeded");
    }
    let (s, log) = api(
        "GET",
        &format!("{base}/api/v1/requests?tenant=capped&limit=100"),
        Some(&token),
        None,
    )
    .await;
    assert_eq!(s, 200, "{log}");
    for rid in &queued {
        let row = log["data"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["request_id"] == rid.as_str())
            .unwrap_or_else(|| panic!("{rid} in {log}"));
        assert_eq!(row["outcome"], "admitted", "{row}");
        assert!(row["queued_ms"].as_i64().unwrap() > 0, "{row}");
        assert_eq!(row["queue_reason"], "tenant_inflight_exceeded", "{row}");
    }
    // The refusals are refusals; the waits are not.
    let refused = log["data"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["outcome"] == "refused")
        .count();
    assert_eq!(refused, 2, "{log}");
    // The console: the log's row and the lookup say how long it waited and
    // why, in words (and in Chinese too).
    let w = e2e::console_web::Web::login(&base, "root@example.com").await;
    let page = w.get("/console/requests?tenant=capped").await.body;
    assert!(
        page.contains("Waited in the queue: ") && page.contains("too many of the tenant"),
        "{page}"
    );
    let page = w
        .get(&format!("/console/requests?id={}", queued[0]))
        .await
        .body;
    assert!(page.contains("data-outcome=\"admitted\""), "{page}");
    assert!(page.contains("Waited in the queue"), "{page}");
    assert!(page.contains(" ms, for: "), "{page}");
    srv.shutdown().await;
}

/// `GET /api/v1/requests/{rid}` until `ready` says it is all there (10 s).
async fn lookup(base: &str, token: &str, rid: &str, ready: impl Fn(&Value) -> bool) -> Value {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let (s, b) = api(
            "GET",
            &format!("{base}/api/v1/requests/{rid}"),
            Some(token),
            None,
        )
        .await;
        if (s == 200 && ready(&b)) || std::time::Instant::now() > deadline {
            return b;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Opens a stream and returns its response once the headers are in.
async fn open(url: &str, key: &str, directive: &str) -> reqwest::Response {
    post(url, key, &stream_body(directive)).await
}

#[tokio::test]
async fn a_tenants_stream_cap_refuses_one_stream_too_many_until_one_ends() {
    let env = TestEnv::new().await;
    env.model("gpt-4o-mini", "chat", 150_000, 600_000).await;
    let key = tenant(&env, "s", "standard", Limits::default(), None).await;
    let other = tenant(&env, "o", "standard", Limits::default(), None).await;
    let srv = env.server_with(config(&env)).await;
    let base = format!("http://{}", srv.addr);
    let token = admin(&env, &base).await;
    let t = patch_tenant(&srv, &base, &token, "s", json!({"max_open_streams": 2})).await;
    assert_eq!(t["max_open_streams"], 2);
    let url = format!("{base}/v1/chat/completions");
    // Two streams of 40 chunks, 50 ms apart: open for about two seconds.
    let slow = "[mock:output_tokens=40] [mock:chunk_delay_ms=50]";
    let a = open(&url, &key, slow).await;
    let b = open(&url, &key, slow).await;
    assert_eq!((a.status().as_u16(), b.status().as_u16()), (200, 200));
    assert_eq!(srv.gateway.open_streams().count("s"), 2);
    // A third is refused before it is forwarded, in the client's dialect.
    let r = open(&url, &key, slow).await;
    assert_eq!(r.status(), 429);
    assert_eq!(reason(&r), "tenant_stream_cap");
    assert_eq!(r.headers()["retry-after"], "1");
    let rid = r.headers()["x-request-id"].to_str().unwrap().to_string();
    let e: Value = r.json().await.unwrap();
    assert_eq!(e["error"]["code"], "tenant_stream_cap", "{e}");
    assert_eq!(e["error"]["type"], "rate_limit_error", "{e}");
    let r = reqwest::Client::new()
        .post(format!("{base}/v1/messages"))
        .header("x-api-key", &key)
        .header("anthropic-version", "2023-06-01")
        .json(
            &json!({"model": "gpt-4o-mini", "max_tokens": 8, "stream": true,
            "messages": [{"role": "user", "content": "hello"}]}),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 429);
    assert_eq!(reason(&r), "tenant_stream_cap");
    let e: Value = r.json().await.unwrap();
    assert_eq!(
        (&e["type"], &e["error"]["type"]),
        (&json!("error"), &json!("rate_limit_error")),
        "{e}"
    );
    // Not a stream, or another tenant: not affected.
    let r = post(&url, &key, &body("", 8)).await;
    assert_eq!(r.status(), 200);
    let r = open(&url, &other, "").await;
    assert_eq!(r.status(), 200);
    let _ = r.bytes().await;
    // The refusal is in the request log.
    let found = lookup(&base, &token, &rid, |b| !b["decision"].is_null()).await;
    assert_eq!(found["decision"]["reason"], "tenant_stream_cap", "{found}");
    assert_eq!(found["decision"]["status"], 429, "{found}");
    // The two streams end (read to their end): their places are given back.
    let (ta, tb) = tokio::join!(a.text(), b.text());
    assert!(ta.unwrap().contains("[DONE]"));
    assert!(tb.unwrap().contains("[DONE]"));
    assert!(
        eventually(Duration::from_secs(5), || async {
            srv.gateway.open_streams().count("s") == 0
        })
        .await,
        "the finished streams are closed"
    );
    let r = open(&url, &key, "").await;
    assert_eq!(r.status(), 200, "{}", reason(&r));
    let _ = r.bytes().await;
    // A client that hangs up mid-stream gives its place back too.
    let c = open(&url, &key, slow).await;
    let d = open(&url, &key, slow).await;
    assert_eq!((c.status().as_u16(), d.status().as_u16()), (200, 200));
    let mut chunks = c.bytes_stream();
    assert!(chunks.next().await.is_some());
    drop(chunks);
    drop(d);
    assert!(
        eventually(Duration::from_secs(5), || async {
            srv.gateway.open_streams().count("s") == 0
        })
        .await,
        "streams whose clients left are closed"
    );
    let r = open(&url, &key, "").await;
    assert_eq!(r.status(), 200, "{}", reason(&r));
    let _ = r.bytes().await;
    // An upstream that fails before streaming, or breaks off mid-stream:
    // the place is not kept.
    let r = open(&url, &key, "[mock:fault=500]").await;
    assert_ne!(r.status(), 200);
    let r = open(&url, &key, "[mock:fault=disconnect_after=3]").await;
    let _ = r.bytes().await;
    assert!(
        eventually(Duration::from_secs(5), || async {
            srv.gateway.open_streams().count("s") == 0
        })
        .await,
        "failed streams are closed"
    );
    // Back to the platform default (no cap): null.
    let t = patch_tenant(&srv, &base, &token, "s", json!({"max_open_streams": null})).await;
    assert_eq!(t["max_open_streams"], Value::Null);
    srv.shutdown().await;
}

/// A burst of one tenant's stream opens is started a few at a time
/// (`fair.stream_starts_per_tenant`, docs/fair.md, "Isolation under long
/// prompts and stream bursts"): with one start per tenant and a provider
/// that takes 400 ms for its headers, three streams opened at once start
/// one after another, while another tenant's stream, opened with them,
/// starts at once. Pacing never refuses: past `fair.stream_start_wait_ms`
/// a stream starts without its turn.
#[tokio::test]
async fn a_burst_of_stream_opens_is_started_a_few_at_a_time_per_tenant() {
    let env = TestEnv::new().await;
    env.model("gpt-4o-mini", "chat", 150_000, 600_000).await;
    let key = tenant(&env, "burst", "standard", Limits::default(), None).await;
    let other = tenant(&env, "calm", "standard", Limits::default(), None).await;
    let mut cfg = config(&env);
    cfg.fair.stream_starts_per_tenant = 1;
    cfg.fair.stream_start_wait_ms = 600;
    let srv = env.server_with(cfg).await;
    let url = format!("http://{}/v1/chat/completions", srv.addr);
    let slow = "[mock:latency_ms=400] [mock:output_tokens=3]";
    let t0 = std::time::Instant::now();
    let opened = |k: String| {
        let url = url.clone();
        async move {
            let r = open(&url, &k, slow).await;
            let at = t0.elapsed().as_millis();
            let status = r.status().as_u16();
            let _ = r.bytes().await;
            (at, status)
        }
    };
    let (burst, calm) = tokio::join!(
        futures::future::join_all((0..3).map(|_| opened(key.clone()))),
        opened(other.clone())
    );
    let mut at: Vec<u128> = burst.iter().map(|b| b.0).collect();
    at.sort();
    // Every stream was served: pacing delays, it does not refuse.
    assert!(burst.iter().all(|b| b.1 == 200), "{burst:?}");
    assert_eq!(calm.1, 200);
    // The other tenant's stream started with the first of the burst …
    assert!(calm.0 < 700, "the calm tenant waited {} ms", calm.0);
    assert!(at[0] < 700, "{at:?}");
    // … the second of the burst after the first's headers (~800 ms), the
    // third after the second's (~1,200 ms) or, past its 600 ms wait,
    // without a turn (~1,000 ms). Unpaced, all three answer at ~400 ms.
    assert!(at[1] >= 750, "{at:?}");
    assert!(at[2] >= 950, "{at:?}");
    srv.shutdown().await;
}
