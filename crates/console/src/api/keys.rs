use super::extract::{Body, Params};
use super::{known_models, require};
use crate::auth::Authed;
use crate::{ApiError, ControlPlane};
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use chrono::{DateTime, Utc};
use domain::keys;
use domain::roles::Access;
use domain::Limits;
use serde::Deserialize;
use serde_json::{json, Value};
use std::sync::Arc;
use store::{NewKey, Principal};
use uuid::Uuid;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KeyIn {
    pub name: String,
    pub expires_at: Option<DateTime<Utc>>,
    #[serde(default)]
    pub limits: Limits,
    pub allowed_models: Option<Vec<String>>,
    /// Default tags and required tag keys the key adds to its app's (its
    /// own override the app's defaults; both lists of required keys apply).
    /// End-user limits are the app's alone.
    #[serde(default)]
    pub attribution: domain::attribution::Policy,
}

/// A key just issued. `key` is the plaintext: shown in this one answer and
/// stored nowhere.
pub struct IssuedKey {
    pub id: Uuid,
    pub tenant_id: String,
    pub app_id: String,
    pub name: String,
    pub prefix: String,
    pub expires_at: Option<DateTime<Utc>>,
    pub key: String,
}

/// Every rule a new key breaks, all at once in the form's order: its name,
/// limits, expiry, attribution and allowed models (one place for the API,
/// which answers the first, and the console's form, which shows each
/// beside its field; `Err`: the store could not be asked).
pub async fn new_key_problems(cp: &ControlPlane, k: &KeyIn) -> Result<Vec<ApiError>, ApiError> {
    let mut out = Vec::new();
    if k.name.trim().is_empty() {
        out.push(ApiError::field("name", "err.required"));
    } else {
        out.extend(super::valid_text("name", domain::text::KEY_NAME, &k.name).err());
    }
    if k.expires_at.is_some_and(|t| t <= Utc::now()) {
        out.push(ApiError::field("expires_at", "err.past"));
    }
    out.extend(super::limits_problems(&k.limits));
    out.extend(super::valid_attribution(&k.attribution).err());
    if k.attribution.end_user_limits.is_some() {
        out.push(ApiError::invalid(
            "attribution.end_user_limits",
            "end-user limits are set on the app, not on a key".to_string(),
        ));
    }
    out.extend(super::unknown_models(cp, k.allowed_models.as_deref()).await?);
    if let Err(e) = super::known_budget_models(cp, &k.limits).await {
        out.push(e);
    }
    Ok(out)
}

/// Issues a key for an app of a tenant the actor manages.
pub async fn issue(
    cp: &ControlPlane,
    actor: &Principal,
    tenant: &str,
    app: &str,
    k: KeyIn,
) -> Result<IssuedKey, ApiError> {
    require(actor, Access::Manage, tenant)?;
    super::first(new_key_problems(cp, &k).await?)?;
    let key = keys::generate();
    let new = NewKey {
        tenant_id: tenant.to_string(),
        app_id: app.to_string(),
        name: k.name.clone(),
        prefix: keys::display_prefix(&key),
        key_hash: keys::keyed_hash(&cp.pepper, &key),
        limits: k.limits,
        allowed_models: k.allowed_models,
        expires_at: k.expires_at,
        attribution: k.attribution,
    };
    if !cp.store.app_exists(actor.scope(), tenant, app).await? {
        return Err(ApiError::NotFound(format!("app {tenant}/{app}")));
    }
    let id = cp.store.create_key(&actor.label(), &new).await?;
    Ok(IssuedKey {
        id,
        tenant_id: new.tenant_id,
        app_id: new.app_id,
        name: new.name,
        prefix: new.prefix,
        expires_at: new.expires_at,
        key,
    })
}

/// Issues a key. Its plaintext is in this response and nowhere else.
pub async fn create(
    State(cp): State<Arc<ControlPlane>>,
    Authed(actor): Authed,
    Params((tenant, app)): Params<(String, String)>,
    Body(k): Body<KeyIn>,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let k = issue(&cp, &actor, &tenant, &app, k)
        .await
        .map_err(super::in_limits)?;
    Ok((
        StatusCode::CREATED,
        Json(
            json!({"id": k.id, "tenant_id": k.tenant_id, "app_id": k.app_id, "name": k.name, "prefix": k.prefix,
            "expires_at": k.expires_at, "key": k.key}),
        ),
    ))
}

