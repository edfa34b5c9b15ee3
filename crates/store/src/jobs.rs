//! Background jobs' records: job runs, budget alerts (and their webhook
//! outbox), console notices, and expired grants written to the audit log.

use crate::audit::{append, NewAudit};
use crate::{Result, Store, TenantScope};
use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::{json, Value};
use uuid::Uuid;

#[derive(Debug, Clone, Serialize, sqlx::FromRow)]
pub struct JobRunRow {
    pub id: i64,
    pub job: String,
    pub slot: Option<DateTime<Utc>>,
    pub run_as: DateTime<Utc>,
    pub replica: String,
    pub started_at: DateTime<Utc>,
    pub finished_at: Option<DateTime<Utc>>,
    pub outcome: String,
    pub counts: Value,
    pub detail: Value,
    pub error: Option<String>,
}

const RUN_COLS: &str =
    "id, job, slot, run_as, replica, started_at, finished_at, outcome, counts, detail, error";

/// A budget alert: the row is the webhook's outbox too.
#[derive(Debug, Clone, Serialize, sqlx::FromRow)]
pub struct AlertRow {
    pub id: i64,
    pub tenant_id: String,
    pub scope: String,
    pub period: String,
    pub measure: String,
    pub threshold: String,
    pub payload: Value,
    pub created_at: DateTime<Utc>,
    pub delivery: String,
    pub attempts: i32,
    pub delivered_at: Option<DateTime<Utc>>,
    pub last_error: Option<String>,
}

const ALERT_COLS: &str = "id, tenant_id, scope, period, measure, threshold, payload, created_at, delivery, attempts, delivered_at, last_error";

#[derive(Debug, Clone)]
pub struct NewAlert {
    pub tenant_id: String,
    pub scope: String,
    pub period: String,
    pub measure: String,
    pub threshold: String,
    pub payload: Value,
    /// The console notice that goes with it.
    pub notice: String,
    /// No webhook configured: the notice is the only channel.
    pub webhook: bool,
    /// The job's "now": the first delivery is due then.
    pub at: DateTime<Utc>,
}

#[derive(Debug, Clone, Serialize, sqlx::FromRow)]
pub struct NoticeRow {
    pub id: i64,
    pub at: DateTime<Utc>,
    pub tenant_id: Option<String>,
    pub kind: String,
    pub message: String,
    pub detail: Value,
}

impl Store {
    /// Claims a run. A scheduled run (`slot` set) that another replica has
    /// already claimed returns None; a run by hand always gets a row.
    pub async fn claim_job_run(
        &self,
        job: &str,
        slot: Option<DateTime<Utc>>,
        run_as: DateTime<Utc>,
        replica: &str,
    ) -> Result<Option<i64>> {
        Ok(sqlx::query_scalar(
            "INSERT INTO job_runs (job, slot, run_as, replica) VALUES ($1, $2, $3, $4)
             ON CONFLICT (job, slot) DO NOTHING RETURNING id",
        )
        .bind(job)
        .bind(slot)
        .bind(run_as)
        .bind(replica)
        .fetch_optional(&self.pool)
        .await?)
    }

    /// Runs of `job` still marked running although this run holds the job's
    /// lock: their process died. Marked abandoned.
    pub async fn abandon_stale_runs(&self, job: &str, current: i64) -> Result<u64> {
        Ok(sqlx::query(
            "UPDATE job_runs SET outcome = 'abandoned', finished_at = now(),
                 error = 'the process running it stopped before it finished'
             WHERE job = $1 AND outcome = 'running' AND id <> $2",
        )
        .bind(job)
        .bind(current)
        .execute(&self.pool)
        .await?
        .rows_affected())
    }

