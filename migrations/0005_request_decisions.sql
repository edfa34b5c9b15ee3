-- Why a request was refused or degraded (DESIGN §10 request lookup, §9 bills:
-- "requests refused by reason"). Admitted requests are looked up in
-- usage_events; this table holds the decisions that produced no usage event
-- (refused) or changed the request (degraded). Only requests whose key was
-- known are recorded (tenant_id NOT NULL), so a flood of bad keys cannot fill
-- the database. period/day are in the platform time zone, like usage_events.
CREATE TABLE request_decisions (
    request_id TEXT PRIMARY KEY,
    at         TIMESTAMPTZ NOT NULL DEFAULT now(),
    period     TEXT NOT NULL CHECK (period ~ '^[0-9]{4}-[0-9]{2}$'),
    day        DATE NOT NULL,
    tenant_id  TEXT NOT NULL,
    app_id     TEXT NOT NULL,
    key_id     TEXT NOT NULL,
    model      TEXT NOT NULL,
    decision   TEXT NOT NULL CHECK (decision IN ('refused', 'degraded')),
    -- A ReasonCode (crates/domain/src/reason.rs), e.g. budget_exhausted.
    reason     TEXT NOT NULL,
    -- The HTTP status the client got (200 for a degraded request).
    status     SMALLINT NOT NULL,
    -- The first failing scope ("tenant:t", "app:t/a", "key:<id>") when known.
    scope      TEXT,
    -- Counters at the time: limit, used, held, headroom of the failing scope, etc.
    detail     JSONB NOT NULL DEFAULT '{}'
);
CREATE INDEX request_decisions_tenant_period ON request_decisions (tenant_id, period, reason);
