//! Billing: the ClickHouse archive of closed months, and the books a bill is
//! read from — Postgres while the month is open, ClickHouse once it is
//! closed — rendered by the same code (`domain::bill`), so a month reads the
//! same before and after its rollover.
// A dependency nothing uses fails CI (clippy -D warnings).
#![cfg_attr(not(test), warn(unused_crate_dependencies))]

pub mod archive;

pub use archive::Archive;

use chrono::{DateTime, SecondsFormat, Utc};
use domain::bill::{
    self, AttributedRow, Bill, BillRow, BillSource, DayRow, DrillBy, DrillLine, FocusPeriod,
    GroupBy, MonthRows, TenantInfo, Totals,
};
use domain::period::PlatformClock;
use std::collections::BTreeMap;
use store::{ClosedMonth, Store, StoreError, TenantScope};
use uuid::Uuid;

#[derive(Debug, thiserror::Error)]
pub enum BillingError {
    #[error("ClickHouse: {0}")]
    Archive(#[from] clickhouse::error::Error),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("{0}")]
    Invalid(String),
    #[error("month {0} is closed but no ClickHouse archive is configured")]
    NoArchive(String),
}

pub type Result<T> = std::result::Result<T, BillingError>;

/// Where a month's numbers live.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MonthBook {
    /// Open (or its copy not verified yet): the Postgres ledger.
    Ledger,
    /// Closed: the archive, this batch.
    Archive(Uuid),
}

/// The books of every month, for bills and exports.
#[derive(Clone)]
pub struct Books {
    pub store: Store,
    pub archive: Option<Archive>,
    pub clock: PlatformClock,
}

fn rfc3339(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Secs, true)
}

impl Books {
    pub fn new(store: Store, archive: Option<Archive>, clock: PlatformClock) -> Self {
        Self {
            store,
            archive,
            clock,
        }
    }

    fn valid(&self, period: &str) -> Result<()> {
        domain::period::parse_month(period)
            .map(|_| ())
            .ok_or_else(|| BillingError::Invalid("period must be YYYY-MM".into()))
    }

    pub async fn book(&self, period: &str) -> Result<(MonthBook, Option<ClosedMonth>)> {
        self.valid(period)?;
        let m = self.store.closed_month(period).await?;
        Ok(match &m {
            Some(c) if c.is_closed() => (MonthBook::Archive(c.batch_id), m),
            _ => (MonthBook::Ledger, m),
        })
    }

    fn archive(&self, period: &str) -> Result<&Archive> {
        self.archive
            .as_ref()
            .ok_or_else(|| BillingError::NoArchive(period.to_string()))
    }

    /// A month's rows of the tenants in `scope`. The archive (ClickHouse)
    /// is filtered by the scope's tenant like the ledger's SQL.
    pub async fn rows(&self, period: &str, scope: &TenantScope) -> Result<(MonthBook, MonthRows)> {
        let (book, _) = self.book(period).await?;
        let rows = match book {
            MonthBook::Ledger => MonthRows {
                bill_rows: self.store.bill_rows(scope, period).await?,
                refusals: self.store.refusal_rows(scope, period).await?,
                adjustments: self.adjustments(period, scope).await?,
            },
            MonthBook::Archive(batch) => {
                let a = self.archive(period)?;
                MonthRows {
                    bill_rows: a.bill_rows(period, batch, scope.tenant()).await?,
                    refusals: a.refusal_rows(period, batch, scope.tenant()).await?,
                    adjustments: self.adjustments(period, scope).await?,
                }
            }
        };
        Ok((book, rows))
    }

    /// The approved provider-invoice adjustments billed in the month (read
    /// from Postgres for every month, open or closed: they are never
    /// purged), by department, day and model.
    pub async fn adjustments(
        &self,
        period: &str,
        scope: &TenantScope,
    ) -> Result<Vec<bill::AdjustmentLine>> {
        Ok(self
            .store
            .bill_adjustments(scope, period)
            .await?
            .into_iter()
            .map(|a| {
                bill::AdjustmentLine::new(
                    a.tenant_id,
                    a.adjustment_id.to_string(),
                    a.account_id,
                    a.day.to_string(),
                    a.model,
                    a.amount_pico.into(),
                )
            })
            .collect())
    }

    pub async fn day_rows(&self, period: &str, scope: &TenantScope) -> Result<Vec<DayRow>> {
        Ok(match self.book(period).await?.0 {
            MonthBook::Ledger => self.store.day_rows(scope, period).await?,
            MonthBook::Archive(batch) => {
                self.archive(period)?
                    .day_rows(period, batch, scope.tenant())
                    .await?
            }
        })
    }

