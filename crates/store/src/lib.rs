//! Postgres repositories: the system of record. All SQL of the project lives
//! in this crate (and ClickHouse's in `sql/`). Reads of tenant data take a
//! [`TenantScope`], which only sign-in and session checks (`auth`) or the
//! explicit [`TenantScope::system`] make.
// A dependency nothing uses fails CI (clippy -D warnings).
#![cfg_attr(not(test), warn(unused_crate_dependencies))]

mod analytics;
mod audit;
mod auth;
mod billing;
mod catalog;
mod catalog_delta;
mod console;
mod deployments;
mod jobs;
mod key_lifecycle;
mod ledger;
mod limits_history;
mod model_aliases;
pub mod passwords;
mod pgcopy;
mod pool;
mod prices;
mod provider;
mod provider_recon;
mod quota_requests;
mod request_decisions;
mod request_log;
mod rollups;
mod scope;
mod sso;
mod users;

pub use analytics::{months_between, DayUsage, GroupUsage, UsageBy, UsageSums};
pub use audit::{AuditRow, NewAudit};
pub use auth::{IssuedSession, Principal, Sessions, SignedInVia, VerifiedSession};
pub use billing::{ClosedMonth, DayRowsCursor, VerifiedMonth};
pub use catalog::{
    AppChange, AppRow, Catalog, CatalogParts, KeyRow, ModelRow, NewKey, NewModel, TenantRow,
};
pub use catalog_delta::CatalogChange;
pub use console::{AuditFilter, KeyListRow, KeySpendRow, UserListRow};
pub use deployments::{DeploymentRow, RoutingRows};
pub use jobs::{AlertRow, JobRunRow, NewAlert, NoticeRow};
pub use key_lifecycle::{KeyEdit, Rotation};
pub use ledger::MonthUsageRow;
pub use limits_history::LimitsOwner;
pub use model_aliases::ModelAliasRow;
pub use pool::{BorrowRow, BorrowedRow, GuaranteeRow, ReclaimRow};
pub use prices::{PriceSheetRow, PricedModel};
pub use provider_recon::{
    AccountLink, AdjustmentRow, AdjustmentShare, BillAdjustment, DaySaved, NewAdjustment,
    ProviderAccountRow, PutProviderAccount, ReconDayRow, ReconLedgerRow, ReconLineRow,
    ResolvedLink,
};
pub use quota_requests::{GrantRow, NewQuotaRequest, QuotaRequestRow};
pub use request_decisions::{BudgetRefusal, RequestDecisionRow};
pub use request_log::{RequestCursor, RequestLogFilter, RequestLogRow};
pub use rollups::RollupDifference;
pub use scope::TenantScope;
pub use sso::{SsoIdentity, SsoRefusal};
pub use users::{AccountHandsRow, UserRow};

use sqlx::postgres::{PgListener, PgPoolOptions};
use sqlx::PgPool;
use std::time::Duration;

/// A connection LISTENing for catalog changes (`Store::config_listener`).
pub type ConfigListener = PgListener;

/// The channel every replica's catalog cache listens on (see migrations).
pub const CONFIG_CHANNEL: &str = "tollgate_config";

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("database error: {0}")]
    Db(#[from] sqlx::Error),
    #[error("migration failed: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    #[error("{0} already exists")]
    Conflict(String),
    #[error("{0} not found")]
    NotFound(String),
    #[error("stored data is invalid: {0}")]
    Corrupt(String),
    /// A change based on an older version of the row than the stored one
    /// (`what` as the audit log names it: `tenant:t`, `key:<uuid>`).
    #[error("{what} changed since version {expected} (now {current})")]
    Stale {
        what: String,
        expected: i64,
        current: i64,
    },
}

impl StoreError {
    /// The database could not be reached (down, refusing connections, or
    /// the pool timed out waiting for one), as opposed to a query failing.
    pub fn is_unreachable(&self) -> bool {
        matches!(
            self,
            StoreError::Db(
                sqlx::Error::Io(_)
                    | sqlx::Error::PoolTimedOut
                    | sqlx::Error::PoolClosed
                    | sqlx::Error::Tls(_)
            )
        )
    }

    /// PostgreSQL refused a text value it cannot store: a NUL (U+0000) in a
    /// text column (22021) or in a JSON string (22P05). Bad input, not a
    /// failure of the database.
    pub fn is_bad_text(&self) -> bool {
        matches!(self, StoreError::Db(sqlx::Error::Database(d))
            if matches!(d.code().as_deref(), Some("22021" | "22P05")))
    }
}

pub type Result<T> = std::result::Result<T, StoreError>;

#[derive(Clone)]
pub struct Store {
    pool: PgPool,
}

impl Store {
    pub async fn connect(url: &str, max_connections: u32) -> Result<Self> {
        let pool = PgPoolOptions::new()
            .max_connections(max_connections)
            .acquire_timeout(Duration::from_secs(5))
            .connect(url)
            .await?;
        Ok(Self { pool })
    }

    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    pub async fn migrate(&self) -> Result<()> {
        sqlx::migrate!("../../migrations").run(&self.pool).await?;
        Ok(())
    }

    /// A listener on the config channel; a notification means "reload".
    pub async fn config_listener(&self) -> Result<ConfigListener> {
        let mut l = PgListener::connect_with(&self.pool).await?;
        l.listen(CONFIG_CHANNEL).await?;
        Ok(l)
    }

    pub async fn ping(&self) -> Result<()> {
        sqlx::query("SELECT 1").execute(&self.pool).await?;
        Ok(())
    }
}

/// Maps a unique violation to `Conflict(what)`.
fn conflict(what: impl Into<String>) -> impl FnOnce(sqlx::Error) -> StoreError {
    move |e| match &e {
        sqlx::Error::Database(d) if d.is_unique_violation() => StoreError::Conflict(what.into()),
        _ => StoreError::Db(e),
    }
}

/// A job's cluster-wide lock: a transaction holding a Postgres advisory lock.
/// Dropping it (or the replica dying) releases the lock.
pub struct JobLock {
    _tx: sqlx::Transaction<'static, sqlx::Postgres>,
}

impl JobLock {
    /// Releases the lock now. Dropping it also releases it, but only once
    /// the pool gets round to rolling the transaction back: a run that
    /// follows at once could find its own job still locked.
    pub async fn release(self) -> Result<()> {
        self._tx.rollback().await?;
        Ok(())
    }
}

impl Store {
    /// Takes the named job's lock if no other replica holds it.
    pub async fn try_job_lock(&self, job: &str) -> Result<Option<JobLock>> {
        let mut tx = self.pool.begin().await?;
        let got: bool =
            sqlx::query_scalar("SELECT pg_try_advisory_xact_lock(hashtext('tollgate-job:' || $1))")
                .bind(job)
                .fetch_one(&mut *tx)
                .await?;
        Ok(got.then_some(JobLock { _tx: tx }))
    }
}
