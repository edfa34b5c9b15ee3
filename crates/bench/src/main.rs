//! Stream timing for scripts/bench.sh: time to first event (TTFT) and the
//! gaps between events of SSE streams, at a fixed concurrency. Run it once
//! against the upstream directly and once through tollgate; the difference
//! is what the gateway adds.

use clap::Parser;
use futures::StreamExt;
use std::time::{Duration, Instant};
use tollgate_bench::pct;

#[derive(Parser)]
struct Args {
    /// Full URL of a chat completions endpoint.
    #[arg(long)]
    url: String,
    #[arg(long, default_value = "sk-direct")]
    key: String,
    #[arg(long, default_value_t = 60)]
    requests: usize,
    #[arg(long, default_value_t = 10)]
    concurrency: usize,
    /// Chunks per stream and the upstream's delay between them (mock directives).
    #[arg(long, default_value_t = 64)]
    chunks: u32,
    #[arg(long, default_value_t = 20)]
    chunk_delay_ms: u64,
}

struct One {
    ttft: Duration,
    gaps: Vec<Duration>,
    events: usize,
}

async fn one(
    client: &reqwest::Client,
    a: &Args,
    chunks: u32,
    chunk_delay_ms: u64,
) -> anyhow::Result<One> {
    let body = serde_json::json!({
        "model": "gpt-4o-mini",
        "stream": true,
        "max_tokens": chunks,
        "messages": [{"role": "user", "content": format!(
                        "stream please [mock:output_tokens={chunks}] [mock:chunk_delay_ms={chunk_delay_ms}]")}],
    });
    let t0 = Instant::now();
    let r = client
        .post(&a.url)
        .bearer_auth(&a.key)
        .json(&body)
        .send()
        .await?;
    anyhow::ensure!(r.status().is_success(), "status {}", r.status());
    let mut s = r.bytes_stream();
    let (mut ttft, mut last, mut gaps, mut events) = (None, t0, Vec::new(), 0);
    while let Some(b) = s.next().await {
        let b = b?;
        let now = Instant::now();
        let n = b.windows(6).filter(|w| w == b"data: ").count();
        if n == 0 {
            continue;
        }
        if ttft.is_none() {
            ttft = Some(now - t0);
        } else {
            gaps.push(now - last);
        }
        last = now;
        events += n;
    }
    Ok(One {
        ttft: ttft.unwrap_or_default(),
        gaps,
        events,
    })
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let a = Args::parse();
    let client = reqwest::Client::builder().tcp_nodelay(true).build()?;
    // Warm the connection pool and both ends.
    one(&client, &a, 2, 0).await?;
    let results: Vec<anyhow::Result<One>> = futures::stream::iter(0..a.requests)
        .map(|_| one(&client, &a, a.chunks, a.chunk_delay_ms))
        .buffer_unordered(a.concurrency)
        .collect()
        .await;
    let mut ttft = Vec::new();
    let mut gaps = Vec::new();
    let mut errors = 0;
    let mut why: std::collections::BTreeMap<String, usize> = Default::default();
    let mut events = 0;
    for r in results {
        match r {
            Ok(o) => {
                ttft.push(o.ttft);
                gaps.extend(o.gaps);
                events += o.events;
            }
            Err(e) => {
                errors += 1;
                *why.entry(format!("{e:#}")).or_default() += 1;
            }
        }
    }
    // What failed, on stderr: the report line on stdout stays machine-readable.
    for (e, n) in &why {
        eprintln!("{n}x error: {e}");
    }
    println!(
        "ttft_p50_us={:.0} ttft_p99_us={:.0} gap_p50_us={:.0} gap_p99_us={:.0} streams={} events={} errors={}",
        pct(&mut ttft, 0.50),
        pct(&mut ttft, 0.99),
        pct(&mut gaps, 0.50),
        pct(&mut gaps, 0.99),
        ttft.len(),
        events,
        errors
    );
    Ok(())
}
