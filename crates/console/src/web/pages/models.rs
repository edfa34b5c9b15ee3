//! Models and their prices; platform admins add models and change their
//! prices. The provider key is write-only: the page never shows it.

use super::deployments::DeploymentForm;
use super::{form_error, form_errors, int, noted, usd, FieldError};
use crate::api::models::{self as svc, ModelIn, ModelPatch};
use crate::error::ApiError;
use crate::web::{render, Chrome, PageError, Session};
use crate::ControlPlane;
use askama::Template;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::Form;
use domain::MicroUsd;
use serde::Deserialize;
use std::sync::Arc;

pub struct ModelLine {
    pub id: String,
    /// `id` as a path segment (ids may hold '/' and ':').
    pub path: String,
    pub kind: String,
    pub upstream: String,
    pub upstream_model: String,
    pub input_price: String,
    pub output_price: String,
    pub degrade_to: String,
    pub pool: String,
    /// The provider profile, e.g. `max_completion_tokens · hidden reasoning`.
    pub profile: String,
    pub enabled: bool,
}

#[derive(Deserialize, Default, Clone)]
#[serde(default)]
pub struct ModelForm {
    id: String,
    kind: String,
    upstream_base_url: String,
    upstream_model: String,
    upstream_api_key: String,
    input_price_per_mtok_usd: String,
    output_price_per_mtok_usd: String,
    default_max_output_tokens: String,
    /// Empty: the profile the upstream name suggests.
    cap_field: String,
    /// "", "true" or "false".
    hidden_reasoning: String,
    /// A refused form had a provider key typed, which is not sent back:
    /// the field says to type it again.
    #[serde(skip)]
    key_dropped: bool,
}

/// A price field of a form: money, required.
fn price(field: &'static str, v: &str) -> Result<MicroUsd, ApiError> {
    usd(field, v)?.ok_or(ApiError::field(field, "err.required"))
}

impl ModelForm {
    /// The model as typed, and every field that does not read (left at a
    /// value the service's rules pass, so they find the rest at once).
    fn read(&self) -> (ModelIn, Vec<ApiError>) {
        let mut p = Vec::new();
        let mut money = |field, v: &str| {
            price(field, v).unwrap_or_else(|e| {
                p.push(e);
                MicroUsd(0)
            })
        };
        let input_price_per_mtok_usd =
            money("input_price_per_mtok_usd", &self.input_price_per_mtok_usd);
        let output_price_per_mtok_usd =
            money("output_price_per_mtok_usd", &self.output_price_per_mtok_usd);
        let default_max_output_tokens = noted(
            &mut p,
            int("default_max_output_tokens", &self.default_max_output_tokens),
        );
        let hidden_reasoning = match self.hidden_reasoning.as_str() {
            "" => None,
            "true" => Some(true),
            "false" => Some(false),
            _ => {
                p.push(ApiError::field("hidden_reasoning", "err.yes_no"));
                None
            }
        };
        let m = ModelIn {
            id: self.id.trim().to_string(),
            kind: if self.kind.is_empty() {
                "chat".into()
            } else {
                self.kind.clone()
            },
            upstream_base_url: self.upstream_base_url.trim().to_string(),
            upstream_model: self.upstream_model.trim().to_string(),
            upstream_api_key: Some(self.upstream_api_key.trim().to_string())
                .filter(|k| !k.is_empty()),
            input_price_per_mtok_usd,
            output_price_per_mtok_usd,
            tokenizer: None,
            default_max_output_tokens,
            deployments: Vec::new(),
            fallbacks: Vec::new(),
            cap_field: Some(self.cap_field.trim().to_string()).filter(|c| !c.is_empty()),
            hidden_reasoning,
            apis: None,
        };
        (m, p)
    }
}

#[derive(Template)]
#[template(path = "pages/models.html")]
struct ModelsPage {
    c: Chrome,
    rows: Vec<ModelLine>,
    can_create: bool,
    form: ModelForm,
    errors: FieldError,
    /// A refused price change: the model and its errors.
    price_model: String,
    price_errors: FieldError,
    /// `?saved=<model>`: that model's prices were changed.
    saved: String,
    /// Platform admins only: every model's deployments and their health.
    deployments: Vec<super::deployments::DeploymentLine>,
    /// The deployment form as typed, and its errors (a refused one).
    dep_form: DeploymentForm,
    dep_errors: FieldError,
}

