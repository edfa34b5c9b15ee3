//! `tollgate-dev`: the demo, the mock provider, and the benchmarks' seeding
//! and loaders (see the library's doc). Reads the same configuration as
//! `tollgate` (`--config`, `TOLLGATE__…`).

use clap::{Parser, Subcommand};
use server::config::Config;
use server::process::{main_with, Mimalloc};
use std::path::PathBuf;
use std::process::ExitCode;

/// mimalloc, as `tollgate` uses (`tollgate_server::process`): the mock
/// provider is the benchmarks' upstream, and its allocator should not be
/// what they measure.
#[global_allocator]
static ALLOC: Mimalloc = Mimalloc;

#[derive(Parser)]
#[command(
    name = "tollgate-dev",
    version,
    about = "tollgate's demo, mock provider and benchmark tools (not for production)"
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
    /// Migrate, seed a demo platform on a built-in mock provider, serve as
    /// `tollgate serve` does, and print the demo users and a curl line.
    Demo {
        #[arg(long)]
        listen: Option<String>,
    },
    /// An OpenAI-compatible fake provider for demos, tests and benchmarks.
    MockUpstream {
        #[arg(long)]
        listen: Option<String>,
        #[arg(long)]
        latency_ms: Option<u64>,
        #[arg(long)]
        output_tokens: Option<u32>,
        #[arg(long)]
        chunk_delay_ms: Option<u64>,
        /// Behave like a real provider: `max_tokens_only`,
        /// `max_completion_tokens_only`, `hidden_reasoning=N`,
        /// `absurd_usage=huge|max|negative|float|text`, comma-separated.
        #[arg(long)]
        personality: Option<String>,
    },
    /// Create (or reuse) the `bench` tenant with every limit set high enough
    /// not to run out, a model `gpt-4o-mini` on the given upstream, and print
    /// a fresh key. Used by scripts/bench.sh and bench/peers/peers.sh.
    ///
    /// With `--isolation`: instead, tenants `iso-a` and `iso-b` (in-flight
    /// limit 2 each) for the isolation benchmark; prints A's key, a space
    /// and B's key.
    ///
    /// With `--scenarios`: instead, tenants `scn-core`, `scn-standard` and
    /// `scn-batch` (every limit kind set) and the models of the load
    /// scenarios; prints their three keys, space-separated.
    BenchSetup {
        #[arg(long)]
        upstream: String,
        /// With `--scenarios`: the upstream of `gpt-4.1`, the long prompts'
        /// model (default: `--upstream`).
        #[arg(long, requires = "scenarios")]
        long_upstream: Option<String>,
        #[arg(long)]
        isolation: bool,
        #[arg(long, conflicts_with = "isolation")]
        scenarios: bool,
        /// The fairness benchmark's tenants and pool: the JSON spec that
        /// `fair-bench plan` prints (scripts/bench_fair.sh).
        #[arg(long, conflicts_with_all = ["isolation", "scenarios"])]
        fair: Option<String>,
    },
    /// Write a synthetic month of usage events (and their rollups) through
    /// the ledger's own write path, with tenants `load-00000`… and their
    /// apps; prints events per second. For capacity planning and benchmarks.
    LoadLedger {
        #[arg(long)]
        events: u64,
        #[arg(long, default_value_t = 100)]
        tenants: u32,
        #[arg(long, default_value_t = 5)]
        apps: u32,
        /// End users the events are spread over (0: none).
        #[arg(long, default_value_t = 0)]
        end_users: u32,
        /// YYYY-MM
        #[arg(long)]
        period: String,
        /// Events per insert (default: the gateway's `ledger_batch`).
        #[arg(long)]
        batch: Option<usize>,
        /// Inserts in flight at once, each on its own connection (the
        /// events and their order within a batch stay the same).
        #[arg(long, default_value_t = 1)]
        parallel: usize,
    },
    /// Create N virtual keys spread over tenants `load-00000`… (each with
    /// an app `app-0`), in batches of one statement each: a large catalog
    /// for the scale benchmark. The keys' plaintexts are not kept.
    LoadKeys {
        #[arg(long)]
        keys: u64,
        #[arg(long, default_value_t = 100)]
        tenants: u32,
    },
}

fn main() -> ExitCode {
    main_with(async { run(Cli::parse()).await.map(|()| true) })
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    let mut cfg = Config::load(cli.config.as_deref())?;
    match cli.command {
        Command::Demo { listen } => tollgate_devtools::demo(cfg, listen).await,
        Command::MockUpstream {
            listen,
            latency_ms,
            output_tokens,
            chunk_delay_ms,
            personality,
        } => {
            if let Some(v) = personality {
                cfg.mock.personality = v;
            }
            if let Some(v) = latency_ms {
                cfg.mock.latency_ms = v;
            }
            if let Some(v) = output_tokens {
                cfg.mock.output_tokens = v;
            }
            if let Some(v) = chunk_delay_ms {
                cfg.mock.chunk_delay_ms = v;
            }
            tollgate_devtools::mock_upstream(&cfg, listen).await
        }
        Command::BenchSetup {
            upstream,
            long_upstream,
            isolation,
            scenarios,
            fair,
        } => {
            tollgate_devtools::bench_setup(
                &cfg,
                (&upstream, long_upstream.as_deref()),
                isolation,
                scenarios,
                fair.as_deref(),
            )
            .await
        }
        Command::LoadLedger {
            events,
            tenants,
            apps,
            end_users,
            period,
            batch,
            parallel,
        } => tollgate_devtools::load_ledger(
            &cfg,
            events,
            (tenants, apps, end_users),
            &period,
            batch,
            parallel,
        )
        .await
        .map(|_| ()),
        Command::LoadKeys { keys, tenants } => {
            tollgate_devtools::load_keys(&cfg, keys, tenants).await
        }
    }
}
