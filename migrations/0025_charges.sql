-- Charge components (docs/billing.md, "Charge components"): every ledger
-- row keeps its exact cost split by what the provider bills it for (the
-- quantity and pico-USD of each component present, as
-- {"input":[2000,6000000000],"cached_input":[80000,24000000000]}), and the
-- rollups sum them beside the exact cost, so bills, their CSV and FOCUS
-- exports and the by-component view read sums, never events. A row from
-- before (charges NULL: priced by two numbers) is in the rollups' cost_pico
-- but in no component: the books show it as "unsplit".
ALTER TABLE usage_events ADD COLUMN charges JSONB;

ALTER TABLE usage_rollups
    ADD COLUMN cost_pico INT8 NOT NULL DEFAULT 0,
    ADD COLUMN q_input INT8 NOT NULL DEFAULT 0,
    ADD COLUMN p_input INT8 NOT NULL DEFAULT 0,
    ADD COLUMN q_cached_input INT8 NOT NULL DEFAULT 0,
    ADD COLUMN p_cached_input INT8 NOT NULL DEFAULT 0,
    ADD COLUMN q_cache_write_5m INT8 NOT NULL DEFAULT 0,
    ADD COLUMN p_cache_write_5m INT8 NOT NULL DEFAULT 0,
    ADD COLUMN q_cache_write_1h INT8 NOT NULL DEFAULT 0,
    ADD COLUMN p_cache_write_1h INT8 NOT NULL DEFAULT 0,
    ADD COLUMN q_audio_input INT8 NOT NULL DEFAULT 0,
    ADD COLUMN p_audio_input INT8 NOT NULL DEFAULT 0,
    ADD COLUMN q_image_input INT8 NOT NULL DEFAULT 0,
    ADD COLUMN p_image_input INT8 NOT NULL DEFAULT 0,
    ADD COLUMN q_output INT8 NOT NULL DEFAULT 0,
    ADD COLUMN p_output INT8 NOT NULL DEFAULT 0,
    ADD COLUMN q_audio_output INT8 NOT NULL DEFAULT 0,
    ADD COLUMN p_audio_output INT8 NOT NULL DEFAULT 0,
    ADD COLUMN q_image_output INT8 NOT NULL DEFAULT 0,
    ADD COLUMN p_image_output INT8 NOT NULL DEFAULT 0,
    ADD COLUMN q_web_search INT8 NOT NULL DEFAULT 0,
    ADD COLUMN p_web_search INT8 NOT NULL DEFAULT 0;

-- The exact cost and components of the rows already rolled up, from their
-- events (a month already purged keeps cost_micro × 10^6).
UPDATE usage_rollups SET cost_pico = LEAST(cost_micro::numeric * 1000000, 9223372036854775807)::int8;
UPDATE usage_rollups r SET cost_pico = e.cost_pico,
    q_input = e.q_input, p_input = e.p_input,
    q_cached_input = e.q_cached_input, p_cached_input = e.p_cached_input,
    q_cache_write_5m = e.q_cache_write_5m, p_cache_write_5m = e.p_cache_write_5m,
    q_cache_write_1h = e.q_cache_write_1h, p_cache_write_1h = e.p_cache_write_1h,
    q_audio_input = e.q_audio_input, p_audio_input = e.p_audio_input,
    q_image_input = e.q_image_input, p_image_input = e.p_image_input,
    q_output = e.q_output, p_output = e.p_output,
    q_audio_output = e.q_audio_output, p_audio_output = e.p_audio_output,
    q_image_output = e.q_image_output, p_image_output = e.p_image_output,
    q_web_search = e.q_web_search, p_web_search = e.p_web_search
FROM (
    SELECT period, tenant_id, app_id, key_id, model, day, tags, end_user,
       LEAST(sum(cost_pico::numeric), 9223372036854775807)::int8 AS cost_pico,
       LEAST(sum(COALESCE((charges->'input'->>0)::numeric, 0)), 9223372036854775807)::int8 AS q_input,
       LEAST(sum(COALESCE((charges->'input'->>1)::numeric, 0)), 9223372036854775807)::int8 AS p_input,
       LEAST(sum(COALESCE((charges->'cached_input'->>0)::numeric, 0)), 9223372036854775807)::int8 AS q_cached_input,
       LEAST(sum(COALESCE((charges->'cached_input'->>1)::numeric, 0)), 9223372036854775807)::int8 AS p_cached_input,
       LEAST(sum(COALESCE((charges->'cache_write_5m'->>0)::numeric, 0)), 9223372036854775807)::int8 AS q_cache_write_5m,
       LEAST(sum(COALESCE((charges->'cache_write_5m'->>1)::numeric, 0)), 9223372036854775807)::int8 AS p_cache_write_5m,
       LEAST(sum(COALESCE((charges->'cache_write_1h'->>0)::numeric, 0)), 9223372036854775807)::int8 AS q_cache_write_1h,
       LEAST(sum(COALESCE((charges->'cache_write_1h'->>1)::numeric, 0)), 9223372036854775807)::int8 AS p_cache_write_1h,
       LEAST(sum(COALESCE((charges->'audio_input'->>0)::numeric, 0)), 9223372036854775807)::int8 AS q_audio_input,
       LEAST(sum(COALESCE((charges->'audio_input'->>1)::numeric, 0)), 9223372036854775807)::int8 AS p_audio_input,
       LEAST(sum(COALESCE((charges->'image_input'->>0)::numeric, 0)), 9223372036854775807)::int8 AS q_image_input,
       LEAST(sum(COALESCE((charges->'image_input'->>1)::numeric, 0)), 9223372036854775807)::int8 AS p_image_input,
       LEAST(sum(COALESCE((charges->'output'->>0)::numeric, 0)), 9223372036854775807)::int8 AS q_output,
       LEAST(sum(COALESCE((charges->'output'->>1)::numeric, 0)), 9223372036854775807)::int8 AS p_output,
       LEAST(sum(COALESCE((charges->'audio_output'->>0)::numeric, 0)), 9223372036854775807)::int8 AS q_audio_output,
       LEAST(sum(COALESCE((charges->'audio_output'->>1)::numeric, 0)), 9223372036854775807)::int8 AS p_audio_output,
       LEAST(sum(COALESCE((charges->'image_output'->>0)::numeric, 0)), 9223372036854775807)::int8 AS q_image_output,
       LEAST(sum(COALESCE((charges->'image_output'->>1)::numeric, 0)), 9223372036854775807)::int8 AS p_image_output,
       LEAST(sum(COALESCE((charges->'web_search'->>0)::numeric, 0)), 9223372036854775807)::int8 AS q_web_search,
       LEAST(sum(COALESCE((charges->'web_search'->>1)::numeric, 0)), 9223372036854775807)::int8 AS p_web_search
    FROM usage_events GROUP BY period, tenant_id, app_id, key_id, model, day, tags, end_user
) e
WHERE (r.period, r.tenant_id, r.app_id, r.key_id, r.model, r.day, r.tags, r.end_user)
    = (e.period, e.tenant_id, e.app_id, e.key_id, e.model, e.day, e.tags, e.end_user);

-- A closed month's exact cost, recorded with its other closing totals (the
-- purge checks the archive still holds it); NULL for months closed before.
ALTER TABLE closed_months ADD COLUMN cost_pico INT8;
