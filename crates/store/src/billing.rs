//! The open months' bills, read from the ledger at the grains `domain::bill`
//! assembles, and the rollover's side of the books: the `closed_months`
//! state machine, the copy source, and the purge after retention.

use crate::audit::{append, NewAudit};
use crate::{Result, Store, StoreError, TenantScope};
use chrono::{DateTime, Utc};
use domain::bill::{
    AttributedRow, BillRow, DayRow, GroupBy, QuotaAmount, RefusalRow, TenantInfo, Totals,
};
use domain::pricing::{Charges, Component};
use domain::usage::UsageEvent;
use serde_json::json;
use std::collections::BTreeMap;
use uuid::Uuid;

/// The four sums of [`SUMS`] / [`ROLLUP_SUMS`], flattened into the rows
/// that carry them.
#[derive(sqlx::FromRow)]
struct TotalsCols {
    requests: i64,
    input_tokens: i64,
    output_tokens: i64,
    cost_micro: i64,
    cost_pico: i64,
    /// The components' quantities, then their costs (`Charges::to_array`).
    charges: Vec<i64>,
}

impl From<TotalsCols> for Totals {
    fn from(c: TotalsCols) -> Self {
        Totals {
            requests: c.requests,
            input_tokens: c.input_tokens,
            output_tokens: c.output_tokens,
            cost_micro: c.cost_micro,
            cost_pico: c.cost_pico,
            charges: Charges::from_slice(&c.charges).unwrap_or_default(),
        }
    }
}

#[derive(sqlx::FromRow)]
struct BillRowCols {
    tenant_id: String,
    app_id: String,
    model: String,
    #[sqlx(flatten)]
    totals: TotalsCols,
}

#[derive(sqlx::FromRow)]
struct DayRowCols {
    tenant_id: String,
    app_id: String,
    model: String,
    day: String,
    tags: serde_json::Value,
    #[sqlx(flatten)]
    totals: TotalsCols,
}

/// A month's day rows being read ([`Store::day_rows_cursor`]).
pub struct DayRowsCursor {
    /// None once the rows are all read (the transaction ended).
    tx: Option<sqlx::Transaction<'static, sqlx::Postgres>>,
}

impl DayRowsCursor {
    /// Rows a fetch returns at most.
    const BATCH: usize = 2_000;

    /// The next rows (up to [`Self::BATCH`]); empty once all are read.
    pub async fn next_batch(&mut self) -> Result<Vec<DayRow>> {
        let Some(tx) = self.tx.as_mut() else {
            return Ok(Vec::new());
        };
        let rows = sqlx::query_as::<_, DayRowCols>(&format!(
            "FETCH FORWARD {} FROM day_rows",
            Self::BATCH
        ))
        .fetch_all(&mut **tx)
        .await?;
        if rows.len() < Self::BATCH {
            if let Some(tx) = self.tx.take() {
                tx.rollback().await?;
            }
        }
        Ok(rows.into_iter().map(DayRow::from).collect())
    }
}

impl From<DayRowCols> for DayRow {
    fn from(r: DayRowCols) -> Self {
        DayRow {
            tenant_id: r.tenant_id,
            app_id: r.app_id,
            model: r.model,
            day: r.day,
            tags: crate::ledger::tags_of(r.tags),
            totals: r.totals.into(),
        }
    }
}

#[derive(sqlx::FromRow)]
struct AttributedRowCols {
    tenant_id: String,
    value: Option<String>,
    #[sqlx(flatten)]
    totals: TotalsCols,
}

#[derive(sqlx::FromRow)]
struct RefusalRowCols {
    tenant_id: String,
    app_id: String,
    model: String,
    decision: String,
    reason: String,
    requests: i64,
}

/// A tenant's (tokens, cost) sums: grants and borrows per tenant.
#[derive(sqlx::FromRow)]
struct TenantAmountCols {
    tenant_id: String,
    tokens: i64,
    cost_micro: i64,
}

impl TenantAmountCols {
    fn entry(self) -> (String, QuotaAmount) {
        (
            self.tenant_id,
            QuotaAmount {
                tokens: self.tokens,
                cost_micro: self.cost_micro,
            },
        )
    }
}

#[derive(sqlx::FromRow)]
struct TenantInfoCols {
    id: String,
    name: String,
    cost_center: String,
}

