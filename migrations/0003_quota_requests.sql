-- Temporary quota: requested by a tenant admin, decided by another platform
-- admin; an approved request is a grant until expires_at (checked by time on
-- the hot path, so expiry needs no job to take effect).
CREATE TABLE quota_requests (
    id           UUID PRIMARY KEY,
    tenant_id    TEXT NOT NULL REFERENCES tenants (id),
    app_id       TEXT,
    tokens       BIGINT NOT NULL DEFAULT 0 CHECK (tokens >= 0),
    cost_micro   BIGINT NOT NULL DEFAULT 0 CHECK (cost_micro >= 0),
    expires_at   TIMESTAMPTZ NOT NULL,
    reason       TEXT NOT NULL,
    state        TEXT NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'approved', 'rejected')),
    requested_by UUID NOT NULL REFERENCES users (id),
    decided_by   UUID REFERENCES users (id),
    decided_at   TIMESTAMPTZ,
    note         TEXT NOT NULL DEFAULT '',
    created_at   TIMESTAMPTZ NOT NULL DEFAULT now(),
    CHECK (tokens > 0 OR cost_micro > 0),
    CHECK ((state = 'pending') = (decided_by IS NULL)),
    CHECK (decided_by IS NULL OR decided_by <> requested_by),
    FOREIGN KEY (tenant_id, app_id) REFERENCES apps (tenant_id, id)
);
CREATE INDEX quota_requests_tenant ON quota_requests (tenant_id, created_at DESC);

CREATE TRIGGER quota_requests_notify AFTER INSERT OR UPDATE OR DELETE ON quota_requests
    FOR EACH STATEMENT EXECUTE FUNCTION tollgate_notify_config();
