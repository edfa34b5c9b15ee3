//! Every background job that runs once across replicas: the housekeeping
//! that keeps holds and borrowing right (abandoned holds, near-limit
//! borrowing, reclaim: every few seconds, on every replica's schedule) and
//! the calendar (monthly rollover, grant expiry, budget alerts, month-end
//! forecast, reconcile check). Every job takes "now" as a parameter (tests
//! run a month in seconds), runs once across replicas (a Postgres advisory
//! lock, and a claimed slot for scheduled runs), and is recorded in
//! `job_runs` — except a scheduled housekeeping run that found nothing to
//! do, which only counts in `tollgate_job_runs_total{outcome="idle"}`.
// A dependency nothing uses fails CI (clippy -D warnings).
#![cfg_attr(not(test), warn(unused_crate_dependencies))]

pub mod alerts;
pub mod provider_reconcile;
pub mod reconcile;
pub mod rollover;
mod runner;
pub mod schedule;

pub use rollover::RolloverOptions;
pub use runner::{JobRunner, RunResult};

use billing::Archive;
use chrono::{DateTime, Utc};
use domain::period::PlatformClock;
use quota::QuotaEngine;
use serde_json::Value;
use settlement::abandoned::HoldAges;
use settlement::borrow::Borrowing;
use std::sync::Arc;
use std::time::Duration;
use store::{Store, TenantScope};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum JobName {
    StaleHolds,
    Rollover,
    GrantExpiry,
    Alerts,
    Forecast,
    Reconcile,
    BorrowCheck,
    Reclaim,
    ProviderReconcile,
}

impl JobName {
    pub const ALL: [JobName; 9] = [
        JobName::StaleHolds,
        JobName::Rollover,
        JobName::GrantExpiry,
        JobName::Alerts,
        JobName::Forecast,
        JobName::Reconcile,
        JobName::BorrowCheck,
        JobName::Reclaim,
        JobName::ProviderReconcile,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            JobName::StaleHolds => "stale-holds",
            JobName::Rollover => "rollover",
            JobName::GrantExpiry => "grant-expiry",
            JobName::Alerts => "alerts",
            JobName::Forecast => "forecast",
            JobName::Reconcile => "reconcile",
            JobName::BorrowCheck => "borrow-check",
            JobName::Reclaim => "reclaim",
            JobName::ProviderReconcile => "provider-reconcile",
        }
    }

    /// Housekeeping runs every few seconds on every replica, whether or not
    /// the calendar (`billing.scheduler`) is on: without it abandoned holds
    /// keep quota locked and borrowed quota is never lent or taken back.
    pub fn is_housekeeping(self) -> bool {
        matches!(
            self,
            JobName::StaleHolds | JobName::BorrowCheck | JobName::Reclaim
        )
    }

    pub fn parse(s: &str) -> Option<JobName> {
        JobName::ALL.into_iter().find(|j| j.as_str() == s)
    }

    /// The advisory lock a run holds (stale holds keep the lock name the
    /// orphan sweep had before it was a job, so mixed versions never overlap).
    pub fn lock_name(self) -> &'static str {
        match self {
            JobName::StaleHolds => "hold-reconciler",
            other => other.as_str(),
        }
    }
}

/// Tunables of the jobs (config section `billing`).
#[derive(Clone)]
pub struct JobSettings {
    /// Postgres keeps a closed month's rows this long before the purge.
    pub retention: chrono::Duration,
    /// Budget alerts are POSTed here as JSON; None: console notices only.
    pub webhook_url: Option<String>,
    pub webhook_timeout: Duration,
    /// A delivery is given up after this many failed attempts.
    pub webhook_max_attempts: i32,
    /// In-run retries of one delivery, before it waits for the next run.
    pub webhook_quick_retries: u32,
    pub hold_ages: Arc<HoldAges>,
    pub rollover: RolloverOptions,
    /// Decrypts provider accounts' admin keys (`keys.encryption_key`);
    /// None: provider-reconcile fails, saying so.
    pub encryption_key: Option<[u8; 32]>,
}

impl Default for JobSettings {
    fn default() -> Self {
        Self {
            retention: chrono::Duration::days(90),
            webhook_url: None,
            webhook_timeout: Duration::from_secs(5),
            webhook_max_attempts: 20,
            webhook_quick_retries: 3,
            hold_ages: Arc::new(HoldAges {
                stale_after: Duration::from_secs(24 * 3600),
                orphan_after: Duration::from_secs(120),
                writer_grace: settlement::ledger::writer_grace(Duration::from_millis(50)),
            }),
            rollover: RolloverOptions::default(),
            encryption_key: None,
        }
    }
}

/// What every job needs.
#[derive(Clone)]
pub struct JobContext {
    pub store: Store,
    pub quota: Arc<QuotaEngine>,
    pub archive: Option<Archive>,
    pub clock: PlatformClock,
    pub settings: JobSettings,
    pub http: reqwest::Client,
    /// Borrowing and reclaim work on the gateway's in-memory tenants; None
    /// where no catalog is loaded (those two jobs then fail, saying so).
    pub borrowing: Option<Arc<Borrowing>>,
    /// The day `provider-reconcile` runs for (`--day`); None: the days
    /// not yet final.
    pub provider_day: Option<chrono::NaiveDate>,
}

impl JobContext {
    pub fn new(
        store: Store,
        quota: Arc<QuotaEngine>,
        archive: Option<Archive>,
        clock: PlatformClock,
        settings: JobSettings,
    ) -> Self {
        let http = reqwest::Client::builder()
            .timeout(settings.webhook_timeout)
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .expect("http client");
        Self {
            store,
            quota,
            archive,
            clock,
            settings,
            http,
            borrowing: None,
            provider_day: None,
        }
    }

