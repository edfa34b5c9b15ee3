//! The isolation benchmark for scripts/bench.sh (docs/design.md §7, docs/fair.md):
//! tenant B sends steady sequential traffic through the gateway, first
//! alone, then while tenant A floods far past its in-flight limit. Prints
//! B's latency in both phases, the p99 change, B's failures and what A got
//! (served, queued, refused by reason).
//!
//! The phases alternate over several rounds so that a drift in the shared
//! machine's load lands on both alike. A's clients honour `Retry-After`
//! like the OpenAI SDKs do, unless `--ignore-retry-after` (a hot loop).

use clap::Parser;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tollgate_bench::{header, pct};

#[derive(Parser)]
struct Args {
    /// Full URL of the gateway's chat completions endpoint.
    #[arg(long)]
    url: String,
    #[arg(long)]
    a_key: String,
    #[arg(long)]
    b_key: String,
    /// B's requests per phase and round.
    #[arg(long, default_value_t = 300)]
    requests: usize,
    #[arg(long, default_value_t = 5)]
    rounds: usize,
    /// A's concurrent clients.
    #[arg(long, default_value_t = 128)]
    flood: usize,
    /// The mock upstream's latency per request (a directive in the prompt).
    #[arg(long, default_value_t = 20)]
    latency_ms: u64,
    #[arg(long)]
    ignore_retry_after: bool,
}

fn body(latency_ms: u64) -> String {
    serde_json::json!({
        "model": "gpt-4o-mini",
        "max_tokens": 10,
        "messages": [{"role": "user", "content": format!("hello [mock:latency_ms={latency_ms}]")}],
    })
    .to_string()
}

/// B's steady phase: `n` sequential requests; latencies and failures.
async fn steady(
    client: &reqwest::Client,
    a: &Args,
    n: usize,
    body: &str,
) -> (Vec<Duration>, usize, usize) {
    let (mut lat, mut failed, mut not_allowed) = (Vec::with_capacity(n), 0, 0);
    for _ in 0..n {
        let t = Instant::now();
        let r = client
            .post(&a.url)
            .bearer_auth(&a.b_key)
            .header("content-type", "application/json")
            .body(body.to_string())
            .send()
            .await;
        match r {
            Ok(r) if r.status().is_success() => {
                if header(&r, "x-tollgate-decision") != "allow" {
                    not_allowed += 1;
                }
                let _ = r.bytes().await;
                lat.push(t.elapsed());
            }
            _ => failed += 1,
        }
    }
    (lat, failed, not_allowed)
}

/// One of A's clients: loops until `stop`, tallying what it got.
async fn flood_client(
    client: reqwest::Client,
    url: String,
    key: String,
    body: String,
    ignore_retry_after: bool,
    stop: Arc<AtomicBool>,
    tally: Arc<Mutex<BTreeMap<String, u64>>>,
) {
    while !stop.load(Ordering::Relaxed) {
        let r = client
            .post(&url)
            .bearer_auth(&key)
            .header("content-type", "application/json")
            .body(body.clone())
            .send()
            .await;
        let (what, retry) = match r {
            Ok(r) => {
                let status = r.status().as_u16();
                let what = if status == 200 {
                    format!("200 {}", header(&r, "x-tollgate-decision"))
                } else {
                    format!("{status} {}", header(&r, "x-tollgate-reason"))
                };
                let retry: u64 = header(&r, "retry-after").parse().unwrap_or(1);
                let _ = r.bytes().await;
                (what, (status != 200).then_some(retry))
            }
            Err(_) => ("transport error".to_string(), Some(1)),
        };
        *tally.lock().unwrap().entry(what).or_default() += 1;
        if let (Some(secs), false) = (retry, ignore_retry_after) {
            tokio::time::sleep(Duration::from_secs(secs)).await;
        }
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let a = Args::parse();
    let body = body(a.latency_ms);
    let b_client = reqwest::Client::builder().tcp_nodelay(true).build()?;
    let a_client = reqwest::Client::builder()
        .tcp_nodelay(true)
        .pool_max_idle_per_host(a.flood)
        .build()?;
    steady(&b_client, &a, 20, &body).await; // warm-up
    let tally = Arc::new(Mutex::new(BTreeMap::new()));
    let (mut alone, mut busy) = (Vec::new(), Vec::new());
    let (mut failed, mut not_allowed) = (0, 0);
    for _ in 0..a.rounds {
        let (lat, f, n) = steady(&b_client, &a, a.requests, &body).await;
        alone.extend(lat);
        failed += f;
        not_allowed += n;
        let stop = Arc::new(AtomicBool::new(false));
        let clients: Vec<_> = (0..a.flood)
            .map(|_| {
                tokio::spawn(flood_client(
                    a_client.clone(),
                    a.url.clone(),
                    a.a_key.clone(),
                    body.clone(),
                    a.ignore_retry_after,
                    stop.clone(),
                    tally.clone(),
                ))
            })
            .collect();
        // Let the flood fill A's queue before B measures.
        tokio::time::sleep(Duration::from_millis(500)).await;
        let (lat, f, n) = steady(&b_client, &a, a.requests, &body).await;
        busy.extend(lat);
        failed += f;
        not_allowed += n;
        stop.store(true, Ordering::Relaxed);
        for c in clients {
            c.await?;
        }
    }
    let (a50, a99) = (pct(&mut alone, 0.5), pct(&mut alone, 0.99));
    let (b50, b99) = (pct(&mut busy, 0.5), pct(&mut busy, 0.99));
    let tally = tally.lock().unwrap();
    let a_total: u64 = tally.values().sum();
    let answers: Vec<String> = tally
        .iter()
        .map(|(k, v)| format!("{v}× {}", k.trim()))
        .collect();
    println!(
        "b_alone_p50_us={a50:.0} b_alone_p99_us={a99:.0} b_busy_p50_us={b50:.0} b_busy_p99_us={b99:.0} \
         p99_change_pct={:+.1} b_requests={} b_failed={failed} b_not_allowed={not_allowed} a_requests={a_total}",
        (b99 / a99 - 1.0) * 100.0,
        alone.len() + busy.len() + failed,
    );
    println!("a_answers: {}", answers.join(", "));
    Ok(())
}
