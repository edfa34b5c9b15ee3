//! Apps & keys of one tenant: create apps, issue keys (the plaintext is in
//! the answer to the issue request and nowhere else), revoke keys.

use super::{
    form_error, form_errors, limits_summary, model_problems, noted, split_list, stale_notice,
    thousands, time, when, FieldError, LimitsForm, StaleLine,
};
use crate::api::keys::{self as key_svc, KeyIn, KeyPatch};
use crate::api::tenants::{self as svc, AppIn, AppPatch};
use crate::error::ApiError;
use crate::web::{fragment_or_page, render, Chrome, PageError, Session};
use crate::ControlPlane;
use askama::Template;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::Form;
use domain::money::MicroUsd;
use domain::roles::{Access, Role};
use serde::Deserialize;
use std::collections::HashMap;
use std::sync::Arc;
use uuid::Uuid;

pub struct AppLine {
    pub id: String,
    pub name: String,
    pub limits: String,
    pub keys: Vec<KeyLine>,
    /// The edit form, as stored (or as typed when refused) and its errors.
    pub edit: AppEditForm,
    pub edit_errors: FieldError,
    /// The edit form was refused: it is shown open.
    pub edit_open: bool,
}

/// An app's name, allowed models and attribution policy as a form holds
/// them: lists comma-separated, default tags as `key=value`.
#[derive(Deserialize, Default, Clone)]
#[serde(default)]
pub struct AppEditForm {
    pub name: String,
    pub allowed_models: String,
    pub default_tags: String,
    pub required_tags: String,
}

impl AppEditForm {
    fn of(a: &store::AppRow) -> AppEditForm {
        AppEditForm {
            name: a.name.clone(),
            allowed_models: a.allowed_models.as_deref().unwrap_or_default().join(", "),
            default_tags: a
                .attribution
                .default_tags
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join(", "),
            required_tags: a.attribution.required_tags.join(", "),
        }
    }

    /// The change, keeping the app's end-user limits (API only), or the
    /// first field in error. Tags follow the request header's rules.
    fn patch(&self, current: &domain::attribution::Policy) -> Result<AppPatch, ApiError> {
        use domain::attribution::{parse_header, Policy};
        let default_tags = parse_header(&self.default_tags)
            .map_err(|_| ApiError::field("default_tags", "err.tags"))?;
        let policy = Policy {
            default_tags,
            required_tags: split_list(&self.required_tags).unwrap_or_default(),
            end_user_limits: current.end_user_limits.clone(),
        };
        policy
            .validate()
            .map_err(|_| ApiError::field("required_tags", "err.tags"))?;
        Ok(AppPatch {
            name: Some(self.name.trim().to_string()),
            allowed_models: Some(split_list(&self.allowed_models)),
            attribution: Some(policy),
        })
    }
}

pub struct KeyLine {
    pub id: String,
    pub app: String,
    pub name: String,
    pub prefix: String,
    pub created: String,
    pub expires: String,
    pub revoked: bool,
    /// This month's cost (`$0.00` when unused) and requests.
    pub spend: String,
    pub requests: String,
    /// The last day it was used (this month or the last), or empty.
    pub last_used: String,
    /// No use yet, and the key is younger than the "last used" window.
    pub never_used: bool,
    /// After a rotation whose grace is still running: the previous
    /// secret's prefix and when it stops working; else empty.
    pub previous_prefix: String,
    pub previous_until: String,
    /// When it was last rotated (empty: never).
    pub rotated: String,
    /// The edit form (name, expiry, allowed models), as stored or as typed
    /// when refused, its errors, and what someone else changed meanwhile.
    pub edit: KeyEditForm,
    pub edit_errors: FieldError,
    pub edit_open: bool,
    pub stale: Vec<StaleLine>,
    /// Why the row was refreshed instead of acted on (a stale tab's action
    /// on a key that changed meanwhile); empty otherwise.
    pub notice: String,
}

