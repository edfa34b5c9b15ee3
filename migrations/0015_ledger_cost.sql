-- Cheaper ledger writes: fewer and cheaper indexes on usage_events, the table
-- every admitted request adds a row to (docs/scale.md, "Cheaper ledger
-- writes").
--
-- Nothing reads these two any more: totals come from usage_rollups, the
-- months to close are found in usage_rollups (its key starts with the
-- period), and the remaining month-wide reads (reconcile, rollover copy,
-- purge) visit a whole month, which a sequential scan or the primary key
-- serves.
DROP INDEX usage_events_day;
DROP INDEX usage_events_tenant_period;

-- Request ids are ASCII (`req_` + a UUIDv7 in hex from the gateway); compared
-- bytewise ("C") the primary key and the request-log indexes need no
-- locale-aware string comparison, and the planner may use abbreviated keys.
-- Same order as before for ASCII; no table rewrite (only the indexes on the
-- column are rebuilt). Both sides of the request log's join and union use
-- the same collation.
ALTER TABLE usage_events ALTER COLUMN request_id TYPE TEXT COLLATE "C";
ALTER TABLE request_decisions ALTER COLUMN request_id TYPE TEXT COLLATE "C";
