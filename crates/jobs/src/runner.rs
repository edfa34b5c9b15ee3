//! Runs a job once across replicas and records the run: take the job's
//! advisory lock (another replica running it: skip), claim the run's slot
//! (a scheduled instant another replica already ran: skip), execute, record
//! outcome, counts and error. A scheduled housekeeping run that found
//! nothing to do gives its row back (every few seconds on every replica, it
//! would otherwise be most of `job_runs`); every run is counted in
//! `tollgate_job_runs_total{job,outcome}`.

/// Runs by job and outcome: `ok`, `idle`, `differences`, `failed`, `skipped`.
pub const JOB_RUNS: &str = "tollgate_job_runs_total";
/// When each job last finished a run on this replica (Unix seconds).
pub const JOB_LAST_RUN: &str = "tollgate_job_last_run_timestamp_seconds";

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
            count(job, "skipped");
            return Ok(RunResult::Skipped);
        };
        let Some(run_id) = self
            .ctx
            .store
            .claim_job_run(job.as_str(), slot, now, &self.replica)
            .await?
        else {
            lock.release().await?;
            count(job, "skipped");
            return Ok(RunResult::Skipped);
        };
        self.ctx
            .store
            .abandon_stale_runs(job.as_str(), run_id)
            .await?;
        let result = execute(&self.ctx, job, now).await;
        let recorded = match &result {
            Ok(r) if r.idle && slot.is_some() => self.ctx.store.discard_job_run(run_id).await,
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
        // Released after the record is written: a replica that takes the
        // lock next sees this run finished.
        let released = lock.release().await;
        recorded?;
        released?;
        count(
            job,
            match &result {
                Ok(r) if !r.clean => "differences",
                Ok(r) if r.idle => "idle",
                Ok(_) => "ok",
                Err(_) => "failed",
            },
        );
        metrics::gauge!(JOB_LAST_RUN, "job" => job.as_str()).set(Utc::now().timestamp() as f64);
        Ok(match result {
            Ok(report) => RunResult::Ran { run_id, report },
            Err(e) => RunResult::Failed {
                run_id,
                error: e.to_string(),
            },
        })
    }
}

fn count(job: JobName, outcome: &'static str) {
    metrics::counter!(JOB_RUNS, "job" => job.as_str(), "outcome" => outcome).increment(1);
}