/// A key's name, expiry and allowed models as its edit form holds them,
/// with the row version the form was opened at.
#[derive(Deserialize, Default, Clone)]
#[serde(default)]
pub struct KeyEditForm {
    pub name: String,
    pub expires_at: String,
    pub allowed_models: String,
    pub version: String,
}

impl KeyEditForm {
    fn of(k: &store::KeyListRow, clock: domain::period::PlatformClock) -> KeyEditForm {
        KeyEditForm {
            name: k.name.clone(),
            expires_at: k
                .expires_at
                .map(|t| super::picker(clock, t))
                .unwrap_or_default(),
            allowed_models: k.allowed_models.as_deref().unwrap_or_default().join(", "),
            version: k.version.to_string(),
        }
    }

    /// The change (every field set, as the form shows them all), or the
    /// first field in error.
    fn patch(&self, clock: domain::period::PlatformClock) -> Result<KeyPatch, ApiError> {
        Ok(KeyPatch {
            name: Some(self.name.trim().to_string()),
            expires_at: Some(time(clock, "expires_at", &self.expires_at)?),
            allowed_models: Some(split_list(&self.allowed_models)),
            version: super::int("version", &self.version)?,
        })
    }
}

/// Which keys the tables show: by default not the revoked ones; `q`
/// narrows them to names containing it (any case).
#[derive(Deserialize, Default, Clone)]
#[serde(default)]
pub struct KeyFilter {
    pub q: String,
    /// "1": revoked keys are shown too.
    pub revoked: String,
    /// The app just created (`?created=` of the page a creation lands on).
    pub created: String,
}

impl KeyFilter {
    pub fn show_revoked(&self) -> bool {
        !self.revoked.is_empty() && self.revoked != "0"
    }

    fn shows(&self, k: &store::KeyListRow) -> bool {
        let q = self.q.trim().to_lowercase();
        (self.show_revoked() || k.revoked_at.is_none())
            && (q.is_empty() || k.name.to_lowercase().contains(&q))
    }
}

/// What each key of a tenant used, by key id (from the rollups), and the
/// window the "last used" day is looked for in.
struct KeyUses {
    by_key: HashMap<String, store::KeySpendRow>,
    clock: domain::period::PlatformClock,
    /// The first month of the window (`YYYY-MM`, platform time).
    since: String,
}

impl KeyUses {
    fn get(&self, key: &str) -> Option<&store::KeySpendRow> {
        self.by_key.get(key)
    }

    /// A key with no use in the window that did not exist before it:
    /// never used, rather than "not in two months".
    fn never_used(&self, k: &store::KeyListRow) -> bool {
        self.get(&k.id.to_string())
            .and_then(|u| u.last_day)
            .is_none()
            && self.clock.month(k.created_at) >= self.since
    }
}

async fn key_uses(cp: &ControlPlane, s: &Session, tenant: &str) -> Result<KeyUses, PageError> {
    let period = cp.clock.month(chrono::Utc::now());
    let previous = domain::period::previous_month(&period).unwrap_or_else(|| period.clone());
    let by_key = cp
        .store
        .key_spend(s.actor.scope(), tenant, &period, &previous)
        .await?
        .into_iter()
        .map(|u| (u.key_id.clone(), u))
        .collect();
    Ok(KeyUses {
        by_key,
        clock: cp.clock,
        since: previous,
    })
}

