use super::extract::{Body, Params};
use super::{require_platform_admin, valid_id};
use crate::auth::Authed;
use crate::{ApiError, ControlPlane};
use axum::extract::State;
use axum::Json;
use domain::roles::Role;
use serde::Deserialize;
use serde_json::{json, Value};
use std::sync::Arc;
use store::{passwords, Principal};
use uuid::Uuid;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NewUser {
    pub email: String,
    pub password: String,
    pub role: String,
    pub tenant_id: Option<String>,
}

/// A role and, for tenant admins, their tenant: checked together.
fn role_and_tenant(role: &str, tenant: &Option<String>) -> Result<Role, ApiError> {
    let role = Role::parse(role).ok_or_else(|| ApiError::field("role", "err.role"))?;
    match (role, tenant) {
        (Role::TenantAdmin, Some(t)) => valid_id("tenant_id", t)?,
        (Role::TenantAdmin, None) => return Err(ApiError::field("tenant_id", "err.tenant_needed")),
        (_, Some(_)) => return Err(ApiError::field("tenant_id", "err.tenant_only_for_ta")),
        (_, None) => {}
    }
    Ok(role)
}

/// Every rule a new user breaks, all at once in the form's order: the
/// email, the password's length, the role and its tenant (one place for
/// the API, which answers the first, and the console's form, which shows
/// each beside its field; `Err`: the store could not be asked). Whether
/// the email is taken is the store's to say (409).
pub async fn new_user_problems(
    cp: &ControlPlane,
    actor: &Principal,
    u: &NewUser,
) -> Result<Vec<ApiError>, ApiError> {
    let mut out = Vec::new();
    let email = u.email.trim().to_lowercase();
    if !domain::text::is_email(&email) {
        out.push(ApiError::field("email", "err.email"));
    } else {
        out.extend(super::valid_text("email", domain::text::EMAIL, &email).err());
    }
    if !domain::text::password_long_enough(&u.password) {
        out.push(ApiError::field("password", "err.password_short"));
    }
    match role_and_tenant(&u.role, &u.tenant_id) {
        Err(e) => out.push(e),
        Ok(_) => {
            if let Some(t) = &u.tenant_id {
                if !cp.store.tenant_exists(actor.scope(), t).await? {
                    out.push(ApiError::field("tenant_id", "err.unknown_tenant"));
                }
            }
        }
    }
    Ok(out)
}

/// Creates a user (platform admins only); returns (id, normalised email, role).
pub async fn create_user(
    cp: &ControlPlane,
    actor: &Principal,
    u: NewUser,
) -> Result<(Uuid, String, Role), ApiError> {
    require_platform_admin(actor)?;
    super::first(new_user_problems(cp, actor, &u).await?)?;
    let email = u.email.trim().to_lowercase();
    let role = role_and_tenant(&u.role, &u.tenant_id)?;
    let hash = hash_password(u.password).await?;
    let creator = actor.user_id.parse().ok();
    let id = cp
        .store
        .create_user_by(
            &actor.label(),
            creator,
            &email,
            &hash,
            role.as_str(),
            u.tenant_id.as_deref(),
        )
        .await?;
    Ok((id, email, role))
}

pub async fn create(
    State(cp): State<Arc<ControlPlane>>,
    Authed(actor): Authed,
    Body(u): Body<NewUser>,
) -> Result<Json<Value>, ApiError> {
    let tenant = u.tenant_id.clone();
    let (id, email, role) = create_user(&cp, &actor, u).await?;
    Ok(Json(
        json!({"id": id, "email": email, "role": role.as_str(), "tenant_id": tenant}),
    ))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RoleChange {
    pub role: String,
    pub tenant_id: Option<String>,
}

/// Changes another person's role (platform admins only; never one's own).
pub async fn change_role(
    cp: &ControlPlane,
    actor: &Principal,
    id: Uuid,
    c: RoleChange,
) -> Result<Role, ApiError> {
    require_platform_admin(actor)?;
    if actor.user_id == id.to_string() {
        return Err(ApiError::Forbidden("nobody changes their own role".into()));
    }
    let role = role_and_tenant(&c.role, &c.tenant_id)?;
    if let Some(t) = &c.tenant_id {
        if !cp.store.tenant_exists(actor.scope(), t).await? {
            return Err(ApiError::field("tenant_id", "err.unknown_tenant"));
        }
    }
    cp.store
        .set_user_role(
            &actor.label(),
            actor.user_id.parse().ok(),
            id,
            role.as_str(),
            c.tenant_id.as_deref(),
        )
        .await?;
    Ok(role)
}

pub async fn set_role(
    State(cp): State<Arc<ControlPlane>>,
    Authed(actor): Authed,
    Params(id): Params<Uuid>,
    Body(c): Body<RoleChange>,
) -> Result<Json<Value>, ApiError> {
    let tenant = c.tenant_id.clone();
    let role = change_role(&cp, &actor, id, c).await?;
    Ok(Json(
        json!({"id": id, "role": role.as_str(), "tenant_id": tenant}),
    ))
}

/// argon2id on the blocking pool; a short password names the field.
pub async fn hash_password(password: String) -> Result<String, ApiError> {
    tokio::task::spawn_blocking(move || passwords::hash(&password))
        .await
        .map_err(|_| ApiError::Internal)?
        .map_err(|e| match e {
            passwords::PasswordError::TooShort => ApiError::field("password", "err.password_short"),
            passwords::PasswordError::Hashing => ApiError::Internal,
        })
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Disable {
    pub disabled: bool,
}

/// Disables (or re-enables) another person (platform admins only; never
/// oneself). Disabling ends their sessions at once.
pub async fn set_disabled(
    cp: &ControlPlane,
    actor: &Principal,
    id: Uuid,
    disabled: bool,
) -> Result<(), ApiError> {
    require_platform_admin(actor)?;
    if actor.user_id == id.to_string() {
        return Err(ApiError::Forbidden("nobody disables themselves".into()));
    }
    cp.store
        .set_user_disabled(&actor.label(), actor.user_id.parse().ok(), id, disabled)
        .await?;
    Ok(())
}

pub async fn disable(
    State(cp): State<Arc<ControlPlane>>,
    Authed(actor): Authed,
    Params(id): Params<Uuid>,
    Body(d): Body<Disable>,
) -> Result<Json<Value>, ApiError> {
    set_disabled(&cp, &actor, id, d.disabled).await?;
    Ok(Json(json!({"id": id, "disabled": d.disabled})))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PasswordReset {
    pub password: String,
}

/// Sets another person's password (platform admins only; one's own goes
/// through `/auth/password` with the current one). Every session of theirs
/// ends; a disabled user stays disabled (404 here: enable them first).
pub async fn reset_password(
    cp: &ControlPlane,
    actor: &Principal,
    id: Uuid,
    password: String,
) -> Result<(), ApiError> {
    require_platform_admin(actor)?;
    if actor.user_id == id.to_string() {
        return Err(ApiError::Forbidden(
            "change your own password with your current one".into(),
        ));
    }
    let hash = hash_password(password).await?;
    cp.store
        .set_user_password(&actor.label(), actor.user_id.parse().ok(), id, &hash, true)
        .await?;
    Ok(())
}

pub async fn password(
    State(cp): State<Arc<ControlPlane>>,
    Authed(actor): Authed,
    Params(id): Params<Uuid>,
    Body(r): Body<PasswordReset>,
) -> Result<axum::http::StatusCode, ApiError> {
    reset_password(&cp, &actor, id, r.password).await?;
    Ok(axum::http::StatusCode::NO_CONTENT)
}