#[derive(sqlx::FromRow)]
struct TenantTotalsCols {
    tenant_id: String,
    #[sqlx(flatten)]
    totals: TotalsCols,
}

/// The sums of [`TotalsCols`] over rows whose value of each total is
/// `value(total)`: `requests` counted by `count`, the components as one
/// array (quantities, then costs, in `Component::ALL` order).
fn totals_sql(count: &str, value: impl Fn(&str) -> String) -> String {
    totals_of(count, |col| {
        format!(
            "LEAST(COALESCE(SUM({}), 0), 9223372036854775807)::int8",
            value(col)
        )
    })
}

/// [`TotalsCols`], each total `total(column)`.
fn totals_of(count: &str, total: impl Fn(&str) -> String) -> String {
    let mut charges = Vec::new();
    for kind in ["q", "p"] {
        for c in Component::ALL {
            charges.push(total(&format!("{kind}_{}", c.name())));
        }
    }
    format!(
        "{count} AS requests, {} AS input_tokens, {} AS output_tokens, {} AS cost_micro,
         {} AS cost_pico, ARRAY[{}]::int8[] AS charges",
        total("input_tokens"),
        total("output_tokens"),
        total("cost_micro"),
        total("cost_pico"),
        charges.join(", ")
    )
}

/// Sums over ledger events (the truth the rollups are checked against):
/// a component's quantity and cost are read from the event's `charges`.
fn event_sums() -> &'static str {
    static SQL: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    SQL.get_or_init(|| {
        totals_sql("COUNT(*)::int8", |col| {
            match (col.strip_prefix("q_"), col.strip_prefix("p_")) {
                (Some(c), _) => format!("(charges->'{c}'->>0)::int8"),
                (_, Some(c)) => format!("(charges->'{c}'->>1)::int8"),
                _ => col.to_string(),
            }
        })
    })
}

/// The tables that sum the ledger's events at a coarser grain, kept by its
/// writer (crate::ledger): each must agree with the events before a month
/// closes, and each is purged with them.
const ROLLUP_TABLES: [&str; 3] = ["usage_rollups", "usage_month_rollups", "usage_day_rollups"];

/// The day rollups of a month (and of one tenant, `$2`), in the primary
/// key's order: the FOCUS export's.
fn day_rows_sql() -> &'static str {
    static SQL: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    SQL.get_or_init(|| {
        format!(
            "SELECT tenant_id, app_id, model, day::text AS day, tags, {rs} FROM usage_day_rollups
             WHERE period = $1 AND ($2::text IS NULL OR tenant_id = $2)
             ORDER BY period, tenant_id, day, app_id, model, tags",
            rs = month_row_totals(),
        )
    })
}

/// The same sums over rollup rows: what bills and charts read.
fn rollup_sums() -> &'static str {
    static SQL: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    SQL.get_or_init(|| totals_sql("COALESCE(SUM(requests), 0)::int8", str::to_string))
}

/// One month rollup row's totals as stored: the row is already the whole
/// month of its tenant × app × model, nothing to sum.
fn month_row_totals() -> &'static str {
    static SQL: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    SQL.get_or_init(|| totals_of("requests", str::to_string))
}

/// A month's rollover record (see migrations/0006_billing.sql).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClosedMonth {
    pub period: String,
    pub state: String,
    pub batch_id: Uuid,
    /// The closing totals: requests, tokens, `cost_micro` and the exact
    /// `cost_pico` (-1 for a month closed before it was recorded); no
    /// components.
    pub totals: Totals,
    pub bill_rows: i64,
    pub refused: i64,
    pub attempts: i32,
    pub closed_at: Option<DateTime<Utc>>,
    pub purge_after: Option<DateTime<Utc>>,
    pub purged_at: Option<DateTime<Utc>>,
}

impl ClosedMonth {
    /// Closed (or purged): the month's bill is read from ClickHouse.
    pub fn is_closed(&self) -> bool {
        self.state != "archiving"
    }
}

#[derive(sqlx::FromRow)]
struct ClosedMonthCols {
    period: String,
    state: String,
    batch_id: Uuid,
    events: i64,
    input_tokens: i64,
    output_tokens: i64,
    cost_micro: i64,
    cost_pico: Option<i64>,
    bill_rows: i64,
    refused: i64,
    attempts: i32,
    closed_at: Option<DateTime<Utc>>,
    purge_after: Option<DateTime<Utc>>,
    purged_at: Option<DateTime<Utc>>,
}

