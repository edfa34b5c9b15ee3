//! The `tollgate` binary's library: configuration, wiring and commands, so
//! end-to-end tests run exactly what the binary runs.
// A dependency nothing uses fails CI (clippy -D warnings).
#![cfg_attr(not(test), warn(unused_crate_dependencies))]

// Used by the binary (main.rs) only.
use {clap as _, metrics as _, sqlx as _};

pub mod app;
pub mod commands;
pub mod config;
pub mod metrics_endpoint;
pub mod process;
pub mod redis_policy;
pub mod routing_config;
