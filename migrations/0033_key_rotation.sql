-- Key rotation (docs/console.md, "Rotating a key"): a key gets a new secret
-- while its previous one keeps working until `previous_valid_until` (the
-- grace period). Both are stored only as keyed hashes; the key's id, limits,
-- usage and history stay one. A later rotation replaces the previous secret
-- (ending its grace at once); the columns stay after the grace ends, so a
-- client still sending the old secret is told it was rotated.
ALTER TABLE virtual_keys
    ADD COLUMN previous_key_hash BYTEA CHECK (length(previous_key_hash) = 32),
    ADD COLUMN previous_prefix TEXT,
    ADD COLUMN previous_valid_until TIMESTAMPTZ,
    ADD COLUMN rotated_at TIMESTAMPTZ,
    ADD CONSTRAINT virtual_keys_previous_complete CHECK (
        (previous_key_hash IS NULL) = (previous_valid_until IS NULL)
        AND (previous_key_hash IS NULL) = (previous_prefix IS NULL));

-- The gateway's miss lookup and catalog deltas find a key by either hash.
CREATE UNIQUE INDEX virtual_keys_previous_hash ON virtual_keys (previous_key_hash)
    WHERE previous_key_hash IS NOT NULL;

-- A key's change now notifies every hash it had or has: the previous
-- secret's entry on each replica must learn its grace end (rotation), its
-- revocation, or that it was replaced by a later rotation. Identical
-- payloads in one transaction are delivered once.
CREATE OR REPLACE FUNCTION tollgate_notify_delta() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    r record;
BEGIN
    IF TG_OP = 'DELETE' THEN r := OLD; ELSE r := NEW; END IF;
    -- One IF per table: PL/pgSQL plans a branch only when it runs it, so a
    -- field another table lacks is never looked up.
    IF TG_TABLE_NAME = 'virtual_keys' THEN
        PERFORM pg_notify('tollgate_config', 'key:' || encode(r.key_hash, 'hex'));
        IF r.previous_key_hash IS NOT NULL THEN
            PERFORM pg_notify('tollgate_config', 'key:' || encode(r.previous_key_hash, 'hex'));
        END IF;
        IF TG_OP = 'UPDATE' THEN
            PERFORM pg_notify('tollgate_config', 'key:' || encode(OLD.key_hash, 'hex'));
            IF OLD.previous_key_hash IS NOT NULL THEN
                PERFORM pg_notify('tollgate_config', 'key:' || encode(OLD.previous_key_hash, 'hex'));
            END IF;
        END IF;
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
