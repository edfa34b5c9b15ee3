//! `/api/v1` handlers: parse, check who may, call the store, render.

pub mod audit;
pub mod bills;
pub mod deployments;
pub mod extract;
pub mod keys;
pub mod limits;
pub mod model_aliases;
pub mod models;
pub mod pool;
pub mod prices;
pub mod quota_requests;
pub mod reconciliation;
pub mod request_log;
pub mod requests;
pub mod session;
pub mod tenants;
pub mod usage;
pub mod users;

use crate::error::ApiError;
use domain::roles::{Access, Actor};

/// Refuses unless the actor may access tenant `t`. A tenant admin asking for
/// another tenant gets 404: they do not learn that it exists.
pub fn require(actor: &Actor, access: Access, t: &str) -> Result<(), ApiError> {
    if actor.may(access, t) {
        return Ok(());
    }
    match actor.role {
        domain::roles::Role::TenantAdmin => Err(ApiError::NotFound(format!("tenant {t}"))),
        _ => Err(ApiError::Forbidden("your role may not change this".into())),
    }
}

pub fn require_platform_admin(actor: &Actor) -> Result<(), ApiError> {
    if actor.is_platform_admin() {
        Ok(())
    } else {
        Err(ApiError::Forbidden(
            "only a platform admin may do this".into(),
        ))
    }
}

/// A tenant's or app's id (`domain::text::is_id`).
pub fn valid_id(field: &'static str, id: &str) -> Result<(), ApiError> {
    if domain::text::is_id(id) {
        Ok(())
    } else {
        Err(ApiError::field(field, "err.id_format"))
    }
}

/// The policy obeys the request rules; a refusal names the field at fault
/// (`attribution.required_tags[1]`, `attribution.default_tags.env`).
pub fn valid_attribution(p: &domain::attribution::Policy) -> Result<(), ApiError> {
    use domain::attribution::TagError;
    p.validate().map_err(|e| {
        let param = match &e {
            TagError::BadKey { key } | TagError::BadValue { key } => {
                match p.required_tags.iter().position(|k| k == key) {
                    Some(i) if !p.default_tags.contains_key(key) => {
                        format!("attribution.required_tags[{i}]")
                    }
                    _ => format!("attribution.default_tags.{key}"),
                }
            }
            _ => "attribution".to_string(),
        };
        ApiError::invalid(param, e.message())
    })
}

/// Free text no longer than its kind's maximum (`domain::text`): the
/// refusal names the field and says the maximum ("reason: too long: at most
/// 2,000 characters").
pub fn valid_text(
    field: &'static str,
    limit: domain::text::TextLimit,
    v: &str,
) -> Result<(), ApiError> {
    limit
        .check(v)
        .map_err(|_| ApiError::field(field, too_long_key(limit)))
}

/// The message of a text past `limit`'s maximum (one translation key per
/// maximum of the table; a unit test holds them in step).
pub fn too_long_key(limit: domain::text::TextLimit) -> &'static str {
    match limit.max_chars {
        100 => "err.max_100",
        200 => "err.max_200",
        254 => "err.max_254",
        2000 => "err.max_2000",
        _ => "err.too_long",
    }
}

/// A refusal of a limit named by its place in a JSON body, under
/// `limits` (`limits.allowed_tools[1]`); any other refusal as it is. The
/// console's forms name the limit field itself (they have no `limits`
/// object), so the services return it bare and the API handlers place it.
pub fn in_limits(e: ApiError) -> ApiError {
    match &e {
        ApiError::Field { field, .. } | ApiError::Element { field, .. }
            if domain::limits::FIELDS.contains(field) =>
        {
            e.within("limits.")
        }
        _ => e,
    }
}

/// Limits must not be negative, and their lists hold names; the error
/// names the limit (and a list's bad element: `allowed_tools[1]`).
pub fn valid_limits(l: &domain::Limits) -> Result<(), ApiError> {
    first(limits_problems(l))
}

/// Every limit that breaks a rule (`domain::Limits::problems`), each
/// naming its field.
pub fn limits_problems(l: &domain::Limits) -> Vec<ApiError> {
    l.problems()
        .into_iter()
        .map(|e| match e.index {
            Some(index) if e.field == "budgets" => ApiError::Element {
                field: e.field,
                index,
                key: "err.budget",
            },
            Some(index) => ApiError::Element {
                field: e.field,
                index,
                key: "err.name_list",
            },
            None => ApiError::field(e.field, "err.negative"),
        })
        .collect()
}

/// The first of a form's problems, as the API answers (the console shows
/// them all beside their fields).
pub fn first(problems: Vec<ApiError>) -> Result<(), ApiError> {
    match problems.into_iter().next() {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// Every model a budget of `l` names is one the gateway serves; the
/// refusal names the budget (`budgets[1]`).
pub async fn known_budget_models(
    cp: &crate::ControlPlane,
    l: &domain::Limits,
) -> Result<(), ApiError> {
    for (index, b) in l.budgets.iter().flatten().enumerate() {
        for m in b.models.iter().flatten() {
            if !cp.store.model_exists(m).await? {
                return Err(ApiError::Element {
                    field: "budgets",
                    index,
                    key: "err.unknown_budget_model",
                });
            }
        }
    }
    Ok(())
}

/// Every model of an allowed-models list is one the gateway serves; the
/// refusal names the first unknown one's place (`allowed_models[1]`).
pub async fn known_models(
    cp: &crate::ControlPlane,
    models: Option<&[String]>,
) -> Result<(), ApiError> {
    first(unknown_models(cp, models).await?)
}

/// The refusal of the first model of an allowed-models list the gateway
/// does not serve, if any (`Err`: the store could not be asked).
pub async fn unknown_models(
    cp: &crate::ControlPlane,
    models: Option<&[String]>,
) -> Result<Vec<ApiError>, ApiError> {
    for (index, m) in models.unwrap_or_default().iter().enumerate() {
        if !cp.store.model_exists(m).await? {
            return Ok(vec![ApiError::Element {
                field: "allowed_models",
                index,
                key: "err.unknown_allowed_model",
            }]);
        }
    }
    Ok(Vec::new())
}

/// Model ids are wider than tenant ids (`domain::text::is_model_id`).
pub fn valid_id_model(id: &str) -> Result<(), ApiError> {
    if domain::text::is_model_id(id) {
        Ok(())
    } else {
        Err(ApiError::field("id", "err.model_id_format"))
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_text_limit_has_a_message_saying_its_maximum() {
        for l in domain::text::ALL {
            let key = super::too_long_key(*l);
            assert_ne!(key, "err.too_long", "{l:?} has no message of its own");
            let shown = domain::money::group_thousands(l.max_chars as u64);
            assert!(crate::i18n::english(key).contains(&shown), "{key}");
            assert!(crate::i18n::Lang::Zh.t(key).contains(&shown), "{key}");
        }
    }
}