impl KeyLine {
    fn of(k: &store::KeyListRow, uses: &KeyUses) -> KeyLine {
        let used = uses.get(&k.id.to_string());
        let now = chrono::Utc::now();
        let in_grace = k.previous_valid_until.filter(|t| *t > now);
        let when = |t| when(uses.clock, t);
        KeyLine {
            id: k.id.to_string(),
            app: k.app_id.clone(),
            previous_prefix: in_grace.and(k.previous_prefix.clone()).unwrap_or_default(),
            previous_until: in_grace.map(when).unwrap_or_default(),
            rotated: k.rotated_at.map(when).unwrap_or_default(),
            edit: KeyEditForm::of(k, uses.clock),
            edit_errors: FieldError::default(),
            edit_open: false,
            stale: Vec::new(),
            notice: String::new(),
            name: super::clipped(&k.name, domain::text::KEY_NAME),
            prefix: k.prefix.clone(),
            created: when(k.created_at),
            expires: k.expires_at.map(when).unwrap_or_default(),
            revoked: k.revoked_at.is_some(),
            spend: MicroUsd(used.map_or(0, |u| u.cost_micro)).shown(),
            requests: thousands(used.map_or(0, |u| u.requests)),
            last_used: used
                .and_then(|u| u.last_day)
                .map(|d| d.to_string())
                .unwrap_or_default(),
            never_used: uses.never_used(k),
        }
    }
}

/// The keys of one app that `filter` shows, as its table shows them.
fn key_lines(
    keys: &[store::KeyListRow],
    app: &str,
    uses: &KeyUses,
    filter: &KeyFilter,
) -> Vec<KeyLine> {
    keys.iter()
        .filter(|k| k.app_id == app && filter.shows(k))
        .map(|k| KeyLine::of(k, uses))
        .collect()
}

/// Tenant admins go straight to their tenant; others pick one.
pub async fn pick(State(cp): State<Arc<ControlPlane>>, s: Session) -> Result<Response, PageError> {
    if s.actor.role == Role::TenantAdmin {
        let t = s.actor.tenant.clone().unwrap_or_default();
        return Ok(Redirect::to(&format!("/console/tenants/{t}/apps")).into_response());
    }
    let tenants = svc::visible_tenants(&cp, &s.actor).await?;
    render(PickPage {
        c: Chrome::new(&s, "nav.apps", "/console/apps"),
        tenants: tenants.into_iter().map(|t| (t.id, t.name)).collect(),
    })
    .map(IntoResponse::into_response)
}

#[derive(Template)]
#[template(path = "pages/apps_pick.html")]
struct PickPage {
    c: Chrome,
    tenants: Vec<(String, String)>,
}

#[derive(Deserialize, Default, Clone)]
#[serde(default)]
pub struct AppForm {
    id: String,
    name: String,
    #[serde(flatten)]
    limits: LimitsForm,
    allowed_models: String,
}

#[derive(Template)]
#[template(path = "pages/apps.html")]
struct AppsPage {
    c: Chrome,
    tenant: String,
    apps: Vec<AppLine>,
    can_manage: bool,
    form: AppForm,
    errors: FieldError,
    /// The key forms' (none on a fresh page).
    key_errors: FieldError,
    key_draft: KeyForm,
    /// Which keys the tables show, and how many revoked ones they hide.
    filter: KeyFilter,
    hidden_revoked: usize,
}

impl AppsPage {
    /// The app `?created=` names, if it is one of the page's (a confirmation
    /// of the creation, never text from the address alone).
    fn created(&self) -> Option<&str> {
        self.apps
            .iter()
            .find(|a| !self.filter.created.is_empty() && a.id == self.filter.created)
            .map(|a| a.id.as_str())
    }
}

async fn apps_page(
    cp: &ControlPlane,
    s: &Session,
    tenant: &str,
    form: AppForm,
    errors: FieldError,
) -> Result<AppsPage, PageError> {
    apps_page_with(cp, s, tenant, form, errors, KeyFilter::default()).await
}

