-- Reconciliation with the provider's invoice (docs/billing.md, "Closing
-- against the provider's invoice"): the provider accounts deployments bill
-- to, what the daily `provider-reconcile` job found when it compared the
-- ledger with the provider's usage and cost reports, and the adjustments
-- finance books for what is left.

-- An account at a provider whose usage and cost reports the job reads
-- (OpenAI organization, Anthropic organization). The admin key is
-- encrypted like provider keys (ChaCha20-Poly1305, `keys.encryption_key`)
-- and never returned.
CREATE TABLE provider_accounts (
    id                  TEXT PRIMARY KEY CHECK (id ~ '^[a-z0-9][a-z0-9._-]{0,63}$'),
    kind                TEXT NOT NULL CHECK (kind IN ('openai', 'anthropic')),
    -- The admin API's base, e.g. https://api.openai.com/v1.
    api_base_url        TEXT NOT NULL CHECK (api_base_url ~ '^https?://'),
    admin_key_enc       BYTEA NOT NULL,
    -- A day whose dollars differ by more than this share of the provider's
    -- (basis points; 100 = 1 %) raises an alert.
    drift_alert_bps     INTEGER NOT NULL DEFAULT 100 CHECK (drift_alert_bps BETWEEN 0 AND 10000),
    created_at          TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at          TIMESTAMPTZ NOT NULL DEFAULT now()
);

-- Which deployments bill to an account, and the provider-side id their
-- traffic is reported under: OpenAI's `api_key_id` (or `project_id` when it
-- starts with `proj_`), Anthropic's `workspace_id` (its cost report groups
-- by workspace, not by key). `deployment` is the ledger's name: `default`
-- for a model's own upstream.
CREATE TABLE provider_account_links (
    model_id     TEXT NOT NULL,
    deployment   TEXT NOT NULL,
    account_id   TEXT NOT NULL REFERENCES provider_accounts (id) ON DELETE CASCADE,
    provider_ref TEXT NOT NULL CHECK (provider_ref ~ '^[A-Za-z0-9_.:-]{1,128}$'),
    PRIMARY KEY (model_id, deployment)
);
CREATE INDEX provider_account_links_account ON provider_account_links (account_id);

-- One reconciled day of an account: when it was fetched and whether the
-- provider may still revise it (fetched before the day was final).
CREATE TABLE provider_recon_days (
    account_id   TEXT NOT NULL REFERENCES provider_accounts (id) ON DELETE CASCADE,
    day          DATE NOT NULL,
    fetched_at   TIMESTAMPTZ NOT NULL,
    final        BOOLEAN NOT NULL,
    -- How many times the provider's figures for the day changed.
    revisions    INTEGER NOT NULL DEFAULT 0,
    -- A digest of the provider's figures, to tell a revision from a re-run.
    digest       TEXT NOT NULL,
    tollgate_pico INT8 NOT NULL,
    provider_pico INT8 NOT NULL,
    PRIMARY KEY (account_id, day)
);

-- The comparison, per account × day × model × class (docs/billing.md):
-- quantities (tokens, calls or requests) and pico-USD on both sides, the
-- quantity of tollgate's requests at the day's edge, and the difference's
-- classification. Replaced whole when the day is fetched again.
CREATE TABLE provider_recon_lines (
    account_id     TEXT NOT NULL,
    day            DATE NOT NULL,
    model          TEXT NOT NULL,
    class          TEXT NOT NULL,
    tollgate_qty   INT8 NOT NULL,
    -- NULL: the provider reports no quantity for it (a cost line only).
    provider_qty   INT8,
    edge_qty       INT8 NOT NULL DEFAULT 0,
    tollgate_pico  INT8 NOT NULL,
    provider_pico  INT8 NOT NULL,
    finding        TEXT NOT NULL CHECK (finding IN ('match', 'rounding', 'day_edge', 'price',
                       'outside_traffic', 'not_billed', 'provider_more')),
    PRIMARY KEY (account_id, day, model, class),
    FOREIGN KEY (account_id, day) REFERENCES provider_recon_days (account_id, day) ON DELETE CASCADE
);

-- What finance books for a residual: proposed by one finance user,
-- approved (or rejected) by another. Approval fixes the shares.
CREATE TABLE bill_adjustments (
    id           UUID PRIMARY KEY,
    account_id   TEXT NOT NULL REFERENCES provider_accounts (id),
    day          DATE NOT NULL,
    model        TEXT NOT NULL,
    -- The month (platform time) the adjustment is billed in.
    period       TEXT NOT NULL CHECK (period ~ '^[0-9]{4}-[0-9]{2}$'),
    -- Signed: a provider that invoiced less gives departments a credit.
    amount_pico  INT8 NOT NULL CHECK (amount_pico <> 0),
    allocation   TEXT NOT NULL CHECK (allocation IN ('pro_rata', 'unallocated')),
    reason       TEXT NOT NULL CHECK (reason <> ''),
    state        TEXT NOT NULL DEFAULT 'proposed' CHECK (state IN ('proposed', 'approved', 'rejected')),
    proposed_by  UUID NOT NULL REFERENCES users (id),
    proposed_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
    decided_by   UUID REFERENCES users (id),
    decided_at   TIMESTAMPTZ,
    CHECK ((state = 'proposed') = (decided_by IS NULL)),
    CHECK (decided_by IS NULL OR decided_by <> proposed_by)
);
CREATE INDEX bill_adjustments_period ON bill_adjustments (period, state);

-- An approved adjustment's share per department; tenant '' is the
-- "unallocated" line. The shares add up to the amount exactly.
CREATE TABLE bill_adjustment_shares (
    adjustment_id UUID NOT NULL REFERENCES bill_adjustments (id),
    tenant_id     TEXT NOT NULL,
    period        TEXT NOT NULL,
    amount_pico   INT8 NOT NULL,
    PRIMARY KEY (adjustment_id, tenant_id)
);
CREATE INDEX bill_adjustment_shares_period ON bill_adjustment_shares (period, tenant_id);

-- A day's drift alert is delivered like a budget alert (its console
-- notice, its webhook with retries): measure `provider_drift`, scope
-- `provider_account:<id>`, threshold `day YYYY-MM-DD`.
ALTER TABLE budget_alerts DROP CONSTRAINT budget_alerts_measure_check;
ALTER TABLE budget_alerts ADD CONSTRAINT budget_alerts_measure_check
    CHECK (measure IN ('tokens', 'cost', 'provider_drift'));
