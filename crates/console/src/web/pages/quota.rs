//! Temporary quota: tenant admins request it (reason, expiry), platform
//! admins other than the requester approve with a note or reject.

use super::{form_error, int, time, time_left, usd, when, FieldError};
use crate::api::quota_requests::{self, RequestIn};
use crate::error::ApiError;
use crate::web::{fragment_or_page, render, Chrome, PageError, Session};
use crate::ControlPlane;
use askama::Template;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{Html, IntoResponse, Response};
use axum::Form;
use chrono::{DateTime, Utc};
use domain::roles::{Actor, Role};
use domain::MicroUsd;
use serde::Deserialize;
use std::sync::Arc;
use store::{Principal, QuotaRequestRow};
use uuid::Uuid;

/// One request, formatted for a table row.
pub struct QuotaLine {
    pub id: String,
    pub tenant: String,
    pub app: String,
    pub tokens: String,
    pub cost: String,
    pub reason: String,
    /// pending / active / expired / rejected
    pub state: &'static str,
    /// Translation key of the state.
    pub state_key: &'static str,
    pub expires: String,
    pub left: String,
    pub note: String,
    pub requested_by: String,
    pub decided_by: String,
    /// This viewer may approve or reject it now.
    pub can_decide: bool,
    /// Why not, for a pending request this viewer may not decide (a
    /// translation key; "" otherwise).
    pub refusal: &'static str,
    /// Why the row was refreshed instead of decided (a stale tab's decision
    /// of a request decided meanwhile); empty otherwise.
    pub notice: String,
}

/// The rows of a requests table, with who asked, who decided and whether
/// this viewer may decide (the rule the decision itself enforces).
pub async fn lines(
    cp: &ControlPlane,
    viewer: &Principal,
    lang: crate::i18n::Lang,
    rows: &[QuotaRequestRow],
    now: DateTime<Utc>,
) -> Result<Vec<QuotaLine>, ApiError> {
    let people = quota_requests::people_of(cp, rows).await?;
    let mut out = Vec::with_capacity(rows.len());
    for q in rows {
        let mut line = QuotaLine::of(lang, cp.clock, q, now);
        line.requested_by = people.get(&q.requested_by).cloned().unwrap_or_default();
        line.decided_by = q
            .decided_by
            .and_then(|u| people.get(&u).cloned())
            .unwrap_or_default();
        if line.state == "pending" {
            match quota_requests::may_decide_request(cp, viewer, q.requested_by).await? {
                Ok(()) => line.can_decide = true,
                Err(r) => line.refusal = crate::web::error::refusal_key(r),
            }
        }
        out.push(line);
    }
    Ok(out)
}

impl QuotaLine {
    fn of(
        lang: crate::i18n::Lang,
        clock: domain::period::PlatformClock,
        q: &QuotaRequestRow,
        now: DateTime<Utc>,
    ) -> QuotaLine {
        let (state, state_key) = match quota_requests::state_of(q, now) {
            "pending" => ("pending", "quota.state_pending"),
            "active" => ("active", "quota.state_active"),
            "expired" => ("expired", "quota.state_expired"),
            _ => ("rejected", "quota.state_rejected"),
        };
        QuotaLine {
            id: q.id.to_string(),
            tenant: q.tenant_id.clone(),
            app: q.app_id.clone().unwrap_or_default(),
            tokens: if q.tokens > 0 {
                super::thousands(q.tokens)
            } else {
                String::new()
            },
            cost: if q.cost_micro > 0 {
                MicroUsd(q.cost_micro).shown()
            } else {
                String::new()
            },
            reason: super::clipped(&q.reason, domain::text::REASON),
            state,
            state_key,
            expires: when(clock, q.expires_at),
            // Only a grant that is or may yet be in force has time left; a
            // rejected request's expiry is moot.
            left: if matches!(state, "pending" | "active") {
                time_left(lang, q.expires_at, now)
            } else {
                String::new()
            },
            note: super::clipped(&q.note, domain::text::NOTE),
            requested_by: String::new(),
            decided_by: String::new(),
            can_decide: false,
            refusal: "",
            notice: String::new(),
        }
    }
}

#[derive(Deserialize, Default, Clone)]
#[serde(default)]
pub struct RequestForm {
    tenant_id: String,
    app_id: String,
    tokens: String,
    cost_usd: String,
    expires_at: String,
    reason: String,
}

