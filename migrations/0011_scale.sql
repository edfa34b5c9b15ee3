-- Catalog deltas: a change notifies what changed, so each replica updates
-- the one entry instead of reloading the whole catalog. Payloads on the
-- `tollgate_config` channel:
--   key:<hex keyed hash>   a virtual key was created, changed or revoked
--   tenant:<id>            a tenant, one of its apps, grants or borrows
--   models                 a model or a pool guarantee
--   config                 anything else (the replica reloads all but keys)
-- A statement touching many rows sends many payloads; the replica falls
-- back to a full reload when a burst is larger than it is worth applying.

CREATE FUNCTION tollgate_notify_delta() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    r record;
BEGIN
    IF TG_OP = 'DELETE' THEN r := OLD; ELSE r := NEW; END IF;
    -- One IF per table: PL/pgSQL plans a branch only when it runs it, so a
    -- field another table lacks is never looked up.
    IF TG_TABLE_NAME = 'virtual_keys' THEN
        PERFORM pg_notify('tollgate_config', 'key:' || encode(r.key_hash, 'hex'));
    ELSIF TG_TABLE_NAME = 'tenants' THEN
        PERFORM pg_notify('tollgate_config', 'tenant:' || r.id);
    ELSIF TG_TABLE_NAME IN ('apps', 'quota_requests', 'borrows') THEN
        PERFORM pg_notify('tollgate_config', 'tenant:' || r.tenant_id);
    ELSIF TG_TABLE_NAME IN ('models', 'model_guarantees') THEN
        PERFORM pg_notify('tollgate_config', 'models');
    ELSE
        PERFORM pg_notify('tollgate_config', 'config');
    END IF;
    RETURN NULL;
END $$;

DROP TRIGGER virtual_keys_notify ON virtual_keys;
CREATE TRIGGER virtual_keys_notify AFTER INSERT OR UPDATE OR DELETE ON virtual_keys
    FOR EACH ROW EXECUTE FUNCTION tollgate_notify_delta();
DROP TRIGGER tenants_notify ON tenants;
CREATE TRIGGER tenants_notify AFTER INSERT OR UPDATE OR DELETE ON tenants
    FOR EACH ROW EXECUTE FUNCTION tollgate_notify_delta();
DROP TRIGGER apps_notify ON apps;
CREATE TRIGGER apps_notify AFTER INSERT OR UPDATE OR DELETE ON apps
    FOR EACH ROW EXECUTE FUNCTION tollgate_notify_delta();
DROP TRIGGER quota_requests_notify ON quota_requests;
CREATE TRIGGER quota_requests_notify AFTER INSERT OR UPDATE OR DELETE ON quota_requests
    FOR EACH ROW EXECUTE FUNCTION tollgate_notify_delta();
DROP TRIGGER borrows_notify ON borrows;
CREATE TRIGGER borrows_notify AFTER INSERT OR UPDATE OR DELETE ON borrows
    FOR EACH ROW EXECUTE FUNCTION tollgate_notify_delta();
DROP TRIGGER models_notify ON models;
CREATE TRIGGER models_notify AFTER INSERT OR UPDATE OR DELETE ON models
    FOR EACH STATEMENT EXECUTE FUNCTION tollgate_notify_delta();
DROP TRIGGER model_guarantees_notify ON model_guarantees;
CREATE TRIGGER model_guarantees_notify AFTER INSERT OR UPDATE OR DELETE ON model_guarantees
    FOR EACH STATEMENT EXECUTE FUNCTION tollgate_notify_delta();

-- The request log (GET /api/v1/requests) reads newest first by keyset
-- (time, request id), within a tenant or across all of them.
CREATE INDEX usage_events_log ON usage_events (tenant_id, started_at, request_id);
CREATE INDEX usage_events_log_all ON usage_events (started_at, request_id);
CREATE INDEX request_decisions_log ON request_decisions (tenant_id, at, request_id);
CREATE INDEX request_decisions_log_all ON request_decisions (at, request_id);

-- Usage totals per (period, tenant, app, key, model, day): what bills,
-- usage, dashboards, alerts and forecasts read, instead of summing events.
-- Written in the same statement as the events they summarise (see
-- crates/store/src/ledger.rs), so the two never disagree; `reconcile
-- --check` compares them. Attribution (tags, end users) will add its
-- columns to this key: the grain is named in one place, `ROLLUP_KEY`.
CREATE TABLE usage_rollups (
    period             TEXT NOT NULL CHECK (period ~ '^[0-9]{4}-[0-9]{2}$'),
    tenant_id          TEXT NOT NULL,
    app_id             TEXT NOT NULL,
    key_id             TEXT NOT NULL,
    model              TEXT NOT NULL,
    day                DATE NOT NULL,
    requests           BIGINT NOT NULL CHECK (requests >= 0),
    input_tokens       BIGINT NOT NULL CHECK (input_tokens >= 0),
    output_tokens      BIGINT NOT NULL CHECK (output_tokens >= 0),
    cost_micro         BIGINT NOT NULL CHECK (cost_micro >= 0),
    overrun_tokens     BIGINT NOT NULL DEFAULT 0,
    overrun_cost_micro BIGINT NOT NULL DEFAULT 0,
    PRIMARY KEY (period, tenant_id, app_id, key_id, model, day)
);

INSERT INTO usage_rollups
SELECT period, tenant_id, app_id, key_id, model, day, count(*), sum(input_tokens), sum(output_tokens),
       sum(cost_micro), sum(overrun_tokens), sum(overrun_cost_micro)
FROM usage_events GROUP BY period, tenant_id, app_id, key_id, model, day;
