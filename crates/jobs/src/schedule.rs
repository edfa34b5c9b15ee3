//! The schedule inside `tollgate serve` (tokio-cron-scheduler, platform
//! time). Every replica runs the same schedule; the runner makes each fire
//! run once across them (advisory lock + the fire's slot: its minute for a
//! cron job, its window of the interval for a housekeeping job).

use crate::{JobName, JobRunner, RunResult};
use chrono::{DateTime, DurationRound, Utc};
use std::time::Duration;
use tokio_cron_scheduler::{Job, JobScheduler, JobSchedulerError};

/// When a job fires.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trigger {
    /// Cron (sec min hour day-of-month month day-of-week), platform time.
    Cron(&'static str),
    /// Every interval, from the replica's start.
    Every(Duration),
}

impl Trigger {
    /// The slot a fire at `now` claims: replicas firing within one window
    /// of the trigger claim the same slot, so one of them runs it.
    pub fn slot(self, now: DateTime<Utc>) -> DateTime<Utc> {
        let window = match self {
            Trigger::Cron(_) => chrono::Duration::minutes(1),
            Trigger::Every(d) => chrono::Duration::from_std(d.max(Duration::from_secs(1)))
                .unwrap_or(chrono::Duration::minutes(1)),
        };
        now.duration_trunc(window).unwrap_or(now)
    }
}

/// Cron of the calendar jobs; None for the housekeeping ones (intervals).
pub fn cron_of(job: JobName) -> Option<&'static str> {
    Some(match job {
        // 00:05 on the 1st closes the month before; the hourly runs retry
        // a deferred or failed rollover and purge after retention (a run
        // with nothing to do is a few queries).
        JobName::Rollover => "0 5 * * * *",
        JobName::GrantExpiry => "0 */5 * * * *",
        JobName::Alerts => "0 */5 * * * *",
        JobName::Forecast => "0 30 * * * *",
        JobName::Reconcile => "0 45 * * * *",
        // Daily: yesterday and the days the provider may still revise.
        JobName::ProviderReconcile => "0 15 6 * * *",
        JobName::StaleHolds | JobName::BorrowCheck | JobName::Reclaim => return None,
    })
}

/// How often the housekeeping jobs run (config: `gateway`, `fair`).
#[derive(Debug, Clone, Copy)]
pub struct Housekeeping {
    /// Abandoned holds (stale or orphaned): every minute.
    pub stale_holds: Duration,
    /// Near-limit borrowing and pending-borrow recovery.
    pub borrow_check: Duration,
    /// Reclaim; None turns it off.
    pub reclaim: Option<Duration>,
}

impl Default for Housekeeping {
    fn default() -> Self {
        Self {
            stale_holds: Duration::from_secs(60),
            borrow_check: Duration::from_secs(10),
            reclaim: Some(Duration::from_secs(60)),
        }
    }
}

/// What a replica's schedule runs: the housekeeping always, the calendar
/// when `calendar` (`billing.scheduler`) is on.
pub fn plan(calendar: bool, h: Housekeeping) -> Vec<(JobName, Trigger)> {
    let mut out = vec![
        (JobName::StaleHolds, Trigger::Every(h.stale_holds)),
        (JobName::BorrowCheck, Trigger::Every(h.borrow_check)),
    ];
    if let Some(every) = h.reclaim {
        out.push((JobName::Reclaim, Trigger::Every(every)));
    }
    if calendar {
        out.extend(
            JobName::ALL
                .into_iter()
                .filter_map(|j| cron_of(j).map(|c| (j, Trigger::Cron(c)))),
        );
    }
    out
}

pub struct Schedule {
    sched: JobScheduler,
}

impl Schedule {
    pub async fn start(
        runner: JobRunner,
        plan: Vec<(JobName, Trigger)>,
    ) -> Result<Schedule, JobSchedulerError> {
        let sched = JobScheduler::new().await?;
        let tz = runner.ctx.clock.tz;
        for (job, trigger) in plan {
            let runner = runner.clone();
            let fire = move |_id, _lock| {
                let runner = runner.clone();
                Box::pin(async move { fire(&runner, job, trigger).await })
                    as std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>
            };
            let j = match trigger {
                Trigger::Cron(cron) => Job::new_async_tz(cron, tz, fire)?,
                Trigger::Every(every) => Job::new_repeated_async(every, fire)?,
            };
            sched.add(j).await?;
        }
        sched.start().await?;
        Ok(Schedule { sched })
    }

    pub async fn shutdown(mut self) {
        let _ = self.sched.shutdown().await;
    }
}

async fn fire(runner: &JobRunner, job: JobName, trigger: Trigger) {
    let now = Utc::now();
    match runner.run(job, now, Some(trigger.slot(now))).await {
        Ok(RunResult::Ran { report, .. }) if !report.idle => {
            tracing::info!(job = job.as_str(), summary = %report.summary, "job ran")
        }
        Ok(RunResult::Ran { .. }) | Ok(RunResult::Skipped) => {}
        Ok(RunResult::Failed { error, .. }) => {
            tracing::warn!(job = job.as_str(), %error, "job failed")
        }
        Err(e) => tracing::warn!(job = job.as_str(), error = %e, "job could not start"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_housekeeping_runs_without_the_calendar() {
        let jobs = |p: Vec<(JobName, Trigger)>| p.into_iter().map(|(j, _)| j).collect::<Vec<_>>();
        let off = jobs(plan(false, Housekeeping::default()));
        assert_eq!(
            off,
            [JobName::StaleHolds, JobName::BorrowCheck, JobName::Reclaim]
        );
        let on = jobs(plan(true, Housekeeping::default()));
        assert_eq!(on.len(), JobName::ALL.len(), "every job is scheduled once");
        let no_reclaim = Housekeeping {
            reclaim: None,
            ..Default::default()
        };
        assert!(!jobs(plan(true, no_reclaim)).contains(&JobName::Reclaim));
        for j in JobName::ALL {
            assert_eq!(cron_of(j).is_none(), j.is_housekeeping(), "{j:?}");
        }
    }

    #[test]
    fn replicas_firing_within_one_window_claim_one_slot() {
        let t = |s: &str| DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc);
        let every = Trigger::Every(Duration::from_secs(10));
        assert_eq!(
            every.slot(t("2026-12-01T10:00:03Z")),
            every.slot(t("2026-12-01T10:00:08Z"))
        );
        assert_ne!(
            every.slot(t("2026-12-01T10:00:08Z")),
            every.slot(t("2026-12-01T10:00:11Z"))
        );
        let cron = Trigger::Cron("0 */5 * * * *");
        assert_eq!(
            cron.slot(t("2026-12-01T10:05:00.4Z")),
            t("2026-12-01T10:05:00Z")
        );
    }
}
