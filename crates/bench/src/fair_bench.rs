//! The fairness benchmark (`scripts/bench_fair.sh`, docs/fair.md,
//! "Fairness, measured"): a month of a dozen tenants compressed into a
//! minute and a half, replayed against the gateway on the mock upstream,
//! then judged from the records alone.
//!
//! - `plan` prints the tenants' spec (JSON, for `tollgate-dev bench-setup
//!   --fair`): budgets sized from the month's offered load, so that some
//!   tenants stay well inside theirs and the bursty ones run past it and
//!   borrow, and a pool that is tight by the end of the month.
//! - `replay` sends the month (diurnal load, weekends, random bursts, long
//!   prompts, streams, a month-end rush) open-loop and writes one line per
//!   request (`--out`): the request id, the tenant, what it was answered,
//!   and what the client knows of its size (the output it asked the mock
//!   for, the usage it was told); `--iso` instead runs each tenant's steady
//!   load alone, then all together, and prints p50/p99 of each.
//! - `judge` reads that log and what scripts/bench_fair.sh copied out of
//!   PostgreSQL (the ledger, the decision log, borrows, reclaims, the
//!   tenants' limits and the pool) and computes the figures from them
//!   alone — nothing of the gateway's deciding code is called: false
//!   refusals by cause, borrow hit rate, reclaim on time, tokens served,
//!   and each admitted request's bill against the client's usage.

use bytes::Bytes;
use clap::{Parser, Subcommand};
use std::collections::{BTreeMap, HashMap};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tollgate_bench::{header, pct, svg};

#[derive(Parser)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(clap::Args, Clone)]
struct Month {
    /// Seed of the month's random draws (arrivals, bursts, sizes).
    #[arg(long, default_value_t = 4)]
    seed: u64,
    /// Days of the month.
    #[arg(long, default_value_t = 30)]
    days: u32,
    /// Seconds one day of the month takes.
    #[arg(long, default_value_t = 3.0)]
    day_secs: f64,
    /// Every tenant's request rate, times this.
    #[arg(long, default_value_t = 2.0)]
    rate_scale: f64,
}

#[derive(Subcommand)]
enum Cmd {
    /// The tenants' spec for `tollgate-dev bench-setup --fair`.
    Plan {
        #[command(flatten)]
        month: Month,
        /// `on` (borrowing), `off` (nobody may borrow, same budgets) or
        /// `iso` (budgets out of reach: the isolation phases).
        #[arg(long, default_value = "on")]
        mode: String,
    },
    /// Sends the month (or, with --iso, the isolation phases).
    Replay {
        #[command(flatten)]
        month: Month,
        /// The gateway's base URL.
        #[arg(long)]
        url: String,
        /// A file of `tenant key` lines (bench-setup's output).
        #[arg(long)]
        keys: PathBuf,
        /// The per-request log (TSV).
        #[arg(long)]
        out: PathBuf,
        /// Each tenant's steady load alone, then all together.
        #[arg(long)]
        iso: bool,
        /// Seconds of each isolation phase alone (together: twice as long).
        #[arg(long, default_value_t = 4.0)]
        iso_secs: f64,
    },
    /// Computes the figures from the request log and the database's copy.
    Judge {
        /// The replay's per-request log.
        #[arg(long)]
        client: PathBuf,
        /// The directory bench_fair.sh wrote the database's rows to.
        #[arg(long)]
        dir: PathBuf,
        /// The queue's maximum waits (ms): core, standard, batch.
        #[arg(long, default_value = "2000,2000,6000")]
        max_wait_ms: String,
        /// The reclaim job's period (s): a reclaim's deadline is one period
        /// and a second after the pool turned tight.
        #[arg(long, default_value_t = 2)]
        reclaim_secs: u64,
        /// Heading of this run.
        #[arg(long, default_value = "")]
        label: String,
    },
    /// The month's charts (SVG) from two runs' tables: tokens served over
    /// the month with borrowing on and off, and the pool of the `on` run.
    Chart {
        /// The borrowing run's tables (`bench_fair.sh`'s `db-on`).
        #[arg(long)]
        on: PathBuf,
        /// The run without borrowing (`db-off`).
        #[arg(long)]
        off: PathBuf,
        /// Days of the month (the x axis).
        #[arg(long, default_value_t = 30)]
        days: u32,
        /// Where to write `fair-served.svg` and `fair-pool.svg`.
        #[arg(long)]
        svg_dir: PathBuf,
    },
}

// ---------------------------------------------------------------- the month

#[derive(Clone, Copy, PartialEq)]
enum Role {
    /// Stays well inside its budget.
    Steady,
    /// Runs past its budget late in the month: borrows.
    Borrower,
}

struct TenantSpec {
    id: &'static str,
    priority: &'static str,
    /// Mean requests/s at the day's peak (before `rate_scale`).
    rate: f64,
    long_share: f64,
    stream_share: f64,
    bursty: bool,
    role: Role,
    max_inflight: i64,
    guarantee: i32,
}

const fn t(
    id: &'static str,
    priority: &'static str,
    rate: f64,
    (long_share, stream_share): (f64, f64),
    bursty: bool,
    role: Role,
    (max_inflight, guarantee): (i64, i32),
) -> TenantSpec {
    TenantSpec {
        id,
        priority,
        rate,
        long_share,
        stream_share,
        bursty,
        role,
        max_inflight,
        guarantee,
    }
}

use Role::{Borrower, Steady};
/// Twelve departments: three core, six standard, three batch.
const TENANTS: [TenantSpec; 12] = [
    t("fair-01", "core", 3.0, (0.0, 0.0), false, Steady, (6, 3)),
    t("fair-02", "core", 2.0, (0.0, 0.5), false, Borrower, (6, 2)),
    t("fair-03", "core", 2.5, (0.0, 0.0), true, Steady, (6, 0)),
    t(
        "fair-04",
        "standard",
        2.0,
        (0.0, 0.0),
        true,
        Borrower,
        (3, 0),
    ),
    t(
        "fair-05",
        "standard",
        1.0,
        (0.3, 0.0),
        false,
        Steady,
        (3, 0),
    ),
    t(
        "fair-06",
        "standard",
        2.0,
        (0.0, 0.0),
        true,
        Borrower,
        (3, 0),
    ),
    t(
        "fair-07",
        "standard",
        1.5,
        (0.0, 0.5),
        false,
        Borrower,
        (3, 0),
    ),
    t(
        "fair-08",
        "standard",
        2.0,
        (0.0, 0.0),
        true,
        Borrower,
        (3, 0),
    ),
    t(
        "fair-09",
        "standard",
        1.5,
        (0.0, 0.0),
        false,
        Steady,
        (3, 0),
    ),
    t("fair-10", "batch", 1.0, (0.5, 0.0), false, Steady, (3, 0)),
    t("fair-11", "batch", 2.0, (0.0, 0.3), true, Borrower, (3, 0)),
    t("fair-12", "batch", 1.5, (0.0, 0.0), false, Steady, (3, 0)),
];
const POOL_CAPACITY: i32 = 12;
/// A burst: this many times the tenant's rate for `BURST_HOURS` of a day.
const BURST_X: f64 = 5.0;
const BURST_HOURS: f64 = 5.0;
const LONG_SIZES: [usize; 3] = [4_000, 6_000, 8_000];

