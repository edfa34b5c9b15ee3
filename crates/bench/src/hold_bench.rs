//! Hold-engine micro-benchmark for scripts/bench.sh: hold + settle pairs per
//! second against a real Redis, with every limit kind set on tenant, app and
//! key (so every check runs), and Redis's own time per script call from
//! `INFO commandstats`.
//!
//! - `sequential`: N clients, each on its own connection, one call at a time
//!   (no pipelining): round-trip bound.
//! - `pipelined`: N tasks sharing one multiplexed connection, whose calls
//!   redis-rs pipelines: bound by Redis's single thread.
//! - `lease`: N tasks admitting from leases and settling in batches (the
//!   gateway's lease path): one script per chunk and per batch, not per
//!   request.
//!
//! Keys live under a fresh prefix and are deleted afterwards.

use clap::Parser;
use domain::Limits;
use quota::{
    HoldOutcome, HoldRequest, LeaseAdmit, LeaseBook, LeaseTuning, LedgerSource, QuotaEngine,
    ScopeUsage, SettleRequest,
};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(Parser)]
struct Args {
    #[arg(long, default_value = "redis://127.0.0.1:6379")]
    redis: String,
    #[arg(long, default_value_t = 3)]
    seconds: u64,
    /// Runs as MODE:CLIENTS, comma-separated.
    #[arg(
        long,
        default_value = "sequential:1,sequential:16,pipelined:16,pipelined:64,lease:16,lease:64"
    )]
    runs: String,
}

struct NoLedger;
impl LedgerSource for NoLedger {
    async fn month_usage(&self, _t: &str, _m: &str) -> Result<Vec<ScopeUsage>, String> {
        Ok(vec![])
    }
}

fn limits() -> Limits {
    Limits {
        monthly_tokens: Some(i64::MAX / 4),
        monthly_cost_usd: Some(domain::MicroUsd(i64::MAX / 4)),
        max_inflight: Some(1_000_000),
        rpm: Some(1_000_000_000),
        input_tpm: Some(1_000_000_000_000),
        output_tpm: Some(1_000_000_000_000),
        ..Default::default()
    }
}

const EVENT: &str = r#"{"request_id":"req_0192f4c1a0b07c3e9d2a1b4c5d6e7f80","tenant_id":"bench","app_id":"bench-app","key_id":"7c9e6679-7425-40de-944b-e07fc1f90ae7","model":"gpt-4o-mini","period":"2026-11","day":"2026-11-29","input_tokens":14,"output_tokens":9,"cost_micro":8,"est_tokens":78,"est_cost_micro":41,"overrun_tokens":0,"overrun_cost_micro":0,"status":"ok","stream":false,"usage_source":"provider","replica":"bench-1","started_at_ms":1764400000000,"settled_at_ms":1764400000001}"#;

struct Run {
    mode: String,
    clients: usize,
    pairs: u64,
    secs: f64,
    script_calls: u64,
    usec_per_call: f64,
}

async fn commandstats(url: &str) -> anyhow::Result<(u64, f64)> {
    let mut c = redis::Client::open(url)?
        .get_multiplexed_async_connection()
        .await?;
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(&mut c)
        .await?;
    let (mut calls, mut usec) = (0u64, 0f64);
    for line in info.lines() {
        let Some(rest) = line
            .strip_prefix("cmdstat_evalsha:")
            .or_else(|| line.strip_prefix("cmdstat_eval:"))
        else {
            continue;
        };
        for kv in rest.split(',') {
            match kv.split_once('=') {
                Some(("calls", v)) => calls += v.parse::<u64>().unwrap_or(0),
                Some(("usec", v)) => usec += v.parse::<f64>().unwrap_or(0.0),
                _ => {}
            }
        }
    }
    Ok((calls, usec))
}

async fn cleanup(url: &str, prefix: &str) -> anyhow::Result<()> {
    let mut c = redis::Client::open(url)?
        .get_multiplexed_async_connection()
        .await?;
    let mut cursor = 0u64;
    loop {
        let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(format!("{prefix}:*"))
            .arg("COUNT")
            .arg(1000)
            .query_async(&mut c)
            .await?;
        if !keys.is_empty() {
            redis::cmd("UNLINK")
                .arg(&keys)
                .query_async::<()>(&mut c)
                .await?;
        }
        if next == 0 {
            return Ok(());
        }
        cursor = next;
    }
}