    /// The month's bill of the tenants in `scope`.
    pub async fn bill(&self, period: &str, scope: &TenantScope) -> Result<Bill> {
        let (book, rows) = self.rows(period, scope).await?;
        let (start, end) = self
            .clock
            .month_bounds(period)
            .ok_or_else(|| BillingError::Invalid("period must be YYYY-MM".into()))?;
        let granted = self.store.granted_between(scope, start, end).await?;
        let borrowed = self.store.borrowed_in(scope, period).await?;
        let tenants = self.store.tenant_infos(scope).await?;
        let source = match book {
            MonthBook::Ledger => BillSource::Postgres,
            MonthBook::Archive(_) => BillSource::Clickhouse,
        };
        Ok(Bill::assemble(
            period,
            matches!(book, MonthBook::Archive(_)),
            source,
            &rows,
            &granted,
            &borrowed,
            &tenants,
        ))
    }

    /// A month's cost per day (micro-USD as charged), from the day rollups
    /// (open) or the archive (closed): the dashboards' trend.
    pub async fn day_costs(
        &self,
        period: &str,
        scope: &TenantScope,
    ) -> Result<BTreeMap<String, i64>> {
        Ok(match self.book(period).await?.0 {
            MonthBook::Ledger => self.store.day_costs(scope, period).await?,
            MonthBook::Archive(_) => bill::totals_by_day(&self.day_rows(period, scope).await?)
                .into_iter()
                .map(|(d, t)| (d, t.cost_micro))
                .collect(),
        })
    }

    /// A month's totals per tenant, from the rollups (open) or the archive
    /// (closed), without the rest of a bill.
    pub async fn tenant_totals(
        &self,
        period: &str,
        scope: &TenantScope,
    ) -> Result<BTreeMap<String, Totals>> {
        Ok(match self.book(period).await?.0 {
            MonthBook::Ledger => self.store.period_totals(scope, period).await?,
            MonthBook::Archive(_) => {
                bill::totals_by_tenant(&self.rows(period, scope).await?.1.bill_rows)
            }
        })
    }

    pub async fn drill_down(
        &self,
        period: &str,
        scope: &TenantScope,
        by: DrillBy,
    ) -> Result<Vec<DrillLine>> {
        let (bill_rows, day_rows): (Vec<BillRow>, Vec<DayRow>) = match by {
            DrillBy::Day => (vec![], self.day_rows(period, scope).await?),
            _ => (self.rows(period, scope).await?.1.bill_rows, vec![]),
        };
        Ok(bill::drill_down(by, &bill_rows, &day_rows))
    }

    /// The month's usage per value of a tag or per end user, from the
    /// ledger's rollups (open) or the archive (closed).
    pub async fn attributed(
        &self,
        period: &str,
        scope: &TenantScope,
        by: &GroupBy,
    ) -> Result<Vec<AttributedRow>> {
        Ok(match self.book(period).await?.0 {
            MonthBook::Ledger => self.store.attributed_rows(scope, period, by).await?,
            MonthBook::Archive(batch) => {
                self.archive(period)?
                    .attributed_rows(period, batch, scope.tenant(), by)
                    .await?
            }
        })
    }

    pub async fn attributed_csv(
        &self,
        period: &str,
        scope: &TenantScope,
        by: &GroupBy,
    ) -> Result<String> {
        let rows = self.attributed(period, scope, by).await?;
        let tenants = self.store.tenant_infos(scope).await?;
        Ok(bill::attributed_csv(period, by, &rows, &tenants))
    }

    pub async fn csv(&self, period: &str, scope: &TenantScope) -> Result<String> {
        let (_, rows) = self.rows(period, scope).await?;
        let tenants: Vec<TenantInfo> = self.store.tenant_infos(scope).await?;
        let mut out = bill::bill_csv(period, &rows.bill_rows, &tenants);
        out.push_str(&bill::adjustment_csv_rows(
            period,
            &rows.adjustments,
            &tenants,
        ));
        Ok(out)
    }