/// splitmix64: the month's draws, the same for a seed on every machine.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
    fn range(&mut self, lo: u32, hi: u32) -> u32 {
        lo + (self.next() % u64::from(hi - lo + 1)) as u32
    }
    fn poisson(&mut self, lambda: f64) -> u32 {
        let l = (-lambda).exp();
        let (mut k, mut p) = (0, 1.0);
        loop {
            p *= self.unit();
            if p <= l {
                return k;
            }
            k += 1;
        }
    }
}

#[derive(Clone, Copy, PartialEq, Debug)]
enum Kind {
    Short,
    Long(usize),
    Stream,
}

#[derive(Clone)]
struct Req {
    /// Seconds from the month's start.
    at: f64,
    tenant: usize,
    kind: Kind,
    /// Output tokens the mock is asked for.
    out: u32,
    max_tokens: u32,
    /// The burst it belongs to (0: none).
    burst: u32,
}

impl Req {
    /// Input tokens (for sizing budgets only): the long prompts counted
    /// once with o200k, the short ones about 25.
    fn approx_input(&self, long: &[u64]) -> u64 {
        match self.kind {
            Kind::Long(i) => long[i],
            _ => 25,
        }
    }
}

/// The long prompts' input tokens (o200k), for the plan's budgets.
fn long_tokens() -> Vec<u64> {
    use domain::tokens::{chat_input_tokens, TokenizerFamily};
    LONG_SIZES
        .iter()
        .enumerate()
        .map(|(i, &n)| {
            let msgs = [serde_json::json!({"role": "user", "content": long_text(n, i as u64 + 7)})];
            chat_input_tokens(TokenizerFamily::O200k, &msgs)
        })
        .collect()
}

/// Interactive tenants' load over a day: low at night, a working-day
/// hump; batch runs flat.
fn diurnal(priority: &str, hour: f64) -> f64 {
    if priority == "batch" {
        return 0.8;
    }
    let h = ((hour - 7.0) / 14.0 * std::f64::consts::PI).sin();
    if (7.0..21.0).contains(&hour) {
        0.2 + 1.6 * h.max(0.0)
    } else {
        0.2
    }
}

fn month_rate(m: &Month, ti: usize, at: f64, bursts: &[(f64, f64, u32)]) -> (f64, u32) {
    let spec = &TENANTS[ti];
    let day = (at / m.day_secs) as u32;
    let hour = (at / m.day_secs).fract() * 24.0;
    let mut r = spec.rate * m.rate_scale * diurnal(spec.priority, hour);
    if spec.priority != "batch" && day % 7 >= 5 {
        r *= 0.35; // weekends
    }
    if day + 5 >= m.days {
        r *= 1.3; // the month-end rush
    }
    let mut burst = 0;
    for &(s, e, id) in bursts {
        if at >= s && at < e {
            r *= BURST_X;
            burst = id;
        }
    }
    (r, burst)
}

/// The month's requests, in order of time.
fn schedule(m: &Month) -> Vec<Req> {
    let mut rng = Rng(m.seed);
    let mut out = Vec::new();
    let slot = 0.05;
    let end = f64::from(m.days) * m.day_secs;
    let mut burst_id = 0;
    for (ti, spec) in TENANTS.iter().enumerate() {
        let mut bursts = Vec::new();
        if spec.bursty {
            for d in 0..m.days {
                if rng.unit() < 0.35 {
                    let hour = 9.0 + rng.unit() * 8.0;
                    let s = (f64::from(d) + hour / 24.0) * m.day_secs;
                    burst_id += 1;
                    bursts.push((s, s + BURST_HOURS / 24.0 * m.day_secs, burst_id));
                }
            }
        }
        let mut at = 0.0;
        while at < end {
            let (rate, burst) = month_rate(m, ti, at, &bursts);
            for _ in 0..rng.poisson(rate * slot) {
                let u = rng.unit();
                let kind = if u < spec.long_share {
                    Kind::Long(rng.range(0, LONG_SIZES.len() as u32 - 1) as usize)
                } else if u < spec.long_share + spec.stream_share {
                    Kind::Stream
                } else {
                    Kind::Short
                };
                let (out_tokens, max_tokens) = match kind {
                    Kind::Short => (rng.range(8, 56), 64),
                    Kind::Long(_) => (rng.range(60, 120), 128),
                    Kind::Stream => (rng.range(20, 30), 48),
                };
                out.push(Req {
                    at: at + rng.unit() * slot,
                    tenant: ti,
                    kind,
                    out: out_tokens,
                    max_tokens,
                    burst,
                });
            }
            at += slot;
        }
    }
    out.sort_by(|a, b| a.at.total_cmp(&b.at));
    out
}

fn plan(m: &Month, mode: &str) -> anyhow::Result<serde_json::Value> {
    anyhow::ensure!(
        matches!(mode, "on" | "off" | "iso"),
        "--mode: on, off or iso"
    );
    let reqs = schedule(m);
    let long = long_tokens();
    let mut demand = [0u64; 12];
    for r in &reqs {
        demand[r.tenant] += r.approx_input(&long) + u64::from(r.out);
    }
    // Borrowers get 70 % of what they will ask for, the others 150 %; the
    // pool lends 1.2 × what the borrowers lack, so lent quota that sits
    // unused is what stands between the last borrowers and a dry pool.
    let budget = |i: usize| -> i64 {
        let d = demand[i] as f64;
        match TENANTS[i].role {
            Borrower => (d * 0.7) as i64,
            Steady => (d * 1.5) as i64,
        }
    };
    let lack: i64 = (0..12)
        .filter(|&i| TENANTS[i].role == Borrower)
        .map(|i| demand[i] as i64 - budget(i))
        .sum();
    let pool = (lack as f64 * 1.2) as i64;
    let tenants: Vec<serde_json::Value> = TENANTS
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let iso = mode == "iso";
            serde_json::json!({
                "id": s.id, "priority": s.priority,
                "monthly_tokens": if iso { 1_000_000_000_000 } else { budget(i) },
                "max_inflight": s.max_inflight,
                "may_borrow": mode == "on",
                "borrow_cap_tokens": pool * 45 / 100,
                "guarantee": s.guarantee,
                "expected_tokens": demand[i],
            })
        })
        .collect();
    Ok(serde_json::json!({
        "pool_tokens": pool, "max_borrow_share_ppm": 50_000, "reclaim_below_share_ppm": 200_000,
        "capacity": POOL_CAPACITY, "tenants": tenants, "requests": reqs.len(),
    }))
}

