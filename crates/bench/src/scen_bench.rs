//! The load scenarios for scripts/bench.sh (docs/benchmarks.md, "Load
//! scenarios"): three tenants (core, standard, batch; `tollgate-dev
//! bench-setup --scenarios`) on one gateway, one scenario per run:
//!
//! - `storm`: tiny prompts, `max_tokens` 1, 256 connections in all;
//! - `long`: batch sends 32k–1M-token prompts while core and standard send
//!   short ones;
//! - `streams`: batch holds 1,000 concurrent streams at mixed speeds while
//!   core and standard send short requests;
//! - `retry`: standard's clients (128) retry every 429/503 at once,
//!   ignoring `Retry-After`, while core and batch send their usual load;
//! - `surge`: standard sends 10× its usual rate;
//! - `all`: every tenant 10× at once on a model pool where core holds a
//!   guarantee.
//!
//! Each tenant's load runs alone first, then all together, in the same run;
//! per tenant and phase it prints requests admitted and refused by reason,
//! p50/p99/p99.9 latency and the gateway's CPU per request, then the
//! scenario's targets, a `BOOKS` line per tenant (what the clients were
//! served, for the books check in scripts/bench.sh) and, with `--svg`, a
//! chart of the per-second p99 of each tenant.

use bytes::Bytes;
use clap::Parser;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tollgate_bench::{header, pct, svg};

#[derive(Parser)]
struct Args {
    /// The gateway's base URL (`http://127.0.0.1:18081`).
    #[arg(long)]
    url: String,
    /// The keys of core, standard and batch, comma-separated.
    #[arg(long)]
    keys: String,
    #[arg(long)]
    scenario: String,
    /// Seconds per phase.
    #[arg(long, default_value_t = 10)]
    dur: u64,
    /// Seconds of the surge phases (`surge`, `all`).
    #[arg(long, default_value_t = 30)]
    surge_dur: u64,
    /// Concurrent streams of the `streams` scenario.
    #[arg(long, default_value_t = 1000)]
    streams: usize,
    /// The gateway's process: its CPU per request and RSS.
    #[arg(long)]
    gw_pid: Option<u32>,
    /// Where to write the chart (SVG).
    #[arg(long)]
    svg: Option<std::path::PathBuf>,
    /// A note for the heading (e.g. the long-input estimate in use).
    #[arg(long, default_value = "")]
    note: String,
    /// The noisy tenant's clients of `long` and `streams` (batch's long
    /// prompts, its 1,000 streams) run on their own two threads at this
    /// nice increment (0: beside the measured clients, same priority).
    /// They stand in for other machines: on one box their own CPU (writing
    /// 6 MB bodies, opening 1,000 connections) would otherwise delay the
    /// measured clients' sends and reads, and the figure would be the
    /// load generator's, not the gateway's.
    #[arg(long, default_value_t = 0)]
    noisy_nice: i32,
}

const TENANTS: [&str; 3] = ["core", "standard", "batch"];
const COLORS: [&str; 3] = ["#1f77b4", "#2ca02c", "#d62728"];
/// Usual rates (requests/s) of core, standard, batch.
const USUAL: [f64; 3] = [20.0, 20.0, 10.0];

#[derive(Clone)]
struct Load {
    tenant: usize,
    conns: usize,
    /// Requests per second over all connections; 0 = as fast as answered.
    rate: f64,
    bodies: Arc<Vec<Bytes>>,
    stream: bool,
    /// Resend every 429/503 at once, ignoring Retry-After.
    hot_retry: bool,
    /// The scenario's noisy load (`--noisy-nice`).
    noisy: bool,
}

/// The runtime of the noisy clients: two threads at `nice`.
fn noisy_runtime(nice: i32) -> &'static tokio::runtime::Runtime {
    static RT: std::sync::OnceLock<tokio::runtime::Runtime> = std::sync::OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("noisy-client")
            .enable_all()
            .on_thread_start(move || {
                // SAFETY: gettid and setpriority only read their arguments;
                // Linux keeps a nice value per thread.
                unsafe {
                    let tid = libc::syscall(libc::SYS_gettid) as libc::id_t;
                    libc::setpriority(libc::PRIO_PROCESS, tid, nice);
                }
            })
            .build()
            .expect("noisy client runtime")
    })
}