    /// The FOCUS export (one row per charge component of each tenant ×
    /// day × app × model × tags) as CSV chunks: the header, then the rows
    /// a few tenants at a time, then [`FocusChunk::End`]. An open month is
    /// read through the day rollups' cursor, so the first rows go out
    /// before the last are read and memory holds about one tenant's rows,
    /// whatever the platform's size; a closed month's rows come from the
    /// archive in one read (and are written out a chunk at a time). The
    /// bill's rounding is per tenant, so a chunk is final when its
    /// tenants' rows are all read. An error ends the chunks with it, and a
    /// channel that closes without `End` (the task failed) is no end
    /// either: the response is then cut short, never passed off as whole.
    /// A reader that takes no chunk for [`FOCUS_SEND_WAIT`] is given up
    /// on: the cursor's transaction and its connection are released.
    pub async fn focus_chunks(
        &self,
        period: &str,
        scope: &TenantScope,
    ) -> Result<tokio::sync::mpsc::Receiver<Result<FocusChunk>>> {
        /// A chunk is sent once it holds this much.
        const CHUNK: usize = 256 * 1024;
        let (book, _) = self.book(period).await?;
        let tenants = self.store.tenant_infos(scope).await?;
        let adjustments = self.adjustments(period, scope).await?;
        let (start, end) = self
            .clock
            .month_bounds(period)
            .ok_or_else(|| BillingError::Invalid("period must be YYYY-MM".into()))?;
        let (billing_start, billing_end) = (rfc3339(start), rfc3339(end));
        let clock = self.clock;
        let mut source = match book {
            MonthBook::Ledger => {
                FocusSource::Cursor(self.store.day_rows_cursor(scope, period).await?)
            }
            MonthBook::Archive(batch) => FocusSource::Rows(
                self.archive(period)?
                    .day_rows(period, batch, scope.tenant())
                    .await?,
            ),
        };
        let (tx, rx) = tokio::sync::mpsc::channel(4);
        tokio::spawn(async move {
            // False when the reader is gone or has taken nothing for too
            // long: stop reading (dropping the cursor rolls its
            // transaction back and gives its connection back).
            let send = |item: Result<FocusChunk>| {
                let tx = tx.clone();
                async move {
                    matches!(
                        tokio::time::timeout(FOCUS_SEND_WAIT, tx.send(item)).await,
                        Ok(Ok(()))
                    )
                }
            };
            let day_bounds = move |d: &str| match clock.day_bounds(d) {
                Some((s, e)) => (rfc3339(s), rfc3339(e)),
                None => (String::new(), String::new()),
            };
            let p = FocusPeriod {
                billing_start,
                billing_end,
                day_bounds: &day_bounds,
                provider: "tollgate",
            };
            let by_id = bill::tenants_by_id(&tenants);
            let mut out = bill::focus_header();
            // The rows of the tenant being read (they arrive a tenant after
            // the other, in id order).
            let mut pending: Vec<DayRow> = Vec::new();
            loop {
                let batch = match source.next_batch().await {
                    Ok(b) => b,
                    Err(e) => {
                        send(Err(e)).await;
                        return;
                    }
                };
                let done = batch.is_empty();
                for r in batch {
                    if pending.last().is_some_and(|l| l.tenant_id != r.tenant_id) {
                        bill::focus_rows(&p, &pending, &by_id, &mut out);
                        pending.clear();
                        if out.len() >= CHUNK
                            && !send(Ok(FocusChunk::Csv(std::mem::take(&mut out)))).await
                        {
                            return;
                        }
                    }
                    pending.push(r);
                }
                if done {
                    bill::focus_rows(&p, &pending, &by_id, &mut out);
                    bill::focus_adjustment_rows(&p, &adjustments, &by_id, &mut out);
                    if send(Ok(FocusChunk::Csv(out))).await {
                        send(Ok(FocusChunk::End)).await;
                    }
                    return;
                }
            }
        });
        Ok(rx)
    }
}

/// How long the FOCUS export waits for its reader to take a chunk before
/// it gives up (and releases the database connection it reads through).
pub const FOCUS_SEND_WAIT: std::time::Duration = std::time::Duration::from_secs(60);

/// A piece of the FOCUS export ([`Books::focus_chunks`]).
#[derive(Debug)]
pub enum FocusChunk {
    /// The next bytes of the CSV.
    Csv(String),
    /// The export is whole: nothing follows.
    End,
}

/// Where the FOCUS export's rows come from.
enum FocusSource {
    /// An open month: the day rollups, through a cursor.
    Cursor(store::DayRowsCursor),
    /// A closed month: its rows read from the archive, given out once.
    Rows(Vec<DayRow>),
}

impl FocusSource {
    /// The next rows in (tenant, …) order; empty once all are given.
    async fn next_batch(&mut self) -> Result<Vec<DayRow>> {
        match self {
            FocusSource::Cursor(c) => Ok(c.next_batch().await?),
            FocusSource::Rows(rows) => {
                let mut rows = std::mem::take(rows);
                rows.sort_by(|a, b| a.tenant_id.cmp(&b.tenant_id));
                Ok(rows)
            }
        }
    }
}
