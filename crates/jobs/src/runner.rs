//! Runs a job once across replicas and records the run: take the job's
//! advisory lock (another replica running it: skip), claim the run's slot
//! (a scheduled instant another replica already ran: skip), execute, record
//! outcome, counts and error.

use crate::{execute, JobContext, JobError, JobName, JobReport};
use chrono::{DateTime, Utc};
use serde_json::{json, Value};

#[derive(Debug, Clone, PartialEq)]
pub enum RunResult {
    /// This replica ran it; `report.clean` is false for findings.
    Ran { run_id: i64, report: JobReport },
    /// This replica ran it and it failed (recorded, retried by schedule).
    Failed { run_id: i64, error: String },
    /// Another replica holds the lock or already ran this slot.
    Skipped,
}

#[derive(Clone)]
pub struct JobRunner {
    pub ctx: JobContext,
    /// Who runs (the replica's name, or `cli`).
    pub replica: String,
}

impl JobRunner {
    pub fn new(ctx: JobContext, replica: impl Into<String>) -> Self {
        Self {
            ctx,
            replica: replica.into(),
        }
    }

    /// Runs `job` as if at `now`. `slot`: the scheduled instant this run is
    /// for (None for a run by hand).
    pub async fn run(
        &self,
        job: JobName,
        now: DateTime<Utc>,
        slot: Option<DateTime<Utc>>,
    ) -> Result<RunResult, JobError> {
        let Some(lock) = self.ctx.store.try_job_lock(job.lock_name()).await? else {
            return Ok(RunResult::Skipped);
        };
        let Some(run_id) = self
            .ctx
            .store
            .claim_job_run(job.as_str(), slot, now, &self.replica)
            .await?
        else {
            return Ok(RunResult::Skipped);
        };
        self.ctx
            .store
            .abandon_stale_runs(job.as_str(), run_id)
            .await?;
        let result = execute(&self.ctx, job, now).await;
        let recorded = match &result {
            Ok(r) => {
                let outcome = if r.clean { "ok" } else { "differences" };
                self.ctx
                    .store
                    .finish_job_run(run_id, outcome, &r.counts, &r.detail, None)
                    .await
            }
            Err(e) => {
                let msg = e.to_string();
                tracing::warn!(job = job.as_str(), error = %msg, "job failed; the schedule retries it");
                let _ = self
                    .ctx
                    .store
                    .add_notice(
                        None,
                        "job_failed",
                        &format!("job {} failed: {msg}", job.as_str()),
                        &json!({"job": job.as_str(), "run_id": run_id}),
                    )
                    .await;
                self.ctx
                    .store
                    .finish_job_run(run_id, "failed", &json!({}), &Value::Null, Some(&msg))
                    .await
            }
        };
        drop(lock);
        recorded?;
        Ok(match result {
            Ok(report) => RunResult::Ran { run_id, report },
            Err(e) => RunResult::Failed {
                run_id,
                error: e.to_string(),
            },
        })
    }
}
