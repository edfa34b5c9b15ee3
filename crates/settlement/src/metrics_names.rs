//! Metric names of the ledger writer (Prometheus text at `/metrics`).

pub const LEDGER_EVENTS: &str = "tollgate_ledger_events_stored_total";
pub const LEDGER_ERRORS: &str = "tollgate_ledger_errors_total";
