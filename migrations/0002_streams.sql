-- Streams metered as they flow: which count a settle used, and the tenant
-- policy that lets a non-stream request through with max_tokens clamped to
-- what the budget still covers.
ALTER TABLE usage_events ADD COLUMN usage_source TEXT NOT NULL DEFAULT 'provider'
    CHECK (usage_source IN ('provider', 'counted', 'estimated'));
ALTER TABLE tenants ADD COLUMN clamp_max_tokens BOOLEAN NOT NULL DEFAULT FALSE;
