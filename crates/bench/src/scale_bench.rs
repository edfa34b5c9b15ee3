//! The scale benchmark's drivers (`SCALE=1 scripts/bench.sh`, docs/benchmarks.md):
//!
//! - `keys`: keys created through the admin API of one replica and used at
//!   once on each replica in turn: how many first calls were refused, the
//!   time from the create call's answer to the first 200, and the time from
//!   a revocation's answer to the first 401 (the change reaching the
//!   replica's index).
//! - `get`: a GET timed several times (bills, CSV, dashboard).
//! - `pages`: the request log's first page, then its cursor followed deep.
//!
//! Output: one `key=value` line per measurement, for the script.

use clap::{Parser, Subcommand};
use std::time::{Duration, Instant};
use tollgate_bench::pct;

#[derive(Parser)]
struct Args {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    Keys {
        /// Admin API base of the replica that creates (and revokes) keys.
        #[arg(long)]
        admin: String,
        /// Bearer token of a platform admin.
        #[arg(long)]
        token: String,
        #[arg(long)]
        tenant: String,
        #[arg(long)]
        app: String,
        /// Gateway bases the new keys are used on, in turn (comma-separated).
        #[arg(long, value_delimiter = ',')]
        urls: Vec<String>,
        #[arg(long, default_value_t = 1000)]
        n: usize,
        /// Every how many keys a revocation is timed too.
        #[arg(long, default_value_t = 10)]
        revoke_every: usize,
    },
    Get {
        #[arg(long)]
        url: String,
        /// A header, `Name: value` (repeatable).
        #[arg(long)]
        header: Vec<String>,
        #[arg(long, default_value_t = 5)]
        n: usize,
        /// Name printed before the figures.
        #[arg(long)]
        name: String,
    },
    Pages {
        /// The request log URL without a cursor (`…/api/v1/requests?limit=50`).
        #[arg(long)]
        url: String,
        #[arg(long)]
        token: String,
        /// How many pages to follow.
        #[arg(long, default_value_t = 200)]
        pages: usize,
    },
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

const CHAT: &str =
    r#"{"model":"gpt-4o-mini","max_tokens":8,"messages":[{"role":"user","content":"hi"}]}"#;

async fn chat(c: &reqwest::Client, base: &str, key: &str) -> anyhow::Result<u16> {
    let r = c
        .post(format!("{base}/v1/chat/completions"))
        .bearer_auth(key)
        .header("content-type", "application/json")
        .body(CHAT)
        .send()
        .await?;
    let s = r.status().as_u16();
    r.bytes().await?;
    Ok(s)
}

/// Calls until the answer is `want` (at most 5 s); the time it took.
async fn until(
    c: &reqwest::Client,
    base: &str,
    key: &str,
    want: u16,
) -> anyhow::Result<(Duration, u16)> {
    let t0 = Instant::now();
    let first = chat(c, base, key).await?;
    let mut s = first;
    while s != want {
        anyhow::ensure!(
            t0.elapsed() < Duration::from_secs(5),
            "{base}: still {s} after 5 s"
        );
        tokio::time::sleep(Duration::from_millis(1)).await;
        s = chat(c, base, key).await?;
    }
    Ok((t0.elapsed(), first))
}

#[allow(clippy::too_many_arguments)]
async fn keys(
    admin: &str,
    token: &str,
    tenant: &str,
    app: &str,
    urls: &[String],
    n: usize,
    revoke_every: usize,
) -> anyhow::Result<()> {
    let c = reqwest::Client::new();
    let mut visible: Vec<Vec<Duration>> = vec![Vec::new(); urls.len()];
    let mut revoked: Vec<Vec<Duration>> = vec![Vec::new(); urls.len()];
    let mut refused_first = vec![0usize; urls.len()];
    let mut served_after_revoke = vec![0usize; urls.len()];
    for i in 0..n {
        let u = i % urls.len();
        let r = c
            .post(format!("{admin}/api/v1/tenants/{tenant}/apps/{app}/keys"))
            .bearer_auth(token)
            .json(&serde_json::json!({"name": format!("scale-{i}")}))
            .send()
            .await?;
        anyhow::ensure!(r.status() == 201, "create key: {}", r.status());
        let body: serde_json::Value = r.json().await?;
        let (key, id) = (
            body["key"].as_str().unwrap_or_default().to_string(),
            body["id"].as_str().unwrap_or_default().to_string(),
        );
        let (took, first) = until(&c, &urls[u], &key, 200).await?;
        visible[u].push(took);
        if first == 401 {
            refused_first[u] += 1;
        }
        // Every `revoke_every`-th round of the replicas: each replica sees
        // revocations, not only the one the round starts on.
        if revoke_every > 0 && (i / urls.len()).is_multiple_of(revoke_every) {
            let r = c
                .delete(format!("{admin}/api/v1/keys/{id}"))
                .bearer_auth(token)
                .send()
                .await?;
            anyhow::ensure!(r.status() == 204, "revoke key: {}", r.status());
            let (took, first) = until(&c, &urls[u], &key, 401).await?;
            revoked[u].push(took);
            if first == 200 {
                served_after_revoke[u] += 1;
            }
        }
    }
    for (u, url) in urls.iter().enumerate() {
        let (v, r) = (&mut visible[u], &mut revoked[u]);
        println!(
            "replica={url} keys={} first_call_401={} usable_p50_ms={:.2} usable_p99_ms={:.2} usable_max_ms={:.2} \
             revocations={} served_after_revoke={} revoked_p50_ms={:.2} revoked_p99_ms={:.2} revoked_max_ms={:.2}",
            v.len(),
            refused_first[u],
            pct(v, 0.5) / 1e3,
            pct(v, 0.99) / 1e3,
            pct(v, 1.0) / 1e3,
            r.len(),
            served_after_revoke[u],
            pct(r, 0.5) / 1e3,
            pct(r, 0.99) / 1e3,
            pct(r, 1.0) / 1e3,
        );
    }
    Ok(())
}

/// GETs `url` `n` times: the whole answer's time and its first body
/// byte's (a streamed export starts long before it ends), p50 and max.
async fn get(url: &str, headers: &[String], n: usize, name: &str) -> anyhow::Result<()> {
    let c = reqwest::Client::new();
    let (mut times, mut firsts) = (Vec::new(), Vec::new());
    let (mut status, mut bytes) = (0, 0);
    for _ in 0..n.max(1) {
        let mut rb = c.get(url);
        for h in headers {
            let (k, v) = h.split_once(':').unwrap_or((h, ""));
            rb = rb.header(k.trim(), v.trim());
        }
        let t0 = Instant::now();
        let mut r = rb.send().await?;
        status = r.status().as_u16();
        bytes = 0;
        let mut first = None;
        while let Some(chunk) = r.chunk().await? {
            first.get_or_insert_with(|| t0.elapsed());
            bytes += chunk.len();
        }
        times.push(t0.elapsed());
        firsts.push(first.unwrap_or_else(|| t0.elapsed()));
    }
    println!(
        "name={name} status={status} bytes={bytes} runs={} p50_ms={:.1} max_ms={:.1} \
         first_byte_p50_ms={:.1} first_byte_max_ms={:.1}",
        times.len(),
        pct(&mut times, 0.5) / 1e3,
        pct(&mut times, 1.0) / 1e3,
        pct(&mut firsts, 0.5) / 1e3,
        pct(&mut firsts, 1.0) / 1e3,
    );
    Ok(())
}

async fn follow_pages(url: &str, token: &str, pages: usize) -> anyhow::Result<()> {
    let c = reqwest::Client::new();
    let (mut times, mut rows, mut cursor) = (Vec::new(), 0usize, None::<String>);
    for _ in 0..pages.max(1) {
        let u = match &cursor {
            Some(cur) => format!("{url}&cursor={cur}"),
            None => url.to_string(),
        };
        let t0 = Instant::now();
        let r = c.get(&u).bearer_auth(token).send().await?;
        anyhow::ensure!(r.status() == 200, "request log: {}", r.status());
        let body: serde_json::Value = r.json().await?;
        times.push(t0.elapsed());
        rows += body["data"].as_array().map_or(0, |a| a.len());
        match body["next_cursor"].as_str() {
            Some(next) => cursor = Some(next.to_string()),
            None => break,
        }
    }
    let (first, last) = (times[0], times[times.len() - 1]);
    println!(
        "pages={} rows={rows} first_ms={:.1} last_ms={:.1} p50_ms={:.1} max_ms={:.1}",
        times.len(),
        ms(first),
        ms(last),
        pct(&mut times, 0.5) / 1e3,
        pct(&mut times, 1.0) / 1e3,
    );
    Ok(())
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    match Args::parse().cmd {
        Cmd::Keys {
            admin,
            token,
            tenant,
            app,
            urls,
            n,
            revoke_every,
        } => keys(&admin, &token, &tenant, &app, &urls, n, revoke_every).await,
        Cmd::Get {
            url,
            header,
            n,
            name,
        } => get(&url, &header, n, &name).await,
        Cmd::Pages { url, token, pages } => follow_pages(&url, &token, pages).await,
    }
}