// ---------------------------------------------------------------- replay

/// English-like text of about `tokens` o200k tokens (as scen-bench's).
fn long_text(tokens: usize, seed: u64) -> String {
    const WORDS: [&str; 16] = [
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
        "borrow",
        "reclaim",
        "department",
    ];
    let mut out = String::with_capacity(tokens * 6);
    let mut rng = Rng(seed);
    for _ in 0..tokens * 10 / 13 {
        let r = rng.next() as usize;
        out.push_str(WORDS[r % WORDS.len()]);
        match r % 17 {
            0 => out.push_str(". "),
            1 => out.push_str(&format!(" {} ", r % 10_000)),
            _ => out.push(' '),
        }
    }
    out
}

fn body(r: &Req, n: usize, long: &[String]) -> Bytes {
    let (content, stream) = match r.kind {
        Kind::Short => (
            format!(
                "question {n} of the month [mock:latency_ms=30] [mock:output_tokens={}]",
                r.out
            ),
            false,
        ),
        Kind::Long(i) => (
            format!(
                "{} [mock:latency_ms=30] [mock:output_tokens={}]",
                long[i], r.out
            ),
            false,
        ),
        Kind::Stream => (
            format!(
                "stream {n} [mock:output_tokens={}] [mock:chunk_delay_ms=20]",
                r.out
            ),
            true,
        ),
    };
    let mut v = serde_json::json!({"model": "fair-pool", "max_tokens": r.max_tokens,
        "messages": [{"role": "user", "content": content}]});
    if stream {
        v["stream"] = true.into();
        v["stream_options"] = serde_json::json!({"include_usage": true});
    }
    v.to_string().into()
}

/// (prompt, completion) of a JSON answer or of a stream's last usage.
fn usage(b: &[u8], stream: bool) -> (u64, u64) {
    let of = |v: &serde_json::Value| {
        let u = &v["usage"];
        (
            u["prompt_tokens"].as_u64().unwrap_or(0),
            u["completion_tokens"].as_u64().unwrap_or(0),
        )
    };
    if !stream {
        return serde_json::from_slice(b).map(|v| of(&v)).unwrap_or((0, 0));
    }
    String::from_utf8_lossy(b)
        .lines()
        .rev()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter(|l| l.contains("\"usage\""))
        .find_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .map(|v| of(&v))
        .unwrap_or((0, 0))
}

struct Rec {
    id: String,
    tenant: usize,
    sent_ms: i64,
    lat: Duration,
    status: u16,
    what: String,
    kind: Kind,
    out: u32,
    max_tokens: u32,
    burst: u32,
    usage: (u64, u64),
}

async fn send(client: &reqwest::Client, url: &str, key: &str, r: &Req, b: Bytes) -> Rec {
    let sent_ms = chrono_ms();
    let start = Instant::now();
    let mut rec = Rec {
        id: String::new(),
        tenant: r.tenant,
        sent_ms,
        lat: Duration::ZERO,
        status: 0,
        what: "transport_error".into(),
        kind: r.kind,
        out: r.out,
        max_tokens: r.max_tokens,
        burst: r.burst,
        usage: (0, 0),
    };
    let stream = r.kind == Kind::Stream;
    if let Ok(resp) = client
        .post(url)
        .bearer_auth(key)
        .header("content-type", "application/json")
        .body(b)
        .send()
        .await
    {
        rec.status = resp.status().as_u16();
        rec.id = header(&resp, "x-request-id");
        let decision = header(&resp, "x-tollgate-decision");
        let reason = header(&resp, "x-tollgate-reason");
        let ok = resp.status().is_success();
        match resp.bytes().await {
            Ok(b) if ok => {
                rec.usage = usage(&b, stream);
                rec.what = if decision.is_empty() {
                    "allow".into()
                } else if reason.is_empty() {
                    decision
                } else {
                    format!("{decision}:{reason}")
                };
            }
            Ok(b) => {
                rec.what = serde_json::from_slice::<serde_json::Value>(&b)
                    .ok()
                    .and_then(|v| v["error"]["code"].as_str().map(str::to_string))
                    .unwrap_or(reason);
            }
            Err(_) => rec.what = "body_cut".into(),
        }
    }
    rec.lat = start.elapsed();
    rec
}

fn chrono_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

fn read_keys(p: &Path) -> anyhow::Result<Vec<String>> {
    let text = std::fs::read_to_string(p)?;
    let map: HashMap<&str, &str> = text.lines().filter_map(|l| l.split_once(' ')).collect();
    TENANTS
        .iter()
        .map(|s| {
            map.get(s.id)
                .map(|k| k.trim().to_string())
                .ok_or_else(|| anyhow::anyhow!("no key for {} in {}", s.id, p.display()))
        })
        .collect()
}

/// Sends `reqs` open-loop from now on; every answer logged.
async fn run_load(
    url: &str,
    keys: &[String],
    reqs: &[Req],
    long: &Arc<Vec<String>>,
) -> anyhow::Result<Vec<Rec>> {
    let client = reqwest::Client::builder()
        .tcp_nodelay(true)
        .pool_max_idle_per_host(256)
        .timeout(Duration::from_secs(60))
        .build()?;
    let url = Arc::new(format!("{}/v1/chat/completions", url.trim_end_matches('/')));
    let recs = Arc::new(Mutex::new(Vec::with_capacity(reqs.len())));
    let t0 = Instant::now() + Duration::from_millis(100);
    let mut tasks = Vec::with_capacity(reqs.len());
    for (n, r) in reqs.iter().enumerate() {
        let (client, url, recs, r) = (client.clone(), url.clone(), recs.clone(), r.clone());
        let key = keys[r.tenant].clone();
        let b = body(&r, n, long);
        tasks.push(tokio::spawn(async move {
            tokio::time::sleep_until((t0 + Duration::from_secs_f64(r.at)).into()).await;
            let rec = send(&client, &url, &key, &r, b).await;
            recs.lock().unwrap().push(rec);
        }));
    }
    for t in tasks {
        t.await?;
    }
    let mut v = std::mem::take(&mut *recs.lock().unwrap());
    v.sort_by_key(|r| r.sent_ms);
    Ok(v)
}

fn kind_name(k: Kind) -> String {
    match k {
        Kind::Short => "short".into(),
        Kind::Long(i) => format!("long{}", LONG_SIZES[i]),
        Kind::Stream => "stream".into(),
    }
}

