-- Billing and the calendar (DESIGN §9): job runs, the month rollover state
-- machine, budget alerts with their webhook deliveries, console notices, and
-- the record of grants whose expiry has been audited.

-- Every run of a background job. A scheduled run claims its slot (the cron
-- instant it fires for): replicas racing for one slot get one run. Runs
-- started by hand (`tollgate jobs run`) have no slot.
CREATE TABLE job_runs (
    id          BIGSERIAL PRIMARY KEY,
    job         TEXT NOT NULL,
    slot        TIMESTAMPTZ,
    -- The "now" the job ran as (injected by tests and `--now`).
    run_as      TIMESTAMPTZ NOT NULL,
    replica     TEXT NOT NULL,
    started_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
    finished_at TIMESTAMPTZ,
    outcome     TEXT NOT NULL DEFAULT 'running'
                CHECK (outcome IN ('running', 'ok', 'differences', 'failed', 'abandoned')),
    counts      JSONB NOT NULL DEFAULT '{}',
    detail      JSONB NOT NULL DEFAULT 'null',
    error       TEXT,
    UNIQUE (job, slot)
);
CREATE INDEX job_runs_recent ON job_runs (job, started_at DESC);

-- The rollover of a month. No row: the month is open (bills from Postgres).
-- archiving: a copy to ClickHouse is under way or crashed (still open);
-- closed: ClickHouse holds batch_id's copy, verified equal to Postgres
-- (bills from ClickHouse); purged: the Postgres rows are gone after the
-- retention period. The totals are what was verified.
CREATE TABLE closed_months (
    period        TEXT PRIMARY KEY CHECK (period ~ '^[0-9]{4}-[0-9]{2}$'),
    state         TEXT NOT NULL CHECK (state IN ('archiving', 'closed', 'purged')),
    batch_id      UUID NOT NULL,
    events        BIGINT NOT NULL DEFAULT 0,
    input_tokens  BIGINT NOT NULL DEFAULT 0,
    output_tokens BIGINT NOT NULL DEFAULT 0,
    cost_micro    BIGINT NOT NULL DEFAULT 0,
    bill_rows     BIGINT NOT NULL DEFAULT 0,
    refused       BIGINT NOT NULL DEFAULT 0,
    attempts      INTEGER NOT NULL DEFAULT 1,
    started_at    TIMESTAMPTZ NOT NULL DEFAULT now(),
    closed_at     TIMESTAMPTZ,
    purge_after   TIMESTAMPTZ,
    purged_at     TIMESTAMPTZ,
    CHECK ((state = 'archiving') = (closed_at IS NULL))
);

-- A budget alert, once per scope, measure, threshold and month. The row is
-- also the webhook delivery's outbox: retried with backoff until delivered.
CREATE TABLE budget_alerts (
    id              BIGSERIAL PRIMARY KEY,
    tenant_id       TEXT NOT NULL,
    -- 'tenant:<t>' or 'app:<t>/<a>'
    scope           TEXT NOT NULL,
    period          TEXT NOT NULL CHECK (period ~ '^[0-9]{4}-[0-9]{2}$'),
    measure         TEXT NOT NULL CHECK (measure IN ('tokens', 'cost')),
    -- 'used_70', 'used_90', 'forecast_over_budget'
    threshold       TEXT NOT NULL,
    payload         JSONB NOT NULL,
    created_at      TIMESTAMPTZ NOT NULL DEFAULT now(),
    delivery        TEXT NOT NULL DEFAULT 'pending'
                    CHECK (delivery IN ('pending', 'delivered', 'no_webhook', 'gave_up')),
    attempts        INTEGER NOT NULL DEFAULT 0,
    next_attempt_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    delivered_at    TIMESTAMPTZ,
    last_error      TEXT,
    UNIQUE (scope, period, measure, threshold)
);
CREATE INDEX budget_alerts_pending ON budget_alerts (next_attempt_at) WHERE delivery = 'pending';

-- Notices shown in the console (budget alerts, forecasts, rollover trouble).
CREATE TABLE notices (
    id        BIGSERIAL PRIMARY KEY,
    at        TIMESTAMPTZ NOT NULL DEFAULT now(),
    -- NULL: for the platform's staff only.
    tenant_id TEXT,
    kind      TEXT NOT NULL,
    message   TEXT NOT NULL,
    detail    JSONB NOT NULL DEFAULT '{}'
);
CREATE INDEX notices_recent ON notices (tenant_id, at DESC);

-- Grants whose expiry has been written to the audit log (once each).
CREATE TABLE grant_expiries (
    quota_request_id UUID PRIMARY KEY REFERENCES quota_requests (id),
    expired_at       TIMESTAMPTZ NOT NULL,
    recorded_at      TIMESTAMPTZ NOT NULL DEFAULT now()
);
