-- Borrowing and fairness (DESIGN §7): the platform's shared pool, the
-- borrows tenants take from it and the reclaims that take them back, and
-- core tenants' guaranteed share of a model's upstream concurrency.
-- tenants.priority, may_borrow, borrow_cap_tokens and models.degrade_to,
-- pool_capacity exist since 0001.

-- One row: the monthly pool. Shares are parts per million (no floats).
CREATE TABLE borrow_pool (
    id                    BOOLEAN PRIMARY KEY DEFAULT TRUE CHECK (id),
    monthly_tokens        BIGINT CHECK (monthly_tokens >= 0),
    monthly_cost_micro    BIGINT CHECK (monthly_cost_micro >= 0),
    max_borrow_share_ppm  INTEGER NOT NULL DEFAULT 50000 CHECK (max_borrow_share_ppm BETWEEN 1 AND 1000000),
    reclaim_below_share_ppm INTEGER NOT NULL DEFAULT 200000 CHECK (reclaim_below_share_ppm BETWEEN 0 AND 1000000),
    updated_at            TIMESTAMPTZ NOT NULL DEFAULT now()
);

-- A borrow is 'pending' from before the pool is debited until it is known
-- whether the debit landed (the Redis pool script is idempotent by id, so a
-- pending borrow is simply driven again), then 'active' or 'refused'.
-- outstanding_* shrink as reclaims take quota back.
CREATE TABLE borrows (
    id                 UUID PRIMARY KEY,
    tenant_id          TEXT NOT NULL REFERENCES tenants (id),
    period             TEXT NOT NULL CHECK (period ~ '^[0-9]{4}-[0-9]{2}$'),
    state              TEXT NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'active', 'refused')),
    asked_tokens       BIGINT NOT NULL CHECK (asked_tokens >= 0),
    tokens             BIGINT NOT NULL DEFAULT 0 CHECK (tokens >= 0),
    cost_micro         BIGINT NOT NULL DEFAULT 0 CHECK (cost_micro >= 0),
    outstanding_tokens BIGINT NOT NULL DEFAULT 0 CHECK (outstanding_tokens >= 0 AND outstanding_tokens <= tokens),
    outstanding_cost_micro BIGINT NOT NULL DEFAULT 0 CHECK (outstanding_cost_micro >= 0 AND outstanding_cost_micro <= cost_micro),
    trigger            TEXT NOT NULL,
    replica            TEXT NOT NULL,
    created_at         TIMESTAMPTZ NOT NULL DEFAULT now(),
    settled_at         TIMESTAMPTZ
);
CREATE INDEX borrows_period_tenant ON borrows (period, tenant_id, created_at);

-- Quota taken back from a borrow. 'pending' until the pool has been given
-- the amount back (idempotent by id), then 'done'.
CREATE TABLE reclaims (
    id         UUID PRIMARY KEY,
    borrow_id  UUID NOT NULL REFERENCES borrows (id),
    tenant_id  TEXT NOT NULL,
    period     TEXT NOT NULL,
    tokens     BIGINT NOT NULL CHECK (tokens >= 0),
    cost_micro BIGINT NOT NULL CHECK (cost_micro >= 0),
    state      TEXT NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'done')),
    reason     TEXT NOT NULL,
    at         TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE INDEX reclaims_period ON reclaims (period, at);

-- A core tenant's guaranteed share of a model pool's concurrency.
CREATE TABLE model_guarantees (
    model_id  TEXT NOT NULL REFERENCES models (id),
    tenant_id TEXT NOT NULL REFERENCES tenants (id),
    slots     INTEGER NOT NULL CHECK (slots > 0),
    PRIMARY KEY (model_id, tenant_id)
);

-- Borrowed quota raises effective limits on the hot path: every replica's
-- index reloads when borrows change.
CREATE TRIGGER borrows_notify AFTER INSERT OR UPDATE OR DELETE ON borrows
    FOR EACH STATEMENT EXECUTE FUNCTION tollgate_notify_config();
CREATE TRIGGER model_guarantees_notify AFTER INSERT OR UPDATE OR DELETE ON model_guarantees
    FOR EACH STATEMENT EXECUTE FUNCTION tollgate_notify_config();
CREATE TRIGGER borrow_pool_notify AFTER INSERT OR UPDATE OR DELETE ON borrow_pool
    FOR EACH STATEMENT EXECUTE FUNCTION tollgate_notify_config();
