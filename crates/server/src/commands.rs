//! The command-line verbs (docs/design.md §12). Operators script against them: keep
//! names and flags stable.

use crate::config::Config;
use crate::{app, demo};
use anyhow::Context;
use std::net::SocketAddr;
use store::{passwords, Store, TenantScope};
use tokio::net::TcpListener;

pub async fn serve(mut cfg: Config, listen: Option<String>, demo_mode: bool) -> anyhow::Result<()> {
    if let Some(l) = listen {
        cfg.server.listen = l;
    }
    let mut demo_key = None;
    if demo_mode {
        cfg = cfg.with_demo_secrets();
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
        demo_key = Some(demo::seed(&store, &mock_url, &cfg.pepper()?).await?);
        tracing::info!(upstream = %mock_url, "demo platform seeded; built-in mock upstream running");
    }
    tracing::info!(config = ?cfg, "starting");
    let listener = TcpListener::bind(&cfg.server.listen)
        .await
        .with_context(|| format!("cannot listen on {}", cfg.server.listen))?;
    let running = app::start(&cfg, listener).await?;
    let metrics = match (running.metrics_addr, &cfg.metrics.token) {
        (Some(m), _) => format!("http://{m}/metrics"),
        (None, Some(_)) => format!("http://{}/metrics (Bearer metrics.token)", running.addr),
        (None, None) => "off (set metrics.listen or metrics.token)".into(),
    };
    print_banner(running.addr, &metrics, demo_key.as_ref());
    shutdown_signal().await;
    tracing::info!("shutting down: finishing in-flight requests and draining the ledger");
    running.shutdown().await;
    Ok(())
}

fn print_banner(addr: SocketAddr, metrics: &str, demo_key: Option<&demo::DemoKey>) {
    let url = format!("http://{addr}");
    println!("tollgate is serving on {url}");
    println!("  OpenAI-compatible API: {url}/v1    health: {url}/healthz    metrics: {metrics}");
    println!(
        "  console: {url}/console    admin API: {url}/api/v1 (OpenAPI: {url}/api/v1/openapi.json)"
    );
    if let Some(k) = demo_key {
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
    use std::io::Write;
    let _ = std::io::stdout().flush();
}

async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .expect("SIGTERM handler");
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = ctrl_c.await;
}

pub async fn migrate(cfg: &Config) -> anyhow::Result<()> {
    let store = Store::connect(&cfg.database.url, 2)
        .await
        .context("cannot connect to PostgreSQL")?;
    store.migrate().await?;
    println!("postgres: migrations applied");
    cfg.archive()?
        .apply_schema()
        .await
        .context("cannot apply the ClickHouse schema (clickhouse.url)")?;
    println!(
        "clickhouse: schema applied to database {}",
        cfg.clickhouse.database
    );
    Ok(())
}

pub async fn create_user(
    cfg: &Config,
    email: &str,
    password: &str,
    role: &str,
    tenant: Option<&str>,
) -> anyhow::Result<()> {
    let store = Store::connect(&cfg.database.url, 2)
        .await
        .context("cannot connect to PostgreSQL")?;
    store.migrate().await?;
    let hash = passwords::hash(password)?;
    let id = store
        .create_user("cli:admin", email, &hash, role, tenant)
        .await?;
    println!("created user {email} ({role}) with id {id}");
    Ok(())
}