async fn page(
    cp: &ControlPlane,
    s: &Session,
    form: ModelForm,
    errors: FieldError,
) -> Result<ModelsPage, PageError> {
    page_with(
        cp,
        s,
        form,
        errors,
        (String::new(), FieldError::default()),
        String::new(),
    )
    .await
}

async fn page_with(
    cp: &ControlPlane,
    s: &Session,
    form: ModelForm,
    errors: FieldError,
    (price_model, price_errors): (String, FieldError),
    saved: String,
) -> Result<ModelsPage, PageError> {
    let models = cp.store.models().await?;
    let deployments = if s.actor.is_platform_admin() {
        super::deployments::lines(cp, &models).await?
    } else {
        Vec::new()
    };
    let rows: Vec<ModelLine> = models
        .into_iter()
        .map(|m| ModelLine {
            input_price: MicroUsd(m.input_price_micro_per_mtok).shown(),
            output_price: MicroUsd(m.output_price_micro_per_mtok).shown(),
            degrade_to: m.degrade_to.unwrap_or_default(),
            pool: m.pool_capacity.map(|p| p.to_string()).unwrap_or_default(),
            profile: profile_text(s.lang, &m.profile),
            // Platform admins see where a model goes; others only its name.
            upstream: if s.actor.is_platform_admin() {
                m.upstream_base_url
            } else {
                String::new()
            },
            upstream_model: m.upstream_model,
            enabled: m.enabled,
            kind: m.kind,
            path: super::path_segment(&m.id),
            id: m.id,
        })
        .collect();
    Ok(ModelsPage {
        c: Chrome::new(s, "nav.models", "/console/models"),
        rows,
        can_create: s.actor.is_platform_admin(),
        form,
        errors,
        price_model,
        price_errors,
        saved,
        deployments,
        dep_form: Default::default(),
        dep_errors: FieldError::default(),
    })
}

/// The models page with a refused deployment form: what was typed, and
/// every field's problem beside it.
pub async fn with_deployment_form(
    cp: &ControlPlane,
    s: &Session,
    form: DeploymentForm,
    errors: FieldError,
) -> Result<Html<String>, PageError> {
    let mut p = page(cp, s, ModelForm::default(), FieldError::default()).await?;
    p.dep_form = form;
    p.dep_errors = errors;
    render(p)
}

fn profile_text(lang: crate::i18n::Lang, p: &domain::provider::ProviderProfile) -> String {
    // The field names are the provider's API; "both" is said in words.
    let mut t = lang.tv("cap", p.cap_field.as_str());
    if p.hidden_reasoning {
        t.push_str(" · ");
        t.push_str(lang.t("models.hidden_reasoning"));
    }
    let apis: Vec<&str> = p.apis.iter().map(|a| a.as_str()).collect();
    if apis != ["chat"] {
        t.push_str(&format!(" · {}", apis.join(", ")));
    }
    t
}

#[derive(Deserialize, Default)]
#[serde(default)]
pub struct Saved {
    saved: String,
}

pub async fn list(
    State(cp): State<Arc<ControlPlane>>,
    s: Session,
    axum::extract::Query(q): axum::extract::Query<Saved>,
) -> Result<Html<String>, PageError> {
    let page = page_with(
        &cp,
        &s,
        ModelForm::default(),
        FieldError::default(),
        (String::new(), FieldError::default()),
        q.saved,
    );
    render(page.await?)
}

#[derive(Deserialize, Default)]
#[serde(default)]
pub struct PriceForm {
    input_price_per_mtok_usd: String,
    output_price_per_mtok_usd: String,
}