async fn apps_page_with(
    cp: &ControlPlane,
    s: &Session,
    tenant: &str,
    form: AppForm,
    errors: FieldError,
    filter: KeyFilter,
) -> Result<AppsPage, PageError> {
    let scope = s.actor.scope();
    if !cp.store.tenant_exists(scope, tenant).await? {
        return Err(ApiError::NotFound(format!("tenant {tenant}")).into());
    }
    let keys = cp.store.keys_of(scope, tenant).await?;
    let hidden_revoked = if filter.show_revoked() {
        0
    } else {
        keys.iter().filter(|k| k.revoked_at.is_some()).count()
    };
    let uses = key_uses(cp, s, tenant).await?;
    let apps = cp
        .store
        .apps_of(scope, tenant)
        .await?
        .into_iter()
        .map(|a| AppLine {
            keys: key_lines(&keys, &a.id, &uses, &filter),
            limits: limits_summary(s.lang, &a.limits),
            edit: AppEditForm::of(&a),
            edit_errors: FieldError::default(),
            edit_open: false,
            id: a.id,
            name: a.name,
        })
        .collect();
    Ok(AppsPage {
        c: Chrome::new(s, "nav.apps", "/console/apps"),
        tenant: tenant.to_string(),
        apps,
        can_manage: s.actor.may(Access::Manage, tenant),
        form,
        errors,
        key_errors: FieldError::default(),
        key_draft: KeyForm::default(),
        filter,
        hidden_revoked,
    })
}

pub async fn list(
    State(cp): State<Arc<ControlPlane>>,
    s: Session,
    Path(tenant): Path<String>,
    Query(filter): Query<KeyFilter>,
) -> Result<Html<String>, PageError> {
    render(
        apps_page_with(
            &cp,
            &s,
            &tenant,
            AppForm::default(),
            FieldError::default(),
            filter,
        )
        .await?,
    )
}

/// A new app: the whole page comes back (the new app has its own key form).
pub async fn create(
    State(cp): State<Arc<ControlPlane>>,
    s: Session,
    Path(tenant): Path<String>,
    Form(f): Form<AppForm>,
) -> Result<Response, PageError> {
    let input = f.limits.parse().map(|limits| AppIn {
        id: f.id.trim().to_string(),
        name: f.name.trim().to_string(),
        limits,
        allowed_models: split_list(&f.allowed_models),
        attribution: Default::default(),
    });
    let result = match input {
        Ok(a) => svc::create_app_in(&cp, &s.actor, &tenant, a)
            .await
            .map(|_| ()),
        Err(e) => Err(e),
    };
    match result {
        // Lands on the list saying so, at the new app (its key form).
        Ok(()) => {
            let id = f.id.trim();
            let q = serde_urlencoded::to_string([("created", id)]).unwrap_or_default();
            let to = format!(
                "/console/tenants/{tenant}/apps?{q}#app-{}",
                super::path_segment(id)
            );
            Ok(Redirect::to(&to).into_response())
        }
        Err(e) => {
            let mut more = f.limits.problems();
            more.extend(model_problems(&cp, &f.allowed_models).await);
            let errors = form_error(e)?.and(more);
            let page = apps_page(&cp, &s, &tenant, f, errors).await?;
            Ok((StatusCode::UNPROCESSABLE_ENTITY, render(page)?).into_response())
        }
    }
}

/// Changes an app's name, allowed models and attribution policy; a
/// refusal shows the page with that app's form open, as typed, every field
/// in error beside it.
pub async fn update(
    State(cp): State<Arc<ControlPlane>>,
    s: Session,
    Path((tenant, app)): Path<(String, String)>,
    Form(f): Form<AppEditForm>,
) -> Result<Response, PageError> {
    let current = cp
        .store
        .apps_of(s.actor.scope(), &tenant)
        .await?
        .into_iter()
        .find(|a| a.id == app)
        .ok_or_else(|| ApiError::NotFound(format!("app {tenant}/{app}")))?;
    let result = match f.patch(&current.attribution) {
        Ok(p) => svc::update_app_in(&cp, &s.actor, &tenant, &app, p)
            .await
            .map(|_| ()),
        Err(e) => Err(e),
    };
    match result {
        Ok(()) => {
            Ok(Redirect::to(&format!("/console/tenants/{tenant}/apps#app-{app}")).into_response())
        }
        Err(e) => {
            let more = model_problems(&cp, &f.allowed_models).await;
            let errors = form_error(e)?.and(more);
            let mut page =
                apps_page(&cp, &s, &tenant, AppForm::default(), FieldError::default()).await?;
            if let Some(line) = page.apps.iter_mut().find(|l| l.id == app) {
                line.edit = f;
                line.edit_errors = errors;
                line.edit_open = true;
            }
            Ok((StatusCode::UNPROCESSABLE_ENTITY, render(page)?).into_response())
        }
    }
}

