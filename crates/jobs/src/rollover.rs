//! Monthly rollover: copy each closed month's usage events, bill rows and
//! refusal counts to ClickHouse, verify them equal to Postgres, then close
//! the month; after the retention period, purge its Postgres rows.
//!
//! Crash safety without transactions in ClickHouse: a month is `archiving`
//! in Postgres from the first write until the close, and stays open (bills
//! from Postgres) until then. Every attempt writes under a fresh batch id
//! after dropping the month's partitions, verifies its own batch, and the
//! close (one Postgres transaction, ledger locked against inserts) records
//! which batch is the month's copy. Readers take only that batch. A crash
//! at any step leaves the month `archiving`; the next run starts over.

use crate::{JobContext, JobError, JobReport};
use billing::Archive;
use chrono::{DateTime, Utc};
use domain::bill::Totals;
use serde_json::json;
use std::collections::BTreeMap;
use store::{TenantScope, VerifiedMonth};
use uuid::Uuid;

/// Failpoints for the crash tests (never set in production config).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RolloverOptions {
    /// Fail right after the ClickHouse insert, before verifying and closing.
    pub crash_after_archive: bool,
}

const PAGE: i64 = 5_000;

/// What of `period` is still open in Redis: requests held per request,
/// live leases of the month (a lease-admitted request has no hold of its
/// own; its lease stays live until its last request settled, and that
/// settle writes its event to the outbox in the same call), and settled
/// events that have not reached the ledger.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Pending {
    holds: usize,
    leases: usize,
    outbox: usize,
}

impl Pending {
    fn any(&self) -> bool {
        self.holds + self.leases + self.outbox > 0
    }
}

async fn pending_in_redis(ctx: &JobContext, period: &str) -> Result<Pending, JobError> {
    let tenants = ctx.store.tenant_ids(&TenantScope::system()).await?;
    // Store whatever settled events are waiting first.
    settlement::ledger::sweep_outboxes(&ctx.store, &ctx.quota, &tenants).await?;
    let mut p = Pending::default();
    for t in &tenants {
        let mut offset = 0;
        loop {
            let (open, gone) = ctx.quota.open_holds(t, i64::MAX, offset, 500).await?;
            p.holds += open.iter().filter(|h| h.month == period).count();
            let seen = open.len() + gone.len();
            if seen < 500 {
                break;
            }
            offset += seen;
        }
        p.leases += ctx
            .quota
            .open_leases(t, i64::MAX)
            .await?
            .iter()
            .filter(|l| l.month == period)
            .count();
        p.outbox += ctx
            .quota
            .outbox_peek(t, 10_000)
            .await?
            .iter()
            .filter(|(_, json)| {
                // An unreadable event counts: better late than closed early.
                serde_json::from_str::<domain::usage::UsageEvent>(json)
                    .map_or(true, |e| e.period == period)
            })
            .count();
    }
    Ok(p)
}

fn mismatch(what: &str, pg: &BTreeMap<String, Totals>, ch: &BTreeMap<String, Totals>) -> JobError {
    let mut lines = vec![];
    for t in pg.keys().chain(ch.keys()) {
        let (a, b) = (pg.get(t), ch.get(t));
        if a != b
            && !lines
                .iter()
                .any(|l: &String| l.starts_with(&format!("{t}:")))
        {
            lines.push(format!("{t}: postgres {a:?} clickhouse {b:?}"));
        }
    }
    JobError::Failed(format!("{what} differ from Postgres: {}", lines.join("; ")))
}