struct Rec {
    at: f64,
    lat: Duration,
    status: u16,
    what: String,
    wait_ms: u64,
    tokens: u64,
}

fn short(model: &str, latency_ms: u64, max_tokens: u32) -> Bytes {
    let content = format!("hello, a short question [mock:latency_ms={latency_ms}]");
    serde_json::json!({"model": model, "max_tokens": max_tokens,
        "messages": [{"role": "user", "content": content}]})
    .to_string()
    .into()
}

fn stream_body(chunks: u32, delay_ms: u64) -> Bytes {
    let content =
        format!("stream please [mock:output_tokens={chunks}] [mock:chunk_delay_ms={delay_ms}]");
    serde_json::json!({"model": "gpt-4o-mini", "stream": true, "max_tokens": chunks,
        "stream_options": {"include_usage": true},
        "messages": [{"role": "user", "content": content}]})
    .to_string()
    .into()
}

/// English-like text of about `tokens` o200k tokens (words from a small
/// vocabulary, pseudo-random, with punctuation and numbers).
fn long_text(tokens: usize, seed: u64) -> String {
    const WORDS: [&str; 24] = [
        "the",
        "gateway",
        "budget",
        "tenant",
        "request",
        "stream",
        "quota",
        "ledger",
        "settles",
        "provider",
        "holds",
        "tokens",
        "monthly",
        "refusal",
        "latency",
        "department",
        "reclaim",
        "borrow",
        "priority",
        "fair",
        "queue",
        "model",
        "window",
        "context",
    ];
    let mut out = String::with_capacity(tokens * 6);
    let mut x = seed.wrapping_mul(6364136223846793005) | 1;
    let mut n = 0usize;
    while n < tokens {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let r = (x >> 33) as usize;
        out.push_str(WORDS[r % WORDS.len()]);
        match r % 17 {
            0 => out.push_str(". "),
            1 => out.push_str(&format!(" {} ", r % 10_000)),
            2 => out.push_str(", "),
            _ => out.push(' '),
        }
        n += 1;
    }
    out
}

/// The long prompts (`tokens` each, roughly) and a table of their sizes:
/// bytes, the exact o200k count and the upper bound the gateway holds.
fn long_bodies(sizes: &[usize]) -> (Vec<Bytes>, String) {
    use domain::tokens::{chat_input_tokens, chat_input_tokens_as, Counting, TokenizerFamily};
    let mut bodies = Vec::new();
    let mut table = String::from(
        "| prompt | body bytes | exact tokens (o200k) | upper bound held | bound ÷ exact |\n|---|---|---|---|---|\n",
    );
    for (i, &n) in sizes.iter().enumerate() {
        // ~1.3 o200k tokens per word of this vocabulary (its numbers and
        // punctuation): the labels were 1.6× short before, and the "1M"
        // prompt (1.61M tokens) was past gpt-4.1's window (413).
        let text = format!(
            "{} [mock:latency_ms=20]",
            long_text(n * 10 / 13, i as u64 + 1)
        );
        let msgs = [serde_json::json!({"role": "user", "content": text})];
        let f = TokenizerFamily::O200k;
        let exact = chat_input_tokens(f, &msgs);
        let bound = chat_input_tokens_as(f, &msgs, Counting::UpperBound);
        let body: Bytes = serde_json::json!({"model": "gpt-4.1", "max_tokens": 16,
            "messages": msgs})
        .to_string()
        .into();
        table.push_str(&format!(
            "| ~{}k tokens | {} | {} | {} | {:.2} |\n",
            n / 1000,
            body.len(),
            exact,
            bound,
            bound as f64 / exact as f64
        ));
        bodies.push(body);
    }
    (bodies, table)
}