/// Revokes a key of a tenant the actor manages (another tenant's key is
/// not found).
pub async fn revoke_key(
    cp: &ControlPlane,
    actor: &Principal,
    id: Uuid,
) -> Result<String, ApiError> {
    let tenant = managed_key(cp, actor, id).await?;
    cp.store.revoke_key(&actor.label(), id).await?;
    Ok(tenant)
}

pub async fn revoke(
    State(cp): State<Arc<ControlPlane>>,
    Authed(actor): Authed,
    Params(id): Params<Uuid>,
) -> Result<StatusCode, ApiError> {
    revoke_key(&cp, &actor, id).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// `POST /api/v1/keys/{id}/rotate`'s body (absent: the default grace).
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct RotateIn {
    /// How long the current secret keeps working, in seconds (0: it stops
    /// now; at most [`keys::ROTATION_GRACE_MAX_SECS`]).
    pub grace_secs: Option<i64>,
}

/// A key rotated: its new secret (`key`, in this answer only) and when
/// the previous one stops working.
pub struct RotatedKey {
    pub tenant_id: String,
    pub rotation: store::Rotation,
    pub key: String,
}

/// Gives an active key of a tenant the actor manages a new secret; the
/// current one keeps working for the grace period. The key keeps its id,
/// name, limits, usage and history.
pub async fn rotate_key(
    cp: &ControlPlane,
    actor: &Principal,
    id: Uuid,
    grace_secs: Option<i64>,
) -> Result<RotatedKey, ApiError> {
    let tenant = managed_key(cp, actor, id).await?;
    let grace = grace_secs.unwrap_or(keys::ROTATION_GRACE_DEFAULT_SECS);
    if !(0..=keys::ROTATION_GRACE_MAX_SECS).contains(&grace) {
        return Err(ApiError::field("grace_secs", "err.grace_range"));
    }
    let key = keys::generate();
    let rotation = cp
        .store
        .rotate_key(
            &actor.label(),
            id,
            &keys::keyed_hash(&cp.pepper, &key),
            &keys::display_prefix(&key),
            grace,
        )
        .await?;
    Ok(RotatedKey {
        tenant_id: tenant,
        rotation,
        key,
    })
}

/// The tenant of a key the actor manages (another tenant's key is not
/// found).
async fn managed_key(cp: &ControlPlane, actor: &Principal, id: Uuid) -> Result<String, ApiError> {
    let tenant = cp
        .store
        .key_tenant(actor.scope(), id)
        .await?
        .ok_or_else(|| ApiError::NotFound(format!("key {id}")))?;
    require(actor, Access::Manage, &tenant)?;
    Ok(tenant)
}

pub async fn rotate(
    State(cp): State<Arc<ControlPlane>>,
    Authed(actor): Authed,
    Params(id): Params<Uuid>,
    body: Option<Body<RotateIn>>,
) -> Result<Response, ApiError> {
    let grace = body.map(|Body(b)| b).unwrap_or_default().grace_secs;
    let r = rotate_key(&cp, &actor, id, grace).await?;
    let rot = &r.rotation;
    let mut resp = Json(
        json!({"id": id, "tenant_id": r.tenant_id, "app_id": rot.app_id,
        "name": rot.name, "prefix": rot.prefix, "key": r.key,
        "previous_prefix": rot.previous_prefix, "grace_ends_at": rot.grace_ends_at,
        "ended_early": rot.ended_early, "version": rot.version}),
    )
    .into_response();
    let h = resp.headers_mut();
    h.insert(axum::http::header::ETAG, crate::error::etag(rot.version));
    h.insert(
        axum::http::header::CACHE_CONTROL,
        axum::http::HeaderValue::from_static("no-store"),
    );
    Ok(resp)
}

/// A key as the API shows it (never a secret or a hash).
fn render(k: &store::KeyListRow, now: DateTime<Utc>) -> Value {
    let previous = k.previous_prefix.as_ref().map(|p| {
        json!({"prefix": p, "valid_until": k.previous_valid_until,
            "valid": k.previous_valid_until.is_some_and(|t| t > now)})
    });
    json!({"id": k.id, "tenant_id": k.tenant_id, "app_id": k.app_id, "name": k.name,
        "prefix": k.prefix, "created_at": k.created_at, "expires_at": k.expires_at,
        "revoked_at": k.revoked_at, "allowed_models": k.allowed_models,
        "rotated_at": k.rotated_at, "previous_secret": previous, "version": k.version})
}

fn versioned(v: Value, version: i64) -> Response {
    let mut r = Json(v).into_response();
    r.headers_mut()
        .insert(axum::http::header::ETAG, crate::error::etag(version));
    r
}

/// A key of a tenant the actor may read.
pub async fn key_for(
    cp: &ControlPlane,
    actor: &Principal,
    id: Uuid,
) -> Result<store::KeyListRow, ApiError> {
    let k = cp
        .store
        .key_detail(actor.scope(), id)
        .await?
        .ok_or_else(|| ApiError::NotFound(format!("key {id}")))?;
    require(actor, Access::Read, &k.tenant_id)?;
    Ok(k)
}

pub async fn show(
    State(cp): State<Arc<ControlPlane>>,
    Authed(actor): Authed,
    Params(id): Params<Uuid>,
) -> Result<Response, ApiError> {
    let k = key_for(&cp, &actor, id).await?;
    Ok(versioned(render(&k, Utc::now()), k.version))
}

/// A change to a key: only the fields given change (its limits change
/// through `PUT …/limits`). `expires_at: null` removes the expiry,
/// `allowed_models: null` lifts the restriction.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct KeyPatch {
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default, deserialize_with = "super::tenants::present")]
    pub expires_at: Option<Option<DateTime<Utc>>>,
    #[serde(default, deserialize_with = "super::tenants::present")]
    pub allowed_models: Option<Option<Vec<String>>>,
    /// The version the change is based on (or `If-Match`): refused with
    /// 409 `version_conflict` when the key changed since.
    #[serde(default)]
    pub version: Option<i64>,
}

