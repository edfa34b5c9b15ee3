//! The `tollgate` binary's library: configuration, wiring and commands, so
//! end-to-end tests run exactly what the binary runs.

pub mod app;
pub mod commands;
pub mod config;
pub mod demo;
pub mod metrics_endpoint;
pub mod load_ledger;
pub mod redis_policy;
pub mod routing_config;
