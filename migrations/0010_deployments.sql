-- Several deployments behind one model (docs/routing.md). A model with no
-- row here has one deployment: its own upstream_base_url / upstream_model /
-- upstream_api_key_enc columns. A model with rows is served by its enabled
-- rows only; its own upstream columns then mirror its first deployment so
-- older readers still see a valid upstream.
CREATE TABLE model_deployments (
    model_id             TEXT NOT NULL REFERENCES models (id) ON DELETE CASCADE,
    -- Unique per model; what the ledger, metrics and request lookup name.
    name                 TEXT NOT NULL CHECK (name ~ '^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$'),
    upstream_base_url    TEXT NOT NULL CHECK (upstream_base_url ~ '^https?://'),
    upstream_model       TEXT NOT NULL CHECK (upstream_model <> ''),
    -- Encrypted with the configured key (ChaCha20-Poly1305); never returned.
    upstream_api_key_enc BYTEA,
    weight               INTEGER NOT NULL DEFAULT 1 CHECK (weight BETWEEN 0 AND 10000),
    -- 0 is the best; higher numbers are fallbacks for the ones above.
    priority             INTEGER NOT NULL DEFAULT 0 CHECK (priority BETWEEN 0 AND 100),
    max_inflight         INTEGER CHECK (max_inflight > 0),
    -- A provider profile (cap_field, hidden_reasoning, apis); NULL: the model's.
    profile              JSONB,
    enabled              BOOLEAN NOT NULL DEFAULT TRUE,
    position             INTEGER NOT NULL DEFAULT 0,
    created_at           TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at           TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (model_id, name)
);

-- Models tried, in order, when every deployment of this one is down.
ALTER TABLE models ADD COLUMN fallbacks TEXT[] NOT NULL DEFAULT '{}';

-- The deployment that answered (NULL for rows written before deployments).
ALTER TABLE usage_events ADD COLUMN deployment TEXT;

CREATE TRIGGER model_deployments_notify AFTER INSERT OR UPDATE OR DELETE ON model_deployments
    FOR EACH STATEMENT EXECUTE FUNCTION tollgate_notify_config();
