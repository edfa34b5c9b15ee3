-- tollgate's ClickHouse archive: closed months (DESIGN §9). Applied by
-- `tollgate migrate` (and before every rollover); every statement is
-- idempotent. `{db}` is replaced by clickhouse.database.
--
-- The exact cost (`cost_pico`) and charge components (`charges`: the
-- components' quantities then their pico-USD, in the order of
-- domain::pricing::Component::ALL; empty for rows from before) are the last
-- columns of usage_events, bill_rows and usage_attribution. ClickHouse
-- 18.16 has no ADD COLUMN IF NOT EXISTS: an archive created before them
-- gets them from `Archive::apply_schema`, which adds a missing column
-- (ARCHIVE_ADDED_COLUMNS) after this file; old rows read cost_pico as
-- cost_micro × 10^6.
--
-- `raw_usage` (usage_events' last column) is the provider's usage object as
-- the ledger row kept it (Postgres migration 0029), JSON text, '' for none
-- and for rows archived before it; added to an older archive the same way.
-- Like every column it is compressed by the MergeTree (LZ4 by default):
-- repetitive usage objects compress to a small fraction of their text.
--
-- Written for ClickHouse 18.16 and later: plain MergeTree, String/Int64/
-- UInt8/Date columns only, times as Int64 milliseconds since the epoch.
-- Each table is partitioned by period, so a month's copy can be dropped
-- whole and written again (ClickHouse has no transactions), and every row
-- carries the rollover batch that wrote it: readers take only the batch
-- recorded in Postgres `closed_months`, so a crashed or concurrent copy can
-- never be counted twice.

CREATE DATABASE IF NOT EXISTS {db};

-- One row per settled request of a closed month (Postgres usage_events).
CREATE TABLE IF NOT EXISTS {db}.usage_events (
    period             String,
    batch_id           String,
    request_id         String,
    tenant_id          String,
    app_id             String,
    key_id             String,
    model              String,
    day                Date,
    input_tokens       Int64,
    output_tokens      Int64,
    cost_micro         Int64,
    est_tokens         Int64,
    est_cost_micro     Int64,
    overrun_tokens     Int64,
    overrun_cost_micro Int64,
    status             String,
    stream             UInt8,
    usage_source       String,
    replica            String,
    started_at_ms      Int64,
    settled_at_ms      Int64,
    cost_pico          Int64 DEFAULT cost_micro * 1000000,
    charges            Array(Int64),
    raw_usage          String DEFAULT ''
) ENGINE = MergeTree
PARTITION BY period
ORDER BY (tenant_id, app_id, model, day, request_id);

-- The month's bill per tenant × app × model.
CREATE TABLE IF NOT EXISTS {db}.bill_rows (
    period        String,
    batch_id      String,
    tenant_id     String,
    app_id        String,
    model         String,
    requests      Int64,
    input_tokens  Int64,
    output_tokens Int64,
    cost_micro    Int64,
    cost_pico     Int64 DEFAULT cost_micro * 1000000,
    charges       Array(Int64)
) ENGINE = MergeTree
PARTITION BY period
ORDER BY (tenant_id, app_id, model);

-- Refused and degraded requests per tenant × app × model × reason.
CREATE TABLE IF NOT EXISTS {db}.refusals (
    period    String,
    batch_id  String,
    tenant_id String,
    app_id    String,
    model     String,
    decision  String,
    reason    String,
    requests  Int64
) ENGINE = MergeTree
PARTITION BY period
ORDER BY (tenant_id, app_id, model, decision, reason);

-- The tags and end user of each closed-month request that had any (an
-- event without either has no row). A table of its own rather than columns
-- of usage_events: ClickHouse 18.16 has no ADD COLUMN IF NOT EXISTS, and
-- this file must stay idempotent for archives created before attribution.
-- `tags` is the JSON object the ledger stored (`{"project":"apollo"}`).
CREATE TABLE IF NOT EXISTS {db}.usage_attribution (
    period        String,
    batch_id      String,
    request_id    String,
    tenant_id     String,
    app_id        String,
    model         String,
    day           Date,
    tags          String,
    end_user      String,
    input_tokens  Int64,
    output_tokens Int64,
    cost_micro    Int64,
    cost_pico     Int64 DEFAULT cost_micro * 1000000,
    charges       Array(Int64)
) ENGINE = MergeTree
PARTITION BY period
ORDER BY (tenant_id, day, request_id);
