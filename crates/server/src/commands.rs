//! The command-line verbs (docs/design.md §12). Operators script against them: keep
//! names and flags stable.

use crate::app;
use crate::config::Config;
use anyhow::Context;
use std::net::SocketAddr;
use store::{passwords, Store, TenantScope};
use tokio::net::TcpListener;

pub async fn serve(cfg: Config, listen: Option<String>) -> anyhow::Result<()> {
    serve_then(cfg, listen, |_| {}).await
}

/// `serve`, with `after_start` called with the address once the server
/// listens (after the banner): the dev binary prints its demo users there.
pub async fn serve_then(
    mut cfg: Config,
    listen: Option<String>,
    after_start: impl FnOnce(SocketAddr),
) -> anyhow::Result<()> {
    if let Some(l) = listen {
        cfg.server.listen = l;
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
    print_banner(running.addr, &metrics);
    after_start(running.addr);
    use std::io::Write;
    let _ = std::io::stdout().flush();
    shutdown_signal().await;
    tracing::info!("shutting down: finishing in-flight requests and draining the ledger");
    running.shutdown().await;
    Ok(())
}

fn print_banner(addr: SocketAddr, metrics: &str) {
    let url = format!("http://{addr}");
    println!("tollgate is serving on {url}");
    println!("  OpenAI-compatible API: {url}/v1    health: {url}/healthz    metrics: {metrics}");
    println!(
        "  console: {url}/console    admin API: {url}/api/v1 (OpenAPI: {url}/api/v1/openapi.json)"
    );
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
    let clock = cfg.platform.clock().map_err(anyhow::Error::msg)?;
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
) -> anyhow::Result<settlement::abandoned::ReconcileReport> {
    let store = Store::connect(&cfg.database.url, 2)
        .await
        .context("cannot connect to PostgreSQL")?;
    let quota = cfg.quota_engine(
        "cli",
        std::time::Duration::from_millis(cfg.redis.timeout_ms.max(1000)),
    )?;
    let clock = cfg.platform.clock().map_err(anyhow::Error::msg)?;
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
    let r = settlement::abandoned::close_abandoned_holds(
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