/// Copies one month and closes it. Returns the verified totals.
async fn close_month(
    ctx: &JobContext,
    archive: &Archive,
    period: &str,
    now: DateTime<Utc>,
    opts: &RolloverOptions,
) -> Result<VerifiedMonth, JobError> {
    let batch = Uuid::now_v7();
    ctx.store.begin_archiving(period, batch).await?;
    let all = TenantScope::system();
    let pg = ctx.store.period_totals(&all, period).await?;
    let bill_rows = ctx.store.bill_rows(&all, period).await?;
    let refusals = ctx.store.refusal_rows(&all, period).await?;
    let refused: i64 = refusals.iter().map(|r| r.requests).sum();

    // Whatever an earlier attempt left of this month goes first.
    archive.drop_period(period).await?;
    let mut after = String::new();
    loop {
        let page = ctx
            .store
            .usage_events_page(&all, period, &after, PAGE)
            .await?;
        let Some(last) = page.last() else { break };
        after = last.request_id.clone();
        archive.insert_events(batch, &page).await?;
        if (page.len() as i64) < PAGE {
            break;
        }
    }
    archive.insert_bill_rows(period, batch, &bill_rows).await?;
    archive.insert_refusals(period, batch, &refusals).await?;
    if opts.crash_after_archive {
        return Err(JobError::Failpoint);
    }

    // Verify the batch, to the micro-dollar, per tenant.
    let ch_events = archive.event_totals(period, batch).await?;
    if ch_events != pg {
        return Err(mismatch("archived usage events", &pg, &ch_events));
    }
    let (n_rows, ch_bills) = archive.bill_row_totals(period, batch).await?;
    if ch_bills != pg || n_rows != bill_rows.len() as i64 {
        return Err(mismatch("archived bill rows", &pg, &ch_bills));
    }
    let ch_refused = archive.refusal_total(period, batch).await?;
    if ch_refused != refused {
        return Err(JobError::Failed(format!(
            "archived refusals {ch_refused} differ from Postgres {refused}"
        )));
    }
    let verified = VerifiedMonth {
        by_tenant: pg,
        bill_rows: n_rows,
        refused,
    };
    ctx.store
        .close_month(
            "job:rollover",
            period,
            batch,
            &verified,
            now + ctx.settings.retention,
        )
        .await?;
    Ok(verified)
}

pub async fn run(
    ctx: &JobContext,
    now: DateTime<Utc>,
    opts: &RolloverOptions,
) -> Result<JobReport, JobError> {
    let archive = ctx
        .archive
        .as_ref()
        .ok_or_else(|| JobError::Failed("no ClickHouse archive configured".into()))?;
    let current = ctx.clock.month(now);
    let due = ctx.store.months_to_close(&current).await?;
    let purgeable = ctx.store.months_to_purge(now).await?;
    if due.is_empty() && purgeable.is_empty() {
        return Ok(JobReport::ok(
            json!({"closed": 0, "deferred": 0, "purged": 0}),
            "rollover: nothing to do",
        ));
    }
    archive.apply_schema().await?;

    let (mut closed, mut deferred, mut purged) = (vec![], vec![], vec![]);
    for period in &due {
        let p = pending_in_redis(ctx, period).await?;
        if p.any() {
            // Requests admitted in the month are still running (or waiting
            // for the stale-hold job or the lease reconciler): they belong
            // to it, so it cannot close yet.
            deferred.push(json!({"period": period, "open_holds": p.holds,
                "live_leases": p.leases, "outbox_events": p.outbox}));
            continue;
        }
        let v = close_month(ctx, archive, period, now, opts).await?;
        let t = v.total();
        tracing::info!(%period, events = t.requests, cost_micro = t.cost_micro, "month closed");
        closed.push(json!({
            "period": period, "events": t.requests, "input_tokens": t.input_tokens,
            "output_tokens": t.output_tokens, "cost_micro": t.cost_micro,
            "bill_rows": v.bill_rows, "refused": v.refused,
        }));
    }
    for m in &purgeable {
        // The archive must still hold the verified copy before Postgres
        // lets go of its rows.
        let ch = archive.event_totals(&m.period, m.batch_id).await?;
        let mut total = Totals::default();
        for v in ch.values() {
            total.add(v);
        }
        if !total.matches_closing(&m.totals) {
            return Err(JobError::Failed(format!(
                "archive of {} no longer matches its closing totals; not purged",
                m.period
            )));
        }
        let n = ctx.store.purge_month("job:rollover", m).await?;
        purged.push(json!({"period": m.period, "usage_events_deleted": n}));
    }
    let summary = format!(
        "rollover: closed {} month(s), deferred {}, purged {}",
        closed.len(),
        deferred.len(),
        purged.len()
    );
    Ok(JobReport {
        idle: false,
        clean: true,
        counts: json!({"closed": closed.len(), "deferred": deferred.len(), "purged": purged.len()}),
        detail: json!({"closed": closed, "deferred": deferred, "purged": purged}),
        summary,
    })
}
