-- The provider's usage object on every ledger row (issue #44), not only an
-- anomaly's: the breakdown and charges say what a request was billed; this
-- says what the provider reported, so history can be re-priced under a new
-- sheet and a variance against the provider's invoice traced to requests
-- (docs/billing.md, "The provider's usage, kept").
--
-- `raw_usage` is the object as the provider sent it (the text the gateway
-- scanned from the answer where it had it; for streams the final usage
-- event's object, a Messages stream's `message_start` usage with
-- `message_delta`'s over it), without the served tier or search calls the
-- gateway reads from beside it (those are in `breakdown`). One larger than
-- 4 KiB is stored as {"truncated":true,"bytes":N}
-- (domain::usage::RAW_USAGE_CAP). NULL when the provider sent no usage, and
-- on rows from before this migration.
--
-- `reported_usage` stays, for anomalies only, as before: it holds the object
-- as the settle read it (tier merged in). Old rows keep it; nothing is
-- backfilled into `raw_usage` (an old row's usage object is in
-- `reported_usage` only if it was an anomaly).
--
-- Compression, honestly: Postgres compresses a row's large values only once
-- the row passes ~2 kB (TOAST), which a usage object of a few hundred bytes
-- never makes happen on its own; the column is lz4 so that when it
-- does (a large object, near the cap) it is the cheap codec. The real
-- compression is the ClickHouse archive's (sql/0001_archive.sql), which
-- compresses every column of a closed month. `SET COMPRESSION` needs
-- Postgres 14 built with lz4; elsewhere the column keeps the server's
-- default and the migration still succeeds.
--
-- Upgrading: the column is nullable, so the previous version's ledger
-- writer still writes (leaving it NULL); its outbox reader ignores the
-- event's new `raw_usage` member.

ALTER TABLE usage_events ADD COLUMN raw_usage JSONB;

DO $$
BEGIN
    EXECUTE 'ALTER TABLE usage_events ALTER COLUMN raw_usage SET COMPRESSION lz4';
EXCEPTION WHEN OTHERS THEN
    RAISE NOTICE 'usage_events.raw_usage keeps the default compression: %', SQLERRM;
END
$$;