impl RequestForm {
    fn parse(&self, clock: domain::period::PlatformClock) -> Result<RequestIn, ApiError> {
        if self.tenant_id.trim().is_empty() {
            return Err(ApiError::field("tenant_id", "err.required"));
        }
        Ok(RequestIn {
            tenant_id: self.tenant_id.trim().to_string(),
            app_id: Some(self.app_id.trim().to_string()).filter(|a| !a.is_empty()),
            tokens: int("tokens", &self.tokens)?,
            cost_usd: usd("cost_usd", &self.cost_usd)?,
            expires_at: time(clock, "expires_at", &self.expires_at)?
                .ok_or(ApiError::field("expires_at", "err.required"))?,
            reason: self.reason.clone(),
        })
    }
}

#[derive(Template)]
#[template(path = "pages/quota.html")]
struct QuotaPage {
    c: Chrome,
    rows: Vec<QuotaLine>,
    may_request: bool,
    /// Tenant admins request for their own tenant only.
    fixed_tenant: Option<String>,
    form: RequestForm,
    errors: FieldError,
    created: bool,
    expiry: ExpiryBound,
    pick: Pickers,
}

#[derive(Template)]
#[template(path = "pages/quota.html", block = "request_form")]
struct RequestFormFragment {
    c: Chrome,
    may_request: bool,
    fixed_tenant: Option<String>,
    form: RequestForm,
    errors: FieldError,
    created: bool,
    expiry: ExpiryBound,
    pick: Pickers,
}

/// What the request form's pickers offer: the tenants the requester may
/// see (id, name) and their apps, by tenant.
#[derive(Default)]
pub struct Pickers {
    pub tenants: Vec<(String, String)>,
    pub apps: Vec<(String, Vec<String>)>,
}

impl Pickers {
    /// The tenants and apps in the actor's scope (a tenant admin: their
    /// own tenant's apps only).
    async fn of(cp: &ControlPlane, actor: &Principal) -> Result<Pickers, PageError> {
        let tenants = cp
            .store
            .tenants(actor.scope())
            .await?
            .into_iter()
            .map(|t| (t.id, t.name))
            .collect();
        let mut apps: Vec<(String, Vec<String>)> = Vec::new();
        for (tenant, app) in cp.store.app_ids(actor.scope()).await? {
            match apps.last_mut() {
                Some((t, list)) if *t == tenant => list.push(app),
                _ => apps.push((tenant, vec![app])),
            }
        }
        Ok(Pickers { tenants, apps })
    }
}

/// The latest expiry a request may ask now (`auth.max_grant_days`): the
/// form's `max` and the hint beside the field.
pub struct ExpiryBound {
    /// `2027-03-07T02:30`, for the datetime-local input.
    pub max: String,
    /// "A temporary grant runs at most 90 days: until 2027-03-07 02:30 UTC."
    pub hint: String,
}

impl ExpiryBound {
    fn of(cp: &ControlPlane, lang: crate::i18n::Lang) -> ExpiryBound {
        let latest = domain::limits::latest_grant_expiry(Utc::now(), cp.max_grant_days);
        ExpiryBound {
            max: super::picker(cp.clock, latest),
            hint: lang
                .t("quota.max_days")
                .replace("{n}", &cp.max_grant_days.to_string())
                .replace("{until}", &when(cp.clock, latest)),
        }
    }
}

#[derive(Template)]
#[template(path = "partials/quota_row.html")]
struct RowFragment {
    c: Chrome,
    q: QuotaLine,
}

fn may_request(a: &Actor) -> bool {
    matches!(a.role, Role::TenantAdmin | Role::PlatformAdmin)
}

pub async fn list(
    State(cp): State<Arc<ControlPlane>>,
    s: Session,
) -> Result<Html<String>, PageError> {
    let rows = quota_requests::visible_requests(&cp, &s.actor).await?;
    let rows = lines(&cp, &s.actor, s.lang, &rows, Utc::now()).await?;
    render(QuotaPage {
        c: Chrome::new(&s, "nav.quota", "/console/quota-requests"),
        rows,
        may_request: may_request(&s.actor),
        fixed_tenant: s.actor.tenant.clone(),
        form: RequestForm::default(),
        errors: FieldError::default(),
        created: false,
        expiry: ExpiryBound::of(&cp, s.lang),
        pick: Pickers::of(&cp, &s.actor).await?,
    })
}