/// The key form: a name, an optional expiry and allowed models, and the
/// key's own limits (empty: only its app's and tenant's apply). Kept as
/// typed when refused, so every error shows beside what was typed.
#[derive(Deserialize, Default, Clone)]
#[serde(default)]
pub struct KeyForm {
    name: String,
    expires_at: String,
    allowed_models: String,
    #[serde(flatten)]
    limits: LimitsForm,
}

#[derive(Template)]
#[template(path = "partials/key_issued.html")]
struct Issued {
    c: Chrome,
    /// The app's key table, new key included (swapped in out of band).
    keys: Vec<KeyLine>,
    can_manage: bool,
    app: String,
    name: String,
    prefix: String,
    key: String,
    expires: String,
}

#[derive(Template)]
#[template(path = "partials/key_form.html")]
struct KeyFormFragment {
    c: Chrome,
    tenant: String,
    app: String,
    key_errors: FieldError,
    key_draft: KeyForm,
}

/// Issues a key; the answer shows it once. Reloading the page shows only
/// its prefix.
pub async fn issue_key(
    State(cp): State<Arc<ControlPlane>>,
    s: Session,
    Path((tenant, app)): Path<(String, String)>,
    Form(f): Form<KeyForm>,
) -> Result<Response, PageError> {
    // Who may first: the form's problems are no answer to someone who may
    // not issue keys here.
    crate::api::require(&s.actor, Access::Manage, &tenant)?;
    // Every field at once: what does not read (left unset), then every
    // rule the rest breaks (the API's own).
    let (limits, mut problems) = f.limits.read();
    let expires_at = noted(&mut problems, time(s.clock, "expires_at", &f.expires_at));
    let input = KeyIn {
        name: f.name.trim().to_string(),
        expires_at,
        limits,
        allowed_models: split_list(&f.allowed_models),
        attribution: Default::default(),
    };
    problems.extend(key_svc::new_key_problems(&cp, &input).await?);
    let result = if problems.is_empty() {
        key_svc::issue(&cp, &s.actor, &tenant, &app, input)
            .await
            .map_err(|e| vec![e])
    } else {
        Err(problems)
    };
    let html = match result {
        Ok(k) => {
            let keys = cp.store.keys_of(s.actor.scope(), &tenant).await?;
            let uses = key_uses(&cp, &s, &tenant).await?;
            fragment_or_page(
                &s,
                "nav.apps",
                "/console/apps",
                Issued {
                    c: Chrome::new(&s, "nav.apps", "/console/apps"),
                    keys: key_lines(&keys, &k.app_id, &uses, &KeyFilter::default()),
                    can_manage: true,
                    app: k.app_id,
                    name: k.name,
                    prefix: k.prefix,
                    key: k.key,
                    expires: k.expires_at.map(|t| when(s.clock, t)).unwrap_or_default(),
                },
            )?
        }
        Err(problems) => {
            let frag = KeyFormFragment {
                c: Chrome::new(&s, "nav.apps", "/console/apps"),
                tenant,
                app,
                key_errors: form_errors(problems)?,
                key_draft: f,
            };
            let html = fragment_or_page(&s, "nav.apps", "/console/apps", frag)?;
            return Ok((StatusCode::UNPROCESSABLE_ENTITY, html).into_response());
        }
    };
    // Never cached anywhere: the one copy of the key.
    Ok(([(axum::http::header::CACHE_CONTROL, "no-store")], html).into_response())
}

