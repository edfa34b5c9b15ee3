-- A refused or degraded request keeps its tags and end user, as an admitted
-- one does in usage_events: the request log filters every outcome by them
-- (an end user refused for their rpm is found under that end user).
-- '{}' and '' for none, as in usage_events.
ALTER TABLE request_decisions
    ADD COLUMN tags     JSONB NOT NULL DEFAULT '{}'::jsonb,
    ADD COLUMN end_user TEXT  NOT NULL DEFAULT '';
