-- Row versions of what people edit in forms: a tenant (its settings and
-- limits), an app (its limits, name, models) and a key (its limits). Every
-- change adds one; a change based on an older version is refused (HTTP 409,
-- `If-Match` / `version` in the admin API, "changed since you opened it" in
-- the console) instead of silently undoing the change in between.
ALTER TABLE tenants ADD COLUMN version bigint NOT NULL DEFAULT 1;
ALTER TABLE apps ADD COLUMN version bigint NOT NULL DEFAULT 1;
ALTER TABLE virtual_keys ADD COLUMN version bigint NOT NULL DEFAULT 1;
