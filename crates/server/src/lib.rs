//! The `tollgate` binary's library: configuration, wiring and commands, so
//! end-to-end tests run exactly what the binary runs.

pub mod app;
pub mod commands;
pub mod config;
pub mod demo;
pub mod redis_policy;
