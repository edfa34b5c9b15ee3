//! Pure business logic of tollgate: money, periods, limits, pricing, token
//! estimates, virtual keys, request validation and admission reasons.
//! No IO here: everything is a function that a unit test can call.

pub mod audit;
pub mod bill;
pub mod borrowing;
pub mod bpe;
pub mod counter;
pub mod fairq;
pub mod keys;
pub mod lease;
pub mod limits;
pub mod money;
pub mod period;
pub mod pricing;
pub mod provider;
pub mod reason;
pub mod request;
pub mod roles;
pub mod secret;
pub mod tokens;
pub mod usage;

pub use limits::{Limits, ScopeKind};
pub use money::MicroUsd;
pub use reason::{Decision, ReasonCode, Refusal};
