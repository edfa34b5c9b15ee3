//! The limits history of a tenant, an app or a key: each change (who, when,
//! each limit before → after, reason), for platform admins a Restore on
//! every earlier version, with a required reason
//! (`crate::api::limits::restore`, audited), and for whoever manages the
//! tenant a form that changes an app's or a key's limits
//! (`crate::api::limits::set`, audited).

use super::{form_error, stale_notice, FieldError, LimitsForm, StaleLine};
use crate::api::limits::{self as svc, LimitVersion};
use crate::web::{render, Chrome, PageError, Session};
use crate::ControlPlane;
use askama::Template;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::Form;
use domain::MicroUsd;
use serde::Deserialize;
use std::sync::Arc;
use store::LimitsOwner;
use uuid::Uuid;

/// One limit a version changed, labelled and formatted.
pub struct ChangeLine {
    pub field: String,
    /// Translation key of the limit's label (`limits.rpm`; "" for a field
    /// the console has no label for: its name is shown).
    pub label: &'static str,
    pub before: String,
    pub after: String,
}

pub struct VersionLine {
    pub id: i64,
    pub at: String,
    pub actor: String,
    /// Translation key: created / changed / restored.
    pub what: &'static str,
    pub reason: String,
    pub changes: Vec<ChangeLine>,
    pub current: bool,
    /// A restore that changed no limit (the version restored was the one in
    /// force): "no change", not "unlimited" (what an empty creation reads).
    pub no_change: bool,
}

/// A limit's value as the console shows it (money as an amount).
pub(super) fn shown(field: &str, v: &str) -> String {
    let money = field.ends_with("_usd");
    match (money, MicroUsd::from_usd_str(v)) {
        (true, Ok(m)) => m.shown(),
        _ => match v.parse::<i64>() {
            Ok(n) => super::thousands(n),
            Err(_) => v.to_string(),
        },
    }
}

/// The label of a limit (the limits form's).
pub(super) fn label_key(field: &str) -> &'static str {
    super::LimitsForm::default()
        .fields()
        .iter()
        .find(|(name, _, _)| *name == field)
        .map_or("", |(_, label, _)| *label)
}

impl VersionLine {
    fn of(v: &LimitVersion, clock: domain::period::PlatformClock) -> VersionLine {
        let what = if v.action.ends_with(".limits_restore") {
            "limits.restored"
        } else if v.action.ends_with(".create") {
            "limits.created"
        } else {
            "limits.changed"
        };
        VersionLine {
            id: v.id,
            at: super::when_text(clock, &v.at),
            actor: v.actor.clone(),
            what,
            reason: super::clipped(&v.reason, domain::text::REASON),
            changes: v
                .changes
                .iter()
                .map(|c| ChangeLine {
                    field: c.field.clone(),
                    label: label_key(&c.field),
                    before: shown(&c.field, &c.before),
                    after: shown(&c.field, &c.after),
                })
                .collect(),
            current: v.current,
            no_change: what == "limits.restored" && v.changes.is_empty(),
        }
    }
}

#[derive(Template)]
#[template(path = "pages/limits.html")]
struct HistoryPage {
    c: Chrome,
    /// What the history is of (`tenant acme`, `app acme/chat`, `key …`).
    kind: &'static str,
    name: String,
    /// Where this page lives (a restore posts to `{base}/{version}/restore`).
    base: String,
    /// Where the owner's own page is.
    back: String,
    rows: Vec<VersionLine>,
    can_restore: bool,
    errors: FieldError,
    /// The version whose restore failed (its form shows the error).
    failed: i64,
    restored: bool,
    /// An app's or a key's limits, editable by whoever manages the tenant
    /// (the limits in force, or as typed when refused).
    edit: Option<LimitsForm>,
    /// A revoked key's history: no change form, a note instead.
    revoked: bool,
    edit_errors: FieldError,
    saved: bool,
    /// The owner's row version the edit form is based on.
    version: i64,
    /// What someone else changed since the edit form was opened (a save
    /// refused as stale).
    stale: Vec<StaleLine>,
    /// The limits in force set higher than the app's or tenant's: accepted
    /// (the lower one applies first), said beside the form.
    above: Vec<AboveLine>,
}

