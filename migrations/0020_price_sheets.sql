-- Priced as the provider bills (docs/billing.md, "The price sheet"): a
-- model's (or one deployment's) price sheet from an instant on. A request
-- is priced by the sheet in force when it was received; a model without
-- one by its two base prices. Rows are never changed: a new price is a new
-- row, so the history is the table.
CREATE TABLE model_price_sheets (
    id             BIGSERIAL PRIMARY KEY,
    model_id       TEXT NOT NULL REFERENCES models (id) ON DELETE CASCADE,
    -- '' for the model's own sheet; else the deployment it is for.
    deployment     TEXT NOT NULL DEFAULT '',
    effective_from TIMESTAMPTZ NOT NULL,
    sheet          JSONB NOT NULL,
    created_at     TIMESTAMPTZ NOT NULL DEFAULT now(),
    created_by     TEXT NOT NULL,
    UNIQUE (model_id, deployment, effective_from)
);
CREATE TRIGGER model_price_sheets_notify AFTER INSERT OR UPDATE OR DELETE ON model_price_sheets
    FOR EACH STATEMENT EXECUTE FUNCTION tollgate_notify_delta();

-- Every ledger row's exact cost (pico-USD: tokens × µUSD per million
-- tokens is an integer) and, when it was more than plain input and output,
-- what it was billed for by component. Rows from before: cost_micro × 10^6.
ALTER TABLE usage_events
    ADD COLUMN cost_pico BIGINT NOT NULL DEFAULT 0,
    ADD COLUMN breakdown JSONB;
UPDATE usage_events SET cost_pico = cost_micro * 1000000 WHERE cost_micro < 9223372036854;
