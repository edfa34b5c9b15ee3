use super::extract::{Body, Params};
use super::{require, require_platform_admin};
use crate::auth::Authed;
use crate::{ApiError, ControlPlane};
use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use chrono::{DateTime, Utc};
use domain::roles::{self, may_decide, Access, DecisionRefusal, Hands, Role};
use domain::MicroUsd;
use serde::Deserialize;
use serde_json::{json, Value};
use std::sync::Arc;
use store::{NewAudit, NewQuotaRequest, Principal, QuotaRequestRow};
use uuid::Uuid;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RequestIn {
    pub tenant_id: String,
    pub app_id: Option<String>,
    pub tokens: Option<i64>,
    pub cost_usd: Option<MicroUsd>,
    pub expires_at: DateTime<Utc>,
    pub reason: String,
}

/// A request's state as people read it: an approved request is `active`
/// until it expires, then `expired`.
pub fn state_of(q: &QuotaRequestRow, now: DateTime<Utc>) -> &str {
    match q.state.as_str() {
        "approved" if q.expires_at <= now => "expired",
        "approved" => "active",
        s => s,
    }
}

fn render(q: &QuotaRequestRow) -> Value {
    let now = Utc::now();
    let state = state_of(q, now);
    json!({"id": q.id, "tenant_id": q.tenant_id, "app_id": q.app_id, "tokens": q.tokens,
        "cost_usd": MicroUsd(q.cost_micro), "expires_at": q.expires_at, "reason": q.reason,
        "state": state, "seconds_left": (q.expires_at - now).num_seconds().max(0),
        "requested_by": q.requested_by, "decided_by": q.decided_by, "decided_at": q.decided_at, "note": q.note})
}

pub async fn create(
    State(cp): State<Arc<ControlPlane>>,
    Authed(actor): Authed,
    Body(r): Body<RequestIn>,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let row = request_quota(&cp, &actor, r).await?;
    Ok((StatusCode::CREATED, Json(render(&row))))
}

/// A tenant admin (or platform admin) asks for temporary quota.
pub async fn request_quota(
    cp: &ControlPlane,
    actor: &Principal,
    r: RequestIn,
) -> Result<QuotaRequestRow, ApiError> {
    if !matches!(actor.role, Role::TenantAdmin | Role::PlatformAdmin) {
        return Err(ApiError::Forbidden(
            "only tenant and platform admins request quota".into(),
        ));
    }
    require(actor, Access::Manage, &r.tenant_id)?;
    let (tokens, cost) = (r.tokens.unwrap_or(0), r.cost_usd.map_or(0, |c| c.0));
    if tokens < 0 || cost < 0 || (tokens == 0 && cost == 0) {
        return Err(ApiError::field("tokens", "err.positive_amount"));
    }
    if r.expires_at <= Utc::now() {
        return Err(ApiError::field("expires_at", "err.past"));
    }
    if !domain::limits::grant_expiry_allowed(r.expires_at, Utc::now(), cp.max_grant_days) {
        return Err(ApiError::invalid(
            "expires_at",
            format!(
                "a temporary grant runs at most {} days (auth.max_grant_days): expire it by {}",
                cp.max_grant_days,
                domain::limits::latest_grant_expiry(Utc::now(), cp.max_grant_days)
                    .format("%Y-%m-%dT%H:%MZ")
            ),
        ));
    }
    if r.reason.trim().is_empty() {
        return Err(ApiError::field("reason", "err.required"));
    }
    super::valid_text("reason", domain::text::REASON, &r.reason)?;
    // The tenant first: an unknown tenant is not reported as an unknown app.
    if !cp.store.tenant_exists(actor.scope(), &r.tenant_id).await? {
        return Err(ApiError::field("tenant_id", "err.unknown_tenant"));
    }
    if let Some(app) = &r.app_id {
        if !cp
            .store
            .app_exists(actor.scope(), &r.tenant_id, app)
            .await?
        {
            return Err(ApiError::field("app_id", "err.unknown_app"));
        }
    }
    let requested_by = actor.user_id.parse().map_err(|_| ApiError::Internal)?;
    let q = NewQuotaRequest {
        tenant_id: r.tenant_id,
        app_id: r.app_id,
        tokens,
        cost_micro: cost,
        expires_at: r.expires_at,
        reason: r.reason,
        requested_by,
    };
    Ok(cp.store.create_quota_request(&actor.label(), &q).await?)
}

/// The requests the actor may see: a tenant admin only their tenant's.
pub async fn visible_requests(
    cp: &ControlPlane,
    actor: &Principal,
) -> Result<Vec<QuotaRequestRow>, ApiError> {
    Ok(cp.store.quota_requests(actor.scope()).await?)
}

pub async fn list(
    State(cp): State<Arc<ControlPlane>>,
    Authed(actor): Authed,
) -> Result<Json<Value>, ApiError> {
    let rows = visible_requests(&cp, &actor).await?;
    Ok(Json(
        json!({"data": rows.iter().map(render).collect::<Vec<_>>()}),
    ))
}