    pub fn with_borrowing(mut self, borrowing: Arc<Borrowing>) -> Self {
        self.borrowing = Some(borrowing);
        self
    }

    fn borrowing(&self, job: JobName) -> Result<&Borrowing, JobError> {
        self.borrowing.as_deref().ok_or_else(|| {
            JobError::Failed(format!(
                "{} needs the tenants' catalog, which this process did not load",
                job.as_str()
            ))
        })
    }

    pub fn books(&self) -> billing::Books {
        billing::Books::new(self.store.clone(), self.archive.clone(), self.clock)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum JobError {
    #[error(transparent)]
    Store(#[from] store::StoreError),
    #[error(transparent)]
    Billing(#[from] billing::BillingError),
    #[error("quota store: {0}")]
    Quota(#[from] quota::QuotaError),
    #[error(transparent)]
    Settlement(#[from] settlement::Error),
    #[error("{0}")]
    Failed(String),
    #[error("failpoint: crashed after the ClickHouse insert, before closing the month")]
    Failpoint,
}

/// How a run ended, with its counts and details for `job_runs`.
#[derive(Debug, Clone, PartialEq)]
pub struct JobReport {
    /// False when the run found something wrong (reconcile differences).
    pub clean: bool,
    /// Nothing to do (a housekeeping run that changed nothing): a scheduled
    /// run like this is counted, not kept in `job_runs`.
    pub idle: bool,
    pub counts: Value,
    pub detail: Value,
    /// One line for logs and the command line.
    pub summary: String,
}

impl JobReport {
    pub fn ok(counts: Value, summary: impl Into<String>) -> Self {
        Self {
            clean: true,
            idle: false,
            counts,
            detail: Value::Null,
            summary: summary.into(),
        }
    }

    /// `ok`, marked idle when `changed` is false.
    fn housekeeping(counts: Value, changed: bool, summary: impl Into<String>) -> Self {
        Self {
            idle: !changed,
            ..Self::ok(counts, summary)
        }
    }
}

/// Runs one job as if at `now` (no lock, no record: the runner does that).
pub async fn execute(
    ctx: &JobContext,
    job: JobName,
    now: DateTime<Utc>,
) -> Result<JobReport, JobError> {
    match job {
        JobName::StaleHolds => stale_holds(ctx, now).await,
        JobName::Rollover => rollover::run(ctx, now, &ctx.settings.rollover).await,
        JobName::GrantExpiry => {
            let n = ctx
                .store
                .record_grant_expiries("job:grant-expiry", now)
                .await?;
            Ok(JobReport::ok(
                serde_json::json!({"expired_grants_recorded": n}),
                format!("grant-expiry: {n} expired grants recorded in the audit log"),
            ))
        }
        JobName::Alerts => alerts::budget_alerts(ctx, now).await,
        JobName::Forecast => alerts::forecast(ctx, now).await,
        JobName::Reconcile => reconcile::run(ctx, now, None).await,
        JobName::BorrowCheck => borrow_check(ctx, now).await,
        JobName::Reclaim => reclaim(ctx, now).await,
        JobName::ProviderReconcile => provider_reconcile::run(ctx, now, ctx.provider_day).await,
    }
}

async fn borrow_check(ctx: &JobContext, now: DateTime<Utc>) -> Result<JobReport, JobError> {
    let granted = ctx
        .borrowing(JobName::BorrowCheck)?
        .run_borrow_check(now)
        .await?;
    Ok(JobReport::housekeeping(
        serde_json::json!({"borrows_granted": granted}),
        granted > 0,
        format!("borrow-check: {granted} borrows granted to tenants near their limit"),
    ))
}

async fn reclaim(ctx: &JobContext, now: DateTime<Utc>) -> Result<JobReport, JobError> {
    let r = ctx.borrowing(JobName::Reclaim)?.run_reclaim(now).await?;
    Ok(JobReport::housekeeping(
        serde_json::json!({
            "period": r.period,
            "lent_before": r.lent_before,
            "need": r.need,
            "reclaimed_tokens": r.reclaimed_tokens,
            "reclaims": r.reclaims,
        }),
        r.reclaims > 0,
        format!(
            "reclaim {}: {} tokens lent, {} needed back, reclaimed {} tokens in {} reclaims",
            r.period, r.lent_before, r.need, r.reclaimed_tokens, r.reclaims
        ),
    ))
}

async fn stale_holds(ctx: &JobContext, now: DateTime<Utc>) -> Result<JobReport, JobError> {
    let tenants = ctx.store.tenant_ids(&TenantScope::system()).await?;
    let r = settlement::abandoned::close_abandoned_holds(
        &ctx.store,
        &ctx.quota,
        &tenants,
        &ctx.clock,
        now.timestamp_millis(),
        &ctx.settings.hold_ages,
    )
    .await?;
    let changed = r != Default::default();
    Ok(JobReport::housekeeping(
        serde_json::json!({
            "tenants": tenants.len(),
            "closed_stale": r.closed_stale,
            "closed_orphaned": r.closed_orphaned,
            "outbox_stored": r.outbox_stored,
            "leases_expired": r.leases_expired,
        }),
        changed,
        format!(
            "stale-holds: {} tenants, closed {} stale and {} orphaned holds, stored {} outbox events",
            tenants.len(),
            r.closed_stale,
            r.closed_orphaned,
            r.outbox_stored
        ),
    ))
}