fn closed_month(r: ClosedMonthCols) -> ClosedMonth {
    ClosedMonth {
        period: r.period,
        state: r.state,
        batch_id: r.batch_id,
        totals: Totals {
            requests: r.events,
            input_tokens: r.input_tokens,
            output_tokens: r.output_tokens,
            cost_micro: r.cost_micro,
            cost_pico: r.cost_pico.unwrap_or(-1),
            ..Default::default()
        },
        bill_rows: r.bill_rows,
        refused: r.refused,
        attempts: r.attempts,
        closed_at: r.closed_at,
        purge_after: r.purge_after,
        purged_at: r.purged_at,
    }
}

const CLOSED_COLS: &str =
    "period, state, batch_id, events, input_tokens, output_tokens, cost_micro, cost_pico, bill_rows,
     refused, attempts, closed_at, purge_after, purged_at";

/// What the rollover verified and closes the month with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifiedMonth {
    pub by_tenant: BTreeMap<String, Totals>,
    pub bill_rows: i64,
    pub refused: i64,
}

impl VerifiedMonth {
    pub fn total(&self) -> Totals {
        let mut t = Totals::default();
        for v in self.by_tenant.values() {
            t.add(v);
        }
        t
    }
}

impl Store {
    /// Usage of a month per tenant of the scope, from the month rollups
    /// (one row per tenant × app × model).
    pub async fn period_totals(
        &self,
        scope: &TenantScope,
        period: &str,
    ) -> Result<BTreeMap<String, Totals>> {
        sums_by_tenant(
            &self.pool,
            "usage_month_rollups",
            rollup_sums(),
            period,
            scope.tenant(),
        )
        .await
    }

    /// The same, summed over the events themselves.
    pub async fn period_event_totals(
        &self,
        scope: &TenantScope,
        period: &str,
    ) -> Result<BTreeMap<String, Totals>> {
        period_totals(&self.pool, period, scope.tenant()).await
    }

    pub async fn bill_rows(&self, scope: &TenantScope, period: &str) -> Result<Vec<BillRow>> {
        let rows = sqlx::query_as::<_, BillRowCols>(&format!(
            "SELECT tenant_id, app_id, model, {rs} FROM usage_month_rollups
             WHERE period = $1 AND ($2::text IS NULL OR tenant_id = $2)
             ORDER BY tenant_id, app_id, model",
            rs = month_row_totals(),
        ))
        .bind(period)
        .bind(scope.tenant())
        .fetch_all(&self.pool)
        .await?;
        Ok(rows
            .into_iter()
            .map(|r| BillRow {
                tenant_id: r.tenant_id,
                app_id: r.app_id,
                model: r.model,
                totals: r.totals.into(),
            })
            .collect())
    }

    /// A month's day rows (tenant × day × app × model × tags) in the FOCUS
    /// export's order, from the day rollups: one row each, nothing grouped.
    pub async fn day_rows(&self, scope: &TenantScope, period: &str) -> Result<Vec<DayRow>> {
        let rows = sqlx::query_as::<_, DayRowCols>(day_rows_sql())
            .bind(period)
            .bind(scope.tenant())
            .fetch_all(&self.pool)
            .await?;
        Ok(rows.into_iter().map(DayRow::from).collect())
    }

    /// [`Self::day_rows`] through a cursor, a batch at a time, in the
    /// primary key's order: the FOCUS export of a whole platform's month
    /// starts before its last row is read and never holds the month in
    /// memory. The cursor reads one snapshot (a read-only repeatable-read
    /// transaction), so the export is one consistent month while the
    /// ledger writer goes on.
    pub async fn day_rows_cursor(
        &self,
        scope: &TenantScope,
        period: &str,
    ) -> Result<DayRowsCursor> {
        let mut tx = self.pool.begin().await?;
        sqlx::query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            .execute(&mut *tx)
            .await?;
        // The database's own backstop: a cursor whose reader stalled does not
        // hold its snapshot (and a pooled connection) for ever.
        sqlx::query("SET LOCAL idle_in_transaction_session_timeout = '5min'")
            .execute(&mut *tx)
            .await?;
        sqlx::query(&format!(
            "DECLARE day_rows NO SCROLL CURSOR FOR {}",
            day_rows_sql()
        ))
        .bind(period)
        .bind(scope.tenant())
        .execute(&mut *tx)
        .await?;
        Ok(DayRowsCursor { tx: Some(tx) })
    }

