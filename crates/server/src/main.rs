use clap::{Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;
use tollgate_server::process::{main_with, Mimalloc};
use tollgate_server::{commands, config::Config};

/// mimalloc instead of glibc's malloc (`tollgate_server::process`).
#[global_allocator]
static ALLOC: Mimalloc = Mimalloc;

#[derive(Parser)]
#[command(
    name = "tollgate",
    version,
    about = "Multi-tenant LLM API gateway with budgets that hold"
)]
struct Cli {
    /// Configuration file (default: ./tollgate.toml when present).
    #[arg(long, global = true)]
    config: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Gateway, metrics and background jobs in one process.
    Serve {
        #[arg(long)]
        listen: Option<String>,
    },
    /// Apply the Postgres and ClickHouse schemas.
    Migrate,
    /// Administrative tasks.
    Admin {
        #[command(subcommand)]
        command: AdminCommand,
    },
    /// Verify the audit log's hash chain; exit 1 naming the first broken row.
    AuditVerify,
    /// Run a background job once, now (or as if at --now).
    Jobs {
        #[command(subcommand)]
        command: JobsCommand,
    },
    /// Compare Redis counters, the Postgres ledger and the ClickHouse
    /// archive per tenant and period; print every difference, exit 1 on any.
    Reconcile {
        #[arg(long)]
        check: bool,
        /// One period (YYYY-MM); default this month and the one before.
        #[arg(long)]
        period: Option<String>,
    },
    /// Price sheets.
    Prices {
        #[command(subcommand)]
        command: PricesCommand,
    },
}

#[derive(Subcommand)]
enum PricesCommand {
    /// Read LiteLLM's `model_prices_and_context_window.json`, print what
    /// would change for every model whose upstream name it prices; store
    /// one new sheet per changed model only with --apply.
    Import {
        file: PathBuf,
        #[arg(long)]
        apply: bool,
        /// When the new sheets take effect (RFC 3339; default now).
        #[arg(long)]
        effective_from: Option<String>,
        /// Round a price finer than a µUSD per million tokens (default: refuse it).
        #[arg(long)]
        round: bool,
    },
}

#[derive(Subcommand)]
enum JobsCommand {
    Run {
        /// stale-holds: close abandoned holds; rollover: archive closed months
        /// to ClickHouse and close them; grant-expiry: audit expired grants;
        /// alerts: budget alerts; forecast: month-end forecast; reconcile:
        /// compare the books; borrow-check: lend pool quota to tenants near
        /// their limit; reclaim: take unused borrowed quota back when the
        /// pool runs low; provider-reconcile: compare the books with the
        /// providers' usage and cost reports.
        #[arg(value_parser = ["stale-holds", "rollover", "grant-expiry", "alerts", "forecast", "reconcile", "borrow-check", "reclaim", "provider-reconcile"])]
        job: String,
        /// Run as if at this time (RFC 3339), e.g. to test month ends.
        #[arg(long)]
        now: Option<String>,
        /// provider-reconcile: the day (UTC, YYYY-MM-DD) to reconcile;
        /// default: the last days not yet final.
        #[arg(long)]
        day: Option<String>,
    },
}

#[derive(Subcommand)]
enum AdminCommand {
    CreateUser {
        #[arg(long)]
        email: String,
        #[arg(long)]
        password: String,
        #[arg(long, value_parser = ["platform_admin", "tenant_admin", "finance", "auditor"])]
        role: String,
        #[arg(long)]
        tenant: Option<String>,
    },
}

fn main() -> ExitCode {
    main_with(run(Cli::parse()))
}

async fn run(cli: Cli) -> anyhow::Result<bool> {
    let cfg = Config::load(cli.config.as_deref())?;
    match cli.command {
        Command::Serve { listen } => commands::serve(cfg, listen).await.map(|_| true),
        Command::Migrate => commands::migrate(&cfg).await.map(|_| true),
        Command::Admin {
            command:
                AdminCommand::CreateUser {
                    email,
                    password,
                    role,
                    tenant,
                },
        } => commands::create_user(&cfg, &email, &password, &role, tenant.as_deref())
            .await
            .map(|_| true),
        Command::AuditVerify => commands::audit_verify(&cfg).await,
        Command::Jobs {
            command: JobsCommand::Run { job, now, day },
        } => commands::run_job(&cfg, &job, now.as_deref(), day.as_deref())
            .await
            .map(|r| matches!(r, jobs::RunResult::Ran { ref report, .. } if report.clean)),
        Command::Reconcile { check, period } => {
            if !check {
                anyhow::bail!("only `reconcile --check` exists: it compares and changes nothing");
            }
            commands::reconcile_check(&cfg, period.as_deref()).await
        }
        Command::Prices {
            command:
                PricesCommand::Import {
                    file,
                    apply,
                    effective_from,
                    round,
                },
        } => commands::prices_import(&cfg, &file, apply, effective_from.as_deref(), round).await,
    }
}
