//! Tenants: limits, priority, borrowing policy, allowed models. Platform
//! admins create and edit; everyone else reads what their role may see.

use super::dashboard::UsageLine;
use super::{
    form_error, form_errors, int, limits_summary, model_problems, noted, split_list, stale_notice,
    FieldError, LimitsForm, StaleLine,
};
use crate::api::tenants::{self as svc, TenantIn, TenantPatch};
use crate::error::ApiError;
use crate::web::{fragment_or_page, render, Chrome, PageError, Session};
use crate::ControlPlane;
use askama::Template;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::Form;
use serde::Deserialize;
use std::sync::Arc;
use store::TenantRow;

pub struct TenantLine {
    pub id: String,
    pub name: String,
    pub cost_center: String,
    pub priority: String,
    pub limits: String,
    pub may_borrow: bool,
    pub borrow_cap: String,
    pub models: String,
}

impl TenantLine {
    fn of(lang: crate::i18n::Lang, t: &TenantRow) -> TenantLine {
        TenantLine {
            id: t.id.clone(),
            name: t.name.clone(),
            cost_center: t.cost_center.clone(),
            priority: t.priority.clone(),
            limits: limits_summary(lang, &t.limits),
            may_borrow: t.may_borrow,
            borrow_cap: super::thousands(t.borrow_cap_tokens),
            models: t
                .allowed_models
                .as_ref()
                .map(|m| m.join(", "))
                .unwrap_or_default(),
        }
    }
}

#[derive(Deserialize, Default, Clone)]
#[serde(default)]
pub struct TenantForm {
    pub id: String,
    pub name: String,
    pub cost_center: String,
    pub priority: String,
    #[serde(flatten)]
    pub limits: LimitsForm,
    pub may_borrow: Option<String>,
    pub borrow_cap_tokens: String,
    pub allowed_models: String,
    pub clamp_max_tokens: Option<String>,
    /// Blank: the platform default.
    pub max_queued_requests: String,
    pub max_open_streams: String,
    /// The tenant's version the form was opened at ("" on a new tenant).
    pub version: String,
}

impl TenantForm {
    fn of(t: &TenantRow, version: i64) -> TenantForm {
        TenantForm {
            version: version.to_string(),
            id: t.id.clone(),
            name: t.name.clone(),
            cost_center: t.cost_center.clone(),
            priority: t.priority.clone(),
            limits: LimitsForm::of(&t.limits),
            may_borrow: t.may_borrow.then(|| "on".into()),
            borrow_cap_tokens: t.borrow_cap_tokens.to_string(),
            allowed_models: t
                .allowed_models
                .as_ref()
                .map(|m| m.join(", "))
                .unwrap_or_default(),
            clamp_max_tokens: t.clamp_max_tokens.then(|| "on".into()),
            max_queued_requests: t
                .max_queued_requests
                .map(|v| v.to_string())
                .unwrap_or_default(),
            max_open_streams: t
                .max_open_streams
                .map(|v| v.to_string())
                .unwrap_or_default(),
        }
    }

    fn blank() -> TenantForm {
        TenantForm {
            priority: "standard".into(),
            borrow_cap_tokens: "0".into(),
            ..Default::default()
        }
    }

    /// The tenant as typed, and every field that does not read (left at
    /// its default, so the service's rules find the rest at once).
    fn read(&self) -> (TenantIn, Vec<ApiError>) {
        let (limits, mut p) = self.limits.read();
        let borrow_cap_tokens = noted(&mut p, int("borrow_cap_tokens", &self.borrow_cap_tokens));
        let max_queued_requests = noted(
            &mut p,
            int("max_queued_requests", &self.max_queued_requests),
        );
        let max_open_streams = noted(&mut p, int("max_open_streams", &self.max_open_streams));
        let t = TenantIn {
            id: self.id.trim().to_string(),
            name: self.name.trim().to_string(),
            cost_center: self.cost_center.trim().to_string(),
            priority: match self.priority.trim() {
                "" => "standard".into(),
                p => p.to_string(),
            },
            limits,
            may_borrow: self.may_borrow.is_some(),
            borrow_cap_tokens: borrow_cap_tokens.unwrap_or(0),
            allowed_models: split_list(&self.allowed_models),
            clamp_max_tokens: self.clamp_max_tokens.is_some(),
            max_queued_requests,
            max_open_streams,
        };
        (t, p)
    }