fn write_log(p: &Path, recs: &[Rec]) -> anyhow::Result<()> {
    let mut f = std::io::BufWriter::new(std::fs::File::create(p)?);
    writeln!(
        f,
        "request_id\ttenant\tsent_ms\tlat_us\tstatus\twhat\tkind\tout\tmax_tokens\tburst\tprompt\tcompletion"
    )?;
    for r in recs {
        writeln!(
            f,
            "{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}",
            r.id,
            TENANTS[r.tenant].id,
            r.sent_ms,
            r.lat.as_micros(),
            r.status,
            r.what,
            kind_name(r.kind),
            r.out,
            r.max_tokens,
            r.burst,
            r.usage.0,
            r.usage.1
        )?;
    }
    Ok(())
}

fn print_books(recs: &[Rec]) {
    for (i, s) in TENANTS.iter().enumerate() {
        let mine = recs
            .iter()
            .filter(|r| r.tenant == i && (200..300).contains(&r.status));
        let (n, tok) = mine.fold((0, 0), |(n, t), r| (n + 1, t + r.usage.0 + r.usage.1));
        println!("BOOKS tenant={} admitted={n} tokens={tok}", s.id);
    }
}

async fn replay(
    m: &Month,
    url: &str,
    keys: &Path,
    out: &Path,
    iso: bool,
    iso_secs: f64,
) -> anyhow::Result<()> {
    let keys = read_keys(keys)?;
    let long = Arc::new(
        LONG_SIZES
            .iter()
            .enumerate()
            .map(|(i, &n)| long_text(n, i as u64 + 7))
            .collect::<Vec<_>>(),
    );
    if !iso {
        let reqs = schedule(m);
        let started = Instant::now();
        let recs = run_load(url, &keys, &reqs, &long).await?;
        write_log(out, &recs)?;
        let ok = recs
            .iter()
            .filter(|r| (200..300).contains(&r.status))
            .count();
        println!(
            "replay: {} requests in {:.1} s ({} days of {} s), {ok} admitted",
            recs.len(),
            started.elapsed().as_secs_f64(),
            m.days,
            m.day_secs
        );
        print_books(&recs);
        return Ok(());
    }
    // Isolation: every tenant's steady load at the day's peak (its mix of
    // prompts and streams, no bursts), alone, then all together.
    let steady = |ti: Option<usize>, secs: f64, seed: u64| -> Vec<Req> {
        let mut rng = Rng(seed);
        let mut v = Vec::new();
        for (i, s) in TENANTS.iter().enumerate() {
            if ti.is_some_and(|x| x != i) {
                continue;
            }
            let rate = s.rate * m.rate_scale;
            let mut at = 0.0;
            while at < secs {
                at += -(1.0 - rng.unit()).ln() / rate;
                let u = rng.unit();
                let kind = if u < s.long_share {
                    Kind::Long(rng.range(0, 2) as usize)
                } else if u < s.long_share + s.stream_share {
                    Kind::Stream
                } else {
                    Kind::Short
                };
                let (out, max_tokens) = match kind {
                    Kind::Short => (rng.range(8, 56), 64),
                    Kind::Long(_) => (rng.range(60, 120), 128),
                    Kind::Stream => (rng.range(20, 30), 48),
                };
                v.push(Req {
                    at,
                    tenant: i,
                    kind,
                    out,
                    max_tokens,
                    burst: 0,
                });
            }
        }
        v.sort_by(|a, b| a.at.total_cmp(&b.at));
        v
    };
    let mut all = Vec::new();
    let mut alone: Vec<Vec<Duration>> = vec![Vec::new(); 12];
    for (i, lat) in alone.iter_mut().enumerate() {
        let recs = run_load(
            url,
            &keys,
            &steady(Some(i), iso_secs, m.seed + i as u64),
            &long,
        )
        .await?;
        lat.extend(
            recs.iter()
                .filter(|r| (200..300).contains(&r.status) && r.kind != Kind::Stream)
                .map(|r| r.lat),
        );
        all.extend(recs);
    }
    let together = run_load(
        url,
        &keys,
        &steady(None, iso_secs * 2.0, m.seed + 99),
        &long,
    )
    .await?;
    println!("| tenant | priority | load | n alone / together | p50 alone ms | p99 alone ms | p50 together ms | p99 together ms | p99 change |");
    println!("|---|---|---|---|---|---|---|---|---|");
    for (i, s) in TENANTS.iter().enumerate() {
        let mut tog: Vec<Duration> = together
            .iter()
            .filter(|r| r.tenant == i && (200..300).contains(&r.status) && r.kind != Kind::Stream)
            .map(|r| r.lat)
            .collect();
        let mut a = alone[i].clone();
        let (a50, a99, t50, t99) = (
            pct(&mut a, 0.5) / 1e3,
            pct(&mut a, 0.99) / 1e3,
            pct(&mut tog, 0.5) / 1e3,
            pct(&mut tog, 0.99) / 1e3,
        );
        let load = match (s.long_share > 0.0, s.stream_share > 0.0) {
            (true, _) => format!("{:.0} % long prompts", s.long_share * 100.0),
            (_, true) => format!("{:.0} % streams", s.stream_share * 100.0),
            _ => "short".into(),
        };
        println!(
            "| {} | {} | {:.1} req/s, {load} | {} / {} | {a50:.1} | {a99:.1} | {t50:.1} | {t99:.1} | {:+.1} % |",
            s.id,
            s.priority,
            s.rate * m.rate_scale,
            a.len(),
            tog.len(),
            (t99 / a99 - 1.0) * 100.0
        );
    }
    let refused = together
        .iter()
        .filter(|r| !(200..300).contains(&r.status))
        .count();
    println!();
    println!(
        "(latencies of non-stream requests; streams last ~0.5–0.7 s by design; {refused} of {} together not admitted)",
        together.len()
    );
    all.extend(together);
    write_log(out, &all)?;
    print_books(&all);
    Ok(())
}

// ---------------------------------------------------------------- judge

/// One admitted request as the ledger booked it.
struct Ev {
    id: String,
    /// Admitted (received + its wait in the queue), settled: epoch ms.
    start: i64,
    end: i64,
    est: i64,
    tok: i64,
    input: i64,
    output: i64,
    cost: i64,
    pool_model: bool,
}

struct Dec {
    id: String,
    tenant: String,
    reason: String,
    at: i64,
    est_in: Option<i64>,
    est_out: Option<i64>,
    /// The headroom the gateway saw (its refusal's detail).
    gw_headroom: Option<i64>,
}

struct TenantRowJ {
    priority: String,
    base: i64,
    max_inflight: i64,
    may_borrow: bool,
    cap: i64,
    guarantee: i64,
}