    /// A month's cost per day (`YYYY-MM-DD`, platform time; micro-USD as
    /// charged) from the day rollups, in day order: the dashboards' trend,
    /// one row a day whatever the number of tenants. Only the cost is
    /// summed (the trend shows nothing else): a third of the time of
    /// every total at 600,000 day rows.
    pub async fn day_costs(
        &self,
        scope: &TenantScope,
        period: &str,
    ) -> Result<BTreeMap<String, i64>> {
        let rows: Vec<(String, i64)> = sqlx::query_as(
            "SELECT day::text AS day,
                    LEAST(COALESCE(SUM(cost_micro), 0), 9223372036854775807)::int8 AS cost
             FROM usage_day_rollups
             WHERE period = $1 AND ($2::text IS NULL OR tenant_id = $2)
             GROUP BY day ORDER BY day",
        )
        .bind(period)
        .bind(scope.tenant())
        .fetch_all(&self.pool)
        .await?;
        Ok(rows.into_iter().collect())
    }

    /// The tag keys a month's requests carry (at most 20, in order).
    pub async fn tag_keys(&self, scope: &TenantScope, period: &str) -> Result<Vec<String>> {
        Ok(sqlx::query_scalar(
            "SELECT DISTINCT jsonb_object_keys(tags) AS k FROM usage_day_rollups
             WHERE period = $1 AND ($2::text IS NULL OR tenant_id = $2) AND tags <> '{}'::jsonb
             ORDER BY k LIMIT 20",
        )
        .bind(period)
        .bind(scope.tenant())
        .fetch_all(&self.pool)
        .await?)
    }