    fn to_input(&self) -> Result<TenantIn, ApiError> {
        let (t, problems) = self.read();
        crate::api::first(problems).map(|()| t)
    }

    /// Every field that does not parse (the service then finds the rest).
    fn problems(&self) -> Vec<ApiError> {
        self.read().1
    }

    fn to_patch(&self) -> Result<TenantPatch, ApiError> {
        let t = self.to_input()?;
        Ok(TenantPatch {
            name: Some(t.name),
            cost_center: Some(t.cost_center),
            priority: Some(t.priority),
            limits: Some(t.limits),
            may_borrow: Some(t.may_borrow),
            borrow_cap_tokens: Some(t.borrow_cap_tokens),
            allowed_models: Some(t.allowed_models),
            clamp_max_tokens: Some(t.clamp_max_tokens),
            max_queued_requests: Some(t.max_queued_requests),
            max_open_streams: Some(t.max_open_streams),
            version: int("version", &self.version)?,
        })
    }
}

#[derive(Template)]
#[template(path = "pages/tenants.html")]
struct ListPage {
    c: Chrome,
    rows: Vec<TenantLine>,
    can_create: bool,
}

pub async fn list(
    State(cp): State<Arc<ControlPlane>>,
    s: Session,
) -> Result<Html<String>, PageError> {
    let rows = svc::visible_tenants(&cp, &s.actor)
        .await?
        .iter()
        .map(|t| TenantLine::of(s.lang, t))
        .collect();
    render(ListPage {
        c: Chrome::new(&s, "nav.tenants", "/console/tenants"),
        rows,
        can_create: s.actor.is_platform_admin(),
    })
}

/// The tenant form, for creating (`editing: false`) or editing.
#[derive(Template)]
#[template(path = "partials/tenant_form.html")]
struct FormFragment {
    c: Chrome,
    form: TenantForm,
    errors: FieldError,
    editing: bool,
    saved: bool,
    stale: Vec<StaleLine>,
}

#[derive(Template)]
#[template(path = "pages/tenant_new.html")]
struct NewPage {
    c: Chrome,
    form: TenantForm,
    errors: FieldError,
    editing: bool,
    saved: bool,
    stale: Vec<StaleLine>,
}

pub async fn new_form(s: Session) -> Result<Html<String>, PageError> {
    crate::api::require_platform_admin(&s.actor)?;
    render(NewPage {
        c: Chrome::new(&s, "tenants.new", "/console/tenants"),
        form: TenantForm::blank(),
        errors: FieldError::default(),
        editing: false,
        saved: false,
        stale: Vec::new(),
    })
}

pub async fn create(
    State(cp): State<Arc<ControlPlane>>,
    s: Session,
    Form(f): Form<TenantForm>,
) -> Result<Response, PageError> {
    crate::api::require_platform_admin(&s.actor)?;
    // Every field at once: what does not read, then every rule the rest
    // breaks (the API's own), then whether the id is taken.
    let (input, mut problems) = f.read();
    problems.extend(svc::new_tenant_problems(&cp, &input).await?);
    if domain::text::is_id(&input.id) && cp.store.tenant_exists(s.actor.scope(), &input.id).await? {
        problems.push(ApiError::field("id", "err.exists"));
    }
    let errors = if problems.is_empty() {
        match svc::create_tenant(&cp, &s.actor, input).await {
            Ok(t) => {
                let to = format!("/console/tenants/{}?saved=1", t.id);
                // htmx reads HX-Redirect only on a 2xx: a 303 would be
                // followed by the browser itself and the page pasted into
                // the form.
                if s.htmx {
                    return Ok((StatusCode::OK, [("hx-redirect", to)]).into_response());
                }
                return Ok(Redirect::to(&to).into_response());
            }
            Err(e) => form_error(e)?,
        }
    } else {
        form_errors(problems)?
    };
    let frag = FormFragment {
        c: Chrome::new(&s, "tenants.new", "/console/tenants"),
        form: f,
        errors,
        editing: false,
        saved: false,
        stale: Vec::new(),
    };
    let html = fragment_or_page(&s, "tenants.new", "/console/tenants", frag)?;
    Ok((StatusCode::UNPROCESSABLE_ENTITY, html).into_response())
}

