//! Console users: platform admins create them, change their roles, disable
//! and re-enable them and set a new password for them — never their own.

use super::{form_error, form_errors, when, FieldError};
use crate::api::users::{self as svc, NewUser, RoleChange};
use crate::web::{render, role_key, Chrome, PageError, Session};
use crate::ControlPlane;
use askama::Template;
use axum::extract::Query;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::Form;
use domain::roles::Role;
use serde::Deserialize;
use std::sync::Arc;
use uuid::Uuid;

pub struct UserLine {
    pub id: String,
    pub email: String,
    pub role: &'static str,
    pub role_code: String,
    pub tenant: String,
    pub created: String,
    pub disabled: bool,
    pub is_me: bool,
}

pub const ROLES: [(&str, &str); 4] = [
    ("platform_admin", "role.platform_admin"),
    ("tenant_admin", "role.tenant_admin"),
    ("finance", "role.finance"),
    ("auditor", "role.auditor"),
];

#[derive(Deserialize, Default, Clone)]
#[serde(default)]
pub struct UserForm {
    email: String,
    password: String,
    role: String,
    tenant_id: String,
}

#[derive(Template)]
#[template(path = "pages/users.html")]
struct UsersPage {
    c: Chrome,
    rows: Vec<UserLine>,
    form: UserForm,
    errors: FieldError,
    /// A refused role change, disable or password reset.
    role_errors: FieldError,
    roles: [(&'static str, &'static str); 4],
    /// What the last action did (`?done=`), as a catalogue key.
    done: Option<&'static str>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
pub struct Done {
    done: String,
}

impl Done {
    fn key(&self) -> Option<&'static str> {
        match self.done.as_str() {
            "disabled" => Some("users.done_disabled"),
            "enabled" => Some("users.done_enabled"),
            "password" => Some("users.done_password"),
            "role" | "created" => Some("common.done"),
            _ => None,
        }
    }
}

async fn page(
    cp: &ControlPlane,
    s: &Session,
    form: UserForm,
    errors: FieldError,
    role_errors: FieldError,
    done: Option<&'static str>,
) -> Result<UsersPage, PageError> {
    crate::api::require_platform_admin(&s.actor)?;
    let rows = cp
        .store
        .users()
        .await?
        .into_iter()
        .map(|u| UserLine {
            is_me: u.id.to_string() == s.actor.user_id,
            id: u.id.to_string(),
            role: Role::parse(&u.role).map(role_key).unwrap_or("err.role"),
            role_code: u.role,
            email: u.email,
            tenant: u.tenant_id.unwrap_or_default(),
            created: when(s.clock, u.created_at),
            disabled: u.disabled,
        })
        .collect();
    Ok(UsersPage {
        c: Chrome::new(s, "nav.users", "/console/users"),
        rows,
        form,
        errors,
        role_errors,
        roles: ROLES,
        done,
    })
}

pub async fn list(
    State(cp): State<Arc<ControlPlane>>,
    s: Session,
    Query(d): Query<Done>,
) -> Result<Html<String>, PageError> {
    render(
        page(
            &cp,
            &s,
            UserForm::default(),
            FieldError::default(),
            FieldError::default(),
            d.key(),
        )
        .await?,
    )
}

/// After an action on a row: the list again, saying what happened; a
/// refusal: the list with the reason beside the table (422).
async fn after_row_action(
    cp: &ControlPlane,
    s: &Session,
    result: Result<(), crate::ApiError>,
    done: &str,
) -> Result<Response, PageError> {
    match result {
        Ok(()) => Ok(Redirect::to(&format!("/console/users?done={done}")).into_response()),
        Err(e) => {
            let errors = form_error(e)?;
            Ok((
                StatusCode::UNPROCESSABLE_ENTITY,
                render(
                    page(
                        cp,
                        s,
                        UserForm::default(),
                        FieldError::default(),
                        errors,
                        None,
                    )
                    .await?,
                )?,
            )
                .into_response())
        }
    }
}

fn tenant_of(v: &str) -> Option<String> {
    Some(v.trim().to_string()).filter(|t| !t.is_empty())
}

pub async fn create(
    State(cp): State<Arc<ControlPlane>>,
    s: Session,
    Form(f): Form<UserForm>,
) -> Result<Response, PageError> {
    crate::api::require_platform_admin(&s.actor)?;
    let u = NewUser {
        email: f.email.clone(),
        password: f.password.clone(),
        role: f.role.clone(),
        tenant_id: tenant_of(&f.tenant_id),
    };
    // Every field at once: every rule broken (the API's own), and whether
    // the email is taken.
    let mut problems = svc::new_user_problems(&cp, &s.actor, &u).await?;
    let email = f.email.trim().to_lowercase();
    if domain::text::is_email(&email) && cp.store.user_by_email(&email).await?.is_some() {
        problems.push(crate::ApiError::field("email", "err.exists"));
    }
    let errors = if problems.is_empty() {
        match svc::create_user(&cp, &s.actor, u).await {
            Ok(_) => return Ok(Redirect::to("/console/users?done=created").into_response()),
            // A duplicate user is a duplicate email.
            Err(crate::ApiError::Conflict(_)) => FieldError::at("email", "err.exists"),
            Err(e) => form_error(e)?,
        }
    } else {
        form_errors(problems)?
    };
    // The password is never sent back.
    let form = UserForm {
        password: String::new(),
        ..f
    };
    Ok((
        StatusCode::UNPROCESSABLE_ENTITY,
        render(page(&cp, &s, form, errors, FieldError::default(), None).await?)?,
    )
        .into_response())
}

#[derive(Deserialize, Default)]
#[serde(default)]
pub struct RoleForm {
    role: String,
    tenant_id: String,
}

pub async fn set_role(
    State(cp): State<Arc<ControlPlane>>,
    s: Session,
    Path(id): Path<Uuid>,
    Form(f): Form<RoleForm>,
) -> Result<Response, PageError> {
    let change = RoleChange {
        role: f.role,
        tenant_id: tenant_of(&f.tenant_id),
    };
    let result = svc::change_role(&cp, &s.actor, id, change)
        .await
        .map(|_| ());
    after_row_action(&cp, &s, result, "role").await
}

#[derive(Deserialize, Default)]
#[serde(default)]
pub struct DisableForm {
    disabled: String,
}

pub async fn set_disabled(
    State(cp): State<Arc<ControlPlane>>,
    s: Session,
    Path(id): Path<Uuid>,
    Form(f): Form<DisableForm>,
) -> Result<Response, PageError> {
    let disabled = f.disabled == "true";
    let result = svc::set_disabled(&cp, &s.actor, id, disabled).await;
    let done = if disabled { "disabled" } else { "enabled" };
    after_row_action(&cp, &s, result, done).await
}

#[derive(Deserialize, Default)]
#[serde(default)]
pub struct PasswordForm {
    password: String,
}

pub async fn reset_password(
    State(cp): State<Arc<ControlPlane>>,
    s: Session,
    Path(id): Path<Uuid>,
    Form(f): Form<PasswordForm>,
) -> Result<Response, PageError> {
    let result = svc::reset_password(&cp, &s.actor, id, f.password).await;
    after_row_action(&cp, &s, result, "password").await
}
