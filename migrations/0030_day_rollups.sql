-- A day's totals per tenant × app × model × tags (docs/scale.md, "Books at
-- scale"): what the FOCUS export, the dashboards' trend, the charts, the
-- alerts, the forecast and a tenant's day cost read, instead of grouping
-- every key × end user × asked-name rollup row of the month (at 2,000
-- tenants × 40,000 keys the platform's FOCUS month grouped 1.4M rollup rows
-- for 18.5 s). Kept by the ledger writer in the same transaction (or
-- statement) as the events, the rollups and the month rollups, so the four
-- never disagree; `reconcile --check` compares it with the events too.
--
-- The primary key is in the FOCUS export's order (tenant, day, app, model,
-- tags), so a month's rows stream out of the index already sorted, one
-- tenant after the other (through a cursor, which the planner plans for
-- its first rows).
--
-- Upgrading: the previous version's ledger writer does not write this
-- table, so stop every replica of it before migrating, as for 0027
-- (docs/operations.md, "Upgrading"); a day row an old replica failed to
-- add to is named by `reconcile --check`.
CREATE TABLE usage_day_rollups (LIKE usage_rollups INCLUDING DEFAULTS INCLUDING CONSTRAINTS);
ALTER TABLE usage_day_rollups
    DROP COLUMN key_id,
    DROP COLUMN end_user,
    DROP COLUMN asked_model;
-- Ids in byte order ("C"), the order the export sorts a tenant's rows in
-- and the gateway sorts ids in, whatever the database's collation.
ALTER TABLE usage_day_rollups
    ALTER COLUMN tenant_id TYPE TEXT COLLATE "C",
    ALTER COLUMN app_id TYPE TEXT COLLATE "C",
    ALTER COLUMN model TYPE TEXT COLLATE "C";
ALTER TABLE usage_day_rollups ADD PRIMARY KEY (period, tenant_id, day, app_id, model, tags);

INSERT INTO usage_day_rollups (period, tenant_id, day, app_id, model, tags,
    requests, input_tokens, output_tokens, cost_micro, overrun_tokens, overrun_cost_micro, cost_pico, q_input, p_input, q_cached_input, p_cached_input, q_cache_write_5m, p_cache_write_5m, q_cache_write_1h, p_cache_write_1h, q_cache_write_30m, p_cache_write_30m, q_cache_write_12h, p_cache_write_12h, q_audio_input, p_audio_input, q_image_input, p_image_input, q_output, p_output, q_audio_output, p_audio_output, q_image_output, p_image_output, q_web_search, p_web_search)
SELECT period, tenant_id, day, app_id, model, tags,
    LEAST(sum(requests::numeric), 9223372036854775807)::int8,
    LEAST(sum(input_tokens::numeric), 9223372036854775807)::int8,
    LEAST(sum(output_tokens::numeric), 9223372036854775807)::int8,
    LEAST(sum(cost_micro::numeric), 9223372036854775807)::int8,
    LEAST(sum(overrun_tokens::numeric), 9223372036854775807)::int8,
    LEAST(sum(overrun_cost_micro::numeric), 9223372036854775807)::int8,
    LEAST(sum(cost_pico::numeric), 9223372036854775807)::int8,
    LEAST(sum(q_input::numeric), 9223372036854775807)::int8,
    LEAST(sum(p_input::numeric), 9223372036854775807)::int8,
    LEAST(sum(q_cached_input::numeric), 9223372036854775807)::int8,
    LEAST(sum(p_cached_input::numeric), 9223372036854775807)::int8,
    LEAST(sum(q_cache_write_5m::numeric), 9223372036854775807)::int8,
    LEAST(sum(p_cache_write_5m::numeric), 9223372036854775807)::int8,
    LEAST(sum(q_cache_write_1h::numeric), 9223372036854775807)::int8,
    LEAST(sum(p_cache_write_1h::numeric), 9223372036854775807)::int8,
    LEAST(sum(q_cache_write_30m::numeric), 9223372036854775807)::int8,
    LEAST(sum(p_cache_write_30m::numeric), 9223372036854775807)::int8,
    LEAST(sum(q_cache_write_12h::numeric), 9223372036854775807)::int8,
    LEAST(sum(p_cache_write_12h::numeric), 9223372036854775807)::int8,
    LEAST(sum(q_audio_input::numeric), 9223372036854775807)::int8,
    LEAST(sum(p_audio_input::numeric), 9223372036854775807)::int8,
    LEAST(sum(q_image_input::numeric), 9223372036854775807)::int8,
    LEAST(sum(p_image_input::numeric), 9223372036854775807)::int8,
    LEAST(sum(q_output::numeric), 9223372036854775807)::int8,
    LEAST(sum(p_output::numeric), 9223372036854775807)::int8,
    LEAST(sum(q_audio_output::numeric), 9223372036854775807)::int8,
    LEAST(sum(p_audio_output::numeric), 9223372036854775807)::int8,
    LEAST(sum(q_image_output::numeric), 9223372036854775807)::int8,
    LEAST(sum(p_image_output::numeric), 9223372036854775807)::int8,
    LEAST(sum(q_web_search::numeric), 9223372036854775807)::int8,
    LEAST(sum(p_web_search::numeric), 9223372036854775807)::int8
FROM usage_rollups
GROUP BY period, tenant_id, day, app_id, model, tags;