/// Changes an active key's name, expiry or allowed models (whoever
/// manages its tenant), audited as `key.update`; a change since
/// `p.version` (or since it was read here) is refused. Returns the key
/// as it is now.
pub async fn update_key(
    cp: &ControlPlane,
    actor: &Principal,
    id: Uuid,
    p: KeyPatch,
) -> Result<store::KeyListRow, ApiError> {
    managed_key(cp, actor, id).await?;
    let k = key_for(cp, actor, id).await?;
    let mut edit = store::KeyEdit {
        name: k.name.clone(),
        expires_at: k.expires_at,
        allowed_models: k.allowed_models.clone(),
    };
    if let Some(name) = p.name {
        let name = name.trim().to_string();
        if name.is_empty() {
            return Err(ApiError::field("name", "err.required"));
        }
        super::valid_text("name", domain::text::KEY_NAME, &name)?;
        edit.name = name;
    }
    if let Some(t) = p.expires_at {
        if t.is_some_and(|t| t <= Utc::now()) {
            return Err(ApiError::field("expires_at", "err.past"));
        }
        edit.expires_at = t;
    }
    if let Some(m) = p.allowed_models {
        known_models(cp, m.as_deref()).await?;
        edit.allowed_models = m;
    }
    let expected = p.version.unwrap_or(k.version);
    cp.store
        .update_key(&actor.label(), id, &edit, Some(expected))
        .await?;
    key_for(cp, actor, id).await
}

/// `PATCH /api/v1/keys/{id}`: `If-Match: "<version>"` or a `version`
/// field makes it conditional.
pub async fn update(
    State(cp): State<Arc<ControlPlane>>,
    Authed(actor): Authed,
    if_match: super::extract::IfMatch,
    Params(id): Params<Uuid>,
    Body(mut p): Body<KeyPatch>,
) -> Result<Response, ApiError> {
    p.version = if_match.with(p.version)?;
    let k = update_key(&cp, &actor, id, p).await?;
    Ok(versioned(render(&k, Utc::now()), k.version))
}