    /// Gives back the row of a claimed run that is not worth keeping (a
    /// scheduled housekeeping run with nothing to do).
    pub async fn discard_job_run(&self, id: i64) -> Result<()> {
        sqlx::query("DELETE FROM job_runs WHERE id = $1")
            .bind(id)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    pub async fn finish_job_run(
        &self,
        id: i64,
        outcome: &str,
        counts: &Value,
        detail: &Value,
        error: Option<&str>,
    ) -> Result<()> {
        sqlx::query(
            "UPDATE job_runs SET finished_at = now(), outcome = $2, counts = $3, detail = $4, error = $5
             WHERE id = $1",
        )
        .bind(id)
        .bind(outcome)
        .bind(counts)
        .bind(detail)
        .bind(error)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// The newest runs, of one job or all. Runs are the platform's (their
    /// details name every tenant): a one-tenant scope reads none.
    pub async fn job_runs(
        &self,
        scope: &TenantScope,
        job: Option<&str>,
        limit: i64,
    ) -> Result<Vec<JobRunRow>> {
        self.runs(scope, job, None, limit).await
    }

    /// A page of runs of every job, newest first: those below id `before`
    /// (`None`: the newest). Like `job_runs`, none for a one-tenant scope.
    pub async fn job_runs_page(
        &self,
        scope: &TenantScope,
        before: Option<i64>,
        limit: i64,
    ) -> Result<Vec<JobRunRow>> {
        self.runs(scope, None, before, limit).await
    }

    /// Runs newest first, of `job` (or all), below id `before` (or from
    /// the newest); none for a one-tenant scope.
    async fn runs(
        &self,
        scope: &TenantScope,
        job: Option<&str>,
        before: Option<i64>,
        limit: i64,
    ) -> Result<Vec<JobRunRow>> {
        let rows = sqlx::query_as::<_, JobRunRow>(&format!(
            "SELECT {RUN_COLS} FROM job_runs
             WHERE ($1::text IS NULL OR job = $1) AND ($4::bigint IS NULL OR id < $4) AND $3
             ORDER BY id DESC LIMIT $2"
        ))
        .bind(job)
        .bind(limit)
        .bind(scope.is_all())
        .bind(before)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows)
    }

    /// Records an alert and its console notice, once per scope, measure,
    /// threshold and month. Returns false when it was already recorded.
    pub async fn record_alert(&self, a: &NewAlert) -> Result<bool> {
        let mut tx = self.pool.begin().await?;
        let id: Option<i64> = sqlx::query_scalar(
            "INSERT INTO budget_alerts (tenant_id, scope, period, measure, threshold, payload, delivery, next_attempt_at)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
             ON CONFLICT (scope, period, measure, threshold) DO NOTHING RETURNING id",
        )
        .bind(&a.tenant_id)
        .bind(&a.scope)
        .bind(&a.period)
        .bind(&a.measure)
        .bind(&a.threshold)
        .bind(&a.payload)
        .bind(if a.webhook { "pending" } else { "no_webhook" })
        .bind(a.at)
        .fetch_optional(&mut *tx)
        .await?;
        if id.is_none() {
            return Ok(false);
        }
        sqlx::query(
            "INSERT INTO notices (tenant_id, kind, message, detail) VALUES ($1, $2, $3, $4)",
        )
        .bind(&a.tenant_id)
        .bind(format!("budget_{}", a.threshold))
        .bind(&a.notice)
        .bind(&a.payload)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(true)
    }

    /// The scope's alerts whose webhook delivery is due.
    pub async fn due_alerts(
        &self,
        scope: &TenantScope,
        now: DateTime<Utc>,
    ) -> Result<Vec<AlertRow>> {
        let rows = sqlx::query_as::<_, AlertRow>(&format!(
            "SELECT {ALERT_COLS} FROM budget_alerts WHERE delivery = 'pending' AND next_attempt_at <= $1
               AND ($2::text IS NULL OR tenant_id = $2)
             ORDER BY id LIMIT 200"
        ))
        .bind(now)
        .bind(scope.tenant())
        .fetch_all(&self.pool)
        .await?;
        Ok(rows)
    }

    pub async fn alert_delivered(&self, id: i64, attempts: i32) -> Result<()> {
        sqlx::query(
            "UPDATE budget_alerts SET delivery = 'delivered', delivered_at = now(), attempts = $2,
                 last_error = NULL WHERE id = $1",
        )
        .bind(id)
        .bind(attempts)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// A delivery failed: try again at `next`, or give up.
    pub async fn alert_failed(
        &self,
        id: i64,
        attempts: i32,
        error: &str,
        next: DateTime<Utc>,
        give_up: bool,
    ) -> Result<()> {
        sqlx::query(
            "UPDATE budget_alerts SET attempts = $2, last_error = $3, next_attempt_at = $4,
                 delivery = CASE WHEN $5 THEN 'gave_up' ELSE delivery END WHERE id = $1",
        )
        .bind(id)
        .bind(attempts)
        .bind(error)
        .bind(next)
        .bind(give_up)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// The scope's alerts, of one month or all.
    pub async fn alerts(&self, scope: &TenantScope, period: Option<&str>) -> Result<Vec<AlertRow>> {
        let rows = sqlx::query_as::<_, AlertRow>(&format!(
            "SELECT {ALERT_COLS} FROM budget_alerts
             WHERE ($1::text IS NULL OR period = $1) AND ($2::text IS NULL OR tenant_id = $2)
             ORDER BY id"
        ))
        .bind(period)
        .bind(scope.tenant())
        .fetch_all(&self.pool)
        .await?;
        Ok(rows)
    }

    pub async fn add_notice(
        &self,
        tenant: Option<&str>,
        kind: &str,
        message: &str,
        detail: &Value,
    ) -> Result<()> {
        sqlx::query(
            "INSERT INTO notices (tenant_id, kind, message, detail) VALUES ($1, $2, $3, $4)",
        )
        .bind(tenant)
        .bind(kind)
        .bind(message)
        .bind(detail)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// Newest notices: a one-tenant scope's, or every notice (the
    /// platform's own, without a tenant, included) for every tenant's scope.
    pub async fn notices(&self, scope: &TenantScope, limit: i64) -> Result<Vec<NoticeRow>> {
        let rows = sqlx::query_as::<_, NoticeRow>(
            "SELECT id, at, tenant_id, kind, message, detail FROM notices
             WHERE ($1::text IS NULL OR tenant_id = $1) ORDER BY id DESC LIMIT $2",
        )
        .bind(scope.tenant())
        .bind(limit)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows)
    }

    /// Writes an audit row for every approved grant that has expired by
    /// `now` and was not recorded yet, once each. Returns how many.
    pub async fn record_grant_expiries(&self, actor: &str, now: DateTime<Utc>) -> Result<u64> {
        let ids: Vec<Uuid> = sqlx::query_scalar(
            "SELECT q.id FROM quota_requests q
             WHERE q.state = 'approved' AND q.expires_at <= $1
               AND NOT EXISTS (SELECT 1 FROM grant_expiries g WHERE g.quota_request_id = q.id)
             ORDER BY q.expires_at LIMIT 1000",
        )
        .bind(now)
        .fetch_all(&self.pool)
        .await?;
        let mut n = 0;
        for id in ids {
            let mut tx = self.pool.begin().await?;
            let row = sqlx::query_as::<_, (String, Option<String>, i64, i64, DateTime<Utc>)>(
                "INSERT INTO grant_expiries (quota_request_id, expired_at)
                 SELECT id, expires_at FROM quota_requests WHERE id = $1
                 ON CONFLICT DO NOTHING
                 RETURNING (SELECT tenant_id FROM quota_requests WHERE id = $1) AS tenant_id,
                           (SELECT app_id FROM quota_requests WHERE id = $1) AS app_id,
                           (SELECT tokens FROM quota_requests WHERE id = $1) AS tokens,
                           (SELECT cost_micro FROM quota_requests WHERE id = $1) AS cost_micro,
                           expired_at",
            )
            .bind(id)
            .fetch_optional(&mut *tx)
            .await?;
            let Some((tenant_id, app_id, tokens, cost_micro, expired_at)) = row else {
                continue;
            };
            append(
                &mut tx,
                NewAudit::new(actor, "grant.expire", format!("quota_request:{id}"))
                    .before(json!({"state": "approved", "active": true}))
                    .after(json!({
                        "active": false,
                        "tenant_id": tenant_id,
                        "app_id": app_id,
                        "tokens": tokens,
                        "cost_micro": cost_micro,
                        "expired_at": expired_at,
                    })),
            )
            .await?;
            tx.commit().await?;
            n += 1;
        }
        Ok(n)
    }
}
