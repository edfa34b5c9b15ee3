-- The request log in request-id order (docs/scale.md, "The request log").
-- A request id is `req_` and a UUIDv7, which begins with the millisecond
-- the gateway received the request; the gateway books that instant as the
-- request's start and a refusal's time. Compared as bytes ("C", migration
-- 0015), ids are in time order, so the primary keys now serve the
-- all-tenant log and its cursor, and the per-tenant index needs no time
-- column. One index fewer on usage_events, the table every admitted request
-- adds a row to.
DROP INDEX usage_events_log_all;
DROP INDEX usage_events_log;
CREATE INDEX usage_events_log ON usage_events (tenant_id, request_id);
DROP INDEX request_decisions_log_all;
DROP INDEX request_decisions_log;
CREATE INDEX request_decisions_log ON request_decisions (tenant_id, request_id);