/// A limit set higher than the same limit of the scope around it.
pub struct AboveLine {
    pub field: &'static str,
    /// Translation key of the limit's label.
    pub label: &'static str,
    pub value: String,
    /// `limits.of_app` / `common.tenant`, and its name.
    pub outer_kind: &'static str,
    pub outer_name: String,
    pub outer_value: String,
}

/// The limits in force (`current`) of an app or a key set higher than its
/// tenant's (and, for a key, its app's).
async fn above_outer(
    cp: &ControlPlane,
    s: &Session,
    owner: &LimitsOwner,
    current: &domain::Limits,
) -> Result<Vec<AboveLine>, PageError> {
    let scope = s.actor.scope();
    let tenant = owner.tenant();
    let app = match owner {
        LimitsOwner::Tenant { .. } => return Ok(Vec::new()),
        LimitsOwner::App { .. } => None,
        LimitsOwner::Key { id, .. } => cp
            .store
            .keys_of(scope, tenant)
            .await?
            .into_iter()
            .find(|k| k.id == *id)
            .map(|k| k.app_id),
    };
    let mut outers = Vec::new();
    if let Some(app) = app {
        if let Some(a) = cp
            .store
            .apps_of(scope, tenant)
            .await?
            .into_iter()
            .find(|a| a.id == app)
        {
            outers.push(("limits.of_app", format!("{tenant}/{app}"), a.limits));
        }
    }
    if let Some(t) = cp.store.tenant(scope, tenant).await? {
        outers.push(("common.tenant", tenant.to_string(), t.limits));
    }
    let amount = |field: &str, v: i64| {
        if field.ends_with("_usd") {
            MicroUsd(v).shown()
        } else {
            super::thousands(v)
        }
    };
    Ok(outers
        .iter()
        .flat_map(|(kind, name, limits)| {
            domain::limits::above(current, limits)
                .into_iter()
                .map(move |(field, mine, theirs)| AboveLine {
                    field,
                    label: label_key(field),
                    value: amount(field, mine),
                    outer_kind: kind,
                    outer_name: name.clone(),
                    outer_value: amount(field, theirs),
                })
        })
        .collect())
}

struct Owner {
    owner: LimitsOwner,
    kind: &'static str,
    name: String,
    base: String,
    back: String,
    /// A revoked key: its limits are history only, not offered for change.
    revoked: bool,
}

async fn tenant_owner(cp: &ControlPlane, s: &Session, t: &str) -> Result<Owner, PageError> {
    Ok(Owner {
        owner: svc::tenant_owner(cp, &s.actor, t).await?,
        kind: "common.tenant",
        name: t.to_string(),
        base: format!("/console/tenants/{t}/limits"),
        back: format!("/console/tenants/{t}"),
        revoked: false,
    })
}

async fn app_owner(cp: &ControlPlane, s: &Session, t: &str, a: &str) -> Result<Owner, PageError> {
    Ok(Owner {
        owner: svc::app_owner(cp, &s.actor, t, a).await?,
        kind: "limits.of_app",
        name: format!("{t}/{a}"),
        base: format!("/console/tenants/{t}/apps/{a}/limits"),
        back: format!("/console/tenants/{t}/apps"),
        revoked: false,
    })
}