    /// A month's usage per tenant and value of one tag, or per end user
    /// (None: requests without one), from the rollups.
    pub async fn attributed_rows(
        &self,
        scope: &TenantScope,
        period: &str,
        by: &GroupBy,
    ) -> Result<Vec<AttributedRow>> {
        let (value, key) = match by {
            GroupBy::Tag(k) => ("tags ->> $3", k.as_str()),
            GroupBy::EndUser => ("NULLIF(end_user, '')", ""),
            GroupBy::AskedModel => (
                "NULLIF(asked_model, '') || $3 || model",
                domain::bill::ASKED_AS,
            ),
        };
        let rows = sqlx::query_as::<_, AttributedRowCols>(&format!(
            "SELECT tenant_id, {value} AS value, {rs} FROM usage_rollups
             WHERE period = $1 AND ($2::text IS NULL OR tenant_id = $2) AND ($3::text IS NOT NULL)
             GROUP BY 1, 2 ORDER BY 1, 2",
            rs = rollup_sums(),
        ))
        .bind(period)
        .bind(scope.tenant())
        .bind(key)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows
            .into_iter()
            .map(|r| AttributedRow {
                tenant_id: r.tenant_id,
                value: r.value,
                totals: r.totals.into(),
            })
            .collect())
    }

    /// Refused and degraded decisions of a month by reason.
    pub async fn refusal_rows(&self, scope: &TenantScope, period: &str) -> Result<Vec<RefusalRow>> {
        let rows = sqlx::query_as::<_, RefusalRowCols>(
            "SELECT tenant_id, app_id, model, decision, reason, COUNT(*)::int8 AS requests
             FROM request_decisions WHERE period = $1 AND ($2::text IS NULL OR tenant_id = $2)
             GROUP BY tenant_id, app_id, model, decision, reason
             ORDER BY tenant_id, app_id, model, decision, reason",
        )
        .bind(period)
        .bind(scope.tenant())
        .fetch_all(&self.pool)
        .await?;
        Ok(rows
            .into_iter()
            .map(|r| RefusalRow {
                tenant_id: r.tenant_id,
                app_id: r.app_id,
                model: r.model,
                decision: r.decision,
                reason: r.reason,
                requests: r.requests,
            })
            .collect())
    }

    /// Temporary quota approved in [start, end), per tenant (tenant- and
    /// app-level grants alike: both are the department's).
    pub async fn granted_between(
        &self,
        scope: &TenantScope,
        start: DateTime<Utc>,
        end: DateTime<Utc>,
    ) -> Result<BTreeMap<String, QuotaAmount>> {
        let rows = sqlx::query_as::<_, TenantAmountCols>(
            "SELECT tenant_id, COALESCE(SUM(tokens), 0)::int8 AS tokens,
                    COALESCE(SUM(cost_micro), 0)::int8 AS cost_micro
             FROM quota_requests
             WHERE state = 'approved' AND decided_at >= $1 AND decided_at < $2
               AND ($3::text IS NULL OR tenant_id = $3)
             GROUP BY tenant_id",
        )
        .bind(start)
        .bind(end)
        .bind(scope.tenant())
        .fetch_all(&self.pool)
        .await?;
        Ok(rows.into_iter().map(TenantAmountCols::entry).collect())
    }

    /// Borrowed from the shared pool in a month, per tenant (active
    /// borrows, as taken: reclaims later give part back).
    pub async fn borrowed_in(
        &self,
        scope: &TenantScope,
        period: &str,
    ) -> Result<BTreeMap<String, QuotaAmount>> {
        let rows = sqlx::query_as::<_, TenantAmountCols>(
            "SELECT tenant_id, COALESCE(SUM(tokens), 0)::int8 AS tokens,
                    COALESCE(SUM(cost_micro), 0)::int8 AS cost_micro
             FROM borrows WHERE state = 'active' AND period = $1
               AND ($2::text IS NULL OR tenant_id = $2)
             GROUP BY tenant_id",
        )
        .bind(period)
        .bind(scope.tenant())
        .fetch_all(&self.pool)
        .await?;
        Ok(rows.into_iter().map(TenantAmountCols::entry).collect())
    }

    pub async fn tenant_infos(&self, scope: &TenantScope) -> Result<Vec<TenantInfo>> {
        let rows = sqlx::query_as::<_, TenantInfoCols>(
            "SELECT id, name, cost_center FROM tenants WHERE ($1::text IS NULL OR id = $1) ORDER BY id",
        )
        .bind(scope.tenant())
        .fetch_all(&self.pool)
        .await?;
        Ok(rows
            .into_iter()
            .map(|r| TenantInfo {
                id: r.id,
                name: r.name,
                cost_center: r.cost_center,
            })
            .collect())
    }

    /// A page of a month's events in request_id order, after `after`: the
    /// rollover's copy source.
    pub async fn usage_events_page(
        &self,
        scope: &TenantScope,
        period: &str,
        after: &str,
        limit: i64,
    ) -> Result<Vec<UsageEvent>> {
        let rows = sqlx::query_as::<_, crate::ledger::UsageEventRow>(
            "SELECT request_id, tenant_id, app_id, key_id, model, period, day, input_tokens,
                    output_tokens, cost_micro, est_tokens, est_cost_micro, overrun_tokens, overrun_cost_micro,
                    status, stream, replica, started_at, settled_at, usage_source, deployment, tags, end_user,
                    cost_pico, charges, asked_model, raw_usage
             FROM usage_events WHERE period = $1 AND request_id > $2 AND ($4::text IS NULL OR tenant_id = $4)
             ORDER BY request_id LIMIT $3",
        )
        .bind(period)
        .bind(after)
        .bind(limit)
        .bind(scope.tenant())
        .fetch_all(&self.pool)
        .await?;
        // The archive keeps the billed amounts, the exact cost and its
        // components, and the provider's usage object (from which a
        // breakdown can be read again); anomalies and breakdowns stay in
        // Postgres' ledger row (request lookup): the select leaves them out.
        Ok(rows.into_iter().map(UsageEvent::from).collect())
    }

    /// Months before `current` that still need their rollover: months with
    /// ledger rows or decisions that are not closed, and crashed copies.
    /// A month's ledger rows are found through its rollups (written in the
    /// same statement as the events; their key starts with the period), so
    /// this reads a few index pages, not the events.
    pub async fn months_to_close(&self, current: &str) -> Result<Vec<String>> {
        Ok(sqlx::query_scalar(
            "SELECT period FROM (
                SELECT DISTINCT period FROM usage_rollups WHERE period < $1
                UNION SELECT DISTINCT period FROM request_decisions WHERE period < $1
                UNION SELECT period FROM closed_months WHERE state = 'archiving'
             ) p
             WHERE period NOT IN (SELECT period FROM closed_months WHERE state <> 'archiving')
             ORDER BY period",
        )
        .bind(current)
        .fetch_all(&self.pool)
        .await?)
    }

    pub async fn closed_month(&self, period: &str) -> Result<Option<ClosedMonth>> {
        let r = sqlx::query_as::<_, ClosedMonthCols>(&format!(
            "SELECT {CLOSED_COLS} FROM closed_months WHERE period = $1"
        ))
        .bind(period)
        .fetch_optional(&self.pool)
        .await?;
        Ok(r.map(closed_month))
    }

    pub async fn closed_months(&self) -> Result<Vec<ClosedMonth>> {
        let rows = sqlx::query_as::<_, ClosedMonthCols>(&format!(
            "SELECT {CLOSED_COLS} FROM closed_months ORDER BY period DESC"
        ))
        .fetch_all(&self.pool)
        .await?;
        Ok(rows.into_iter().map(closed_month).collect())
    }

    /// Starts (or restarts, after a crash) a month's copy under a new batch
    /// id. Refused for a month already closed.
    pub async fn begin_archiving(&self, period: &str, batch: Uuid) -> Result<()> {
        let n = sqlx::query(
            "INSERT INTO closed_months (period, state, batch_id) VALUES ($1, 'archiving', $2)
             ON CONFLICT (period) DO UPDATE SET batch_id = $2, attempts = closed_months.attempts + 1,
                 started_at = now()
             WHERE closed_months.state = 'archiving'",
        )
        .bind(period)
        .bind(batch)
        .execute(&self.pool)
        .await?
        .rows_affected();
        if n == 0 {
            return Err(StoreError::Conflict(format!(
                "month {period} is already closed"
            )));
        }
        Ok(())
    }

    /// Closes a month whose copy `batch` was verified equal to `verified`.
    /// The ledger is locked against inserts while its totals are read once
    /// more, so a row that reached the month after the copy keeps it open.
    pub async fn close_month(
        &self,
        actor: &str,
        period: &str,
        batch: Uuid,
        verified: &VerifiedMonth,
        purge_after: DateTime<Utc>,
    ) -> Result<()> {
        let mut tx = self.pool.begin().await?;
        sqlx::query("LOCK TABLE usage_events, request_decisions IN SHARE MODE")
            .execute(&mut *tx)
            .await?;
        let now_totals = period_totals(&mut *tx, period, None).await?;
        if now_totals != verified.by_tenant {
            return Err(StoreError::Conflict(format!(
                "the ledger of {period} changed during its copy"
            )));
        }
        for table in ROLLUP_TABLES {
            let rolled = sums_by_tenant(&mut *tx, table, rollup_sums(), period, None).await?;
            if rolled != now_totals {
                return Err(StoreError::Conflict(format!(
                    "the rollups of {period} ({table}) differ from its events; run reconcile --check"
                )));
            }
        }
        let refused: i64 =
            sqlx::query_scalar("SELECT COUNT(*)::int8 FROM request_decisions WHERE period = $1")
                .bind(period)
                .fetch_one(&mut *tx)
                .await?;
        if refused != verified.refused {
            return Err(StoreError::Conflict(format!(
                "the decisions of {period} changed during the copy"
            )));
        }
        let t = verified.total();
        let n = sqlx::query(
            "UPDATE closed_months SET state = 'closed', events = $3, input_tokens = $4,
                 output_tokens = $5, cost_micro = $6, bill_rows = $7, refused = $8,
                 closed_at = now(), purge_after = $9, cost_pico = $10
             WHERE period = $1 AND batch_id = $2 AND state = 'archiving'",
        )
        .bind(period)
        .bind(batch)
        .bind(t.requests)
        .bind(t.input_tokens)
        .bind(t.output_tokens)
        .bind(t.cost_micro)
        .bind(verified.bill_rows)
        .bind(verified.refused)
        .bind(purge_after)
        .bind(t.cost_pico)
        .execute(&mut *tx)
        .await?
        .rows_affected();
        if n == 0 {
            return Err(StoreError::Conflict(format!(
                "month {period}: batch {batch} is no longer the one being archived"
            )));
        }
        append(
            &mut tx,
            NewAudit::new(actor, "month.close", format!("period:{period}"))
                .before(json!({"state": "archiving"}))
                .after(json!({
                    "state": "closed", "batch_id": batch, "events": t.requests,
                    "input_tokens": t.input_tokens, "output_tokens": t.output_tokens,
                    "cost_micro": t.cost_micro, "bill_rows": verified.bill_rows,
                    "refused": verified.refused, "purge_after": purge_after,
                })),
        )
        .await?;
        tx.commit().await?;
        Ok(())
    }

    /// Closed months whose retention has passed.
    pub async fn months_to_purge(&self, now: DateTime<Utc>) -> Result<Vec<ClosedMonth>> {
        let rows = sqlx::query_as::<_, ClosedMonthCols>(&format!(
            "SELECT {CLOSED_COLS} FROM closed_months WHERE state = 'closed' AND purge_after <= $1 ORDER BY period"
        ))
        .bind(now)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows.into_iter().map(closed_month).collect())
    }

    /// Deletes a closed month's ledger rows, if they are still exactly what
    /// was archived (a row that arrived after the close keeps them all).
    /// Returns the number of usage events deleted.
    pub async fn purge_month(&self, actor: &str, m: &ClosedMonth) -> Result<u64> {
        let mut tx = self.pool.begin().await?;
        sqlx::query("LOCK TABLE usage_events, request_decisions IN SHARE ROW EXCLUSIVE MODE")
            .execute(&mut *tx)
            .await?;
        let mut now = Totals::default();
        for v in period_totals(&mut *tx, &m.period, None).await?.values() {
            now.add(v);
        }
        if !now.matches_closing(&m.totals) {
            return Err(StoreError::Conflict(format!(
                "the ledger of {} differs from its archive; not purged",
                m.period
            )));
        }
        let events = sqlx::query("DELETE FROM usage_events WHERE period = $1")
            .bind(&m.period)
            .execute(&mut *tx)
            .await?
            .rows_affected();
        for table in ROLLUP_TABLES {
            sqlx::query(&format!("DELETE FROM {table} WHERE period = $1"))
                .bind(&m.period)
                .execute(&mut *tx)
                .await?;
        }
        let decisions = sqlx::query("DELETE FROM request_decisions WHERE period = $1")
            .bind(&m.period)
            .execute(&mut *tx)
            .await?
            .rows_affected();
        sqlx::query(
            "UPDATE closed_months SET state = 'purged', purged_at = now() WHERE period = $1 AND state = 'closed'",
        )
        .bind(&m.period)
        .execute(&mut *tx)
        .await?;
        append(
            &mut tx,
            NewAudit::new(actor, "month.purge", format!("period:{}", m.period))
                .before(json!({"state": "closed"}))
                .after(json!({"state": "purged", "usage_events_deleted": events, "decisions_deleted": decisions})),
        )
        .await?;
        tx.commit().await?;
        Ok(events)
    }
}

/// A month's usage per tenant, summed over its events: of `tenant`, or of
/// every tenant (`None`).
async fn period_totals<'e, E>(
    ex: E,
    period: &str,
    tenant: Option<&str>,
) -> Result<BTreeMap<String, Totals>>
where
    E: sqlx::Executor<'e, Database = sqlx::Postgres>,
{
    sums_by_tenant(ex, "usage_events", event_sums(), period, tenant).await
}

async fn sums_by_tenant<'e, E>(
    ex: E,
    table: &str,
    sums: &str,
    period: &str,
    tenant: Option<&str>,
) -> Result<BTreeMap<String, Totals>>
where
    E: sqlx::Executor<'e, Database = sqlx::Postgres>,
{
    let rows = sqlx::query_as::<_, TenantTotalsCols>(&format!(
        "SELECT tenant_id, {sums} FROM {table} WHERE period = $1 AND ($2::text IS NULL OR tenant_id = $2)
         GROUP BY tenant_id"
    ))
    .bind(period)
    .bind(tenant)
    .fetch_all(ex)
    .await?;
    Ok(rows
        .into_iter()
        .map(|r| (r.tenant_id, r.totals.into()))
        .collect())
}