/// A new request: the form comes back (cleared, with a note) and the list
/// is refreshed by htmx (`HX-Trigger: quota-changed`).
pub async fn create(
    State(cp): State<Arc<ControlPlane>>,
    s: Session,
    Form(mut f): Form<RequestForm>,
) -> Result<Response, PageError> {
    if let Some(t) = &s.actor.tenant {
        f.tenant_id = t.clone();
    }
    let result = match f.parse(s.clock) {
        Ok(r) => quota_requests::request_quota(&cp, &s.actor, r)
            .await
            .map(|_| ()),
        Err(e) => Err(e),
    };
    let (status, errors, created) = match result {
        Ok(()) => (StatusCode::OK, FieldError::default(), true),
        // Past the longest a grant may run (the API says by when).
        Err(ApiError::Invalid { param, .. }) if param == "expires_at" => (
            StatusCode::UNPROCESSABLE_ENTITY,
            FieldError::at("expires_at", "err.grant_too_long"),
            false,
        ),
        Err(e) => (StatusCode::UNPROCESSABLE_ENTITY, form_error(e)?, false),
    };
    if created && !s.htmx {
        return Ok(axum::response::Redirect::to("/console/quota-requests").into_response());
    }
    let form = if created { RequestForm::default() } else { f };
    let frag = RequestFormFragment {
        c: Chrome::new(&s, "nav.quota", "/console/quota-requests"),
        may_request: may_request(&s.actor),
        fixed_tenant: s.actor.tenant.clone(),
        form,
        errors,
        created,
        expiry: ExpiryBound::of(&cp, s.lang),
        pick: Pickers::of(&cp, &s.actor).await?,
    };
    let html = fragment_or_page(&s, "nav.quota", "/console/quota-requests", frag)?;
    let mut r = (status, html).into_response();
    if created {
        r.headers_mut().insert(
            "hx-trigger",
            axum::http::HeaderValue::from_static("quota-changed"),
        );
    }
    Ok(r)
}

#[derive(Deserialize, Default)]
#[serde(default)]
pub struct DecisionForm {
    note: String,
}

async fn decide(
    cp: &ControlPlane,
    s: &Session,
    id: Uuid,
    approve: bool,
    note: &str,
) -> Result<Response, PageError> {
    let (row, already) = match quota_requests::decide_request(cp, &s.actor, id, approve, note).await
    {
        Ok(row) => (row, false),
        // Decided meanwhile (another tab, another admin): the row as it is
        // now, saying what happened to it.
        Err(ApiError::Conflict(_)) => match cp.store.quota_request(s.actor.scope(), id).await? {
            Some(row) => (row, true),
            None => return Err(ApiError::NotFound(format!("quota request {id}")).into()),
        },
        Err(e) => return Err(e.into()),
    };
    if !s.htmx {
        return Ok(axum::response::Redirect::to("/console/quota-requests").into_response());
    }
    let mut q = lines(cp, &s.actor, s.lang, std::slice::from_ref(&row), Utc::now())
        .await?
        .remove(0);
    if already {
        q.notice = already_decided(cp, s, &row, &q).await?;
    }
    let frag = RowFragment {
        c: Chrome::new(s, "nav.quota", "/console/quota-requests"),
        q,
    };
    Ok(render(frag)?.into_response())
}

/// "The request of <tenant> for <amount> was already <state> by <who> at
/// <when>": what a stale tab's decision says instead of acting.
async fn already_decided(
    cp: &ControlPlane,
    s: &Session,
    row: &QuotaRequestRow,
    q: &QuotaLine,
) -> Result<String, PageError> {
    let tenant = cp
        .store
        .tenant(s.actor.scope(), &row.tenant_id)
        .await?
        .map_or_else(|| row.tenant_id.clone(), |t| t.name);
    let who = if q.app.is_empty() {
        tenant
    } else {
        format!("{tenant} / {}", q.app)
    };
    let amount = [
        (!q.tokens.is_empty()).then(|| s.lang.t("quota.amount_tokens").replace("{n}", &q.tokens)),
        (!q.cost.is_empty()).then(|| q.cost.clone()),
    ]
    .into_iter()
    .flatten()
    .collect::<Vec<_>>()
    .join(" + ");
    let key = match row.state.as_str() {
        "approved" => "quota.already_approved",
        "rejected" => "quota.already_rejected",
        _ => "quota.already_changed",
    };
    Ok(s.lang
        .t(key)
        .replace("{who}", &who)
        .replace("{amount}", &amount)
        .replace("{by}", &q.decided_by)
        .replace(
            "{at}",
            &row.decided_at
                .map(|t| when(cp.clock, t))
                .unwrap_or_default(),
        ))
}

pub async fn approve(
    State(cp): State<Arc<ControlPlane>>,
    s: Session,
    Path(id): Path<Uuid>,
    Form(f): Form<DecisionForm>,
) -> Result<Response, PageError> {
    decide(&cp, &s, id, true, &f.note).await
}

pub async fn reject(
    State(cp): State<Arc<ControlPlane>>,
    s: Session,
    Path(id): Path<Uuid>,
    Form(f): Form<DecisionForm>,
) -> Result<Response, PageError> {
    decide(&cp, &s, id, false, &f.note).await
}
