//! People who sign in through OpenID Connect. The provider's (issuer,
//! subject) names a person for good; the role and tenant come from the
//! provider's groups or claims at every sign-in (the console maps them), so
//! a change at the provider counts at the next sign-in. A person the
//! provider vouches for is created on first sign-in (just in time) and the
//! creation, like every later change of role, is audited.

use crate::audit::{append, NewAudit};
use crate::auth::{revoke_user_sessions, Principal};
use crate::{Result, Store};
use serde_json::json;
use uuid::Uuid;

/// A password hash no password verifies (not a PHC string): SSO users
/// sign in only through their provider.
const NO_PASSWORD: &str = "!sso";

/// Who the provider says signed in, with the role the mapping gave them.
pub struct SsoIdentity<'a> {
    pub issuer: &'a str,
    pub subject: &'a str,
    pub email: &'a str,
    /// The provider vouches for the email (`email_verified`): only then is
    /// an existing account with that email linked to this identity.
    pub email_verified: bool,
    pub role: &'a str,
    pub tenant: Option<&'a str>,
}

/// Why a provider's sign-in gets no person.
#[derive(Debug, PartialEq, Eq)]
pub enum SsoRefusal {
    /// The account is disabled here.
    Disabled,
    /// The email belongs to another account and the provider does not
    /// vouch for it.
    EmailTaken,
    /// The mapped tenant does not exist.
    UnknownTenant,
}

impl Store {
    /// The person for a provider's sign-in: found by (issuer, subject),
    /// else linked by a verified email, else created; their role and
    /// tenant set to the mapping's (a change ends their other sessions).
    pub async fn sso_sign_in(
        &self,
        id: &SsoIdentity<'_>,
    ) -> Result<std::result::Result<Principal, SsoRefusal>> {
        let actor = format!("sso:{}", id.issuer);
        let email = id.email.trim().to_lowercase();
        let mut tx = self.pool.begin().await?;
        if let Some(t) = id.tenant {
            let known: bool =
                sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM tenants WHERE id = $1)")
                    .bind(t)
                    .fetch_one(&mut *tx)
                    .await?;
            if !known {
                return Ok(Err(SsoRefusal::UnknownTenant));
            }
        }
        let by_identity = sqlx::query_as::<_, ExistingUser>(
            "SELECT id, role, tenant_id, disabled FROM users \
             WHERE oidc_issuer = $1 AND oidc_subject = $2 FOR UPDATE",
        )
        .bind(id.issuer)
        .bind(id.subject)
        .fetch_optional(&mut *tx)
        .await?;
        let existing = match by_identity {
            Some(r) => Some(r),
            None => {
                let by_email = sqlx::query_as::<_, ExistingUser>(
                    "SELECT id, role, tenant_id, disabled, oidc_issuer FROM users WHERE email = $1 FOR UPDATE",
                )
                .bind(&email)
                .fetch_optional(&mut *tx)
                .await?;
                match by_email {
                    Some(r) if !id.email_verified || r.oidc_issuer.is_some() => {
                        return Ok(Err(SsoRefusal::EmailTaken));
                    }
                    Some(r) => {
                        let uid = r.id;
                        sqlx::query(
                            "UPDATE users SET oidc_issuer = $2, oidc_subject = $3 WHERE id = $1",
                        )
                        .bind(uid)
                        .bind(id.issuer)
                        .bind(id.subject)
                        .execute(&mut *tx)
                        .await?;
                        append(
                            &mut tx,
                            NewAudit::new(&actor, "user.sso_link", format!("user:{email}"))
                                .after(json!({"issuer": id.issuer, "subject": id.subject})),
                        )
                        .await?;
                        Some(r)
                    }
                    None => None,
                }
            }
        };
        let uid = match existing {
            Some(r) => {
                let uid = r.id;
                if r.disabled {
                    return Ok(Err(SsoRefusal::Disabled));
                }
                let (role, tenant) = (r.role, r.tenant_id);
                if role != id.role || tenant.as_deref() != id.tenant {
                    // Set by the provider: no person's hand (four eyes).
                    sqlx::query(
                        "UPDATE users SET role = $2, tenant_id = $3, \
                         access_set_by = NULL, access_set_at = now() WHERE id = $1",
                    )
                    .bind(uid)
                    .bind(id.role)
                    .bind(id.tenant)
                    .execute(&mut *tx)
                    .await?;
                    append(
                        &mut tx,
                        NewAudit::new(&actor, "user.role_change", format!("user:{email}"))
                            .before(json!({"role": role, "tenant_id": tenant}))
                            .after(json!({"role": id.role, "tenant_id": id.tenant, "via": "sso"})),
                    )
                    .await?;
                    revoke_user_sessions(&mut tx, uid).await?;
                }
                uid
            }
            None => {
                let uid = Uuid::now_v7();
                sqlx::query(
                    "INSERT INTO users (id, email, password_hash, role, tenant_id, oidc_issuer, oidc_subject) \
                     VALUES ($1, $2, $3, $4, $5, $6, $7)",
                )
                .bind(uid)
                .bind(&email)
                .bind(NO_PASSWORD)
                .bind(id.role)
                .bind(id.tenant)
                .bind(id.issuer)
                .bind(id.subject)
                .execute(&mut *tx)
                .await
                .map_err(crate::conflict(format!("user {email}")))?;
                append(
                    &mut tx,
                    NewAudit::new(&actor, "user.create", format!("user:{email}")).after(json!({
                        "id": uid, "email": email, "role": id.role, "tenant_id": id.tenant,
                        "via": "sso", "issuer": id.issuer, "subject": id.subject})),
                )
                .await?;
                uid
            }
        };
        let row = sqlx::query_as::<_, crate::UserRow>(
            "SELECT id, email, password_hash, role, tenant_id FROM users WHERE id = $1",
        )
        .bind(uid)
        .fetch_one(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(Principal::of(row).ok_or(SsoRefusal::UnknownTenant))
    }
}

/// An account an SSO sign-in may land on, found by identity or by email
/// (`oidc_issuer` is selected only by email: an identity match has one).
#[derive(sqlx::FromRow)]
struct ExistingUser {
    id: Uuid,
    role: String,
    tenant_id: Option<String>,
    disabled: bool,
    #[sqlx(default)]
    oidc_issuer: Option<String>,
}