/// The revoked key's row, as it is now (htmx swaps it in place).
#[derive(Template)]
#[template(path = "partials/key_row.html")]
struct RevokedRow {
    c: Chrome,
    k: KeyLine,
    can_manage: bool,
}

pub async fn revoke_key(
    State(cp): State<Arc<ControlPlane>>,
    s: Session,
    Path(id): Path<Uuid>,
) -> Result<Response, PageError> {
    let (tenant, already) = match key_svc::revoke_key(&cp, &s.actor, id).await {
        Ok(tenant) => (tenant, false),
        Err(e) => (revoked_meanwhile(&cp, &s, id, e).await?, true),
    };
    if !s.htmx {
        return Ok(Redirect::to(&format!("/console/tenants/{tenant}/apps")).into_response());
    }
    key_row_now(&cp, &s, id, &tenant, already).await
}

/// The tenant of a key an action was refused for because it is revoked
/// (another tab, another admin revoked it meanwhile); any other refusal
/// stands.
async fn revoked_meanwhile(
    cp: &ControlPlane,
    s: &Session,
    id: Uuid,
    e: ApiError,
) -> Result<String, PageError> {
    if !matches!(e, ApiError::NotFound(_) | ApiError::Conflict(_)) {
        return Err(e.into());
    }
    match cp.store.key_tenant(s.actor.scope(), id).await? {
        Some(tenant)
            if cp
                .store
                .keys_of(s.actor.scope(), &tenant)
                .await?
                .iter()
                .any(|k| k.id == id && k.revoked_at.is_some()) =>
        {
            Ok(tenant)
        }
        _ => Err(e.into()),
    }
}

/// A key's row as it is now (htmx swaps it in place of the row acted
/// on); `already`: the action found it revoked, and the row says so by
/// the key's name.
async fn key_row_now(
    cp: &ControlPlane,
    s: &Session,
    id: Uuid,
    tenant: &str,
    already: bool,
) -> Result<Response, PageError> {
    let keys = cp.store.keys_of(s.actor.scope(), tenant).await?;
    let uses = key_uses(cp, s, tenant).await?;
    let row = keys
        .iter()
        .find(|k| k.id == id)
        .ok_or_else(|| ApiError::NotFound(format!("key {id}")))?;
    let mut k = KeyLine::of(row, &uses);
    if already {
        k.notice = s
            .lang
            .t("apps.already_revoked")
            .replace("{name}", &k.name)
            .replace(
                "{at}",
                &row.revoked_at.map(|t| when(s.clock, t)).unwrap_or_default(),
            );
    }
    let mut r = render(RevokedRow {
        c: Chrome::new(s, "nav.apps", "/console/apps"),
        k,
        can_manage: true,
    })?
    .into_response();
    // Whatever the action aimed at (the rotate form aims at the app's
    // box), the answer is this key's row.
    let h = r.headers_mut();
    h.insert(
        "hx-retarget",
        axum::http::HeaderValue::from_str(&format!("#key-{id}")).expect("a uuid"),
    );
    h.insert(
        "hx-reswap",
        axum::http::HeaderValue::from_static("outerHTML"),
    );
    Ok(r)
}

#[derive(Template)]
#[template(path = "partials/key_rotated.html")]
struct Rotated {
    c: Chrome,
    /// The app's key table, the rotation shown (swapped in out of band).
    keys: Vec<KeyLine>,
    can_manage: bool,
    app: String,
    name: String,
    prefix: String,
    key: String,
    previous_prefix: String,
    /// When the previous secret stops working (empty: it already has).
    grace_ends: String,
}

/// The rotate form: how long the current secret keeps working (seconds).
#[derive(Deserialize, Default)]
#[serde(default)]
pub struct RotateForm {
    grace_secs: String,
}