#[derive(Deserialize, Default)]
pub struct Decision {
    #[serde(default)]
    note: String,
}

/// Approves or rejects: a platform admin who may (four eyes,
/// [`may_decide_request`]). Anyone else is refused before the request is
/// looked up; a four-eyes refusal is a 403 `four_eyes_violation` with an
/// audit row (`quota_request.four_eyes_refused`).
pub async fn decide_request(
    cp: &ControlPlane,
    actor: &Principal,
    id: Uuid,
    approve: bool,
    note: &str,
) -> Result<QuotaRequestRow, ApiError> {
    require_platform_admin(actor)?;
    super::valid_text("note", domain::text::NOTE, note)?;
    let q = cp
        .store
        .quota_request(actor.scope(), id)
        .await?
        .ok_or_else(|| ApiError::NotFound(format!("quota request {id}")))?;
    let decider: Uuid = actor.user_id.parse().map_err(|_| ApiError::Internal)?;
    if let Err(r) = may_decide_request(cp, actor, q.requested_by).await? {
        cp.store
            .audit(
                NewAudit::new(
                    actor.label(),
                    "quota_request.four_eyes_refused",
                    format!("quota_request:{id}"),
                )
                .after(json!({"why": r.code(), "requested_by": q.requested_by,
                              "decision": if approve { "approve" } else { "reject" }})),
            )
            .await?;
        return Err(ApiError::FourEyes(r));
    }
    Ok(cp
        .store
        .decide_quota_request(&actor.label(), id, decider, approve, note)
        .await?)
}

/// Who holds a hand over a person (`domain::roles::hands_over`), within
/// the configured window.
async fn hands(cp: &ControlPlane, user: Uuid) -> Result<Hands, ApiError> {
    let accounts: Vec<_> = cp
        .store
        .account_hands(user)
        .await?
        .iter()
        .map(|a| a.hands())
        .collect();
    Ok(roles::hands_over(
        &user.to_string(),
        &accounts,
        Utc::now(),
        chrono::Duration::days(i64::from(cp.four_eyes_days)),
    ))
}

/// Whether `actor` may decide a request made by `requested_by`: the rule
/// the decision enforces, asked beforehand so a page shows no button that
/// would be refused.
pub async fn may_decide_request(
    cp: &ControlPlane,
    actor: &Principal,
    requested_by: Uuid,
) -> Result<Result<(), DecisionRefusal>, ApiError> {
    if !actor.is_platform_admin() {
        return Ok(Err(DecisionRefusal::NotPlatformAdmin));
    }
    four_eyes(cp, actor, requested_by, may_decide).await
}

/// A four-eyes `rule` (`domain::roles::may_decide` for quota requests,
/// `may_decide_adjustment` for bill adjustments) applied to `actor` and the
/// person who asked, with the hands each holds over the other.
pub(crate) async fn four_eyes(
    cp: &ControlPlane,
    actor: &Principal,
    requested_by: Uuid,
    rule: fn(&roles::Actor, &str, &Hands, &Hands) -> Result<(), DecisionRefusal>,
) -> Result<Result<(), DecisionRefusal>, ApiError> {
    let decider: Uuid = actor.user_id.parse().map_err(|_| ApiError::Internal)?;
    let decider_hands = hands(cp, decider).await?;
    let requester_hands = hands(cp, requested_by).await?;
    Ok(rule(
        actor,
        &requested_by.to_string(),
        &decider_hands,
        &requester_hands,
    ))
}

/// Who asked and who decided, by email, for the requests' table.
pub async fn people_of(
    cp: &ControlPlane,
    rows: &[QuotaRequestRow],
) -> Result<std::collections::HashMap<Uuid, String>, ApiError> {
    let mut ids: Vec<Uuid> = rows
        .iter()
        .flat_map(|q| std::iter::once(q.requested_by).chain(q.decided_by))
        .collect();
    ids.sort();
    ids.dedup();
    Ok(cp.store.user_emails(&ids).await?.into_iter().collect())
}

pub async fn approve(
    State(cp): State<Arc<ControlPlane>>,
    Authed(actor): Authed,
    Params(id): Params<Uuid>,
    body: Option<Body<Decision>>,
) -> Result<Json<Value>, ApiError> {
    let note = body.map(|b| b.0).unwrap_or_default().note;
    Ok(Json(render(
        &decide_request(&cp, &actor, id, true, &note).await?,
    )))
}

pub async fn reject(
    State(cp): State<Arc<ControlPlane>>,
    Authed(actor): Authed,
    Params(id): Params<Uuid>,
    body: Option<Body<Decision>>,
) -> Result<Json<Value>, ApiError> {
    let note = body.map(|b| b.0).unwrap_or_default().note;
    Ok(Json(render(
        &decide_request(&cp, &actor, id, false, &note).await?,
    )))
}
