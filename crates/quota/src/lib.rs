//! The Redis hold engine (docs/design.md §4): hold, settle and release as single Lua
//! calls, all-or-nothing across tenant, app and key; rebuild of a tenant's
//! month from the ledger when Redis has lost it; fail closed on any Redis
//! error or timeout.
// A dependency nothing uses fails CI (clippy -D warnings).
#![cfg_attr(not(test), warn(unused_crate_dependencies))]

mod conn;
mod engine;
mod eviction;
mod keys;
mod lease;
mod lease_engine;
mod login;
mod pool;
mod settle_bound;

pub use conn::Timeouts;
pub use engine::{
    BookedCheck, EndUserScope, ExtendOutcome, ExtendRequest, HoldOutcome, HoldRequest,
    LedgerSource, MonthCounters, OpenHold, QuotaEngine, QuotaError, ScopeUsage, SettleOutcome,
    SettleRequest,
};
pub use eviction::{policy_problem, NodePolicy, REQUIRED_POLICY};
pub use keys::KeySpace;
pub use lease::{LeaseAdmit, LeaseBook, LeaseTuning, SettleDone};
pub use lease_engine::{
    LeaseAcquire, LeaseBatch, LeaseBatchOutcome, LeaseGrant, LeaseItem, OpenLease,
};
pub use pool::{BorrowOutcome, SlotOutcome};