/// Tokens the client was told it used: the `usage` of a JSON answer or of
/// the last stream event that carries one.
fn usage_tokens(body: &[u8], stream: bool) -> u64 {
    let of = |v: &serde_json::Value| {
        let u = &v["usage"];
        u["prompt_tokens"].as_u64().unwrap_or(0) + u["completion_tokens"].as_u64().unwrap_or(0)
    };
    if !stream {
        return serde_json::from_slice(body).map(|v| of(&v)).unwrap_or(0);
    }
    let text = String::from_utf8_lossy(body);
    text.lines()
        .rev()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter(|l| l.contains("\"usage\""))
        .find_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .map(|v| of(&v))
        .unwrap_or(0)
}

async fn one(
    client: &reqwest::Client,
    url: &str,
    key: &str,
    body: Bytes,
    stream: bool,
    t0: Instant,
) -> Rec {
    let start = Instant::now();
    let at = (start - t0).as_secs_f64();
    let r = client
        .post(url)
        .bearer_auth(key)
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await;
    let mut rec = Rec {
        at,
        lat: Duration::ZERO,
        status: 0,
        what: "transport error".into(),
        wait_ms: 0,
        tokens: 0,
    };
    if let Ok(r) = r {
        rec.status = r.status().as_u16();
        rec.wait_ms = header(&r, "x-tollgate-queue-wait-ms").parse().unwrap_or(0);
        let reason = header(&r, "x-tollgate-reason");
        let decision = header(&r, "x-tollgate-decision");
        let ok = r.status().is_success();
        match r.bytes().await {
            Ok(b) if ok => {
                rec.tokens = usage_tokens(&b, stream);
                rec.what = if decision == "allow" || decision.is_empty() {
                    "allow".into()
                } else {
                    format!("{decision} {reason}")
                };
            }
            Ok(b) => {
                let code = serde_json::from_slice::<serde_json::Value>(&b)
                    .ok()
                    .and_then(|v| v["error"]["code"].as_str().map(str::to_string))
                    .unwrap_or(reason);
                rec.what = format!("{} {code}", rec.status);
            }
            Err(_) => rec.what = format!("{} body cut", rec.status),
        }
    }
    rec.lat = start.elapsed();
    rec
}

/// One connection of a load until `deadline`.
#[allow(clippy::too_many_arguments)]
async fn conn(
    client: reqwest::Client,
    url: Arc<String>,
    key: Arc<String>,
    load: Load,
    idx: usize,
    t0: Instant,
    deadline: Instant,
    out: Arc<Mutex<Vec<Rec>>>,
) {
    let interval =
        (load.rate > 0.0).then(|| Duration::from_secs_f64(load.conns as f64 / load.rate));
    let mut next = t0
        + interval.map_or(Duration::ZERO, |i| {
            i.mul_f64(idx as f64 / load.conns as f64)
        });
    let mut i = idx;
    let mut mine = Vec::new();
    while Instant::now() < deadline {
        if let Some(iv) = interval {
            tokio::time::sleep_until(next.into()).await;
            let now = Instant::now();
            next += iv;
            if next + iv < now {
                next = now; // no catch-up burst after a slow answer
            }
            if now >= deadline {
                break;
            }
        }
        loop {
            let body = load.bodies[i % load.bodies.len()].clone();
            i += load.conns;
            let rec = one(&client, &url, &key, body, load.stream, t0).await;
            let again = load.hot_retry && matches!(rec.status, 429 | 503);
            mine.push(rec);
            if !again || Instant::now() >= deadline {
                break;
            }
        }
    }
    out.lock().unwrap().extend(mine);
}

fn cpu_ticks(pid: Option<u32>) -> u64 {
    let Some(pid) = pid else { return 0 };
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            let rest = &s[s.rfind(')')? + 2..];
            let f: Vec<&str> = rest.split_whitespace().collect();
            Some(f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?)
        })
        .unwrap_or(0)
}

fn rss_mb(pid: Option<u32>) -> u64 {
    let Some(pid) = pid else { return 0 };
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))?
                .split_whitespace()
                .nth(1)?
                .parse::<u64>()
                .ok()
        })
        .map_or(0, |kb| kb / 1024)
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

