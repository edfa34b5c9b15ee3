-- A request's agent session and the model name it asked for (docs/clients.md,
-- "Sessions" and "Model aliases"): attributes of the ledger row for the
-- request log, not part of any rollup. NULL: none named / asked by the
-- catalog name itself.
ALTER TABLE usage_events
    ADD COLUMN session_id TEXT,
    ADD COLUMN asked_model TEXT;