async fn key_owner(cp: &ControlPlane, s: &Session, id: Uuid) -> Result<Owner, PageError> {
    let owner = svc::key_owner(cp, &s.actor, id).await?;
    let back = format!("/console/tenants/{}/apps", owner.tenant());
    // A key is named by its name (its id is the page's address).
    let detail = cp.store.key_detail(s.actor.scope(), id).await?;
    let name = detail
        .as_ref()
        .map(|k| k.name.clone())
        .unwrap_or_else(|| id.to_string());
    Ok(Owner {
        owner,
        kind: "limits.of_key",
        name,
        base: format!("/console/keys/{id}/limits"),
        back,
        revoked: detail.is_some_and(|k| k.revoked_at.is_some()),
    })
}

async fn page(
    cp: &ControlPlane,
    s: &Session,
    o: Owner,
    errors: FieldError,
    failed: i64,
    restored: bool,
) -> Result<HistoryPage, PageError> {
    let version = svc::version_of(cp, &s.actor, &o.owner).await?;
    let rows = svc::history(cp, &s.actor, &o.owner).await?;
    let edit = (!o.revoked && svc::may_set(&s.actor, &o.owner).is_ok()).then(|| {
        rows.first()
            .map(|v| LimitsForm::of(&v.limits))
            .unwrap_or_default()
    });
    let above = match rows.first() {
        Some(v) => above_outer(cp, s, &o.owner, &v.limits).await?,
        None => Vec::new(),
    };
    Ok(HistoryPage {
        c: Chrome::new(s, "limits.history", "/console/tenants"),
        kind: o.kind,
        name: o.name,
        base: o.base,
        back: o.back,
        rows: rows.iter().map(|v| VersionLine::of(v, cp.clock)).collect(),
        can_restore: s.actor.is_platform_admin(),
        errors,
        failed,
        restored,
        edit,
        revoked: o.revoked,
        edit_errors: FieldError::default(),
        saved: false,
        version,
        stale: Vec::new(),
        above,
    })
}

/// `?restored=1` / `?saved=1`: the history a restore or an edit lands on
/// says it was done.
#[derive(Deserialize, Default)]
#[serde(default)]
pub struct Shown {
    restored: Option<String>,
    saved: Option<String>,
}

async fn shown_page(
    cp: &ControlPlane,
    s: &Session,
    o: Owner,
    q: Shown,
) -> Result<Html<String>, PageError> {
    let mut p = page(cp, s, o, FieldError::default(), 0, q.restored.is_some()).await?;
    p.saved = q.saved.is_some();
    render(p)
}

pub async fn tenant(
    State(cp): State<Arc<ControlPlane>>,
    s: Session,
    Path(t): Path<String>,
    Query(q): Query<Shown>,
) -> Result<Html<String>, PageError> {
    let o = tenant_owner(&cp, &s, &t).await?;
    shown_page(&cp, &s, o, q).await
}

pub async fn app(
    State(cp): State<Arc<ControlPlane>>,
    s: Session,
    Path((t, a)): Path<(String, String)>,
    Query(q): Query<Shown>,
) -> Result<Html<String>, PageError> {
    let o = app_owner(&cp, &s, &t, &a).await?;
    shown_page(&cp, &s, o, q).await
}

pub async fn key(
    State(cp): State<Arc<ControlPlane>>,
    s: Session,
    Path(id): Path<Uuid>,
    Query(q): Query<Shown>,
) -> Result<Html<String>, PageError> {
    let o = key_owner(&cp, &s, id).await?;
    shown_page(&cp, &s, o, q).await
}

#[derive(Deserialize, Default)]
#[serde(default)]
pub struct RestoreForm {
    reason: String,
}

/// Restores a version and shows the history again (the new entry on top),
/// or the form's error beside the version tried.
async fn restore(
    cp: &ControlPlane,
    s: &Session,
    o: Owner,
    version: i64,
    f: RestoreForm,
) -> Result<Response, PageError> {
    let owner = o.owner.clone();
    let result = svc::restore(cp, &s.actor, &owner, version, &f.reason).await;
    match result {
        // Back to the history (a reload does not restore twice).
        Ok(_) => Ok(Redirect::to(&format!("{}?restored=1", o.base)).into_response()),
        Err(e) => {
            let p = page(cp, s, o, form_error(e)?, version, false).await?;
            Ok((StatusCode::UNPROCESSABLE_ENTITY, render(p)?).into_response())
        }
    }
}

