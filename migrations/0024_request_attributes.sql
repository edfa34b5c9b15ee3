-- A request's agent session and the model name it asked for (docs/clients.md,
-- "Sessions" and "Model aliases"): attributes of the ledger row. session_id
-- NULL: none named; asked_model '' : asked by the catalog name itself (a
-- constant default: no rewrite of the table; migration 0026 puts it in the
-- rollups' key).
ALTER TABLE usage_events
    ADD COLUMN session_id TEXT,
    ADD COLUMN asked_model TEXT NOT NULL DEFAULT '';
