//! Isolation (docs/design.md §7): tenant A floods at many times its share while
//! tenant B runs steady traffic; all of B's requests succeed untouched and
//! A's are queued or refused with reason codes.
//!
//! B's latency under A's flood is measured by `scripts/bench.sh` (the
//! isolation section; the gateway as a release build in its own process),
//! not asserted here: this machine is shared and noisy.

mod fair_common;

use domain::Limits;
use e2e::*;
use fair_common::*;
use std::time::{Duration, Instant};

async fn setup() -> (TestEnv, String, String, server::app::Running) {
    let env = TestEnv::new().await;
    env.model("gpt-4o-mini", "chat", 150_000, 600_000).await;
    let two = Limits {
        max_inflight: Some(2),
        ..Default::default()
    };
    let a = tenant(&env, "a", "standard", two.clone(), None).await;
    let b = tenant(&env, "b", "standard", two, None).await;
    let mut cfg = config(&env);
    cfg.fair.queue_max_per_tenant = 8;
    let srv = env.server_with(cfg).await;
    (env, a, b, srv)
}

#[tokio::test]
async fn a_flooding_tenant_is_queued_or_refused_while_another_is_untouched() {
    let (_env, a, b, srv) = setup().await;
    let url = format!("http://{}/v1/chat/completions", srv.addr);
    // A: 40 concurrent requests against an in-flight limit of 2.
    let mut flood = Vec::new();
    for _ in 0..40 {
        let (url, a) = (url.clone(), a.clone());
        flood.push(tokio::spawn(async move {
            let r = post(&url, &a, &body("[mock:latency_ms=150]", 10)).await;
            (r.status().as_u16(), decision(&r), reason(&r))
        }));
    }
    // Until A's queue is full (2 in flight, 8 waiting): on a loaded machine
    // the 40 requests take a while to arrive.
    assert!(
        eventually(Duration::from_secs(10), || async {
            srv.gateway.queue().full_for("a", None).is_some()
        })
        .await,
        "A's queue fills"
    );
    // A's queue is full now: A's next request is refused before its body
    // is even parsed (this one is not JSON), and the answer is paced by
    // fair.refusal_delay_ms (100 ms by default) so that a client that
    // ignores Retry-After cannot turn refusals into a CPU-bound loop.
    let t = Instant::now();
    let r = reqwest::Client::new()
        .post(&url)
        .bearer_auth(&a)
        .header("content-type", "application/json")
        .body("{not json")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 429);
    assert_eq!(reason(&r), "tenant_queue_full");
    assert_eq!(r.headers()["retry-after"], "1");
    assert!(
        t.elapsed() >= Duration::from_millis(100),
        "{:?}",
        t.elapsed()
    );
    let e: serde_json::Value = r.json().await.unwrap();
    assert!(
        e["error"]["message"]
            .as_str()
            .unwrap()
            .contains("requests waiting on this replica"),
        "{e}"
    );
    // B: steady traffic within its own limit.
    for _ in 0..15 {
        let r = post(&url, &b, &body("[mock:latency_ms=20]", 10)).await;
        assert_eq!(r.status(), 200, "{}", reason(&r));
        assert_eq!(decision(&r), "allow");
    }
    let (mut queued, mut full, mut timeout) = (0, 0, 0);
    for h in flood {
        let (status, decision, reason) = h.await.unwrap();
        match (status, reason.as_str()) {
            (200, _) => queued += usize::from(decision == "queue"),
            (429, "tenant_queue_full") => full += 1,
            (503, "queue_timeout") => timeout += 1,
            other => panic!("unexpected answer to A: {other:?}"),
        }
    }
    assert!(queued > 0, "some of A's requests waited for a slot");
    assert!(full > 0, "A's queue filled up: {full} refused");
    let _ = timeout;
    // Queue depth and wait time are in /metrics.
    let m = metrics(srv.addr).await;
    assert!(m.contains("tollgate_queue_depth{tenant=\"a\"}"), "{m}");
    assert!(
        m.lines()
            .any(|l| l.starts_with("tollgate_queue_wait_seconds_bucket")
                && l.contains("outcome=\"admitted\"")
                && l.contains("priority=\"standard\"")),
        "{m}"
    );
    srv.shutdown().await;
}
