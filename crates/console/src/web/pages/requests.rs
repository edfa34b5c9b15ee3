//! Request lookup by `x-request-id`: why was it refused or degraded (the
//! decision, its reason and the counters at the time), or what it cost.

use super::when;
use crate::api::requests;
use crate::error::ApiError;
use crate::web::{render, Chrome, PageError, Session};
use crate::ControlPlane;
use askama::Template;
use axum::extract::{Query, State};
use axum::response::Html;
use domain::MicroUsd;
use serde::Deserialize;
use std::sync::Arc;

#[derive(Deserialize, Default)]
#[serde(default)]
pub struct Lookup {
    id: String,
}

/// What the page shows about one request, formatted.
pub struct Found {
    pub request_id: String,
    pub tenant: String,
    /// refused / degraded / admitted
    pub outcome: String,
    pub outcome_key: &'static str,
    /// (label key, value) rows.
    pub facts: Vec<(&'static str, String)>,
    /// Counters at the time: (name, value), from the decision's detail.
    pub counters: Vec<(String, String)>,
}

#[derive(Template)]
#[template(path = "pages/requests.html")]
struct RequestsPage {
    c: Chrome,
    id: String,
    found: Option<Found>,
    missing: bool,
}

pub async fn lookup(
    State(cp): State<Arc<ControlPlane>>,
    s: Session,
    Query(q): Query<Lookup>,
) -> Result<Html<String>, PageError> {
    let id = q.id.trim().to_string();
    let (found, missing) = if id.is_empty() {
        (None, false)
    } else {
        match requests::lookup(&cp, &s.actor, &id).await {
            Ok(r) => (Some(format(&r)), false),
            // Unknown and another tenant's look the same.
            Err(ApiError::NotFound(_)) => (None, true),
            Err(e) => return Err(e.into()),
        }
    };
    render(RequestsPage {
        c: Chrome::new(&s, "nav.requests", "/console/requests"),
        id,
        found,
        missing,
    })
}

fn format(r: &requests::RequestRecord) -> Found {
    let mut facts = Vec::new();
    let mut counters = Vec::new();
    let (outcome, outcome_key) = match &r.decision {
        Some(d) if d.decision == "degraded" => ("degraded", "req.degraded"),
        Some(_) => ("refused", "req.refused"),
        None => ("admitted", "req.admitted"),
    };
    if let Some(d) = &r.decision {
        facts.push(("req.reason", d.reason.clone()));
        facts.push(("req.status", d.status.to_string()));
        facts.push(("req.scope", d.scope.clone().unwrap_or_default()));
        facts.push(("req.at", when(d.at)));
        facts.push(("common.app", d.app_id.clone()));
        facts.push(("req.key", d.key_id.clone()));
        facts.push(("req.model", d.model.clone()));
        if let Some(obj) = d.detail.as_object() {
            for (k, v) in obj {
                let v = match v {
                    serde_json::Value::String(s) => s.clone(),
                    v => v.to_string(),
                };
                counters.push((k.clone(), v));
            }
        }
    }
    if let Some(u) = &r.usage {
        if r.decision.is_none() {
            facts.push(("common.app", u.app_id.clone()));
            facts.push(("req.key", u.key_id.clone()));
            facts.push(("req.model", u.model.clone()));
        }
        facts.push(("req.input_tokens", u.input_tokens.to_string()));
        facts.push(("req.output_tokens", u.output_tokens.to_string()));
        facts.push(("req.cost", MicroUsd(u.cost_micro).shown()));
        facts.push(("req.usage_status", u.status.clone()));
        if let Some(a) = &u.anomaly {
            // The provider's report, overruled by the sanity bound: the
            // row above is billed at the bound.
            facts.push(("req.usage_anomaly", a.kind.clone()));
            facts.push(("req.reported_usage", a.reported.to_string()));
        }
    }
    Found {
        request_id: r.request_id.clone(),
        tenant: r.tenant_id.clone(),
        outcome: outcome.into(),
        outcome_key,
        facts,
        counters,
    }
}
