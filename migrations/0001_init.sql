-- tollgate: the system of record. Forward-only migrations (expand/contract).

CREATE TABLE tenants (
    id                TEXT PRIMARY KEY CHECK (id ~ '^[a-z0-9][a-z0-9_-]{0,63}$'),
    name              TEXT NOT NULL,
    cost_center       TEXT NOT NULL DEFAULT '',
    priority          TEXT NOT NULL DEFAULT 'standard' CHECK (priority IN ('core', 'standard', 'batch')),
    limits            JSONB NOT NULL DEFAULT '{}',
    may_borrow        BOOLEAN NOT NULL DEFAULT FALSE,
    borrow_cap_tokens BIGINT NOT NULL DEFAULT 0 CHECK (borrow_cap_tokens >= 0),
    -- NULL: every model; otherwise only these model ids.
    allowed_models    TEXT[],
    created_at        TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at        TIMESTAMPTZ NOT NULL DEFAULT now()
);

CREATE TABLE apps (
    tenant_id      TEXT NOT NULL REFERENCES tenants (id),
    id             TEXT NOT NULL CHECK (id ~ '^[a-z0-9][a-z0-9_-]{0,63}$'),
    name           TEXT NOT NULL,
    limits         JSONB NOT NULL DEFAULT '{}',
    allowed_models TEXT[],
    created_at     TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at     TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, id)
);

-- The key itself is never stored: only its HMAC-SHA256 under the server
-- pepper, and a short display prefix.
CREATE TABLE virtual_keys (
    id             UUID PRIMARY KEY,
    tenant_id      TEXT NOT NULL,
    app_id         TEXT NOT NULL,
    name           TEXT NOT NULL,
    prefix         TEXT NOT NULL,
    key_hash       BYTEA NOT NULL UNIQUE CHECK (length(key_hash) = 32),
    limits         JSONB NOT NULL DEFAULT '{}',
    allowed_models TEXT[],
    expires_at     TIMESTAMPTZ,
    revoked_at     TIMESTAMPTZ,
    created_at     TIMESTAMPTZ NOT NULL DEFAULT now(),
    FOREIGN KEY (tenant_id, app_id) REFERENCES apps (tenant_id, id)
);
CREATE INDEX virtual_keys_app ON virtual_keys (tenant_id, app_id);

CREATE TABLE models (
    id                         TEXT PRIMARY KEY CHECK (id ~ '^[A-Za-z0-9][A-Za-z0-9._:/-]{0,127}$'),
    kind                       TEXT NOT NULL DEFAULT 'chat' CHECK (kind IN ('chat', 'embedding')),
    upstream_base_url          TEXT NOT NULL CHECK (upstream_base_url ~ '^https?://'),
    upstream_model             TEXT NOT NULL,
    -- Encrypted with the configured key (ChaCha20-Poly1305); never returned.
    upstream_api_key_enc       BYTEA,
    input_price_micro_per_mtok  BIGINT NOT NULL DEFAULT 0 CHECK (input_price_micro_per_mtok >= 0),
    output_price_micro_per_mtok BIGINT NOT NULL DEFAULT 0 CHECK (output_price_micro_per_mtok >= 0),
    tokenizer                  TEXT,
    default_max_output_tokens  BIGINT NOT NULL DEFAULT 4096 CHECK (default_max_output_tokens > 0),
    degrade_to                 TEXT REFERENCES models (id),
    pool_capacity              INTEGER CHECK (pool_capacity > 0),
    enabled                    BOOLEAN NOT NULL DEFAULT TRUE,
    created_at                 TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at                 TIMESTAMPTZ NOT NULL DEFAULT now()
);