/// Rotates a key; the answer shows its new secret once (like issuing one),
/// the app's table the previous secret and when it stops working.
pub async fn rotate_key(
    State(cp): State<Arc<ControlPlane>>,
    s: Session,
    Path(id): Path<Uuid>,
    Form(f): Form<RotateForm>,
) -> Result<Response, PageError> {
    let grace = super::int("grace_secs", &f.grace_secs)?;
    let r = match key_svc::rotate_key(&cp, &s.actor, id, grace).await {
        Ok(r) => r,
        Err(e) => {
            let tenant = revoked_meanwhile(&cp, &s, id, e).await?;
            if !s.htmx {
                let to = format!("/console/tenants/{tenant}/apps");
                return Ok(Redirect::to(&to).into_response());
            }
            return key_row_now(&cp, &s, id, &tenant, true).await;
        }
    };
    let keys = cp.store.keys_of(s.actor.scope(), &r.tenant_id).await?;
    let uses = key_uses(&cp, &s, &r.tenant_id).await?;
    let rot = r.rotation;
    let in_grace = rot.grace_ends_at > chrono::Utc::now();
    let html = fragment_or_page(
        &s,
        "nav.apps",
        "/console/apps",
        Rotated {
            c: Chrome::new(&s, "nav.apps", "/console/apps"),
            keys: key_lines(&keys, &rot.app_id, &uses, &KeyFilter::default()),
            can_manage: true,
            app: rot.app_id,
            name: rot.name,
            prefix: rot.prefix,
            key: r.key,
            previous_prefix: rot.previous_prefix,
            grace_ends: if in_grace {
                when(s.clock, rot.grace_ends_at)
            } else {
                String::new()
            },
        },
    )?;
    // Never cached anywhere: the one copy of the new secret.
    Ok(([(axum::http::header::CACHE_CONTROL, "no-store")], html).into_response())
}

/// Changes a key's name, expiry and allowed models; back to its row, or
/// the page with its form open as typed, every field in error beside it —
/// or, someone saved in between, what they changed above what was typed.
pub async fn edit_key(
    State(cp): State<Arc<ControlPlane>>,
    s: Session,
    Path(id): Path<Uuid>,
    Form(f): Form<KeyEditForm>,
) -> Result<Response, PageError> {
    let k = key_svc::key_for(&cp, &s.actor, id).await?;
    let tenant = k.tenant_id.clone();
    let result = match f.patch(s.clock) {
        Ok(p) => key_svc::update_key(&cp, &s.actor, id, p).await.map(|_| ()),
        Err(e) => Err(e),
    };
    let (status, errors, stale) = match result {
        Ok(()) => {
            return Ok(
                Redirect::to(&format!("/console/tenants/{tenant}/apps#key-{id}")).into_response(),
            )
        }
        Err(ApiError::Stale { what, expected, .. }) => (
            StatusCode::CONFLICT,
            FieldError::default(),
            stale_notice(&cp, &what, expected).await?,
        ),
        Err(e) => {
            let more = model_problems(&cp, &f.allowed_models).await;
            (
                StatusCode::UNPROCESSABLE_ENTITY,
                form_error(e)?.and(more),
                Vec::new(),
            )
        }
    };
    // Refused: the page with this key shown (revoked or not) and its form
    // open as typed; after a conflict it carries the current version.
    let filter = KeyFilter {
        q: String::new(),
        revoked: if k.revoked_at.is_some() { "1" } else { "" }.into(),
        created: String::new(),
    };
    let mut page = apps_page_with(
        &cp,
        &s,
        &tenant,
        AppForm::default(),
        FieldError::default(),
        filter,
    )
    .await?;
    if let Some(line) = page
        .apps
        .iter_mut()
        .flat_map(|a| a.keys.iter_mut())
        .find(|l| l.id == id.to_string())
    {
        let current = line.edit.version.clone();
        line.edit = f;
        if !stale.is_empty() {
            line.edit.version = current;
        }
        line.edit_errors = errors;
        line.edit_open = true;
        line.stale = stale;
    }
    Ok((status, render(page)?).into_response())
}
