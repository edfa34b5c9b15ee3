//! Streams metered as they flow: cut off at the budget, never over it,
//! short streams instead of up-front refusals, fair charges on disconnects.

use domain::Limits;
use e2e::*;
use futures::StreamExt;
use serde_json::{json, Value};
use server::config::AdmissionSetting;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;

fn stream_body(content: &str, max_tokens: i64) -> Value {
    let mut b = chat_body(content, Some(max_tokens));
    b["stream"] = json!(true);
    b
}

/// The events of a stream, as (event name, data).
async fn events(r: reqwest::Response) -> Vec<(Option<String>, String)> {
    let mut body = String::new();
    let mut s = r.bytes_stream();
    while let Some(b) = s.next().await {
        body.push_str(&String::from_utf8_lossy(&b.expect("stream ends cleanly")));
    }
    body.split("\n\n")
        .filter(|e| !e.trim().is_empty())
        .map(|e| {
            let mut name = None;
            let mut data = String::new();
            for line in e.lines() {
                if let Some(n) = line.strip_prefix("event: ") {
                    name = Some(n.to_string());
                } else if let Some(d) = line.strip_prefix("data: ") {
                    data = d.to_string();
                }
            }
            (name, data)
        })
        .collect()
}

fn delivered_tokens(evs: &[(Option<String>, String)]) -> i64 {
    evs.iter()
        .filter_map(|(_, d)| serde_json::from_str::<Value>(d).ok())
        .filter_map(|v| {
            v["choices"][0]["delta"]["content"]
                .as_str()
                .map(|c| c.matches(" hello").count() as i64)
        })
        .sum()
}

/// Asserts the gateway's cut-off ending and returns the error code.
fn assert_cut_off(evs: &[(Option<String>, String)]) -> String {
    let n = evs.len();
    assert!(n >= 3, "{evs:?}");
    assert_eq!(evs[n - 1].1, "[DONE]");
    let (name, data) = &evs[n - 2];
    assert_eq!(name.as_deref(), Some("error"), "{evs:?}");
    let err: Value = serde_json::from_str(data).unwrap();
    let last: Value = serde_json::from_str(&evs[n - 3].1).unwrap();
    assert_eq!(last["choices"][0]["finish_reason"], "length", "{last}");
    err["tollgate_error"]["code"].as_str().unwrap().to_string()
}

