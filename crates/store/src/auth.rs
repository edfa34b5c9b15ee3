//! Who is asking, and which tenants' data they may read (docs/design.md §1).
//!
//! Every store function that reads tenant data takes a [`TenantScope`] and
//! filters by it in SQL, so a tenant admin's question about another tenant
//! gets no rows (the console answers 404). A scope cannot be written down,
//! only obtained:
//!
//! - a person's scope is part of a [`Principal`], which only
//!   [`Store::sign_in`] (email + password, argon2id) and
//!   [`Store::authenticate`] (a [`VerifiedSession`], i.e. a session token
//!   whose HS256 signature and expiry [`Sessions::verify`] checked) make,
//!   from the user row they read: a tenant admin's scope is the tenant of
//!   their row, everyone else's is every tenant. A session token is signed
//!   only by [`Sessions::issue`], for a `Principal` already obtained;
//! - [`TenantScope::system`] is every tenant, for the platform's own work
//!   (the gateway, jobs, billing, the CLI). The console may not call it: its
//!   `clippy.toml` disallows it.
//!
//! Everything that could turn a tenant id into a scope — the field, the
//! constructor from a role and a tenant, the `Principal`'s fields — is
//! private to this crate. None of these compile outside it:
//!
//! ```compile_fail,E0451
//! // The field is private.
//! let s = store::TenantScope { tenant: Some("other".to_string()) };
//! ```
//!
//! ```compile_fail,E0624
//! // The constructor from a role and a tenant is crate-private.
//! let s = store::TenantScope::of_user(domain::roles::Role::TenantAdmin, Some("other".into()));
//! ```
//!
//! ```compile_fail,E0451
//! // A principal is made by signing in, not by listing what it should be.
//! fn forge(actor: domain::roles::Actor) -> store::Principal {
//!     store::Principal { actor, scope: store::TenantScope::system() }
//! }
//! ```
//!
//! ```compile_fail,E0451
//! // A verified session names a user only after `Sessions::verify`.
//! let v = store::VerifiedSession { user_id: uuid::Uuid::nil(), jti: String::new() };
//! ```
//!
//! What does compile: the system scope (greppable), and narrowing a scope
//! one already has, which never widens it:
//!
//! ```
//! let all = store::TenantScope::system();
//! let one = all.narrow_to("sales").unwrap();
//! assert_eq!(one.tenant(), Some("sales"));
//! assert!(one.narrow_to("research").is_none());
//! ```

use crate::scope::TenantScope;
use crate::{passwords, Result, Store, UserRow};
use domain::roles::{Actor, Role};
use hmac::{Hmac, Mac};
use jsonwebtoken::{decode, encode, Algorithm, DecodingKey, EncodingKey, Header, Validation};
use serde::{Deserialize, Serialize};
use sha2::Sha256;
use uuid::Uuid;

/// A signed-in person: who they are (an [`Actor`], which it dereferences
/// to) and the scope their user row gives them. Made only by
/// [`Store::sign_in`] and [`Store::authenticate`].
#[derive(Debug, Clone)]
pub struct Principal {
    actor: Actor,
    scope: TenantScope,
}

impl Principal {
    pub(crate) fn of(user: UserRow) -> Option<Principal> {
        let role = Role::parse(&user.role)?;
        let scope = TenantScope::of_user(role, user.tenant_id.clone())?;
        Some(Principal {
            actor: Actor {
                user_id: user.id.to_string(),
                email: user.email,
                role,
                tenant: user.tenant_id,
            },
            scope,
        })
    }

    pub fn actor(&self) -> &Actor {
        &self.actor
    }

    /// What this person may read: pass it to every store read.
    pub fn scope(&self) -> &TenantScope {
        &self.scope
    }
}

impl std::ops::Deref for Principal {
    type Target = Actor;

    fn deref(&self) -> &Actor {
        &self.actor
    }
}

#[derive(Debug, Serialize, Deserialize)]
struct Claims {
    sub: String,
    exp: i64,
    iat: i64,
    /// Unique per session (the console derives its CSRF token from it).
    #[serde(default)]
    jti: String,
}

