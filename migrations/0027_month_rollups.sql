-- A month's totals per tenant × app × model (docs/billing.md, "Books at
-- scale"): what bills, their CSV, the by-app / by-model / by-component
-- views and the month's per-tenant totals read, instead of summing every
-- key × day × tags × end user rollup row of the month. Written in the same
-- statement (or transaction) as the events and the rollups, so the three
-- never disagree; `reconcile --check` compares it with the events too.
CREATE TABLE usage_month_rollups (LIKE usage_rollups INCLUDING DEFAULTS INCLUDING CONSTRAINTS);
ALTER TABLE usage_month_rollups
    DROP COLUMN key_id,
    DROP COLUMN day,
    DROP COLUMN tags,
    DROP COLUMN end_user,
    DROP COLUMN asked_model;
ALTER TABLE usage_month_rollups ADD PRIMARY KEY (period, tenant_id, app_id, model);

INSERT INTO usage_month_rollups (period, tenant_id, app_id, model,
    requests, input_tokens, output_tokens, cost_micro, overrun_tokens, overrun_cost_micro, cost_pico, q_input, p_input, q_cached_input, p_cached_input, q_cache_write_5m, p_cache_write_5m, q_cache_write_1h, p_cache_write_1h, q_audio_input, p_audio_input, q_image_input, p_image_input, q_output, p_output, q_audio_output, p_audio_output, q_image_output, p_image_output, q_web_search, p_web_search)
SELECT period, tenant_id, app_id, model,
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
GROUP BY period, tenant_id, app_id, model;
