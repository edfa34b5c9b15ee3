-- The bill by the name a client asked for (docs/billing.md, "By the name
-- asked for"): usage_rollups gains the asked name in its grain, so a bill
-- grouped by it reads rollups like any other grouping and still equals the
-- ledger.
--
-- usage_events.asked_model is '' for "asked by the catalog name" (migration
-- 0024), so it can be part of a key, like end_user. The rollups of every
-- month that still has its events and any request asked by an alias are
-- rebuilt from those events, so each rollup row is again the sum of its
-- events. A month whose events were already purged has none asked by an
-- alias (the name was first kept by migration 0024, in the same release).
--
-- Upgrading: the rollups' key changes, so replicas of the previous version
-- cannot write the ledger after this migration (their batches wait in their
-- outbox): stop them before `tollgate migrate` (docs/operations.md).

ALTER TABLE usage_rollups ADD COLUMN asked_model TEXT NOT NULL DEFAULT '';
ALTER TABLE usage_rollups DROP CONSTRAINT usage_rollups_pkey;
ALTER TABLE usage_rollups ADD PRIMARY KEY (period, tenant_id, app_id, key_id, model, day, tags, end_user, asked_model);

DELETE FROM usage_rollups
WHERE period IN (SELECT DISTINCT period FROM usage_events WHERE asked_model <> '');
INSERT INTO usage_rollups (period, tenant_id, app_id, key_id, model, day, tags, end_user, asked_model,
    requests, input_tokens, output_tokens, cost_micro, overrun_tokens, overrun_cost_micro, cost_pico, q_input, p_input, q_cached_input, p_cached_input, q_cache_write_5m, p_cache_write_5m, q_cache_write_1h, p_cache_write_1h, q_audio_input, p_audio_input, q_image_input, p_image_input, q_output, p_output, q_audio_output, p_audio_output, q_image_output, p_image_output, q_web_search, p_web_search)
SELECT period, tenant_id, app_id, key_id, model, day, tags, end_user, asked_model,
    count(*)::int8,
    LEAST(sum(input_tokens::numeric), 9223372036854775807)::int8,
    LEAST(sum(output_tokens::numeric), 9223372036854775807)::int8,
    LEAST(sum(cost_micro::numeric), 9223372036854775807)::int8,
    LEAST(sum(overrun_tokens::numeric), 9223372036854775807)::int8,
    LEAST(sum(overrun_cost_micro::numeric), 9223372036854775807)::int8,
    LEAST(sum(cost_pico::numeric), 9223372036854775807)::int8,
    LEAST(sum(COALESCE((charges->'input'->>0)::numeric, 0)), 9223372036854775807)::int8,
    LEAST(sum(COALESCE((charges->'input'->>1)::numeric, 0)), 9223372036854775807)::int8,
    LEAST(sum(COALESCE((charges->'cached_input'->>0)::numeric, 0)), 9223372036854775807)::int8,
    LEAST(sum(COALESCE((charges->'cached_input'->>1)::numeric, 0)), 9223372036854775807)::int8,
    LEAST(sum(COALESCE((charges->'cache_write_5m'->>0)::numeric, 0)), 9223372036854775807)::int8,
    LEAST(sum(COALESCE((charges->'cache_write_5m'->>1)::numeric, 0)), 9223372036854775807)::int8,
    LEAST(sum(COALESCE((charges->'cache_write_1h'->>0)::numeric, 0)), 9223372036854775807)::int8,
    LEAST(sum(COALESCE((charges->'cache_write_1h'->>1)::numeric, 0)), 9223372036854775807)::int8,
    LEAST(sum(COALESCE((charges->'audio_input'->>0)::numeric, 0)), 9223372036854775807)::int8,
    LEAST(sum(COALESCE((charges->'audio_input'->>1)::numeric, 0)), 9223372036854775807)::int8,
    LEAST(sum(COALESCE((charges->'image_input'->>0)::numeric, 0)), 9223372036854775807)::int8,
    LEAST(sum(COALESCE((charges->'image_input'->>1)::numeric, 0)), 9223372036854775807)::int8,
    LEAST(sum(COALESCE((charges->'output'->>0)::numeric, 0)), 9223372036854775807)::int8,
    LEAST(sum(COALESCE((charges->'output'->>1)::numeric, 0)), 9223372036854775807)::int8,
    LEAST(sum(COALESCE((charges->'audio_output'->>0)::numeric, 0)), 9223372036854775807)::int8,
    LEAST(sum(COALESCE((charges->'audio_output'->>1)::numeric, 0)), 9223372036854775807)::int8,
    LEAST(sum(COALESCE((charges->'image_output'->>0)::numeric, 0)), 9223372036854775807)::int8,
    LEAST(sum(COALESCE((charges->'image_output'->>1)::numeric, 0)), 9223372036854775807)::int8,
    LEAST(sum(COALESCE((charges->'web_search'->>0)::numeric, 0)), 9223372036854775807)::int8,
    LEAST(sum(COALESCE((charges->'web_search'->>1)::numeric, 0)), 9223372036854775807)::int8
FROM usage_events
WHERE period IN (SELECT DISTINCT period FROM usage_events WHERE asked_model <> '')
GROUP BY period, tenant_id, app_id, key_id, model, day, tags, end_user, asked_model;