/// New prices for a model (platform admins): both fields, as money; every
/// field in error is shown beside the model's row.
pub async fn set_prices(
    State(cp): State<Arc<ControlPlane>>,
    s: Session,
    Path(id): Path<String>,
    Form(f): Form<PriceForm>,
) -> Result<Response, PageError> {
    let input = price("input_price_per_mtok_usd", &f.input_price_per_mtok_usd);
    let output = price("output_price_per_mtok_usd", &f.output_price_per_mtok_usd);
    let result = match (input, output) {
        (Ok(i), Ok(o)) => {
            let patch = ModelPatch {
                input_price_per_mtok_usd: Some(i),
                output_price_per_mtok_usd: Some(o),
                ..Default::default()
            };
            svc::patch_model(&cp, &s.actor, &id, patch)
                .await
                .map(|_| ())
                .map_err(|e| (e, Vec::new()))
        }
        (Err(e), Ok(_)) | (Ok(_), Err(e)) => Err((e, Vec::new())),
        (Err(e), Err(more)) => Err((e, vec![more])),
    };
    match result {
        Ok(()) => {
            let to = format!(
                "/console/models?{}",
                serde_urlencoded::to_string([("saved", &id)]).unwrap_or_default()
            );
            Ok(Redirect::to(&to).into_response())
        }
        Err((e, more)) => {
            let errors = form_error(e)?.and(more);
            let page = page_with(
                &cp,
                &s,
                ModelForm::default(),
                FieldError::default(),
                (id, errors),
                String::new(),
            );
            Ok((StatusCode::UNPROCESSABLE_ENTITY, render(page.await?)?).into_response())
        }
    }
}

pub async fn create(
    State(cp): State<Arc<ControlPlane>>,
    s: Session,
    Form(f): Form<ModelForm>,
) -> Result<Response, PageError> {
    crate::api::require_platform_admin(&s.actor)?;
    // Every field at once: what does not read, every rule the rest breaks
    // (the API's own), and whether the id is taken.
    let (input, mut problems) = f.read();
    problems.extend(svc::new_model_problems(&input));
    if domain::text::is_model_id(&input.id) && cp.store.model_exists(&input.id).await? {
        problems.push(ApiError::field("id", "err.exists"));
    }
    let errors = if problems.is_empty() {
        match svc::create_model(&cp, &s.actor, input).await {
            Ok(_) => return Ok(Redirect::to("/console/models").into_response()),
            Err(e) => form_error(e)?,
        }
    } else {
        form_errors(problems)?
    };
    // The provider key is never echoed back, not even into the form: the
    // field asks for it again.
    let form = ModelForm {
        key_dropped: !f.upstream_api_key.trim().is_empty(),
        upstream_api_key: String::new(),
        ..f
    };
    Ok((
        StatusCode::UNPROCESSABLE_ENTITY,
        render(page(&cp, &s, form, errors).await?)?,
    )
        .into_response())
}

#[derive(Deserialize, Default)]
#[serde(default)]
pub struct EnabledForm {
    /// "true" enables; anything else disables (the button's hidden field).
    enabled: String,
}

/// Takes a whole model out of service or puts it back (platform admins,
/// audited); requests naming a disabled model are answered as for an
/// unknown one.
pub async fn set_enabled(
    State(cp): State<Arc<ControlPlane>>,
    s: Session,
    Path(id): Path<String>,
    Form(f): Form<EnabledForm>,
) -> Result<Response, PageError> {
    let patch = ModelPatch {
        enabled: Some(f.enabled == "true"),
        ..Default::default()
    };
    svc::patch_model(&cp, &s.actor, &id, patch).await?;
    Ok(Redirect::to("/console/models").into_response())
}

/// `POST /console/models/deployments`: adds or edits one deployment. A
/// refused form comes back on the models page with every field's problem
/// beside it and everything typed kept.
pub async fn put_deployment(
    State(cp): State<Arc<ControlPlane>>,
    s: Session,
    Form(f): Form<DeploymentForm>,
) -> Result<Response, PageError> {
    crate::api::require_platform_admin(&s.actor)?;
    let (d, parse) = f.to_input();
    let (model, name) = (f.model.trim(), f.name.trim());
    let mut problems = Vec::new();
    if model.is_empty() {
        problems.push(ApiError::field("model", "err.required"));
    } else if !cp.store.model_exists(model).await? {
        problems.push(ApiError::field("model", "err.unknown_model"));
    }
    problems.extend(parse);
    // A field that did not parse is refused for that, not again for its
    // range.
    problems.extend(d.problems(name));
    let result = if problems.is_empty() {
        crate::api::deployments::put_deployment(&cp, &s.actor, model, name, &d).await
    } else {
        Ok(())
    };
    let errors = match result {
        Ok(()) if problems.is_empty() => return Ok(Redirect::to("/console/models").into_response()),
        Ok(()) => FieldError::default().and(problems),
        Err(e) => form_error(e)?,
    };
    let page = with_deployment_form(&cp, &s, f, errors).await?;
    Ok((StatusCode::UNPROCESSABLE_ENTITY, page).into_response())
}
