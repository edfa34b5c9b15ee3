-- Provider profile per model (docs/providers.md): which request field the
-- provider reads as its output cap, whether it generates reasoning it never
-- streams, and which client dialects it speaks natively.
ALTER TABLE models
    ADD COLUMN cap_field TEXT NOT NULL DEFAULT 'max_tokens'
        CHECK (cap_field IN ('max_tokens', 'max_completion_tokens', 'both')),
    ADD COLUMN hidden_reasoning BOOLEAN NOT NULL DEFAULT FALSE,
    ADD COLUMN apis TEXT[] NOT NULL DEFAULT ARRAY['chat']::text[]
        CHECK (apis <@ ARRAY['chat', 'responses', 'messages']::text[]);

-- Existing models get the profile their upstream name suggests
-- (domain::provider::ProviderProfile::suggested_for): OpenAI's reasoning
-- models read max_completion_tokens and hide their reasoning.
UPDATE models SET cap_field = 'max_completion_tokens', hidden_reasoning = TRUE
WHERE lower(regexp_replace(upstream_model, '^.*/', '')) ~ '^(o1|o3|o4|gpt-5)';

-- A provider report the sanity bound overruled (above the cap sent or the
-- input estimate's documented error, negative, malformed): the row is
-- billed at the bound; the kind and the provider's usage object, verbatim,
-- are kept here for finance. NULL for the normal case.
ALTER TABLE usage_events
    ADD COLUMN usage_anomaly TEXT,
    ADD COLUMN reported_usage JSONB;
