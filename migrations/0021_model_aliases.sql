-- Model aliases (docs/clients.md, "Model aliases"): names clients ask for,
-- exact or with `*` patterns, served by a catalog model; global (no
-- tenant) or one tenant's. One alias per name and scope. A change reloads
-- the models part of every replica's catalog (the `config` payload of
-- tollgate_notify_delta, migration 0011).
CREATE TABLE model_aliases (
    id BIGSERIAL PRIMARY KEY,
    alias TEXT NOT NULL,
    model_id TEXT NOT NULL REFERENCES models (id) ON DELETE CASCADE,
    tenant_id TEXT REFERENCES tenants (id) ON DELETE CASCADE,
    created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE UNIQUE INDEX model_aliases_name ON model_aliases (alias, COALESCE(tenant_id, ''));
CREATE TRIGGER model_aliases_notify AFTER INSERT OR UPDATE OR DELETE ON model_aliases
    FOR EACH STATEMENT EXECUTE FUNCTION tollgate_notify_delta();