CREATE TABLE users (
    id            UUID PRIMARY KEY,
    email         TEXT NOT NULL UNIQUE CHECK (email = lower(email) AND email LIKE '%_@_%'),
    password_hash TEXT NOT NULL,
    role          TEXT NOT NULL CHECK (role IN ('platform_admin', 'tenant_admin', 'finance', 'auditor')),
    tenant_id     TEXT REFERENCES tenants (id),
    disabled      BOOLEAN NOT NULL DEFAULT FALSE,
    created_at    TIMESTAMPTZ NOT NULL DEFAULT now(),
    CHECK ((role = 'tenant_admin') = (tenant_id IS NOT NULL))
);

-- The settled usage ledger of the open months. One row per request, ever.
CREATE TABLE usage_events (
    request_id     TEXT PRIMARY KEY,
    tenant_id      TEXT NOT NULL,
    app_id         TEXT NOT NULL,
    key_id         TEXT NOT NULL,
    model          TEXT NOT NULL,
    period         TEXT NOT NULL CHECK (period ~ '^[0-9]{4}-[0-9]{2}$'),
    day            DATE NOT NULL,
    input_tokens   BIGINT NOT NULL CHECK (input_tokens >= 0),
    output_tokens  BIGINT NOT NULL CHECK (output_tokens >= 0),
    cost_micro     BIGINT NOT NULL CHECK (cost_micro >= 0),
    est_tokens     BIGINT NOT NULL,
    est_cost_micro BIGINT NOT NULL,
    overrun_tokens BIGINT NOT NULL DEFAULT 0,
    overrun_cost_micro BIGINT NOT NULL DEFAULT 0,
    status         TEXT NOT NULL,
    stream         BOOLEAN NOT NULL,
    replica        TEXT NOT NULL,
    started_at     TIMESTAMPTZ NOT NULL,
    settled_at     TIMESTAMPTZ NOT NULL,
    stored_at      TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE INDEX usage_events_tenant_period ON usage_events (tenant_id, period);
CREATE INDEX usage_events_day ON usage_events (day);

-- Append-only, hash-chained audit trail.
CREATE TABLE audit_log (
    id        BIGSERIAL PRIMARY KEY,
    at        TIMESTAMPTZ NOT NULL,
    actor     TEXT NOT NULL,
    action    TEXT NOT NULL,
    target    TEXT NOT NULL,
    before    JSONB NOT NULL DEFAULT 'null',
    after     JSONB NOT NULL DEFAULT 'null',
    reason    TEXT NOT NULL DEFAULT '',
    prev_hash BYTEA NOT NULL,
    hash      BYTEA NOT NULL UNIQUE
);

CREATE FUNCTION tollgate_audit_is_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'audit_log is append-only: % refused', TG_OP;
END $$;
CREATE TRIGGER audit_log_no_update BEFORE UPDATE OR DELETE ON audit_log
    FOR EACH ROW EXECUTE FUNCTION tollgate_audit_is_append_only();
CREATE TRIGGER audit_log_no_truncate BEFORE TRUNCATE ON audit_log
    FOR EACH STATEMENT EXECUTE FUNCTION tollgate_audit_is_append_only();

-- Every replica's key index and limit cache listens on this channel.
CREATE FUNCTION tollgate_notify_config() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('tollgate_config', TG_TABLE_NAME);
    RETURN NULL;
END $$;
CREATE TRIGGER tenants_notify AFTER INSERT OR UPDATE OR DELETE ON tenants
    FOR EACH STATEMENT EXECUTE FUNCTION tollgate_notify_config();
CREATE TRIGGER apps_notify AFTER INSERT OR UPDATE OR DELETE ON apps
    FOR EACH STATEMENT EXECUTE FUNCTION tollgate_notify_config();
CREATE TRIGGER virtual_keys_notify AFTER INSERT OR UPDATE OR DELETE ON virtual_keys
    FOR EACH STATEMENT EXECUTE FUNCTION tollgate_notify_config();
CREATE TRIGGER models_notify AFTER INSERT OR UPDATE OR DELETE ON models
    FOR EACH STATEMENT EXECUTE FUNCTION tollgate_notify_config();
