-- Four eyes remembers who last set a person's password, and who last set
-- their role, tenant or enabled state, and when: nobody decides a quota
-- request of someone who set theirs within `auth.four_eyes_days`, nor the
-- other way round (docs/console.md, "Four eyes on quota requests").
-- NULL: nobody since this migration (or the identity provider, for SSO).
ALTER TABLE users
    ADD COLUMN password_set_by UUID REFERENCES users (id),
    ADD COLUMN password_set_at TIMESTAMPTZ,
    ADD COLUMN access_set_by UUID REFERENCES users (id),
    ADD COLUMN access_set_at TIMESTAMPTZ;
