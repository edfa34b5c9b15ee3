//! `kill -9` one of three gateway processes in the middle of 200 concurrent
//! streams: the other two never stop serving, every request that completed
//! for its client is in the ledger exactly once, and the dead replica's open
//! holds are freed by the reconciler.

use domain::Limits;
use e2e::*;
use futures::StreamExt;
use std::process::Child;
use std::time::Duration;

fn spawn_replica(env: &TestEnv, port: u16, admission: &str) -> Child {
    replica_command(env, port)
        .env("TOLLGATE__GATEWAY__ADMISSION", admission)
        .env("TOLLGATE__GATEWAY__OUTBOX_SWEEP_SECS", "1")
        .env("TOLLGATE__GATEWAY__HEARTBEAT_TTL_SECS", "2")
        // Survival, not latency: three servers and 200 streams share two cores.
        .env("TOLLGATE__REDIS__TIMEOUT_MS", "1000")
        .spawn()
        .expect("tollgate runs")
}

/// The two variants start three processes and 200 streams each: one at a
/// time on a two-core machine.
static HEAVY: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_killed_mid_stream_loses_nothing() {
    let _one = HEAVY.lock().await;
    killed_mid_stream("per_request").await
}

/// The same, with every replica also holding a lease when one is killed:
/// the dead replica's lease is freed like its holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leasing_replica_killed_mid_stream_loses_nothing() {
    let _one = HEAVY.lock().await;
    killed_mid_stream("lease").await
}

async fn killed_mid_stream(admission: &str) {
    let env = TestEnv::new().await;
    let (_, key) = env
        .simple_tenant(Limits {
            monthly_tokens: Some(100_000_000),
            ..Default::default()
        })
        .await;
    let ports = [free_port(), free_port(), free_port()];
    let mut replicas: Vec<Child> = ports
        .iter()
        .map(|p| spawn_replica(&env, *p, admission))
        .collect();
    for p in ports {
        wait_healthy(p).await;
    }

    // Plain requests first: on the lease path each replica now holds a
    // lease (returned after 1 s idle, well after the kill).
    let client = reqwest::Client::new();
    let mut told = 0;
    for i in 0..30 {
        let r = client
            .post(format!(
                "http://127.0.0.1:{}/v1/chat/completions",
                ports[i % 3]
            ))
            .bearer_auth(&key)
            .json(&chat_body("hello", Some(16)))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        told += r.json::<serde_json::Value>().await.unwrap()["usage"]["total_tokens"]
            .as_i64()
            .unwrap();
    }
    // 200 streams of 40 chunks, 25 ms apart (~1 s each), over three replicas.
    let mut body = chat_body(
        "hello [mock:output_tokens=40] [mock:chunk_delay_ms=25]",
        Some(40),
    );
    body["stream"] = serde_json::json!(true);
    let streams = (0..200).map(|i| {
        let (client, key, body) = (client.clone(), key.clone(), body.clone());
        let port = ports[i % 3];
        async move {
            let r = client
                .post(format!("http://127.0.0.1:{port}/v1/chat/completions"))
                .bearer_auth(key)
                .json(&body)
                .send()
                .await;
            let Ok(r) = r else {
                return (i % 3, None, false);
            };
            let rid = r
                .headers()
                .get("x-request-id")
                .map(|v| v.to_str().unwrap().to_string());
            let mut text = String::new();
            let mut s = r.bytes_stream();
            let mut clean = true;
            while let Some(b) = s.next().await {
                match b {
                    Ok(b) => text.push_str(&String::from_utf8_lossy(&b)),
                    Err(_) => {
                        clean = false;
                        break;
                    }
                }
            }
            let completed = clean
                && text.trim_end().ends_with("data: [DONE]")
                && !text.contains("event: error");
            (i % 3, rid, completed)
        }
    });
    let run = tokio::spawn(futures::future::join_all(streams));
    tokio::time::sleep(Duration::from_millis(400)).await;
    replicas[0].kill().unwrap(); // SIGKILL: no drain, no settle, no goodbye
    replicas[0].wait().unwrap();
    let results = run.await.unwrap();

    for (replica, rid, completed) in &results {
        if *replica != 0 {
            assert!(completed, "replica {replica} stopped serving ({rid:?})");
        }
    }
    let completed: Vec<&String> = results
        .iter()
        .filter(|r| r.2)
        .filter_map(|r| r.1.as_ref())
        .collect();
    assert!(
        completed.len() >= 133,
        "only {} streams completed",
        completed.len()
    );
    let broken = results.iter().filter(|r| r.0 == 0 && !r.2).count();
    assert!(broken > 0, "the kill came too late to break any stream");

    // The dead replica's heartbeat (2 s TTL) lapses; the reconciler then
    // closes its orphaned holds, as it would within minutes in production.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let later = chrono::Utc::now() + chrono::Duration::minutes(3);
    let report = server::commands::stale_holds(&env.config(), Some(&later.to_rfc3339()))
        .await
        .unwrap();
    assert!(report.closed_orphaned as usize >= 1, "{report:?}");
    assert_eq!(report.closed_stale, 0);
    match admission {
        "lease" => assert!(report.leases_expired >= 1, "{report:?}"),
        _ => assert_eq!(report.leases_expired, 0, "{report:?}"),
    }

    let month = this_month();
    let settled = eventually(Duration::from_secs(15), || async {
        let c = env.counters("t", &month).await;
        c.get("t:ht") == Some(&0) && c.get("t:ut") == Some(&env.ledger_tokens("t", &month).await.0)
    })
    .await;
    assert!(
        settled,
        "holds left or books apart: {:?}",
        env.counters("t", &month).await
    );
    for rid in &completed {
        let e = env.usage_event(rid).await;
        assert!(
            e.is_some_and(|e| e.status == "ok"),
            "completed request {rid} is not in the ledger as ok"
        );
    }
    // The plain requests, served before the kill, are booked as told.
    let plain: i64 = sqlx::query_scalar(
        "SELECT COALESCE(SUM(input_tokens + output_tokens), 0)::BIGINT FROM usage_events WHERE NOT stream AND status = 'ok'",
    )
    .fetch_one(env.store.pool())
    .await
    .unwrap();
    assert_eq!(plain, told);
    let q = quota::QuotaEngine::new(&env.redis_url, &env.prefix, Duration::from_secs(1), "check")
        .unwrap();
    assert_eq!(
        q.inflight("t", "t").await.unwrap(),
        0,
        "in-flight slots leaked"
    );
    for mut r in replicas.into_iter().skip(1) {
        let _ = r.kill();
        let _ = r.wait();
    }
}