#[derive(Template)]
#[template(path = "pages/tenant.html")]
struct ShowPage {
    c: Chrome,
    t: TenantLine,
    usage: Option<UsageLine>,
    /// The tenant's grants in force now, tenant-wide and per app.
    grants: Vec<super::quota::QuotaLine>,
    can_edit: bool,
    can_manage: bool,
    form: TenantForm,
    errors: FieldError,
    editing: bool,
    saved: bool,
    stale: Vec<StaleLine>,
}

/// `?saved=1`: the page a just-created tenant lands on says so.
#[derive(Deserialize, Default)]
#[serde(default)]
pub struct ShowQuery {
    saved: Option<String>,
}

pub async fn show(
    State(cp): State<Arc<ControlPlane>>,
    s: Session,
    Path(id): Path<String>,
    Query(q): Query<ShowQuery>,
) -> Result<Html<String>, PageError> {
    let (t, version) = svc::tenant_versioned(&cp, &s.actor, &id).await?;
    let grants = active_grants(&cp, &s, &id).await?;
    // Usage is live from Redis; the page still shows the tenant without it.
    let usage = super::dashboard::usage_line(&cp, &s.actor, &id).await.ok();
    render(ShowPage {
        c: Chrome::new(&s, "nav.tenants", "/console/tenants"),
        t: TenantLine::of(s.lang, &t),
        usage,
        grants,
        can_edit: s.actor.is_platform_admin(),
        can_manage: s.actor.may(domain::roles::Access::Manage, &id),
        form: TenantForm::of(&t, version),
        errors: FieldError::default(),
        editing: true,
        saved: q.saved.is_some(),
        stale: Vec::new(),
    })
}

/// The tenant's approved grants in force now (tenant-wide and app-scoped
/// alike), as the quota-request table shows them.
async fn active_grants(
    cp: &ControlPlane,
    s: &Session,
    tenant: &str,
) -> Result<Vec<super::quota::QuotaLine>, PageError> {
    let Some(scope) = s.actor.scope().narrow_to(tenant) else {
        return Ok(Vec::new());
    };
    let now = chrono::Utc::now();
    let rows: Vec<_> = cp
        .store
        .quota_requests(&scope)
        .await?
        .into_iter()
        .filter(|q| crate::api::quota_requests::state_of(q, now) == "active")
        .collect();
    Ok(super::quota::lines(cp, &s.actor, s.lang, &rows, now).await?)
}

pub async fn update(
    State(cp): State<Arc<ControlPlane>>,
    s: Session,
    Path(id): Path<String>,
    Form(mut f): Form<TenantForm>,
) -> Result<Response, PageError> {
    let result = match f.to_patch() {
        Ok(p) => svc::update_tenant(&cp, &s.actor, &id, p).await,
        Err(e) => Err(e),
    };
    let mut stale = Vec::new();
    let (status, errors, saved) = match result {
        Ok((t, version)) => {
            f = TenantForm::of(&t, version);
            (StatusCode::OK, FieldError::default(), true)
        }
        // Someone saved in between: say what they changed, keep what was
        // typed, and base the next save on the version now stored.
        Err(ApiError::Stale {
            what,
            expected,
            current,
        }) => {
            stale = stale_notice(&cp, &what, expected).await?;
            f.version = current.to_string();
            (StatusCode::CONFLICT, FieldError::default(), false)
        }
        Err(e) => {
            let mut more = f.problems();
            more.extend(model_problems(&cp, &f.allowed_models).await);
            (
                StatusCode::UNPROCESSABLE_ENTITY,
                form_error(e)?.and(more),
                false,
            )
        }
    };
    f.id = id.clone();
    let frag = FormFragment {
        c: Chrome::new(&s, "nav.tenants", "/console/tenants"),
        form: f,
        errors,
        editing: true,
        saved,
        stale,
    };
    let html = fragment_or_page(&s, "nav.tenants", "/console/tenants", frag)?;
    Ok((status, html).into_response())
}
