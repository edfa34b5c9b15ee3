-- OpenAI's cache writes by TTL (docs/billing.md, "Charge components"): two
-- charge components, `cache_write_30m` and `cache_write_12h` (the openai
-- SDK's `ResponseUsage.input_tokens_details.cache_write_tokens_details.
-- ttl_30m_tokens` / `ttl_12h_tokens`; chat's unsplit `cache_write_tokens`
-- is a 30-minute write). The rollups and the month rollups sum them like
-- every component (migrations 0025, 0027); the ledger's `charges` JSON
-- names them, so no event changes.
--
-- Nothing to backfill: before this migration an OpenAI write was booked as
-- `cache_write_5m` (and billed at its price), and a booked request stays as
-- it was booked.
--
-- Upgrading: the columns have defaults, so the previous version's ledger
-- writer still writes (it books OpenAI writes as 5-minute ones, leaving
-- these at 0); but it reads the charges of an event that has a new
-- component as absent, so it must not run the rollover or reconcile after
-- this migration (docs/operations.md). A month archived to ClickHouse by this version has 12
-- components per `charges` array; the previous version reads such a month
-- as unsplit (this version reads both layouts).

ALTER TABLE usage_rollups
    ADD COLUMN q_cache_write_30m INT8 NOT NULL DEFAULT 0,
    ADD COLUMN p_cache_write_30m INT8 NOT NULL DEFAULT 0,
    ADD COLUMN q_cache_write_12h INT8 NOT NULL DEFAULT 0,
    ADD COLUMN p_cache_write_12h INT8 NOT NULL DEFAULT 0;

ALTER TABLE usage_month_rollups
    ADD COLUMN q_cache_write_30m INT8 NOT NULL DEFAULT 0,
    ADD COLUMN p_cache_write_30m INT8 NOT NULL DEFAULT 0,
    ADD COLUMN q_cache_write_12h INT8 NOT NULL DEFAULT 0,
    ADD COLUMN p_cache_write_12h INT8 NOT NULL DEFAULT 0;