/// Rows of a `,`-separated file (psql -At -F ,).
fn rows(p: &Path) -> anyhow::Result<Vec<Vec<String>>> {
    let text = std::fs::read_to_string(p)
        .map_err(|e| anyhow::anyhow!("cannot read {}: {e}", p.display()))?;
    Ok(text
        .lines()
        .filter(|l| !l.is_empty())
        .map(|l| l.split(',').map(str::to_string).collect())
        .collect())
}

fn num(s: &str) -> i64 {
    s.trim().parse().unwrap_or(0)
}

struct World {
    tenants: BTreeMap<String, TenantRowJ>,
    events: HashMap<String, Vec<Ev>>,
    /// (tenant, activated at, tokens) of active borrows.
    borrows: Vec<(String, i64, i64)>,
    /// (tenant, at, tokens) of reclaims.
    reclaims: Vec<(String, i64, i64)>,
    pool: i64,
    reclaim_below_ppm: i64,
    capacity: i64,
}

impl World {
    fn used(&self, t: &str, at: i64) -> i64 {
        self.events
            .get(t)
            .map_or(0, |v| v.iter().filter(|e| e.end <= at).map(|e| e.tok).sum())
    }
    /// Holds in flight at `at` (each at the estimate it held), not counting `skip`.
    fn held(&self, t: &str, at: i64, skip: &str) -> i64 {
        self.events.get(t).map_or(0, |v| {
            v.iter()
                .filter(|e| e.start <= at && at < e.end && e.id != skip)
                .map(|e| e.est)
                .sum()
        })
    }
    fn inflight(&self, t: &str, at: i64, pool_only: bool) -> i64 {
        self.events.get(t).map_or(0, |v| {
            v.iter()
                .filter(|e| e.start <= at && at < e.end && (!pool_only || e.pool_model))
                .count() as i64
        })
    }
    fn borrowed(&self, t: &str, at: i64) -> i64 {
        let b: i64 = self
            .borrows
            .iter()
            .filter(|(x, when, _)| x == t && *when <= at)
            .map(|b| b.2)
            .sum();
        let r: i64 = self
            .reclaims
            .iter()
            .filter(|(x, when, _)| x == t && *when <= at)
            .map(|r| r.2)
            .sum();
        b - r
    }
    fn free(&self, at: i64) -> i64 {
        self.pool
            - self
                .tenants
                .keys()
                .map(|t| self.borrowed(t, at))
                .sum::<i64>()
    }
    /// What the pool could lend `t` at `at`: its free tokens, within the
    /// tenant's cap.
    fn lendable(&self, t: &str, at: i64) -> i64 {
        let Some(row) = self.tenants.get(t) else {
            return 0;
        };
        if !row.may_borrow {
            return 0;
        }
        self.free(at).min(row.cap - self.borrowed(t, at)).max(0)
    }
    /// Lent and not used or held by its borrower at `at`: what a reclaim
    /// may take back.
    fn lent_unused(&self, at: i64) -> i64 {
        self.tenants
            .keys()
            .map(|t| self.lent_unused_by(t, at))
            .sum()
    }
    /// What of `t`'s borrowed tokens it neither used nor holds at `at`.
    fn lent_unused_by(&self, t: &str, at: i64) -> i64 {
        self.borrowed(t, at).min(self.headroom(t, at, "").max(0))
    }
    /// Budget left: base + borrowed − used − held.
    fn headroom(&self, t: &str, at: i64, skip: &str) -> i64 {
        let base = self.tenants.get(t).map_or(0, |r| r.base);
        base + self.borrowed(t, at) - self.used(t, at) - self.held(t, at, skip)
    }
    /// The model pool's rule: in flight + 1 + every other tenant's unused
    /// guarantee ≤ capacity.
    fn pool_room(&self, t: &str, at: i64) -> bool {
        let mut n = 1;
        for (x, row) in &self.tenants {
            let f = self.inflight(x, at, true);
            n += f;
            if x != t {
                n += (row.guarantee - f).max(0);
            }
        }
        n <= self.capacity
    }
}

struct ClientRec {
    tenant: String,
    status: u16,
    kind: String,
    out: i64,
    max_tokens: i64,
    burst: u32,
    prompt: i64,
    completion: i64,
}

fn load_world(dir: &Path) -> anyhow::Result<World> {
    let mut tenants = BTreeMap::new();
    for r in rows(&dir.join("tenants.csv"))? {
        tenants.insert(
            r[0].clone(),
            TenantRowJ {
                priority: r[1].clone(),
                base: num(&r[2]),
                max_inflight: num(&r[3]),
                may_borrow: r[4] == "t",
                cap: num(&r[5]),
                guarantee: 0,
            },
        );
    }
    for r in rows(&dir.join("guarantees.csv"))? {
        if let Some(t) = tenants.get_mut(&r[0]) {
            t.guarantee = num(&r[1]);
        }
    }
    let waited: HashMap<String, i64> = rows(&dir.join("waits.csv"))?
        .into_iter()
        .map(|r| (r[0].clone(), num(&r[1])))
        .collect();
    let mut events: HashMap<String, Vec<Ev>> = HashMap::new();
    // request_id, tenant, input, output, est, cost, started ms, settled ms, model
    for r in rows(&dir.join("events.csv"))? {
        let id = r[0].clone();
        let start = num(&r[6]) + waited.get(&id).copied().unwrap_or(0);
        events.entry(r[1].clone()).or_default().push(Ev {
            start,
            end: num(&r[7]).max(start),
            est: num(&r[4]),
            tok: num(&r[2]) + num(&r[3]),
            input: num(&r[2]),
            output: num(&r[3]),
            cost: num(&r[5]),
            pool_model: r[8] == "fair-pool",
            id,
        });
    }
    let borrows = rows(&dir.join("borrows.csv"))?
        .into_iter()
        .filter(|r| r[1] == "active")
        .map(|r| (r[0].clone(), num(&r[4]), num(&r[2])))
        .collect();
    let reclaims = rows(&dir.join("reclaims.csv"))?
        .into_iter()
        .map(|r| (r[0].clone(), num(&r[2]), num(&r[1])))
        .collect();
    let pool = rows(&dir.join("pool.csv"))?;
    let p = pool.first().cloned().unwrap_or_default();
    let cap = rows(&dir.join("capacity.csv"))?;
    Ok(World {
        tenants,
        events,
        borrows,
        reclaims,
        pool: p.first().map_or(0, |s| num(s)),
        reclaim_below_ppm: p.get(1).map_or(200_000, |s| num(s)),
        capacity: cap
            .first()
            .and_then(|r| r.first())
            .map_or(i64::MAX, |s| num(s)),
    })
}