/// Session tokens: HS256 JWTs (algorithm pinned, `exp` checked with no
/// leeway) carrying only the user id. Holds the signing secret, which
/// never leaves it: other keys are derived from it ([`Sessions::derive_key`]).
pub struct Sessions {
    secret: Vec<u8>,
    lifetime_secs: i64,
}

/// A new session: the token to hand out, and its id.
pub struct IssuedSession {
    pub token: String,
    pub jti: String,
}

/// A session token whose signature and expiry were checked: what
/// [`Store::authenticate`] takes. Made only by [`Sessions::verify`].
#[derive(Debug)]
pub struct VerifiedSession {
    user_id: Uuid,
    jti: String,
}

impl VerifiedSession {
    pub fn jti(&self) -> &str {
        &self.jti
    }
}

impl Sessions {
    pub fn new(secret: &[u8], lifetime_secs: i64) -> Sessions {
        Sessions {
            secret: secret.to_vec(),
            lifetime_secs,
        }
    }

    pub fn lifetime_secs(&self) -> i64 {
        self.lifetime_secs
    }

    /// A signed token for someone already signed in. Only
    /// [`Store::open_session`] calls it: a token without its session row is
    /// refused.
    pub(crate) fn issue(&self, p: &Principal) -> Option<IssuedSession> {
        let now = chrono::Utc::now().timestamp();
        let jti = Uuid::new_v4().simple().to_string();
        let claims = Claims {
            sub: p.actor.user_id.clone(),
            iat: now,
            exp: now + self.lifetime_secs,
            jti: jti.clone(),
        };
        let token = encode(
            &Header::new(Algorithm::HS256),
            &claims,
            &EncodingKey::from_secret(&self.secret),
        )
        .ok()?;
        Some(IssuedSession { token, jti })
    }

    /// Checks a token's signature (HS256 only) and expiry (no leeway).
    pub fn verify(&self, token: &str) -> Option<VerifiedSession> {
        let mut v = Validation::new(Algorithm::HS256);
        v.leeway = 0;
        let c = decode::<Claims>(token, &DecodingKey::from_secret(&self.secret), &v)
            .ok()?
            .claims;
        Some(VerifiedSession {
            user_id: c.sub.parse().ok()?,
            jti: c.jti,
        })
    }

    /// A key for another purpose (the console's CSRF tokens), derived from
    /// the session secret: `HMAC-SHA256(secret, purpose)`.
    pub fn derive_key(&self, purpose: &str) -> [u8; 32] {
        let mut m = Hmac::<Sha256>::new_from_slice(&self.secret).expect("any key length");
        m.update(purpose.as_bytes());
        m.finalize().into_bytes().into()
    }
}

impl Store {
    /// Email + password → the person, or `None` (unknown email, wrong
    /// password, disabled user, SSO-only account). argon2 runs on the
    /// blocking pool, and every refusal costs the time of a verification
    /// (`passwords::check`).
    pub async fn sign_in(&self, email: &str, password: String) -> Result<Option<Principal>> {
        let user = self.user_by_email(email).await?;
        let stored = user.as_ref().map(|u| u.password_hash.clone());
        let ok =
            tokio::task::spawn_blocking(move || passwords::check(&password, stored.as_deref()))
                .await
                .unwrap_or(false);
        Ok(user.filter(|_| ok).and_then(Principal::of))
    }

    /// The person a verified session names, re-read from the database on
    /// every request together with the session's row: a revoked or expired
    /// session, a disabled user or a changed role counts at once.
    pub async fn authenticate(&self, s: &VerifiedSession) -> Result<Option<Principal>> {
        let r = sqlx::query_as::<_, UserRow>(
            "SELECT u.id, u.email, u.password_hash, u.role, u.tenant_id \
             FROM sessions s JOIN users u ON u.id = s.user_id \
             WHERE s.id = $1 AND s.user_id = $2 AND s.revoked_at IS NULL \
               AND s.expires_at > now() AND NOT u.disabled",
        )
        .bind(&s.jti)
        .bind(s.user_id)
        .fetch_optional(&self.pool)
        .await?;
        Ok(r.and_then(Principal::of))
    }

