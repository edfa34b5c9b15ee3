-- Per-tenant caps (docs/fair.md, "Per-tenant caps"): how many of a tenant's
-- requests may wait in the fair queue at once, and how many of its streamed
-- answers may be open at once, on each replica. NULL: the platform default
-- (`fair.queue_max_per_tenant`, `fair.max_open_streams_per_tenant`).
ALTER TABLE tenants
    ADD COLUMN max_queued_requests INTEGER
        CHECK (max_queued_requests BETWEEN 1 AND 1000000),
    ADD COLUMN max_open_streams INTEGER
        CHECK (max_open_streams BETWEEN 1 AND 1000000);

-- A request that waited in the fair queue and was then admitted is recorded
-- too (decision 'queued', reason = what it waited for, detail.waited_ms), so
-- the request log shows its wait. Bills count decision = 'refused' only.
ALTER TABLE request_decisions DROP CONSTRAINT IF EXISTS request_decisions_decision_check;
ALTER TABLE request_decisions ADD CONSTRAINT request_decisions_decision_check
    CHECK (decision IN ('refused', 'degraded', 'queued'));
