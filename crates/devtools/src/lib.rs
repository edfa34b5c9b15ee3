//! `tollgate-dev`: what a developer, a demo and the benchmarks need and a
//! production deployment must not carry — the demo platform on a built-in
//! mock provider, the mock provider on its own, the benchmarks' tenants, and
//! the synthetic ledger and key loaders. The shipped `tollgate` binary
//! depends on none of it (and not on the mock provider).
// A dependency nothing uses fails CI (clippy -D warnings).
#![cfg_attr(not(test), warn(unused_crate_dependencies))]

// Used by the binary (main.rs) only.
use clap as _;

pub mod demo;
pub mod load_ledger;

use anyhow::Context;
use server::config::Config;
use std::net::SocketAddr;
use store::Store;
use tokio::net::TcpListener;

/// `tollgate-dev demo`: migrate, start a mock provider in this process, seed
/// a demo platform on it (two users, a tenant, an app, a key), then serve
/// exactly as `tollgate serve` does and print the users and a curl line.
pub async fn demo(cfg: Config, listen: Option<String>) -> anyhow::Result<()> {
    let cfg = cfg.with_demo_secrets();
    let (mock_url, _stats) = mock_upstream::spawn(mock_upstream::MockConfig {
        latency_ms: cfg.mock.latency_ms,
        output_tokens: cfg.mock.output_tokens,
        chunk_delay_ms: cfg.mock.chunk_delay_ms,
        ..Default::default()
    })
    .await;
    let store = Store::connect(&cfg.database.url, 4)
        .await
        .context("cannot connect to PostgreSQL")?;
    store.migrate().await?;
    let key = demo::seed(&store, &mock_url, &cfg.pepper()?).await?;
    drop(store);
    tracing::info!(upstream = %mock_url, "demo platform seeded; built-in mock upstream running");
    server::commands::serve_then(cfg, listen, |addr| print_demo(addr, &key)).await
}

fn print_demo(addr: SocketAddr, k: &demo::DemoKey) {
    let url = format!("http://{addr}");
    println!("demo users (sign in to the console at {url}/console/login):");
    println!(
        "  platform admin: {} / {}",
        demo::ADMIN_EMAIL,
        demo::ADMIN_PASSWORD
    );
    println!(
        "  finance:        {} / {}",
        demo::FINANCE_EMAIL,
        demo::FINANCE_PASSWORD
    );
    println!(
        "demo key for tenant {:?}, app {:?} (shown once):",
        k.tenant, k.app
    );
    println!("  {}", k.key);
    println!("try it:");
    println!(
        "curl -sS {url}/v1/chat/completions -H 'Authorization: Bearer {}' -H 'Content-Type: application/json' -d '{{\"model\":\"gpt-4o-mini\",\"messages\":[{{\"role\":\"user\",\"content\":\"Hello, tollgate!\"}}]}}'",
        k.key
    );
}

pub async fn mock_upstream(cfg: &Config, listen: Option<String>) -> anyhow::Result<()> {
    let addr = listen.unwrap_or_else(|| cfg.mock.listen.clone());
    let listener = TcpListener::bind(&addr)
        .await
        .with_context(|| format!("cannot listen on {addr}"))?;
    println!(
        "mock upstream serving on http://{}/v1",
        listener.local_addr()?
    );
    let personality =
        mock_upstream::Personality::parse(&cfg.mock.personality).map_err(anyhow::Error::msg)?;
    let mock = mock_upstream::MockConfig {
        latency_ms: cfg.mock.latency_ms,
        output_tokens: cfg.mock.output_tokens,
        chunk_delay_ms: cfg.mock.chunk_delay_ms,
        personality,
        ..Default::default()
    };
    mock_upstream::serve(listener, mock, Default::default()).await?;
    Ok(())
}

pub async fn bench_setup(
    cfg: &Config,
    (upstream, long_upstream): (&str, Option<&str>),
    isolation: bool,
    scenarios: bool,
    fair: Option<&str>,
) -> anyhow::Result<()> {
    let store = Store::connect(&cfg.database.url, 2)
        .await
        .context("cannot connect to PostgreSQL")?;
    store.migrate().await?;
    let pepper = cfg.clone().with_demo_secrets().pepper()?;
    if let Some(spec) = fair {
        let spec: crate::demo::FairSpec =
            serde_json::from_str(spec).context("--fair: the spec `fair-bench plan` writes")?;
        for (tenant, key) in crate::demo::seed_fair(&store, upstream, &pepper, &spec).await? {
            println!("{tenant} {key}");
        }
    } else if scenarios {
        let [c, s, b] = crate::demo::seed_scenarios(
            &store,
            (upstream, long_upstream.unwrap_or(upstream)),
            &pepper,
        )
        .await?;
        println!("{c} {s} {b}");
    } else if isolation {
        let (a, b) = crate::demo::seed_isolation(&store, upstream, &pepper).await?;
        println!("{a} {b}");
    } else {
        println!(
            "{}",
            crate::demo::seed_bench(&store, upstream, &pepper).await?
        );
    }
    Ok(())
}

/// `tollgate-dev load-ledger`: a synthetic month through the ledger path.
pub async fn load_ledger(
    cfg: &Config,
    events: u64,
    (tenants, apps, end_users): (u32, u32, u32),
    period: &str,
    batch: Option<usize>,
    parallel: usize,
) -> anyhow::Result<crate::load_ledger::LoadReport> {
    let parallel = parallel.max(1);
    let store = Store::connect(&cfg.database.url, parallel as u32 + 1).await?;
    store.migrate().await?;
    let plan = crate::load_ledger::LoadPlan {
        events,
        tenants,
        apps,
        end_users,
        period: period.to_string(),
        batch: batch.unwrap_or(cfg.gateway.ledger_batch),
        parallel,
        progress: true,
    };
    let r = crate::load_ledger::load(&store, &plan).await?;
    println!(
        "load-ledger: {} new events of {events} in {:.1}s: {:.0} events/s",
        r.events_written,
        r.seconds,
        r.events_per_sec()
    );
    Ok(r)
}

/// `tollgate-dev load-keys`: a large catalog of keys.
pub async fn load_keys(cfg: &Config, keys: u64, tenants: u32) -> anyhow::Result<()> {
    let store = Store::connect(&cfg.database.url, 2).await?;
    store.migrate().await?;
    let pepper = cfg.clone().with_demo_secrets().pepper()?;
    let started = std::time::Instant::now();
    let n = crate::load_ledger::load_keys(&store, &pepper, keys, tenants).await?;
    println!(
        "load-keys: {n} keys over {tenants} tenants in {:.1}s",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}
