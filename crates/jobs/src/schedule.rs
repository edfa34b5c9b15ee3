//! The schedule inside `tollgate serve` (tokio-cron-scheduler, platform
//! time). Every replica runs the same schedule; the runner makes each fire
//! run once across them (advisory lock + the fire's minute as the slot).

use crate::{JobName, JobRunner, RunResult};
use chrono::{DurationRound, Utc};
use tokio_cron_scheduler::{Job, JobScheduler, JobSchedulerError};

/// Cron (sec min hour day-of-month month day-of-week), platform time.
pub fn cron_of(job: JobName) -> &'static str {
    match job {
        // Hourly; the gateway's every-minute sweep closes orphans sooner.
        JobName::StaleHolds => "0 0 * * * *",
        // 00:05 on the 1st closes the month before; the hourly runs retry
        // a deferred or failed rollover and purge after retention (a run
        // with nothing to do is a few queries).
        JobName::Rollover => "0 5 * * * *",
        JobName::GrantExpiry => "0 */5 * * * *",
        JobName::Alerts => "0 */5 * * * *",
        JobName::Forecast => "0 30 * * * *",
        JobName::Reconcile => "0 45 * * * *",
    }
}

pub struct Schedule {
    sched: JobScheduler,
}

impl Schedule {
    pub async fn start(runner: JobRunner) -> Result<Schedule, JobSchedulerError> {
        let sched = JobScheduler::new().await?;
        let tz = runner.ctx.clock.tz;
        for job in JobName::ALL {
            let runner = runner.clone();
            let j = Job::new_async_tz(cron_of(job), tz, move |_id, _lock| {
                let runner = runner.clone();
                Box::pin(async move {
                    let now = Utc::now();
                    let slot = now
                        .duration_trunc(chrono::Duration::minutes(1))
                        .unwrap_or(now);
                    match runner.run(job, now, Some(slot)).await {
                        Ok(RunResult::Ran { report, .. }) => {
                            tracing::info!(job = job.as_str(), summary = %report.summary, "job ran")
                        }
                        Ok(RunResult::Failed { error, .. }) => {
                            tracing::warn!(job = job.as_str(), %error, "job failed")
                        }
                        Ok(RunResult::Skipped) => {}
                        Err(e) => {
                            tracing::warn!(job = job.as_str(), error = %e, "job could not start")
                        }
                    }
                })
            })?;
            sched.add(j).await?;
        }
        sched.start().await?;
        Ok(Schedule { sched })
    }

    pub async fn shutdown(mut self) {
        let _ = self.sched.shutdown().await;
    }
}
