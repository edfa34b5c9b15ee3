//! Console users. Passwords arrive here already hashed (argon2id).

use crate::audit::{append, NewAudit};
use crate::{conflict, Result, Store};
use serde_json::json;
use uuid::Uuid;

#[derive(Debug, Clone, sqlx::FromRow)]
pub struct UserRow {
    pub id: Uuid,
    pub email: String,
    pub password_hash: String,
    pub role: String,
    pub tenant_id: Option<String>,
}

/// One account's row for four eyes (`Store::account_hands`).
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct AccountHandsRow {
    pub id: Uuid,
    pub created_by: Option<Uuid>,
    pub password_set_by: Option<Uuid>,
    pub password_set_at: Option<chrono::DateTime<chrono::Utc>>,
    pub access_set_by: Option<Uuid>,
    pub access_set_at: Option<chrono::DateTime<chrono::Utc>>,
}

impl AccountHandsRow {
    pub fn hands(&self) -> domain::roles::AccountHands {
        let set = |by: Option<Uuid>, at: Option<chrono::DateTime<chrono::Utc>>| {
            Some((by?.to_string(), at?))
        };
        domain::roles::AccountHands {
            id: self.id.to_string(),
            created_by: self.created_by.map(|c| c.to_string()),
            password_set: set(self.password_set_by, self.password_set_at),
            access_set: set(self.access_set_by, self.access_set_at),
        }
    }
}

impl Store {
    pub async fn create_user(
        &self,
        actor: &str,
        email: &str,
        password_hash: &str,
        role: &str,
        tenant_id: Option<&str>,
    ) -> Result<Uuid> {
        self.create_user_by(actor, None, email, password_hash, role, tenant_id)
            .await
    }

    /// Creates a user, recording which user created it (None: the CLI or
    /// the demo seed).
    pub async fn create_user_by(
        &self,
        actor: &str,
        created_by: Option<Uuid>,
        email: &str,
        password_hash: &str,
        role: &str,
        tenant_id: Option<&str>,
    ) -> Result<Uuid> {
        let id = Uuid::now_v7();
        let email = email.trim().to_lowercase();
        let mut tx = self.pool.begin().await?;
        sqlx::query("INSERT INTO users (id, email, password_hash, role, tenant_id, created_by) VALUES ($1, $2, $3, $4, $5, $6)")
            .bind(id)
            .bind(&email)
            .bind(password_hash)
            .bind(role)
            .bind(tenant_id)
            .bind(created_by)
            .execute(&mut *tx)
            .await
            .map_err(conflict(format!("user {email}")))?;
        append(
            &mut tx,
            NewAudit::new(actor, "user.create", format!("user:{email}"))
                .after(json!({"id": id, "email": email, "role": role, "tenant_id": tenant_id})),
        )
        .await?;
        tx.commit().await?;
        Ok(id)
    }

    pub async fn user_by_email(&self, email: &str) -> Result<Option<UserRow>> {
        let r = sqlx::query_as::<_, UserRow>("SELECT id, email, password_hash, role, tenant_id FROM users WHERE email = $1 AND NOT disabled")
            .bind(email.trim().to_lowercase())
            .fetch_optional(&self.pool)
            .await?;
        Ok(r)
    }
}

impl Store {
    pub async fn user_by_id(&self, id: Uuid) -> Result<Option<UserRow>> {
        let r = sqlx::query_as::<_, UserRow>("SELECT id, email, password_hash, role, tenant_id FROM users WHERE id = $1 AND NOT disabled")
            .bind(id)
            .fetch_optional(&self.pool)
            .await?;
        Ok(r)
    }
}

impl Store {
    /// Who holds a hand over a user (four eyes, `domain::roles::hands_over`):
    /// the user's row and every row reachable from it upwards through who
    /// created it and who last set its password or its access (role,
    /// tenant, enabled state), whenever that was — the rule decides what
    /// counts. Bounded at 64 steps (the graph may have cycles: two admins
    /// who set each other's passwords).
    pub async fn account_hands(&self, id: Uuid) -> Result<Vec<AccountHandsRow>> {
        Ok(sqlx::query_as(
            "WITH RECURSIVE up(id, depth) AS (
                 SELECT $1::uuid, 0
                 UNION
                 SELECT p.by, up.depth + 1
                 FROM up JOIN users u ON u.id = up.id
                 CROSS JOIN LATERAL (VALUES (u.created_by), (u.password_set_by), (u.access_set_by)) AS p(by)
                 WHERE p.by IS NOT NULL AND up.depth < 64)
             SELECT id, created_by, password_set_by, password_set_at, access_set_by, access_set_at
             FROM users WHERE id IN (SELECT id FROM up)",
        )
        .bind(id)
        .fetch_all(&self.pool)
        .await?)
    }

    /// The emails of these users (ids not found are left out).
    pub async fn user_emails(&self, ids: &[Uuid]) -> Result<Vec<(Uuid, String)>> {
        Ok(
            sqlx::query_as("SELECT id, email FROM users WHERE id = ANY($1)")
                .bind(ids)
                .fetch_all(&self.pool)
                .await?,
        )
    }
}

impl Store {
    /// Disables (or re-enables) a user; disabling ends their sessions.
    /// `by`: the person who did (four eyes remembers).
    pub async fn set_user_disabled(
        &self,
        actor: &str,
        by: Option<Uuid>,
        id: Uuid,
        disabled: bool,
    ) -> Result<()> {
        let mut tx = self.pool.begin().await?;
        let email: String = sqlx::query_scalar(
            "UPDATE users SET disabled = $2, access_set_by = $3, access_set_at = now() \
             WHERE id = $1 RETURNING email",
        )
        .bind(id)
        .bind(disabled)
        .bind(by)
        .fetch_optional(&mut *tx)
        .await?
        .ok_or_else(|| crate::StoreError::NotFound(format!("user {id}")))?;
        let ended = crate::auth::revoke_user_sessions(&mut tx, id).await?;
        let action = if disabled {
            "user.disable"
        } else {
            "user.enable"
        };
        append(
            &mut tx,
            NewAudit::new(actor, action, format!("user:{email}"))
                .before(json!({"disabled": !disabled}))
                .after(json!({"disabled": disabled, "sessions_ended": ended})),
        )
        .await?;
        tx.commit().await?;
        Ok(())
    }

    /// Sets a user's password (already hashed) and ends every session of
    /// theirs, the one that asked included. `reset`: a platform admin set
    /// it for them (audited as a reset, not as their own change). `by`: the
    /// person who set it (four eyes remembers; the user themselves for
    /// their own change).
    pub async fn set_user_password(
        &self,
        actor: &str,
        by: Option<Uuid>,
        id: Uuid,
        password_hash: &str,
        reset: bool,
    ) -> Result<()> {
        let mut tx = self.pool.begin().await?;
        let email: String = sqlx::query_scalar(
            "UPDATE users SET password_hash = $2, password_set_by = $3, password_set_at = now() \
             WHERE id = $1 AND NOT disabled RETURNING email",
        )
        .bind(id)
        .bind(password_hash)
        .bind(by)
        .fetch_optional(&mut *tx)
        .await?
        .ok_or_else(|| crate::StoreError::NotFound(format!("user {id}")))?;
        let ended = crate::auth::revoke_user_sessions(&mut tx, id).await?;
        append(
            &mut tx,
            NewAudit::new(
                actor,
                if reset {
                    "user.password_reset"
                } else {
                    "user.password_change"
                },
                format!("user:{email}"),
            )
            .after(json!({"sessions_ended": ended})),
        )
        .await?;
        tx.commit().await?;
        Ok(())
    }
}