async fn pair(q: &QuotaEngine, book: Option<&LeaseBook>, rid: &str, l: &Limits) -> bool {
    let hold = HoldRequest {
        budgets: &[],
        request_id: rid,
        tenant: "bench",
        app: "bench-app",
        key: "bench-key",
        month: "2026-11",
        est_input: 14,
        est_output: 64,
        est_cost: 41,
        model: "gpt-4o-mini",
        limits: [l, l, l],
    };
    if let Some(book) = book {
        if let Ok(LeaseAdmit::Admitted { .. }) = book.admit(&hold, &NoLedger).await {
            let actual = domain::lease::Need {
                input: 14,
                output: 9,
                cost: 8,
            };
            if let Some(rx) = book.settle(rid, actual, EVENT.to_string()) {
                return rx.await.is_ok();
            }
        }
        return false;
    }
    if !matches!(
        q.hold(&hold, &NoLedger).await,
        Ok(HoldOutcome::Admitted { .. })
    ) {
        return false;
    }
    let settle = SettleRequest {
        request_id: rid,
        tenant: "bench",
        app: "bench-app",
        key: "bench-key",
        month: "2026-11",
        input_tokens: 14,
        output_tokens: 9,
        cost: 8,
        event_json: EVENT,
        status: "ok",
        limits: [l, l, l],
        bound: domain::usage::Bound::SAFE,
    };
    q.settle(&settle).await.is_ok()
}

async fn run(url: &str, mode: &str, clients: usize, secs: u64) -> anyhow::Result<Run> {
    let prefix = format!("tghb{}", std::process::id());
    let engine = |i: usize| {
        QuotaEngine::new(url, &prefix, Duration::from_secs(2), &format!("hb-{i}")).map(Arc::new)
    };
    let shared = engine(0)?;
    let book = (mode == "lease").then(|| LeaseBook::start(shared.clone(), LeaseTuning::default()));
    let l = Arc::new(limits());
    // Warm up: month rebuilt, scripts loaded.
    pair(&shared, None, "warm", &l).await;
    let (calls0, usec0) = commandstats(url).await?;
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicU64::new(0));
    let t0 = Instant::now();
    let mut tasks = Vec::new();
    for c in 0..clients {
        let q = match mode {
            "sequential" => engine(c + 1)?,
            _ => shared.clone(),
        };
        let (stop, done, book, l) = (stop.clone(), done.clone(), book.clone(), l.clone());
        tasks.push(tokio::spawn(async move {
            let mut i = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let rid = format!("r{c}-{i}");
                if pair(&q, book.as_deref(), &rid, &l).await {
                    done.fetch_add(1, Ordering::Relaxed);
                }
                i += 1;
            }
        }));
    }
    tokio::time::sleep(Duration::from_secs(secs)).await;
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        let _ = t.await;
    }
    let elapsed = t0.elapsed().as_secs_f64();
    if let Some(b) = &book {
        b.shutdown(Duration::from_secs(5)).await;
    }
    let (calls1, usec1) = commandstats(url).await?;
    cleanup(url, &prefix).await?;
    let calls = calls1.saturating_sub(calls0);
    Ok(Run {
        mode: mode.to_string(),
        clients,
        pairs: done.load(Ordering::Relaxed),
        secs: elapsed,
        script_calls: calls,
        usec_per_call: if calls > 0 {
            (usec1 - usec0) / calls as f64
        } else {
            0.0
        },
    })
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let a = Args::parse();
    let mut runs = Vec::new();
    for spec in a.runs.split(',') {
        let (mode, n) = spec
            .split_once(':')
            .ok_or_else(|| anyhow::anyhow!("run {spec:?} is not MODE:CLIENTS"))?;
        anyhow::ensure!(
            ["sequential", "pipelined", "lease"].contains(&mode),
            "unknown mode {mode}"
        );
        runs.push(run(&a.redis, mode, n.parse()?, a.seconds).await?);
    }
    println!("| hold engine | clients | hold+settle pairs/s | script calls per pair | Redis µs per script call | Redis µs per pair |");
    println!("|---|---|---|---|---|---|");
    for r in runs {
        let per_pair = r.script_calls as f64 / r.pairs.max(1) as f64;
        println!(
            "| {} | {} | {:.0} | {:.3} | {:.1} | {:.2} |",
            r.mode,
            r.clients,
            r.pairs as f64 / r.secs,
            per_pair,
            r.usec_per_call,
            r.usec_per_call * per_pair
        );
    }
    Ok(())
}