#[derive(Default)]
struct Tally {
    requests: u64,
    admitted: u64,
    answers: BTreeMap<String, u64>,
    lats: Vec<Duration>,
    series: Vec<(f64, f64)>,
    max_wait_ms: u64,
    tokens: u64,
}

impl Tally {
    fn of(recs: &[Rec]) -> Self {
        let mut t = Tally::default();
        let mut per_sec: BTreeMap<u64, Vec<Duration>> = BTreeMap::new();
        for r in recs {
            t.requests += 1;
            *t.answers.entry(r.what.clone()).or_default() += 1;
            if (200..300).contains(&r.status) {
                t.admitted += 1;
                t.lats.push(r.lat);
                t.tokens += r.tokens;
                t.max_wait_ms = t.max_wait_ms.max(r.wait_ms);
                per_sec.entry(r.at as u64).or_default().push(r.lat);
            }
        }
        t.series = per_sec
            .into_iter()
            .map(|(s, mut v)| (s as f64 + 0.5, pct(&mut v, 0.99) / 1000.0))
            .collect();
        t
    }
    fn p(&mut self, q: f64) -> f64 {
        pct(&mut self.lats, q) / 1000.0
    }
    fn refused(&self) -> String {
        let v: Vec<String> = self
            .answers
            .iter()
            .filter(|(k, _)| {
                !k.starts_with("allow") && !k.starts_with("queue") && !k.starts_with("degrade")
            })
            .map(|(k, n)| format!("{n}× {k}"))
            .collect();
        if v.is_empty() {
            "—".into()
        } else {
            v.join(", ")
        }
    }
    fn queued(&self) -> u64 {
        self.answers
            .iter()
            .filter(|(k, _)| k.starts_with("queue"))
            .map(|(_, n)| n)
            .sum()
    }
}

struct Phase {
    name: String,
    secs: f64,
    tallies: BTreeMap<usize, Tally>,
    cpu_us_per_req: f64,
    cpu_cores: f64,
    peak_rss: u64,
}