/// Recomputes the audit chain; names the first broken row. Exit 1 if any.
pub async fn audit_verify(cfg: &Config) -> anyhow::Result<bool> {
    let store = Store::connect(&cfg.database.url, 2)
        .await
        .context("cannot connect to PostgreSQL")?;
    let rows = store.audit_chain(&TenantScope::system()).await?;
    let chain: Vec<_> = rows
        .iter()
        .map(|r| (r.entry.clone(), r.prev_hash.clone(), r.hash.clone()))
        .collect();
    match domain::audit::first_broken(&chain) {
        None => {
            println!("audit chain intact: {} rows", rows.len());
            Ok(true)
        }
        Some(i) => {
            let r = &rows[i];
            println!(
                "audit chain BROKEN at row id {} ({} {} by {} at {})",
                r.id, r.entry.action, r.entry.target, r.entry.actor, r.entry.at
            );
            Ok(false)
        }
    }
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

/// The jobs' context for a command-line run.
pub async fn job_context(cfg: &Config) -> anyhow::Result<jobs::JobContext> {
    let store = Store::connect(&cfg.database.url, 4)
        .await
        .context("cannot connect to PostgreSQL")?;
    store.migrate().await?;
    let quota = cfg
        .quota_engine(
            "cli",
            std::time::Duration::from_millis(cfg.redis.timeout_ms.max(1000)),
        )?
        .with_booked_check(std::sync::Arc::new(gateway::replay_check::LedgerBooked(
            store.clone(),
        )));
    let clock =
        domain::period::PlatformClock::parse(&cfg.platform.timezone).map_err(anyhow::Error::msg)?;
    Ok(jobs::JobContext::new(
        store,
        std::sync::Arc::new(quota),
        Some(cfg.archive()?),
        clock,
        cfg.job_settings(),
    ))
}

async fn parse_now(
    ctx: &jobs::JobContext,
    now: Option<&str>,
) -> anyhow::Result<chrono::DateTime<chrono::Utc>> {
    Ok(match now {
        Some(t) => chrono::DateTime::parse_from_rfc3339(t)
            .context("--now must be RFC 3339")?
            .with_timezone(&chrono::Utc),
        // Hold ages are Redis time: use it when Redis answers.
        None => match ctx.quota.now_ms().await {
            Ok(ms) => chrono::DateTime::from_timestamp_millis(ms).unwrap_or_else(chrono::Utc::now),
            Err(_) => chrono::Utc::now(),
        },
    })
}

/// `tollgate jobs run <job> [--now T] [--day D]`: one run, locked and
/// recorded like a scheduled one. Ok(false) when it failed or found differences.
pub async fn run_job(
    cfg: &Config,
    job: &str,
    now: Option<&str>,
    day: Option<&str>,
) -> anyhow::Result<jobs::RunResult> {
    let job = jobs::JobName::parse(job).with_context(|| format!("unknown job {job:?}"))?;
    let mut ctx = job_context(cfg).await?;
    if let Some(d) = day {
        anyhow::ensure!(
            job == jobs::JobName::ProviderReconcile,
            "--day is for provider-reconcile"
        );
        ctx.provider_day = Some(
            chrono::NaiveDate::parse_from_str(d, "%Y-%m-%d").context("--day must be YYYY-MM-DD")?,
        );
    }
    if matches!(job, jobs::JobName::BorrowCheck | jobs::JobName::Reclaim) {
        // Borrowing works on the tenants' catalog: load it for this run.
        let catalog = std::sync::Arc::new(gateway::state::CatalogCache::new(cfg.encryption_key()?));
        catalog.reload(&ctx.store).await?;
        let b = settlement::borrow::Borrowing::new(
            ctx.store.clone(),
            ctx.quota.clone(),
            catalog,
            ctx.clock,
            "cli".into(),
            cfg.fair.tuning(&cfg.gateway).borrow,
        );
        ctx = ctx.with_borrowing(std::sync::Arc::new(b));
    }
    let now = parse_now(&ctx, now).await?;
    let runner = jobs::JobRunner::new(ctx, "cli");
    let r = runner.run(job, now, None).await?;
    match &r {
        jobs::RunResult::Ran { run_id, report } => {
            println!("{} (run {run_id})", report.summary)
        }
        jobs::RunResult::Failed { run_id, error } => {
            println!("{} FAILED (run {run_id}): {error}", job.as_str())
        }
        jobs::RunResult::Skipped => {
            println!("{}: another replica is running it; skipped", job.as_str())
        }
    }
    Ok(r)
}

/// `tollgate admin load-ledger`: a synthetic month through the ledger path.
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

/// `tollgate admin load-keys`: a large catalog of keys.
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

/// `tollgate reconcile --check [--period P]`: prints every difference;
/// Ok(false) when there is any.
pub async fn reconcile_check(cfg: &Config, period: Option<&str>) -> anyhow::Result<bool> {
    let ctx = job_context(cfg).await?;
    let now = parse_now(&ctx, None).await?;
    let r = jobs::reconcile::check(&ctx, now, period).await?;
    for n in &r.notes {
        println!("note: {n}");
    }
    for d in &r.differences {
        println!("DIFFERENCE {d}");
    }
    for d in &r.rollups {
        println!("DIFFERENCE {d}");
    }
    println!(
        "reconcile: {} period(s) [{}], {} tenants, {} difference(s), {} rollup difference(s)",
        r.periods.len(),
        r.periods.join(", "),
        r.tenants_checked,
        r.differences.len(),
        r.rollups.len()
    );
    Ok(r.is_clean())
}

/// `tollgate jobs run stale-holds [--now T]`: close abandoned holds once.
pub async fn stale_holds(
    cfg: &Config,
    now: Option<&str>,
) -> anyhow::Result<settlement::reconcile::ReconcileReport> {
    let store = Store::connect(&cfg.database.url, 2)
        .await
        .context("cannot connect to PostgreSQL")?;
    let quota = cfg.quota_engine(
        "cli",
        std::time::Duration::from_millis(cfg.redis.timeout_ms.max(1000)),
    )?;
    let clock =
        domain::period::PlatformClock::parse(&cfg.platform.timezone).map_err(anyhow::Error::msg)?;
    let now_ms = match now {
        Some(t) => chrono::DateTime::parse_from_rfc3339(t)
            .context("--now must be RFC 3339")?
            .timestamp_millis(),
        None => quota.now_ms().await?,
    };
    let _lock = store
        .try_job_lock("hold-reconciler")
        .await?
        .context("another replica is running this job")?;
    let ages = cfg.job_settings().hold_ages;
    let tenants = store.tenant_ids(&TenantScope::system()).await?;
    let r = settlement::reconcile::close_abandoned_holds(
        &store, &quota, &tenants, &clock, now_ms, &ages,
    )
    .await?;
    println!(
        "stale-holds: {} tenants, closed {} stale and {} orphaned holds, stored {} outbox events",
        tenants.len(),
        r.closed_stale,
        r.closed_orphaned,
        r.outbox_stored
    );
    Ok(r)
}

/// `tollgate prices import FILE`: LiteLLM's price catalog against every
/// model (docs/billing.md, "Importing prices"). Prints the diff; changes
/// nothing without `apply`. False (exit 1) when a price was refused.
pub async fn prices_import(
    cfg: &Config,
    file: &std::path::Path,
    apply: bool,
    effective_from: Option<&str>,
    round: bool,
) -> anyhow::Result<bool> {
    let text =
        std::fs::read_to_string(file).with_context(|| format!("cannot read {}", file.display()))?;
    let catalog: serde_json::Value =
        serde_json::from_str(&text).with_context(|| format!("{} is not JSON", file.display()))?;
    let effective_from = effective_from
        .map(chrono::DateTime::parse_from_rfc3339)
        .transpose()
        .context("--effective-from: not an RFC 3339 instant")?
        .map(|t| t.with_timezone(&chrono::Utc));
    let store = Store::connect(&cfg.database.url, 2)
        .await
        .context("cannot connect to PostgreSQL")?;
    let req = console::ImportIn {
        format: "litellm".into(),
        catalog,
        apply,
        effective_from,
        round,
    };
    let (plan, applied) = console::import_catalog(&store, "cli", &req)
        .await
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    for m in &plan.matched {
        println!("matched {} = {}", m.model, m.entry);
    }
    let price = |v: Option<i64>| v.map_or("-".to_string(), |v| v.to_string());
    for c in &plan.changes {
        println!(
            "change {} {}: {} -> {}",
            c.model,
            c.field,
            price(c.old),
            price(c.new)
        );
    }
    for m in &plan.unmatched_models {
        println!("unmatched {m}");
    }
    for u in &plan.unknown_fields {
        println!("unknown {} {}: {} (not mapped)", u.model, u.entry, u.field);
    }
    for r in &plan.refused {
        println!("error {} {}: {}", r.model, r.field, r.reason);
    }
    let changed = plan.new_sheets.len();
    if applied {
        println!("applied: {changed} new sheet(s)");
    } else {
        println!("not applied: {changed} model(s) would get a new sheet (pass --apply)");
    }
    Ok(plan.refused.is_empty())
}