fn load_client(p: &Path) -> anyhow::Result<HashMap<String, ClientRec>> {
    let text = std::fs::read_to_string(p)?;
    let mut m = HashMap::new();
    for l in text.lines().skip(1) {
        let f: Vec<&str> = l.split('\t').collect();
        if f.len() < 12 {
            continue;
        }
        m.insert(
            f[0].to_string(),
            ClientRec {
                tenant: f[1].into(),
                status: f[4].parse().unwrap_or(0),
                kind: f[6].into(),
                out: num(f[7]),
                max_tokens: num(f[8]),
                burst: f[9].parse().unwrap_or(0),
                prompt: num(f[10]),
                completion: num(f[11]),
            },
        );
    }
    Ok(m)
}

fn share(a: u64, b: u64) -> String {
    if b == 0 {
        "n/a".into()
    } else {
        format!("{:.2} %", a as f64 * 100.0 / b as f64)
    }
}

/// The independent price of gpt-4o-mini's list price ($0.15 / $0.60 a
/// million tokens), rounded up to a micro-dollar (docs/billing.md).
fn list_cost(input: i64, output: i64) -> i64 {
    (input * 150_000 + output * 600_000 + 999_999) / 1_000_000
}

fn judge(
    client: &Path,
    dir: &Path,
    max_wait: &str,
    reclaim_secs: u64,
    label: &str,
) -> anyhow::Result<()> {
    let w = load_world(dir)?;
    let cl = load_client(client)?;
    let waits: Vec<i64> = max_wait.split(',').map(num).collect();
    anyhow::ensure!(waits.len() == 3, "--max-wait-ms: core,standard,batch");
    let wait_of = |p: &str| match p {
        "core" => waits[0],
        "batch" => waits[2],
        _ => waits[1],
    };
    let mut decisions: Vec<Dec> = rows(&dir.join("decisions.csv"))?
        .into_iter()
        .map(|r| Dec {
            id: r[0].clone(),
            tenant: r[1].clone(),
            reason: r[2].clone(),
            at: num(&r[3]),
            est_in: r.get(4).filter(|s| !s.is_empty()).map(|s| num(s)),
            est_out: r.get(5).filter(|s| !s.is_empty()).map(|s| num(s)),
            gw_headroom: r.get(6).filter(|s| !s.is_empty()).map(|s| num(s)),
        })
        .collect();
    decisions.sort_by_key(|d| d.at);
    let admitted: u64 = w.events.values().map(|v| v.len() as u64).sum();
    let t0 = w
        .events
        .values()
        .flatten()
        .map(|e| e.start)
        .min()
        .unwrap_or(0);
    // ---- false refusals
    let mut causes: BTreeMap<String, u64> = BTreeMap::new();
    // (tenant, cause) → (n, first, last, ledger headroom min/max, gateway's)
    type Where = (u64, i64, i64, i64, i64, Option<i64>);
    let mut wheres: BTreeMap<(String, String), Where> = BTreeMap::new();
    let mut true_refusals: BTreeMap<String, u64> = BTreeMap::new();
    let mut false_n = 0u64;
    let mut refused_est: HashMap<&str, i64> = HashMap::new();
    // What the false refusals counted so far would have used, had they been
    // served (their actual size, from their time on): the room a later
    // refusal finds is after them, so a tenant's last crumbs of budget are
    // counted as room once, not for every request refused on them.
    let mut phantom: Vec<(String, i64, i64)> = Vec::new();
    for d in &decisions {
        let Some(row) = w.tenants.get(&d.tenant) else {
            continue;
        };
        let c = cl.get(&d.id);
        let est_in = d
            .est_in
            .unwrap_or_else(|| c.map_or(25, |c| c.prompt.max(25)));
        let est = est_in + d.est_out.unwrap_or_else(|| c.map_or(64, |c| c.max_tokens));
        let actual = est_in + c.map_or(est - est_in, |c| c.out);
        refused_est.insert(&d.id, est);
        let taken: i64 = phantom
            .iter()
            .filter(|(t, at, _)| *t == d.tenant && *at <= d.at)
            .map(|p| p.2)
            .sum();
        let room_at = |at: i64, need: i64| w.headroom(&d.tenant, at, &d.id) - taken >= need;
        let slots_at = |at: i64| {
            w.inflight(&d.tenant, at, false) < row.max_inflight && w.pool_room(&d.tenant, at)
        };
        let cause = if d.reason.contains("budget") {
            if room_at(d.at, est) {
                Some("lease granularity / settle lag (room at the estimate, counting every hold in flight)")
            } else if room_at(d.at, actual) {
                Some("estimate error (room for what it would have used, not for max_tokens)")
            } else if w.headroom(&d.tenant, d.at, &d.id) - taken + w.lendable(&d.tenant, d.at)
                >= est
            {
                Some("borrow latency (the pool could lend it, the borrow came too late)")
            } else {
                None
            }
        } else if d.reason == "queue_timeout" {
            let out = d.at + wait_of(&row.priority);
            (slots_at(out) && room_at(out, est))
                .then_some("queue timeout (a slot was free when it gave up)")
        } else {
            (slots_at(d.at) && room_at(d.at, est)).then_some("other")
        };
        match cause {
            Some(c) => {
                false_n += 1;
                phantom.push((d.tenant.clone(), d.at, actual));
                let h = w.headroom(&d.tenant, d.at, &d.id) - taken;
                let e = wheres
                    .entry((
                        d.tenant.clone(),
                        c.split(' ').next().unwrap_or(c).to_string(),
                    ))
                    .or_insert((0, d.at, d.at, h, h, d.gw_headroom));
                e.0 += 1;
                e.2 = d.at;
                e.3 = e.3.min(h);
                e.4 = e.4.max(h);
                let key = if c == "other" {
                    format!("other: {}", d.reason)
                } else {
                    c.to_string()
                };
                *causes.entry(key).or_default() += 1;
            }
            None => *true_refusals.entry(d.reason.clone()).or_default() += 1,
        }
    }
    let refused_client = cl
        .values()
        .filter(|c| !(200..300).contains(&c.status))
        .count();
    let heading = if label.is_empty() {
        String::new()
    } else {
        format!(" — {label}")
    };
    println!("### Judged from the ledger and the decision log{heading}");
    println!();
    println!(
        "- requests: {} sent, {admitted} admitted (ledger events), {} refused in the decision log ({} refusals seen by the clients)",
        cl.len(),
        decisions.len(),
        refused_client
    );
    println!(
        "- **false refusals: {false_n} of {} requests that fit = {}**",
        admitted + false_n,
        share(false_n, admitted + false_n)
    );
    for (c, n) in &causes {
        println!("  - {c}: {n}");
    }
    for ((t, c), (n, a, b, lo, hi, gw)) in &wheres {
        println!(
            "  - where: {t}, {c}: {n} between +{:.1} s and +{:.1} s of the month; budget left by the ledger {lo}–{hi} tokens (with every hold in flight), by the gateway's refusal {}",
            (a - t0) as f64 / 1000.0,
            (b - t0) as f64 / 1000.0,
            gw.map_or("—".to_string(), |g| format!("{g} tokens"))
        );
    }
    println!(
        "- refusals with no room (true): {}",
        true_refusals
            .iter()
            .map(|(r, n)| format!("{n}× {r}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    // ---- borrow hit rate: requests above the tenant's own budget
    let ev_by_id: HashMap<&str, (&str, &Ev)> = w
        .events
        .iter()
        .flat_map(|(t, v)| v.iter().map(move |e| (e.id.as_str(), (t.as_str(), e))))
        .collect();
    let dec_by_id: HashMap<&str, &Dec> = decisions.iter().map(|d| (d.id.as_str(), d)).collect();
    let (mut above, mut could, mut hit, mut served_dry) = (0u64, 0u64, 0u64, 0u64);
    let mut episodes: BTreeMap<(String, u32), (u64, u64)> = BTreeMap::new();
    for (id, c) in &cl {
        let Some(row) = w.tenants.get(&c.tenant) else {
            continue;
        };
        if !row.may_borrow {
            continue;
        }
        let (at, est, served) = if let Some((_, e)) = ev_by_id.get(id.as_str()) {
            (e.start, e.est, true)
        } else if let Some(d) = dec_by_id.get(id.as_str()) {
            if !d.reason.contains("budget") {
                continue; // refused for something else than its budget
            }
            (
                d.at,
                refused_est.get(id.as_str()).copied().unwrap_or(0),
                false,
            )
        } else {
            continue;
        };
        let used_held = w.used(&c.tenant, at) + w.held(&c.tenant, at, id);
        if used_held + est <= row.base {
            continue; // within its own budget
        }
        above += 1;
        let can = w.headroom(&c.tenant, at, id) + w.lendable(&c.tenant, at) >= est;
        if can {
            could += 1;
            if served {
                hit += 1;
            }
            if c.burst > 0 {
                let e = episodes.entry((c.tenant.clone(), c.burst)).or_default();
                e.0 += 1;
                e.1 += u64::from(served);
            }
        } else if served {
            served_dry += 1;
        }
    }
    let ep_hit = episodes.values().filter(|(n, s)| n == s).count();
    println!(
        "- **borrow hit rate: {hit} of {could} requests above their tenant's own budget that the pool could serve were served = {}**; bursts: {ep_hit} of {} burst episodes above budget served whole ({}); {} more above budget when the pool (or the tenant's cap) could not cover them, {served_dry} of which were served anyway (quota already lent)",
        share(hit, could),
        episodes.len(),
        share(ep_hit as u64, episodes.len() as u64),
        above - could
    );
    // ---- reclaim on time
    let (t_min, t_max) = span(&w);
    let threshold = w.pool * w.reclaim_below_ppm / 1_000_000;
    let crumbs = w.pool / 100;
    let reclaimable = |at: i64| w.lent_unused(at);
    let deadline_ms = reclaim_secs as i64 * 1000 + 1000;
    let (mut demands, mut on_time) = (0u64, 0u64);
    let mut missed = Vec::new();
    let tight_ms = (t_min..t_max)
        .step_by(100)
        .filter(|&at| w.pool > 0 && w.free(at) < threshold)
        .count() as i64
        * 100;
    // An unmet demand whose deadline falls after the month's last request
    // is not judged: the gateway is stopped then (counted apart).
    let mut censored = 0u64;
    let mut at = t_min;
    while w.pool > 0 && at < t_max {
        if w.free(at) < threshold && reclaimable(at) >= crumbs {
            let dl = at + deadline_ms;
            let first = w
                .reclaims
                .iter()
                .filter(|r| r.1 >= at && r.1 <= dl)
                .map(|r| r.1)
                .min();
            let met = first.is_some() || w.free(dl) >= threshold || reclaimable(dl) < crumbs;
            if !met && dl > t_max {
                // Unmet, its deadline after the month's last request: set
                // apart (a met one near the end counts like any other).
                censored += 1;
            } else if met {
                demands += 1;
                on_time += 1;
            } else {
                demands += 1;
                let next = w.reclaims.iter().map(|r| r.1).filter(|&r| r > dl).min();
                let who: Vec<String> = w
                    .tenants
                    .keys()
                    .filter_map(|t| {
                        let u = w.lent_unused_by(t, at);
                        (u > 0).then(|| format!("{t} {u}"))
                    })
                    .collect();
                missed.push(format!(
                    "+{:.1} s: {} free (threshold {threshold}), {} lent and unused ({}); next reclaim {}",
                    (at - t_min) as f64 / 1000.0,
                    w.free(at),
                    reclaimable(at),
                    who.join(", "),
                    next.map_or("none".into(), |n| format!("+{:.1} s", (n - t_min) as f64 / 1000.0))
                ));
            }
            at = first.unwrap_or(dl) + 100;
            continue;
        }
        at += 100;
    }
    let taken: i64 = w.reclaims.iter().map(|r| r.2).sum();
    // A reclaim must never leave its tenant below what it used and held.
    let below: Vec<String> = w
        .reclaims
        .iter()
        .filter(|(t, at, _)| w.headroom(t, *at, "") < 0)
        .map(|(t, at, n)| {
            format!(
                "{t} at +{:.1} s took {n}: left {} tokens of headroom by the ledger",
                (at - t_min) as f64 / 1000.0,
                w.headroom(t, *at, "")
            )
        })
        .collect();
    println!(
        "- **reclaim on time: {on_time} of {demands} reclaim demands (pool below {} % free with ≥ 1 % of it lent and unused) met within {} s = {}**{}; pool tight for {:.1} s of the month; {} reclaims took back {taken} tokens; {} left a tenant below its used + held by the ledger{}",
        w.reclaim_below_ppm / 10_000,
        deadline_ms / 1000,
        share(on_time, demands),
        if censored > 0 {
            format!(" (and {censored} unmet in the month's last {} s, whose deadline falls after the run: not judged)", deadline_ms / 1000)
        } else {
            String::new()
        },
        tight_ms as f64 / 1000.0,
        w.reclaims.len(),
        below.len(),
        if below.is_empty() {
            String::new()
        } else {
            format!(" ({})", below.join("; "))
        }
    );
    for m in &missed {
        println!("  - missed at {m}");
    }
    // ---- tokens served, and the bills
    let served_tok: i64 = w.events.values().flatten().map(|e| e.tok).sum();
    let offered: i64 = cl
        .iter()
        .map(|(id, c)| {
            let est_in = ev_by_id
                .get(id.as_str())
                .map(|(_, e)| e.input)
                .or_else(|| dec_by_id.get(id.as_str()).and_then(|d| d.est_in))
                .unwrap_or(c.prompt);
            est_in + c.out
        })
        .sum();
    let lent_end = w.pool - w.free(i64::MAX);
    println!(
        "- tokens served (ledger): {served_tok} of {offered} offered ({}); pool {} tokens, lent at the end {lent_end}",
        share(served_tok as u64, offered as u64),
        w.pool
    );
    let (mut exact, mut billed) = (0u64, 0u64);
    let mut diffs = Vec::new();
    for (id, c) in &cl {
        if !(200..300).contains(&c.status) {
            continue;
        }
        billed += 1;
        match ev_by_id.get(id.as_str()) {
            Some((_, e))
                if e.input == c.prompt
                    && e.output == c.completion
                    && e.cost == list_cost(c.prompt, c.completion) =>
            {
                exact += 1
            }
            Some((_, e)) => diffs.push(format!(
                "{id} ({}): client {}+{} tokens, ledger {}+{} for {} µUSD (list price {})",
                c.kind,
                c.prompt,
                c.completion,
                e.input,
                e.output,
                e.cost,
                list_cost(c.prompt, c.completion)
            )),
            None => diffs.push(format!("{id} ({}): served, not in the ledger", c.kind)),
        }
    }
    println!(
        "- **bills exact: {exact} of {billed} served requests booked with the tokens the client was told and the list price = {}**",
        share(exact, billed)
    );
    for d in diffs.iter().take(5) {
        println!("  - {d}");
    }
    println!();
    println!(
        "FIG false_refusals={false_n} fit={} borrow_hit={hit} borrow_could={could} reclaim_on_time={on_time} reclaim_demands={demands} served_tokens={served_tok} offered_tokens={offered} bills_exact={exact} bills={billed} served_requests={admitted}",
        admitted + false_n
    );
    Ok(())
}

/// The month's span in the ledger: first start, last end (ms).
fn span(w: &World) -> (i64, i64) {
    w.events
        .values()
        .flatten()
        .fold((i64::MAX, 0), |(a, b), e| (a.min(e.start), b.max(e.end)))
}

/// Tokens served by `at` (ledger, settled), every tenant.
fn served_by(w: &World, at: i64) -> i64 {
    w.tenants.keys().map(|t| w.used(t, at)).sum()
}

/// Charts of two runs, from their tables alone (like the judge).
fn charts(on: &Path, off: &Path, days: u32, dir: &Path) -> anyhow::Result<()> {
    let (won, woff) = (load_world(on)?, load_world(off)?);
    std::fs::create_dir_all(dir)?;
    let days = f64::from(days.max(1));
    // Tokens served, cumulative, against the day of the month (each run
    // against its own start: the two replays are the same arrivals).
    let served = |w: &World, name: &str, color: &str| {
        let (t0, t1) = span(w);
        let day_ms = (t1 - t0) as f64 / days;
        let points = (0..=days as i64 * 4)
            .map(|q| {
                let at = t0 + (q as f64 * day_ms / 4.0) as i64;
                (q as f64 / 4.0, served_by(w, at) as f64)
            })
            .collect();
        svg::Series {
            name: name.into(),
            color: color.into(),
            points,
            reference: None,
        }
    };
    let s = [
        served(&won, "borrowing on", "#1f77b4"),
        served(&woff, "borrowing off", "#d62728"),
    ];
    std::fs::write(
        dir.join("fair-served.svg"),
        svg::chart_linear(
            "Tokens served over the month, same requests (ledger)",
            "day of the month",
            "tokens served",
            &s,
        ),
    )?;
    // The pool of the `on` run: free, and lent but unused by its borrower
    // (what a reclaim may take back); dashed: the reclaim threshold.
    let (t0, t1) = span(&won);
    let day_ms = (t1 - t0) as f64 / days;
    let threshold = (won.pool * won.reclaim_below_ppm / 1_000_000) as f64;
    let sample = |f: &dyn Fn(i64) -> i64| -> Vec<(f64, f64)> {
        (0..=days as i64 * 8)
            .map(|q| {
                let at = t0 + (q as f64 * day_ms / 8.0) as i64;
                (q as f64 / 8.0, f(at) as f64)
            })
            .collect()
    };
    let unused = |at: i64| won.lent_unused(at);
    let lent = |at: i64| won.pool - won.free(at);
    let p = [
        svg::Series {
            name: "free".into(),
            color: "#2ca02c".into(),
            points: sample(&|at| won.free(at)),
            reference: Some(threshold),
        },
        svg::Series {
            name: "lent".into(),
            color: "#1f77b4".into(),
            points: sample(&lent),
            reference: None,
        },
        svg::Series {
            name: "lent, unused".into(),
            color: "#ff7f0e".into(),
            points: sample(&unused),
            reference: None,
        },
    ];
    std::fs::write(
        dir.join("fair-pool.svg"),
        svg::chart_linear(
            "The shared pool over the month, borrowing on (dashed: reclaim below this)",
            "day of the month",
            "tokens",
            &p,
        ),
    )?;
    Ok(())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    match Cli::parse().cmd {
        Cmd::Plan { month, mode } => println!("{}", plan(&month, &mode)?),
        Cmd::Replay {
            month,
            url,
            keys,
            out,
            iso,
            iso_secs,
        } => replay(&month, &url, &keys, &out, iso, iso_secs).await?,
        Cmd::Judge {
            client,
            dir,
            max_wait_ms,
            reclaim_secs,
            label,
        } => judge(&client, &dir, &max_wait_ms, reclaim_secs, &label)?,
        Cmd::Chart {
            on,
            off,
            days,
            svg_dir,
        } => charts(&on, &off, days, &svg_dir)?,
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_month_is_the_same_for_a_seed_and_sized_for_a_short_run() {
        let m = Month {
            seed: 4,
            days: 30,
            day_secs: 3.0,
            rate_scale: 2.0,
        };
        let (a, b) = (schedule(&m), schedule(&m));
        assert_eq!(a.len(), b.len());
        assert!(a
            .iter()
            .zip(&b)
            .all(|(x, y)| x.at == y.at && x.out == y.out));
        assert!((2_000..8_000).contains(&a.len()), "{} requests", a.len());
        assert!(a.iter().any(|r| r.burst > 0));
        let spec = plan(&m, "on").unwrap();
        assert!(spec["pool_tokens"].as_i64().unwrap() > 0);
        assert_eq!(spec["tenants"].as_array().unwrap().len(), 12);
    }

    #[test]
    fn list_cost_rounds_up() {
        assert_eq!(list_cost(1, 0), 1);
        assert_eq!(list_cost(1000, 500), 450);
    }
}
