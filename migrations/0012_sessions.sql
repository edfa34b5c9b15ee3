-- Revocable sessions: a session token (a signed JWT) names a row here by its
-- `jti`, and is refused once that row is revoked or past its expiry. Logout
-- revokes one row; a password change, a role change and disabling the user
-- revoke all of that user's rows, in the change's own transaction.
CREATE TABLE sessions (
    id          TEXT PRIMARY KEY,
    user_id     UUID NOT NULL REFERENCES users (id),
    via         TEXT NOT NULL CHECK (via IN ('password', 'oidc')),
    created_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
    expires_at  TIMESTAMPTZ NOT NULL,
    revoked_at  TIMESTAMPTZ
);
CREATE INDEX sessions_live_by_user ON sessions (user_id) WHERE revoked_at IS NULL;

-- People who sign in through OpenID Connect: the provider's (issuer,
-- subject) names them for good (an email can change at the provider).
ALTER TABLE users ADD COLUMN oidc_issuer TEXT;
ALTER TABLE users ADD COLUMN oidc_subject TEXT;
ALTER TABLE users ADD CONSTRAINT users_oidc_identity UNIQUE (oidc_issuer, oidc_subject);
ALTER TABLE users ADD CONSTRAINT users_oidc_both CHECK ((oidc_issuer IS NULL) = (oidc_subject IS NULL));
