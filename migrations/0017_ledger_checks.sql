-- Cheaper ledger writes, continued (docs/scale.md, "Cheaper ledger writes"):
-- usage_events checked each row's period against a regular expression, ~5 %
-- of the Postgres backend's time per request in a profile. Every event is
-- summed into a usage_rollups row keyed by its period in the same
-- transaction (both ledger writes in crates/store/src/ledger.rs; nothing
-- else inserts into usage_events), and usage_rollups keeps the same CHECK, so
-- an event with a malformed period still fails its whole batch: the check
-- now runs once per rollup row instead of once per event.
ALTER TABLE usage_events DROP CONSTRAINT usage_events_period_check;