async fn phase(
    a: &Args,
    name: &str,
    loads: &[Load],
    keys: &[String],
    secs: u64,
) -> anyhow::Result<Phase> {
    let url = Arc::new(format!(
        "{}/v1/chat/completions",
        a.url.trim_end_matches('/')
    ));
    let t0 = Instant::now() + Duration::from_millis(50);
    let deadline = t0 + Duration::from_secs(secs);
    let out: BTreeMap<usize, Arc<Mutex<Vec<Rec>>>> = loads
        .iter()
        .map(|l| (l.tenant, Arc::new(Mutex::new(Vec::new()))))
        .collect();
    let c0 = cpu_ticks(a.gw_pid);
    let mut tasks = Vec::new();
    for l in loads {
        let client = reqwest::Client::builder()
            .tcp_nodelay(true)
            .pool_max_idle_per_host(l.conns)
            .timeout(Duration::from_secs(120))
            .build()?;
        let key = Arc::new(keys[l.tenant].clone());
        let elsewhere = (l.noisy && a.noisy_nice > 0).then(|| noisy_runtime(a.noisy_nice));
        for i in 0..l.conns {
            let c = conn(
                client.clone(),
                url.clone(),
                key.clone(),
                l.clone(),
                i,
                t0,
                deadline,
                out[&l.tenant].clone(),
            );
            tasks.push(match elsewhere {
                Some(rt) => rt.spawn(c),
                None => tokio::spawn(c),
            });
        }
    }
    let mut peak = 0;
    let watch = async {
        loop {
            peak = peak.max(rss_mb(a.gw_pid));
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    };
    let all = futures::future::join_all(tasks);
    tokio::select! {
        _ = watch => unreachable!(),
        r = all => { for t in r { t?; } }
    }
    let elapsed = t0.elapsed().as_secs_f64();
    let ticks = cpu_ticks(a.gw_pid).saturating_sub(c0);
    let tallies: BTreeMap<usize, Tally> = out
        .into_iter()
        .map(|(t, recs)| (t, Tally::of(&recs.lock().unwrap())))
        .collect();
    let n: u64 = tallies.values().map(|t| t.requests).sum();
    // Let streams' settles and the ledger writer finish before the next phase.
    tokio::time::sleep(Duration::from_secs(1)).await;
    Ok(Phase {
        name: name.to_string(),
        secs: elapsed,
        tallies,
        cpu_us_per_req: ticks as f64 * 1e4 / n.max(1) as f64,
        cpu_cores: ticks as f64 / 100.0 / elapsed,
        peak_rss: peak,
    })
}

/// The loads of a scenario (all together) and its phase length.
fn scenario(a: &Args) -> anyhow::Result<(Vec<Load>, u64, Option<String>)> {
    let usual = |tenant: usize, model: &str| Load {
        tenant,
        conns: 4,
        rate: USUAL[tenant],
        bodies: Arc::new(vec![short(model, 20, 10)]),
        stream: false,
        hot_retry: false,
        noisy: false,
    };
    let surge = |tenant: usize, model: &str| Load {
        conns: 16,
        rate: USUAL[tenant] * 10.0,
        ..usual(tenant, model)
    };
    let m = "gpt-4o-mini";
    Ok(match a.scenario.as_str() {
        "storm" => {
            let tiny = Arc::new(vec![short(m, 0, 1)]);
            let l = |tenant, conns| Load {
                tenant,
                conns,
                rate: 0.0,
                bodies: tiny.clone(),
                stream: false,
                hot_retry: false,
                noisy: false,
            };
            (vec![l(0, 128), l(1, 64), l(2, 64)], a.dur, None)
        }
        "long" => {
            let (bodies, table) = long_bodies(&[32_000, 128_000, 512_000, 1_000_000]);
            let long = Load {
                tenant: 2,
                conns: 2,
                rate: 0.0,
                bodies: Arc::new(bodies),
                stream: false,
                hot_retry: false,
                noisy: true,
            };
            (vec![usual(0, m), usual(1, m), long], a.dur, Some(table))
        }
        "streams" => {
            // 60 chunks 50, 100 or 200 ms apart: 3, 6 or 12 s a stream.
            let speeds = [50, 100, 200];
            let bodies = speeds.iter().map(|&d| stream_body(60, d)).collect();
            let streams = Load {
                tenant: 2,
                conns: a.streams,
                rate: 0.0,
                bodies: Arc::new(bodies),
                stream: true,
                hot_retry: false,
                noisy: true,
            };
            (vec![usual(0, m), usual(1, m), streams], a.dur, None)
        }
        "retry" => {
            let hot = Load {
                conns: 128,
                rate: 0.0,
                hot_retry: true,
                ..usual(1, m)
            };
            (vec![usual(0, m), hot, usual(2, m)], a.dur, None)
        }
        "surge" => (
            vec![usual(0, m), surge(1, m), usual(2, m)],
            a.surge_dur,
            None,
        ),
        "all" => {
            let p = "scn-pool";
            let slow = |l: Load| Load {
                bodies: Arc::new(vec![short(p, 50, 10)]),
                ..l
            };
            (
                vec![slow(surge(0, p)), slow(surge(1, p)), slow(surge(2, p))],
                a.surge_dur,
                None,
            )
        }
        other => anyhow::bail!("unknown scenario {other}: storm long streams retry surge all"),
    })
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let a = Args::parse();
    let keys: Vec<String> = a.keys.split(',').map(str::to_string).collect();
    anyhow::ensure!(keys.len() == 3, "--keys: core,standard,batch");
    let (loads, secs, extra) = scenario(&a)?;
    let load0 = loadavg();
    // Warm-up: every tenant once. Its answers are served like any other,
    // so they count in the books (not in the phases' latencies).
    let warm = reqwest::Client::new();
    let mut warm_books = [(0u64, 0u64); 3];
    for (t, k) in keys.iter().enumerate() {
        let r = one(
            &warm,
            &format!("{}/v1/chat/completions", a.url),
            k,
            short("gpt-4o-mini", 0, 1),
            false,
            Instant::now(),
        )
        .await;
        if (200..300).contains(&r.status) {
            warm_books[t] = (1, r.tokens);
        }
    }
    let mut phases = Vec::new();
    for l in &loads {
        phases.push(
            phase(
                &a,
                &format!("{} alone", TENANTS[l.tenant]),
                std::slice::from_ref(l),
                &keys,
                secs,
            )
            .await?,
        );
    }
    phases.push(phase(&a, "together", &loads, &keys, secs).await?);
    let load1 = loadavg();
    let stamp = chrono_now();
    println!(
        "### {} — {stamp}, {secs} s per phase, load average {load0} (start) / {load1} (end){}",
        a.scenario,
        if a.note.is_empty() {
            String::new()
        } else {
            format!(", {}", a.note)
        }
    );
    println!();
    if let Some(t) = &extra {
        println!("{t}");
    }
    println!("| tenant | phase | requests | admitted (queued) | refused, by reason | p50 ms | p99 ms | p99.9 ms | p99 vs alone | admitted/s | gateway CPU µs/request | gateway cores |");
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|");
    let mut alone_p99 = BTreeMap::new();
    let n = phases.len();
    for (pi, ph) in phases.iter_mut().enumerate() {
        let (cpu, cores) = (ph.cpu_us_per_req, ph.cpu_cores);
        for (&t, tally) in ph.tallies.iter_mut() {
            let (p50, p99, p999) = (tally.p(0.5), tally.p(0.99), tally.p(0.999));
            let vs = if pi == n - 1 {
                alone_p99.get(&t).map_or(String::new(), |a: &f64| {
                    format!("{:+.1} %", (p99 / a - 1.0) * 100.0)
                })
            } else {
                alone_p99.insert(t, p99);
                String::new()
            };
            println!(
                "| {} | {} | {} | {} ({}) | {} | {p50:.1} | {p99:.1} | {p999:.1} | {vs} | {:.1} | {cpu:.0} | {cores:.2} |",
                TENANTS[t], ph.name, tally.requests, tally.admitted, tally.queued(), tally.refused(),
                tally.admitted as f64 / ph.secs,
            );
        }
    }
    println!();
    targets(&a, &phases, &alone_p99);
    for (t, name) in TENANTS.iter().enumerate() {
        let (adm, tok) = phases
            .iter()
            .filter_map(|p| p.tallies.get(&t))
            .fold(warm_books[t], |(a, b), x| (a + x.admitted, b + x.tokens));
        println!("BOOKS tenant=scn-{name} admitted={adm} tokens={tok}");
    }
    if let Some(path) = &a.svg {
        let together = phases.last().expect("a together phase");
        let series: Vec<svg::Series> = together
            .tallies
            .iter()
            .map(|(&t, tally)| svg::Series {
                name: TENANTS[t].to_string(),
                color: COLORS[t].to_string(),
                points: tally.series.clone(),
                reference: alone_p99.get(&t).copied(),
            })
            .collect();
        let title = format!(
            "{}: per-second p99 latency, together (dashed: p99 alone)",
            a.scenario
        );
        std::fs::write(path, svg::chart(&title, "seconds", "p99 ms (log)", &series))?;
    }
    Ok(())
}

fn chrono_now() -> String {
    let out = std::process::Command::new("date")
        .args(["-u", "+%F %H:%M UTC"])
        .output();
    out.map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default()
}

/// The scenario's targets, each met or not, with the figures that decide.
fn targets(a: &Args, phases: &[Phase], alone: &BTreeMap<usize, f64>) {
    let together = phases.last().expect("a together phase");
    let change = |t: usize| {
        let mut v = together
            .tallies
            .get(&t)
            .map(|x| x.lats.clone())
            .unwrap_or_default();
        let p = pct(&mut v, 0.99) / 1000.0;
        alone.get(&t).map_or(f64::NAN, |a| (p / a - 1.0) * 100.0)
    };
    let verdict = |ok: bool| if ok { "met" } else { "NOT met" };
    let within = |tenants: &[usize], pct_max: f64| {
        for &t in tenants {
            let c = change(t);
            println!(
                "- TARGET {}'s p99 within {pct_max} % of alone: {c:+.1} % — {}",
                TENANTS[t],
                verdict(c <= pct_max)
            );
        }
    };
    match a.scenario.as_str() {
        "storm" => {
            let all: f64 = together
                .tallies
                .values()
                .map(|t| t.admitted as f64)
                .sum::<f64>()
                / together.secs;
            println!("- storm: {all:.0} admitted/s in all together; gateway CPU {:.0} µs per request ({:.2} cores)", together.cpu_us_per_req, together.cpu_cores);
        }
        "long" => within(&[0, 1], 10.0),
        "streams" => {
            within(&[0, 1], 10.0);
            println!(
                "- streams: peak gateway RSS {} MB with {} concurrent streams",
                together.peak_rss, a.streams
            );
        }
        "retry" => {
            within(&[0, 2], 10.0);
            // CPU per refusal: the hot tenant alone, less what its admitted
            // requests cost at the rate core's alone phase measured.
            let hot = phases.iter().find(|p| p.name == "standard alone");
            let core = phases.iter().find(|p| p.name == "core alone");
            if let (Some(h), Some(c)) = (hot, core) {
                let t = &h.tallies[&1];
                let refused = (t.requests - t.admitted).max(1) as f64;
                let total_us = h.cpu_us_per_req * t.requests as f64;
                let per_refusal =
                    (total_us - c.cpu_us_per_req * t.admitted as f64).max(0.0) / refused;
                println!(
                    "- TARGET CPU per refusal far below an admitted request's: {per_refusal:.0} µs vs {:.0} µs — {}",
                    c.cpu_us_per_req,
                    verdict(per_refusal * 4.0 <= c.cpu_us_per_req)
                );
                println!(
                    "- refusals paced: {:.0} refusals/s to 128 hot connections ({:.1} per connection per second) alone, {:.0}/s together",
                    refused / h.secs,
                    refused / h.secs / 128.0,
                    together.tallies[&1].requests.saturating_sub(together.tallies[&1].admitted) as f64 / together.secs
                );
            }
        }
        "surge" => {
            let t = &together.tallies[&1];
            let limited: u64 = t
                .answers
                .iter()
                .filter(|(k, _)| k.contains("tenant_"))
                .map(|(_, n)| n)
                .sum();
            println!(
                "- TARGET standard's own limits bind, with their reason codes: {} — {}",
                t.answers
                    .iter()
                    .map(|(k, n)| format!("{n}× {k}"))
                    .collect::<Vec<_>>()
                    .join(", "),
                verdict(limited > 0)
            );
            within(&[0, 2], 5.0);
        }
        "all" => {
            let core = &together.tallies[&0];
            let batch = &together.tallies[&2];
            let count = |t: &Tally, what: &str| -> u64 {
                t.answers
                    .iter()
                    .filter(|(k, _)| k.contains(what))
                    .map(|(_, n)| n)
                    .sum()
            };
            // The guarantee: 3 of the pool's 6 slots are core's whenever it
            // wants them: at 50 ms a request, at least 60 requests/s (or all
            // it asked for), whatever the others send.
            let secs = together.secs;
            let (served, asked) = (core.admitted as f64 / secs, core.requests as f64 / secs);
            let floor = 0.9 * (3.0 / 0.050_f64).min(asked);
            println!(
                "- TARGET core keeps its guarantee (3 of 6 pool slots, ≥ {floor:.0} req/s): served {served:.1}/s of {asked:.1}/s asked; {} queued for the pool, {} refused for it or timed out, longest wait {} ms — {}",
                count(core, "queue model_pool_full"),
                count(core, "503") + count(core, "429 model_pool_full"),
                core.max_wait_ms,
                verdict(served >= floor)
            );
            let timeouts = count(batch, "queue_timeout");
            println!(
                "- TARGET batch not starved: {} served ({:.1}/s), longest queue wait {} ms (max wait 60000), {timeouts} queue timeouts — {}",
                batch.admitted,
                batch.admitted as f64 / together.secs,
                batch.max_wait_ms,
                verdict(batch.admitted > 0 && batch.max_wait_ms <= 60_000 && timeouts == 0)
            );
        }
        _ => {}
    }
    println!();
}
