//! The calendar's background jobs (docs/design.md §9): stale holds, monthly
//! rollover, grant expiry, budget alerts, month-end forecast, reconcile
//! check. Every job takes "now" as a parameter (tests run a month in
//! seconds), runs once across replicas (a Postgres advisory lock, and a
//! claimed slot for scheduled runs), and is recorded in `job_runs`.

pub mod alerts;
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
use settlement::reconcile::HoldAges;
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
}

impl JobName {
    pub const ALL: [JobName; 6] = [
        JobName::StaleHolds,
        JobName::Rollover,
        JobName::GrantExpiry,
        JobName::Alerts,
        JobName::Forecast,
        JobName::Reconcile,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            JobName::StaleHolds => "stale-holds",
            JobName::Rollover => "rollover",
            JobName::GrantExpiry => "grant-expiry",
            JobName::Alerts => "alerts",
            JobName::Forecast => "forecast",
            JobName::Reconcile => "reconcile",
        }
    }

    pub fn parse(s: &str) -> Option<JobName> {
        JobName::ALL.into_iter().find(|j| j.as_str() == s)
    }

    /// The advisory lock a run holds. Stale holds share the lock of the
    /// every-minute orphan sweep, so the two never overlap.
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
            }),
            rollover: RolloverOptions::default(),
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
        }
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
    pub counts: Value,
    pub detail: Value,
    /// One line for logs and the command line.
    pub summary: String,
}

impl JobReport {
    pub fn ok(counts: Value, summary: impl Into<String>) -> Self {
        Self {
            clean: true,
            counts,
            detail: Value::Null,
            summary: summary.into(),
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
    }
}

async fn stale_holds(ctx: &JobContext, now: DateTime<Utc>) -> Result<JobReport, JobError> {
    let tenants = ctx.store.tenant_ids(&TenantScope::system()).await?;
    let r = settlement::reconcile::close_abandoned_holds(
        &ctx.store,
        &ctx.quota,
        &tenants,
        &ctx.clock,
        now.timestamp_millis(),
        &ctx.settings.hold_ages,
    )
    .await
    .map_err(JobError::Failed)?;
    Ok(JobReport::ok(
        serde_json::json!({
            "tenants": tenants.len(),
            "closed_stale": r.closed_stale,
            "closed_orphaned": r.closed_orphaned,
            "outbox_stored": r.outbox_stored,
        }),
        format!(
            "stale-holds: {} tenants, closed {} stale and {} orphaned holds, stored {} outbox events",
            tenants.len(),
            r.closed_stale,
            r.closed_orphaned,
            r.outbox_stored
        ),
    ))
}