#[tokio::test]
async fn a_stream_past_the_budget_is_cut_off_cleanly_and_the_upstream_closed() {
    let env = TestEnv::new().await;
    let (_, key) = env
        .simple_tenant(Limits {
            monthly_tokens: Some(1000),
            ..Default::default()
        })
        .await;
    let srv = env.server().await;
    let url = format!("http://{}/v1/chat/completions", srv.addr);
    let r = post(
        &url,
        &key,
        &stream_body(
            "hello [mock:output_tokens=5000] [mock:chunk_delay_ms=1]",
            5000,
        ),
    )
    .await;
    assert_eq!(r.status(), 200);
    let evs = events(r).await;
    assert_eq!(assert_cut_off(&evs), "tenant_monthly_budget_exhausted");
    let delivered = delivered_tokens(&evs);

    let month = this_month();
    assert!(
        eventually(Duration::from_secs(5), || async {
            env.counters("t", &month).await.get("t:ht") == Some(&0)
        })
        .await
    );
    let c = env.counters("t", &month).await;
    assert!(c["t:ut"] <= 1000, "used {} > 1000", c["t:ut"]);
    // It used the budget, not a fraction of it: the last slice is squeezed.
    assert!(c["t:ut"] >= 990, "used only {}", c["t:ut"]);
    assert!((970..=1000).contains(&delivered), "delivered {delivered}");
    assert!(
        eventually(Duration::from_secs(3), || async {
            env.mock.snapshot().streams_closed_early == 1
        })
        .await
    );
    assert!(
        eventually(Duration::from_secs(5), || async {
            env.ledger_tokens("t", &month).await.0 == c["t:ut"]
        })
        .await
    );
    srv.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fifty_concurrent_streams_never_spend_past_the_budget() {
    streams_and_requests_race(AdmissionSetting::PerRequest).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fifty_concurrent_streams_never_spend_past_the_budget_beside_leases() {
    streams_and_requests_race(AdmissionSetting::Lease).await
}

/// 50 streams and 50 non-stream requests at once against one budget: the
/// streams are held slice by slice (per request on both paths), the plain
/// requests per request or from leases.
async fn streams_and_requests_race(mode: AdmissionSetting) {
    let env = TestEnv::new().await;
    let limit = 20_000;
    let (_, key) = env
        .simple_tenant(Limits {
            monthly_tokens: Some(limit),
            ..Default::default()
        })
        .await;
    // The budget, not latency: 50 streams share two cores with Redis.
    let mut cfg = env.config();
    cfg.redis.timeout_ms = 1000;
    cfg.gateway.admission = mode;
    let srv = env.server_with(cfg).await;
    let url = format!("http://{}/v1/chat/completions", srv.addr);
    let month = this_month();

    // Sample used and used + held while the streams run.
    let done = Arc::new(AtomicBool::new(false));
    let worst = Arc::new(AtomicI64::new(0));
    let sampler = {
        let (done, worst) = (done.clone(), worst.clone());
        let (redis, key) = (
            env.redis_url.clone(),
            format!("{}:{{t:t}}:m:{}", env.prefix, month),
        );
        tokio::spawn(async move {
            let mut c = redis::Client::open(redis)
                .unwrap()
                .get_multiplexed_async_connection()
                .await
                .unwrap();
            let mut samples = 0;
            while !done.load(Ordering::Relaxed) {
                let (ut, ht): (Option<i64>, Option<i64>) = redis::cmd("HMGET")
                    .arg(&key)
                    .arg("t:ut")
                    .arg("t:ht")
                    .query_async(&mut c)
                    .await
                    .unwrap();
                let (ut, ht) = (ut.unwrap_or(0), ht.unwrap_or(0));
                assert!(ut <= limit, "used {ut} > {limit} during the run");
                worst.fetch_max(ut + ht, Ordering::Relaxed);
                samples += 1;
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            samples
        })
    };
    let client = reqwest::Client::new();
    let runs = (0..50).map(|_| {
        let (client, url, key) = (client.clone(), url.clone(), key.clone());
        async move {
            let body = stream_body(
                "hello [mock:output_tokens=2000] [mock:chunk_delay_ms=1]",
                2000,
            );
            let r = client
                .post(url)
                .bearer_auth(key)
                .json(&body)
                .send()
                .await
                .unwrap();
            let status = r.status().as_u16();
            (
                status,
                if status == 200 {
                    events(r).await
                } else {
                    vec![(None, r.text().await.unwrap())]
                },
            )
        }
    });
    let plain = (0..50).map(|_| {
        let (client, url, key) = (client.clone(), url.clone(), key.clone());
        async move {
            let r = client
                .post(url)
                .bearer_auth(key)
                .json(&chat_body("hello [mock:output_tokens=100]", Some(100)))
                .send()
                .await
                .unwrap();
            let status = r.status().as_u16();
            let json: Value = r.json().await.unwrap();
            assert!(status == 200 || status == 402, "{status} {json}");
            if status == 402 {
                assert_eq!(json["error"]["code"], "tenant_monthly_budget_exhausted");
            }
        }
    });
    let (results, _) = futures::future::join(
        futures::future::join_all(runs),
        futures::future::join_all(plain),
    )
    .await;
    done.store(true, Ordering::Relaxed);
    let samples = sampler.await.unwrap();
    assert!(samples > 10, "only {samples} samples");
    assert!(
        worst.load(Ordering::Relaxed) <= limit,
        "used + held reached {}",
        worst.load(Ordering::Relaxed)
    );

    let mut cut = 0;
    for (status, evs) in &results {
        match status {
            200 => {
                assert_eq!(
                    evs.last().unwrap().1,
                    "[DONE]",
                    "stream did not end cleanly"
                );
                if evs.iter().any(|(n, _)| n.as_deref() == Some("error")) {
                    assert_eq!(assert_cut_off(evs), "tenant_monthly_budget_exhausted");
                    cut += 1;
                }
            }
            402 => assert!(evs[0].1.contains("tenant_monthly_budget_exhausted")),
            other => panic!("unexpected status {other}: {evs:?}"),
        }
    }
    assert!(cut > 0, "the budget never cut a stream");
    assert!(
        eventually(Duration::from_secs(5), || async {
            env.counters("t", &month).await.get("t:ht") == Some(&0)
        })
        .await
    );
    let used = env.counters("t", &month).await["t:ut"];
    assert!(used <= limit, "used {used}");
    assert!(
        eventually(Duration::from_secs(5), || async {
            env.ledger_tokens("t", &month).await.0 == used
        })
        .await
    );
    srv.shutdown().await;
}

#[tokio::test]
async fn a_small_budget_still_runs_short_streams_that_ask_for_a_lot() {
    let env = TestEnv::new().await;
    let (_, key) = env
        .simple_tenant(Limits {
            monthly_tokens: Some(2000),
            ..Default::default()
        })
        .await;
    let srv = env.server().await;
    let url = format!("http://{}/v1/chat/completions", srv.addr);
    for _ in 0..5 {
        let r = post(
            &url,
            &key,
            &stream_body("hello [mock:output_tokens=50]", 8000),
        )
        .await;
        assert_eq!(
            r.status(),
            200,
            "a max_tokens of 8000 must not lock a 2,000-token budget"
        );
        let evs = events(r).await;
        assert!(evs.iter().all(|(n, _)| n.is_none()), "{evs:?}");
        assert_eq!(delivered_tokens(&evs), 50);
    }
    // The upstream was told the client's cap, not the slice.
    assert_eq!(env.mock.snapshot().last_body.unwrap()["max_tokens"], 8000);
    srv.shutdown().await;
}

#[tokio::test]
async fn an_upstream_that_breaks_mid_stream_is_charged_for_what_it_sent() {
    let env = TestEnv::new().await;
    let (_, key) = env
        .simple_tenant(Limits {
            monthly_tokens: Some(100_000),
            ..Default::default()
        })
        .await;
    let srv = env.server().await;
    let url = format!("http://{}/v1/chat/completions", srv.addr);
    let r = post(
        &url,
        &key,
        &stream_body(
            "hello [mock:output_tokens=500] [mock:fault=disconnect_after=30]",
            500,
        ),
    )
    .await;
    let evs = events(r).await;
    assert_eq!(evs.last().unwrap().1, "[DONE]");
    let err = evs
        .iter()
        .find(|(n, _)| n.as_deref() == Some("error"))
        .expect("error event");
    assert!(err.1.contains("upstream_error"));
    let delivered = delivered_tokens(&evs);
    assert_eq!(delivered, 30);

    let e = only_usage_event(&env).await;
    // The 30 tokens sent, counted by the gateway; not 0, not the 256-token hold.
    assert_eq!(
        (e.output_tokens, e.usage_source.as_str(), e.status.as_str()),
        (30, "counted", "upstream_error")
    );
    assert!(e.input_tokens > 0);
    srv.shutdown().await;
}

#[tokio::test]
async fn the_ledger_records_whether_the_provider_or_the_gateway_counted() {
    let env = TestEnv::new().await;
    let (_, key) = env.simple_tenant(Limits::default()).await;
    let srv = env.server().await;
    let url = format!("http://{}/v1/chat/completions", srv.addr);
    let with = post(
        &url,
        &key,
        &stream_body("hello [mock:output_tokens=20]", 100),
    )
    .await;
    let with_id = with.headers()["x-request-id"].to_str().unwrap().to_string();
    events(with).await;
    let without = post(
        &url,
        &key,
        &stream_body("hello [mock:output_tokens=20] [mock:no_usage]", 100),
    )
    .await;
    let without_id = without.headers()["x-request-id"]
        .to_str()
        .unwrap()
        .to_string();
    events(without).await;
    let plain = post(&url, &key, &chat_body("hello [mock:no_usage]", Some(10))).await;
    let plain_id = plain.headers()["x-request-id"]
        .to_str()
        .unwrap()
        .to_string();

    let month = this_month();
    assert!(
        eventually(Duration::from_secs(5), || async {
            env.ledger_tokens("t", &month).await.1 == 3
        })
        .await
    );
    let e = env.usage_event(&with_id).await.unwrap();
    assert_eq!((e.usage_source.as_str(), e.output_tokens), ("provider", 20));
    let e = env.usage_event(&without_id).await.unwrap();
    assert_eq!((e.usage_source.as_str(), e.output_tokens), ("counted", 20));
    let e = env.usage_event(&plain_id).await.unwrap();
    assert_eq!(
        (e.usage_source.as_str(), e.output_tokens),
        ("estimated", 10)
    );
    srv.shutdown().await;
}

#[tokio::test]
async fn a_large_max_tokens_is_clamped_to_the_budget_when_the_tenant_allows_it() {
    let env = TestEnv::new().await;
    env.model("gpt-4o-mini", "chat", 150_000, 600_000).await;
    env.tenant_with_policy(
        "t",
        Limits {
            monthly_tokens: Some(1000),
            ..Default::default()
        },
        None,
        true,
    )
    .await;
    env.app("t", "a", Limits::default()).await;
    let (_, key) = env.key("t", "a", Limits::default()).await;
    env.tenant(
        "strict",
        Limits {
            monthly_tokens: Some(1000),
            ..Default::default()
        },
        None,
    )
    .await;
    env.app("strict", "a", Limits::default()).await;
    let (_, strict) = env.key("strict", "a", Limits::default()).await;
    let srv = env.server().await;
    let url = format!("http://{}/v1/chat/completions", srv.addr);

    let r = post(
        &url,
        &key,
        &chat_body("hello [mock:output_tokens=5000]", Some(5000)),
    )
    .await;
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["x-tollgate-decision"], "degrade");
    assert_eq!(
        r.headers()["x-tollgate-reason"],
        "max_tokens_clamped_to_budget"
    );
    let cap = env.mock.snapshot().last_body.unwrap()["max_tokens"]
        .as_i64()
        .unwrap();
    assert!((900..1000).contains(&cap), "clamped to {cap}");
    let month = this_month();
    assert!(
        eventually(Duration::from_secs(5), || async {
            env.ledger_tokens("t", &month).await.0 > 0
        })
        .await
    );
    assert!(env.counters("t", &month).await["t:ut"] <= 1000);

    let r = post(&url, &strict, &chat_body("hello", Some(5000))).await;
    assert_eq!(r.status(), 402);
    assert_eq!(
        r.headers()["x-tollgate-reason"],
        "tenant_monthly_budget_exhausted"
    );
    srv.shutdown().await;
}

/// Four streams at once, each asking for 2,000 tokens of output in the delta
/// field `directive` picks, on a 3,000-token tenant budget. Whatever field
/// the output arrives in, the streams are held slice by slice and cut at
/// the budget: the ledger and what the provider generated stay within the
/// budget plus one slice per concurrent stream (each stream's hold runs at
/// most a slice ahead of what it was counted, and a provider may generate
/// that slice before the cut reaches it).
async fn four_streams_on_a_small_budget(directive: &str) {
    let env = TestEnv::new().await;
    let limit = 3_000;
    let (_, key) = env
        .simple_tenant(Limits {
            monthly_tokens: Some(limit),
            ..Default::default()
        })
        .await;
    let cfg = env.config();
    let streams = 4;
    let bound = streams * cfg.gateway.stream_slice_tokens;
    let srv = env.server_with(cfg).await;
    let url = format!("http://{}/v1/chat/completions", srv.addr);
    let client = reqwest::Client::new();
    let runs = (0..streams).map(|_| {
        let (client, url, key) = (client.clone(), url.clone(), key.clone());
        let mut body = stream_body(
            &format!("hello [mock:output_tokens=2000] [mock:chunk_delay_ms=1] {directive}"),
            2000,
        );
        body["modalities"] = json!(["text", "audio"]);
        body["audio"] = json!({"voice": "alloy", "format": "pcm16"});
        async move {
            let r = client
                .post(url)
                .bearer_auth(key)
                .json(&body)
                .send()
                .await
                .unwrap();
            let status = r.status().as_u16();
            (
                status,
                if status == 200 {
                    events(r).await
                } else {
                    vec![]
                },
            )
        }
    });
    let results = futures::future::join_all(runs).await;
    let mut cut = 0;
    for (status, evs) in &results {
        assert!(*status == 200 || *status == 402, "{status}");
        if *status == 200 {
            assert_eq!(evs.last().unwrap().1, "[DONE]", "{evs:?}");
            if evs.iter().any(|(n, _)| n.as_deref() == Some("error")) {
                assert_eq!(assert_cut_off(evs), "tenant_monthly_budget_exhausted");
                cut += 1;
            }
        }
    }
    let month = this_month();
    assert!(
        eventually(Duration::from_secs(5), || async {
            env.counters("t", &month).await.get("t:ht") == Some(&0)
        })
        .await
    );
    let used = env.counters("t", &month).await["t:ut"];
    assert!(
        eventually(Duration::from_secs(5), || async {
            env.ledger_tokens("t", &month).await.0 == used
        })
        .await
    );
    let ledger = env.ledger_tokens("t", &month).await.0;
    let generated = env.mock.snapshot().completion_tokens as i64;
    eprintln!("{directive}: ledger {ledger}, provider generated {generated} output tokens, {cut} streams cut");
    assert!(
        ledger <= limit + bound,
        "{directive}: ledger {ledger} > {limit} + {bound}"
    );
    assert!(
        generated <= limit + bound,
        "{directive}: the provider generated {generated} output tokens on a {limit}-token budget (+ {bound})"
    );
    assert!(cut > 0, "{directive}: the budget never cut a stream");
    srv.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn four_text_streams_are_cut_at_a_small_budget() {
    four_streams_on_a_small_budget("").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn four_audio_streams_are_cut_at_a_small_budget_like_text() {
    four_streams_on_a_small_budget("[mock:audio]").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_stream_in_an_unknown_delta_field_is_cut_at_a_small_budget() {
    four_streams_on_a_small_budget("[mock:unknown_delta]").await
}