pub async fn tenant_restore(
    State(cp): State<Arc<ControlPlane>>,
    s: Session,
    Path((t, version)): Path<(String, i64)>,
    Form(f): Form<RestoreForm>,
) -> Result<Response, PageError> {
    let o = tenant_owner(&cp, &s, &t).await?;
    restore(&cp, &s, o, version, f).await
}

pub async fn app_restore(
    State(cp): State<Arc<ControlPlane>>,
    s: Session,
    Path((t, a, version)): Path<(String, String, i64)>,
    Form(f): Form<RestoreForm>,
) -> Result<Response, PageError> {
    let o = app_owner(&cp, &s, &t, &a).await?;
    restore(&cp, &s, o, version, f).await
}

pub async fn key_restore(
    State(cp): State<Arc<ControlPlane>>,
    s: Session,
    Path((id, version)): Path<(Uuid, i64)>,
    Form(f): Form<RestoreForm>,
) -> Result<Response, PageError> {
    let o = key_owner(&cp, &s, id).await?;
    restore(&cp, &s, o, version, f).await
}

/// The limits form as posted: the limits and the version it was opened at.
#[derive(Deserialize, Default)]
#[serde(default)]
pub struct EditForm {
    #[serde(flatten)]
    limits: LimitsForm,
    version: String,
}

/// Changes an app's or a key's limits from the history page's form; back to
/// the history (the change on top), or the form with every field in error,
/// or — someone saved in between — what they changed, above what was typed.
async fn edit(
    cp: &ControlPlane,
    s: &Session,
    o: Owner,
    f: EditForm,
) -> Result<Response, PageError> {
    if o.revoked {
        // The page offers no form; a post made anyway is refused too.
        return Err(crate::error::ApiError::Forbidden(
            "the key is revoked; its limits can no longer be changed".into(),
        )
        .into());
    }
    let owner = o.owner.clone();
    let EditForm { limits: f, version } = f;
    let result = match (f.parse(), super::int("version", &version)) {
        (Ok(limits), Ok(expected)) => svc::set(cp, &s.actor, &owner, &limits, expected).await,
        (Err(e), _) | (_, Err(e)) => Err(e),
    };
    match result {
        Ok(_) => Ok(Redirect::to(&format!("{}?saved=1", o.base)).into_response()),
        Err(crate::error::ApiError::Stale { what, expected, .. }) => {
            let stale = stale_notice(cp, &what, expected).await?;
            let mut p = page(cp, s, o, FieldError::default(), 0, false).await?;
            p.edit = Some(f);
            p.stale = stale;
            Ok((StatusCode::CONFLICT, render(p)?).into_response())
        }
        Err(e) => {
            let errors = form_error(e)?.and(f.problems());
            let mut p = page(cp, s, o, FieldError::default(), 0, false).await?;
            p.edit = Some(f);
            p.edit_errors = errors;
            Ok((StatusCode::UNPROCESSABLE_ENTITY, render(p)?).into_response())
        }
    }
}

pub async fn app_edit(
    State(cp): State<Arc<ControlPlane>>,
    s: Session,
    Path((t, a)): Path<(String, String)>,
    Form(f): Form<EditForm>,
) -> Result<Response, PageError> {
    let o = app_owner(&cp, &s, &t, &a).await?;
    edit(&cp, &s, o, f).await
}

pub async fn key_edit(
    State(cp): State<Arc<ControlPlane>>,
    s: Session,
    Path(id): Path<Uuid>,
    Form(f): Form<EditForm>,
) -> Result<Response, PageError> {
    let o = key_owner(&cp, &s, id).await?;
    edit(&cp, &s, o, f).await
}
