-- Cost attribution below the app: a request's tags and its end user
-- (docs/billing.md, "Tags and end users").
--
-- usage_events gains the two as plain columns (tags as a JSON object of
-- strings, '{}' for none; end_user '' for none, so it can be part of a key).
-- usage_rollups gains them in its grain: a rollup row is one
-- (period, tenant, app, key, model, day, tags, end user), written in the same
-- statement as its events, so bills grouped by a tag or an end user read
-- rollups and still equal the ledger.
-- apps and virtual_keys gain their attribution policy: default tags and
-- required tag keys ({"default_tags": {...}, "required_tags": [...]}).

ALTER TABLE usage_events
    ADD COLUMN tags     JSONB NOT NULL DEFAULT '{}'::jsonb,
    ADD COLUMN end_user TEXT  NOT NULL DEFAULT '';

ALTER TABLE usage_rollups
    ADD COLUMN tags     JSONB NOT NULL DEFAULT '{}'::jsonb,
    ADD COLUMN end_user TEXT  NOT NULL DEFAULT '';
ALTER TABLE usage_rollups DROP CONSTRAINT usage_rollups_pkey;
ALTER TABLE usage_rollups
    ADD PRIMARY KEY (period, tenant_id, app_id, key_id, model, day, tags, end_user);

ALTER TABLE apps ADD COLUMN attribution JSONB NOT NULL DEFAULT '{}'::jsonb;
ALTER TABLE virtual_keys ADD COLUMN attribution JSONB NOT NULL DEFAULT '{}'::jsonb;
