//! Settlement and back office: the work behind a request that has no HTTP in
//! it. The ledger writer and the outbox sweeper (settled usage into
//! Postgres), the Postgres ledger as the hold engine's rebuild source,
//! closing abandoned holds, and borrowing from (and reclaiming for) the
//! platform pool. Used by the gateway (on the request path) and by the jobs.
// A dependency nothing uses fails CI (clippy -D warnings).
#![cfg_attr(not(test), warn(unused_crate_dependencies))]

pub mod abandoned;
pub mod borrow;
pub mod ledger;
pub mod ledger_source;
mod metrics_names;

pub use ledger::LedgerWriter;

/// What can go wrong in settlement: the stores it works on.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("postgres: {0}")]
    Store(#[from] store::StoreError),
    #[error("quota store: {0}")]
    Quota(#[from] quota::QuotaError),
    /// The pool kept answering "unknown" although it was rebuilt each time.
    #[error("the pool of {month} was rebuilt but still does not know the borrow")]
    PoolRebuildIncomplete { month: String },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

use chrono::{DateTime, Utc};
use domain::fairq::Priority;
use domain::Limits;
use std::collections::HashMap;
use std::sync::Arc;

/// A tenant as settlement sees it: its borrowing terms, its effective
/// limits, and the borrowed quota held in memory for the request path. The
/// gateway's catalog entry is one.
pub trait Tenant: Send + Sync {
    fn id(&self) -> &str;
    fn priority(&self) -> Priority;
    fn may_borrow(&self) -> bool;
    fn borrow_cap_tokens(&self) -> i64;
    /// Borrowed quota outstanding in `month` (tokens, micro-USD).
    fn borrowed_in(&self, month: &str) -> (i64, i64);
    /// Sets the outstanding borrowed quota of `month` (absolute).
    fn set_borrowed(&self, month: &str, tokens: i64, cost_micro: i64);
    /// What the tenant's budgets are checked against in `month` at `now`.
    fn effective(&self, now: DateTime<Utc>, month: &str) -> Limits;
}

/// The tenants currently known (the gateway's in-memory catalog is one):
/// always the latest view, so a reload between two calls is seen.
pub trait Tenants: Send + Sync {
    /// Every tenant id, sorted.
    fn tenant_ids(&self) -> Vec<String>;
    fn tenant(&self, id: &str) -> Option<Arc<dyn Tenant>>;
    /// One consistent view of every tenant, by id.
    fn tenants(&self) -> HashMap<String, Arc<dyn Tenant>>;
}
