//! Pure business logic of tollgate: money, periods, limits, pricing, token
//! estimates, virtual keys, request validation and admission reasons.
//! No IO here: everything is a function that a unit test can call.
// A dependency nothing uses fails CI (clippy -D warnings).
#![cfg_attr(not(test), warn(unused_crate_dependencies))]

pub mod admission;
pub mod alias;
pub mod attribution;
pub mod audit;
pub mod bill;
pub mod borrowing;
pub mod bpe;
pub mod budgets;
pub mod chain_budgets;
pub mod charges;
pub mod client_ip;
pub mod context;
pub mod count_cache;
pub mod counter;
pub mod day_cost;
pub mod extras;
pub mod fairq;
pub mod images;
pub mod invoice;
pub mod json_scan;
pub mod keys;
pub mod lease;
pub mod limits;
pub mod login;
pub mod media;
pub mod money;
pub mod period;
pub mod pricing;
pub mod provider;
pub mod reason;
pub mod request;
pub mod request_id;
pub mod roles;
pub mod routing;
pub mod secret;
pub mod sso;
pub mod standing;
pub mod text;
pub mod tokens;
pub mod usage;

pub use limits::{Limits, ScopeKind};
pub use money::MicroUsd;
pub use reason::{Decision, ReasonCode, Refusal};