    /// A new session for someone who just signed in (`via`: how), stored so
    /// it can be revoked, and its signed token.
    pub async fn open_session(
        &self,
        sessions: &Sessions,
        p: &Principal,
        via: SignedInVia,
    ) -> Result<Option<IssuedSession>> {
        let Some(issued) = sessions.issue(p) else {
            return Ok(None);
        };
        let user: Uuid = p
            .actor
            .user_id
            .parse()
            .map_err(|_| crate::StoreError::NotFound(format!("user {}", p.actor.user_id)))?;
        sqlx::query(
            "INSERT INTO sessions (id, user_id, via, expires_at) \
             VALUES ($1, $2, $3, now() + make_interval(secs => $4))",
        )
        .bind(&issued.jti)
        .bind(user)
        .bind(via.as_str())
        .bind(sessions.lifetime_secs() as f64)
        .execute(&self.pool)
        .await?;
        Ok(Some(issued))
    }

    /// Ends one session (logout). Idempotent.
    pub async fn revoke_session(&self, s: &VerifiedSession) -> Result<()> {
        sqlx::query("UPDATE sessions SET revoked_at = now() WHERE id = $1 AND revoked_at IS NULL")
            .bind(&s.jti)
            .execute(&self.pool)
            .await?;
        Ok(())
    }
}

/// How a session was opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SignedInVia {
    Password,
    Oidc,
}

impl SignedInVia {
    fn as_str(self) -> &'static str {
        match self {
            SignedInVia::Password => "password",
            SignedInVia::Oidc => "oidc",
        }
    }
}

/// Ends every live session of a user, inside the transaction of the change
/// that calls for it (password, role, disabled); returns how many.
pub(crate) async fn revoke_user_sessions(
    tx: &mut sqlx::Transaction<'_, sqlx::Postgres>,
    user: Uuid,
) -> Result<u64> {
    Ok(sqlx::query(
        "UPDATE sessions SET revoked_at = now() WHERE user_id = $1 AND revoked_at IS NULL",
    )
    .bind(user)
    .execute(&mut **tx)
    .await?
    .rows_affected())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(t: &str) -> TenantScope {
        TenantScope::of_user(Role::TenantAdmin, Some(t.into())).unwrap()
    }

    #[test]
    fn tenant_admins_read_their_tenant_everyone_else_all() {
        assert_eq!(one("sales").tenant(), Some("sales"));
        for r in [Role::PlatformAdmin, Role::Finance, Role::Auditor] {
            assert!(TenantScope::of_user(r, None).unwrap().is_all());
        }
        assert!(TenantScope::of_user(Role::TenantAdmin, None).is_none());
    }

    #[test]
    fn narrowing_never_widens() {
        let s = one("sales");
        assert!(s.covers("sales") && !s.covers("research"));
        assert_eq!(s.narrow_to("sales"), Some(one("sales")));
        assert_eq!(s.narrow_to("research"), None);
        assert_eq!(
            TenantScope::system().narrow_to("research"),
            Some(one("research"))
        );
    }

    #[test]
    fn sessions_verify_only_their_own_unexpired_tokens() {
        let user = UserRow {
            id: Uuid::now_v7(),
            email: "ta@x.io".into(),
            password_hash: String::new(),
            role: "tenant_admin".into(),
            tenant_id: Some("sales".into()),
        };
        let p = Principal::of(user.clone()).unwrap();
        let s = Sessions::new(b"0123456789abcdef0123456789abcdef", 60);
        let issued = s.issue(&p).unwrap();
        let v = s.verify(&issued.token).unwrap();
        assert_eq!((v.user_id, v.jti()), (user.id, issued.jti.as_str()));
        let other = Sessions::new(b"another-secret-another-secret-xx", 60);
        assert!(other.verify(&issued.token).is_none());
        let expired = Sessions::new(b"0123456789abcdef0123456789abcdef", -1);
        assert!(s.verify(&expired.issue(&p).unwrap().token).is_none());
        assert_ne!(s.derive_key("csrf"), other.derive_key("csrf"));
    }
}
